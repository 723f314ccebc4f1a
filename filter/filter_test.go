package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
)

func testSchema() *tandem.Schema {
	s := &tandem.Schema{Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "lang", Type: tandem.Keyword},
		{Name: "tags", Type: tandem.Keywords},
		{Name: "year", Type: tandem.Number},
		{Name: "published", Type: tandem.Date},
		{Name: "open", Type: tandem.Bool},
	}}
	s.Fill()
	return s
}

func TestParseErrorsNamePath(t *testing.T) {
	tests := []struct {
		in, path, msg string
	}{
		{``, "", "empty filter"},
		{`{"term":`, "term", "malformed JSON"},
		{`{"and":[{"exists":"a"},]}`, "and[1]", "malformed JSON"},
		{`[]`, "", "want an object"},
		{`{}`, "", "exactly one operator"},
		{`{"term":{"a":1},"or":[]}`, "", "exactly one operator"},
		{`{"near":{"a":1}}`, "near", "unknown operator"},
		{`{"and":{"term":{"a":1}}}`, "and", "want a list"},
		{`{"and":[{"term":{"a":1}},{"range":{"year":{"gte":"x","from":1}}}]}`, "and[1].range.year.from", "unknown bound"},
		{`{"or":[{"not":{"terms":{"tags":[]}}}]}`, "or[0].not.terms.tags", "empty list"},
		{`{"terms":{"tags":["a",{"b":1}]}}`, "terms.tags[1]", "want a string, number or bool"},
		{`{"term":{"a":null}}`, "term.a", "want a string, number or bool"},
		{`{"term":{"a":1,"b":2}}`, "term", "one field"},
		{`{"term":{"a":1},"term":{"a":2}}`, "", `got "term" and "term"`},
		{`{"range":{"year":{"gte":1,"gte":2}}}`, "range.year.gte", "given twice"},
		{`{"exists":{"field":"a","b":1}}`, "exists", "field name"},
		{`{"range":{"year":{}}}`, "range.year", "want bounds"},
		{`{"range":{"year":{"gt":1,"gte":2}}}`, "range.year", "both gt and gte"},
		{`{"range":{"year":{"lt":true}}}`, "range.year.lt", "number or a date"},
		{`{"prefix":{"lang":3}}`, "prefix.lang", "want a string prefix"},
		{`{"exists":3}`, "exists", "field name"},
		{`{"exists":{"field":[true]}}`, "exists", "field name"}, // once a panic: a key asked for inside the array
		{`{"exists":{"field":{"a":1}}}`, "exists", "field name"},
		{`{"term":{"a":1}} {}`, "", "trailing data"},
		{strings.Repeat(`{"not":`, 100) + `{"exists":"a"}` + strings.Repeat(`}`, 100), strings.TrimSuffix(strings.Repeat("not.", DefaultMaxDepth), "."), "nested deeper than the limit of 32 levels"},
	}
	for _, tc := range tests {
		_, err := Parse([]byte(tc.in))
		var fe *Error
		if !errors.As(err, &fe) {
			t.Errorf("Parse(%.40s): err = %v, want *Error", tc.in, err)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%.40s): not ErrInvalid", tc.in)
		}
		if fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("Parse(%.40s) = path %q msg %q; want path %q msg containing %q", tc.in, fe.Path, fe.Msg, tc.path, tc.msg)
		}
	}
}

// Every leaf counts one clause, each value of a terms list too, and an
// empty and or or; a filter over Limits is refused naming the limit and
// the clause or node where it was passed.
func TestLimits(t *testing.T) {
	five := `{"and":[{"terms":{"tags":["a","b"]}},{"or":[]},{"not":{"range":{"year":{"gte":1}}}},{"exists":"lang"}]}`
	for _, tc := range []struct {
		in         string
		lim        Limits
		path, kind string
	}{
		{five, Limits{MaxClauses: 5}, "", ""},
		{five, Limits{MaxClauses: 4}, "and[3].exists", LimitClauses},
		{five, Limits{MaxClauses: 2}, "and[1].or", LimitClauses},
		{five, Limits{MaxClauses: 1}, "and[0].terms.tags[1]", LimitClauses},
		{five, Limits{MaxDepth: 3}, "", ""},
		{five, Limits{MaxDepth: 2}, "and[2].not", LimitDepth},
		{`{"and":[]}`, Limits{MaxClauses: 1, MaxDepth: 1}, "", ""},
		{`{"prefix":{"lang":"a"}}`, Limits{MaxDepth: 1}, "", ""},
		{`{"not":{"prefix":{"lang":"a"}}}`, Limits{MaxDepth: 1}, "not", LimitDepth},
		{`{"or":[{"term":{"a":1}},{"term":{"a":2}}]}`, Limits{MaxClauses: 1}, "or[1].term", LimitClauses},
	} {
		_, err := tc.lim.Parse([]byte(tc.in))
		if tc.kind == "" {
			if err != nil {
				t.Errorf("%+v.Parse(%s): %v", tc.lim, tc.in, err)
			}
			continue
		}
		var fe *Error
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) || fe.Limit != tc.kind || fe.Path != tc.path {
			t.Errorf("%+v.Parse(%s) = %#v; want the %s limit at %q", tc.lim, tc.in, err, tc.kind, tc.path)
		}
	}
	if DefaultLimits != (Limits{MaxClauses: 1024, MaxDepth: 32}) || DefaultLimits.fill() != (Limits{}).fill() {
		t.Errorf("DefaultLimits = %+v, and zero Limits mean %+v", DefaultLimits, Limits{}.fill())
	}
}

// A filter far over the limit is refused from what is read before the
// limit: the rest is never parsed, so a syntax error at its end goes
// unseen, and no tree of it is built.
func TestLimitStopsReading(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"or":[`)
	for i := range 800_000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"range":{"year":{"gte":%d}}}`, i)
	}
	b.WriteString(`,{"range":`) // cut short: malformed from here on
	_, err := Parse([]byte(b.String()))
	var fe *Error
	if !errors.As(err, &fe) || fe.Limit != LimitClauses || fe.Path != "or[1024].range" {
		t.Fatalf("800,000 clauses: %v; want the clause limit at or[1024].range", err)
	}
	if !strings.Contains(err.Error(), "over the limit of 1024 clauses") {
		t.Errorf("error %q does not name the limit", err)
	}
}

func TestCheckErrorsNamePath(t *testing.T) {
	tests := []struct {
		in, path, msg string
	}{
		{`{"term":{"author":"x"}}`, "term.author", `unknown field "author"`},
		{`{"and":[{"exists":"lang"},{"range":{"year":{"gte":"1999"}}}]}`, "and[1].range.year.gte", "number field"},
		{`{"range":{"lang":{"gte":"a"}}}`, "range.lang", "range needs a number or date"},
		{`{"prefix":{"year":"19"}}`, "prefix.year", "prefix needs a keyword"},
		{`{"term":{"text":"x"}}`, "term.text", "text field"},
		{`{"not":{"term":{"open":"yes"}}}`, "not.term.open", "bool field"},
		{`{"range":{"published":{"lt":"yesterday"}}}`, "range.published.lt", "cannot parse"},
		{`{"or":[{"terms":{"tags":["a",1]}}]}`, "or[0].terms.tags[1]", "keywords field"},
	}
	s := testSchema()
	for _, tc := range tests {
		e, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.in, err)
		}
		err = Check(e, s)
		var fe *Error
		if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) {
			t.Errorf("Check(%s) = %v; want path %q msg containing %q", tc.in, err, tc.path, tc.msg)
		}
	}
}

func TestMatch(t *testing.T) {
	doc := map[string]any{
		"lang": "en", "tags": []any{"bio", "med"}, "year": 2001.0,
		"published": "2001-05-01T00:00:00Z", "open": true,
	}
	tests := []struct {
		in   string
		want bool
	}{
		{`{"term":{"lang":"en"}}`, true},
		{`{"term":{"lang":"EN"}}`, false},
		{`{"term":{"tags":"med"}}`, true},
		{`{"terms":{"tags":["x","bio"]}}`, true},
		{`{"term":{"year":2001}}`, true},
		{`{"range":{"year":{"gt":2001}}}`, false},
		{`{"range":{"year":{"gte":2001,"lt":2002}}}`, true},
		{`{"range":{"published":{"gte":"2001-01-01","lt":"2001-05-01"}}}`, false},
		{`{"range":{"published":{"lte":"2001-05-01"}}}`, true},
		{`{"term":{"published":"2001-05-01"}}`, true},
		{`{"prefix":{"tags":"me"}}`, true},
		{`{"prefix":{"lang":""}}`, true},
		{`{"exists":"year"}`, true},
		{`{"exists":{"field":"text"}}`, false},
		{`{"not":{"term":{"open":true}}}`, false},
		{`{"and":[]}`, true},
		{`{"or":[]}`, false},
		{`{"or":[{"term":{"open":false}},{"and":[{"term":{"lang":"en"}},{"not":{"exists":"text"}}]}]}`, true},
	}
	s := testSchema()
	for _, tc := range tests {
		e, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.in, err)
		}
		if err := Check(e, s); err != nil {
			t.Fatalf("Check(%s): %v", tc.in, err)
		}
		if got := Match(e, s, doc); got != tc.want {
			t.Errorf("Match(%s) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// FuzzParse checks that Parse and Check never panic and that every error
// is an *Error; the seed corpus runs as a normal test.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"term":{"lang":"en"}}`,
		`{"and":[{"range":{"year":{"gte":1990,"lt":2000}}},{"not":{"prefix":{"tags":"bi"}}}]}`,
		`{"or":[{"exists":"open"},{"terms":{"published":["2020-01-01"]}}]}`,
		`{"range":{"published":{"gt":"2020-01-01T10:00:00Z"}}}`,
		`{"term":{"open":true}}`, `{"not":{}}`, `[1,2]`, `{"terms":{"x":[1e400]}}`,
	} {
		f.Add([]byte(s))
	}
	s := testSchema()
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse(data)
		if err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Parse error %v is not *Error", err)
			}
			return
		}
		_ = e.String()
		if err := Check(e, s); err != nil {
			var fe *Error
			if !errors.As(err, &fe) {
				t.Fatalf("Check error %v is not *Error", err)
			}
			return
		}
		Match(e, s, map[string]any{"lang": "en", "year": 1.0})
	})
}

func BenchmarkParseCheck(b *testing.B) {
	data := []byte(`{"and":[{"term":{"lang":"en"}},{"or":[{"range":{"year":{"gte":1990,"lt":2000}}},{"prefix":{"tags":"bi"}}]},{"not":{"exists":"open"}}]}`)
	s := testSchema()
	b.ReportAllocs()
	for b.Loop() {
		e, err := Parse(data)
		if err != nil {
			b.Fatal(err)
		}
		if err := Check(e, s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "filters/s")
}

// BenchmarkRefuseOverLimit measures refusing the 800,000-clause filter
// (28.8 MB) of issue 27, which Parse once built whole.
func BenchmarkRefuseOverLimit(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"or":[`)
	for i := range 800_000 {
		if i > 0 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, `{"range":{"year":{"gte":%d}}}`, i%100_000)
	}
	buf.WriteString(`]}`)
	data := buf.Bytes()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Parse(data); err == nil {
			b.Fatal("refused nothing")
		}
	}
}

// Decode reads a filter in the middle of a larger document and leaves the
// decoder after it; null is no filter; over a limit it stops reading.
func TestDecode(t *testing.T) {
	dec := json.NewDecoder(strings.NewReader(`{"filter": {"and":[{"term":{"lang":"en"}},{"range":{"year":{"gte":1e3}}}]}, "none": null, "k": 3}`))
	dec.UseNumber()
	var got []string
	read := func() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(tok))
	}
	decode := func() {
		e, err := DefaultLimits.Decode(dec)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprint(e))
	}
	read()   // {
	read()   // filter
	decode() // the filter
	read()   // none
	decode() // null
	read()   // k
	var k int
	if err := dec.Decode(&k); err != nil || k != 3 {
		t.Errorf("after the filters: k = %d, %v", k, err)
	}
	if want := "{ filter (lang:en AND year:range(gt=<nil> gte=1000 lt=<nil> lte=<nil>)) none <nil> k"; strings.Join(got, " ") != want {
		t.Errorf("read %q,\nwant %q", strings.Join(got, " "), want)
	}
	dec = json.NewDecoder(strings.NewReader(`{"or":[{"exists":"a"},{"exists":"b"},{"exists":` + "\x00"))
	_, err := Limits{MaxClauses: 2}.Decode(dec)
	var fe *Error
	if !errors.As(err, &fe) || fe.Limit != LimitClauses || fe.Path != "or[2].exists" {
		t.Errorf("over the limit: %v", err)
	}
}
