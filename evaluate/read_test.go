package evaluate

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadQueries(t *testing.T) {
	in := `{"_id": "1", "text": "first", "metadata": {}}` + "\r\n\n" +
		`{"_id": "b", "text": ""}` + "\n"
	got, err := ReadQueries(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []Query{{"1", "first"}, {"b", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestReadQrels(t *testing.T) {
	in := "query-id\tcorpus-id\tscore\r\n1\td1\t2\r\n1\td2\t0\r\n\n2\td1\t-1\n"
	got, err := ReadQrels(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Qrels{"1": {"d1": 2, "d2": 0}, "2": {"d1": -1}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestReadErrors checks that each bad input is reported with its line and
// the offending field, and wraps ErrMalformed.
func TestReadErrors(t *testing.T) {
	queries := func(s string) error { _, err := ReadQueries(strings.NewReader(s)); return err }
	qrels := func(s string) error { _, err := ReadQrels(strings.NewReader(s)); return err }
	trec := func(s string) error { _, err := ReadTREC(strings.NewReader(s)); return err }
	tests := []struct {
		name string
		read func(string) error
		in   string
		want string
	}{
		{"query json", queries, `{"_id":"1","text":"a"}` + "\n{oops\n", "line 2: invalid character"},
		{"query no id", queries, `{"text":"a"}`, `line 1: field "_id" is missing`},
		{"query numeric id", queries, `{"_id":1,"text":"a"}`, "line 1: json: cannot unmarshal number"},
		{"query no text", queries, `{"_id":"1"}`, `line 1: field "text" is missing`},
		{"query dup", queries, `{"_id":"1","text":"a"}` + "\n" + `{"_id":"1","text":"b"}`, `line 2: query id "1" already defined on line 1`},
		{"qrels fields", qrels, "query-id\tcorpus-id\tscore\nq1 d1 1\n", "line 2: want 3 tab-separated fields"},
		{"qrels score", qrels, "q1\td1\thigh\n", `line 1: score: strconv.Atoi: parsing "high"`},
		{"qrels empty doc", qrels, "q1\t\t1\n", "line 1: corpus-id is empty"},
		{"qrels empty query", qrels, "\td1\t1\n", "line 1: query-id is empty"},
		{"qrels dup", qrels, "q1\td1\t1\nq1\td1\t0\n", `line 2: query "q1" doc "d1" already judged on line 1`},
		{"trec fields", trec, "q1 Q0 d1 1 0.5\n", "line 1: want 6 fields"},
		{"trec rank", trec, "q1 Q0 d1 one 0.5 t\n", `line 1: rank: strconv.Atoi: parsing "one"`},
		{"trec score", trec, "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 x t\n", `line 2: score: strconv.ParseFloat: parsing "x"`},
		{"trec nan", trec, "q1 Q0 d1 1 NaN t\n", "line 1: score is NaN"},
		{"trec dup", trec, "q1 Q0 d1 1 2 t\nq1 Q0 d1 2 1 t\n", `line 2: query "q1" doc "d1" already retrieved on line 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.read(tt.in)
			if err == nil {
				t.Fatalf("no error, want %q", tt.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("%v does not wrap ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
}

func TestLoadNamesPath(t *testing.T) {
	_, err := LoadQrels("testdata/no-such-file.tsv")
	if err == nil || !strings.Contains(err.Error(), "no-such-file.tsv") {
		t.Errorf("got %v, want an error naming the path", err)
	}
}

func TestTRECRoundTrip(t *testing.T) {
	run := Run{
		"q2": {{"b", 0.1}, {"a", -3e-17}},
		"q1": {{"c", 12}, {"d", 12}, {"e", 1.0 / 3}},
	}
	var buf bytes.Buffer
	if err := WriteTREC(&buf, run, "tandem"); err != nil {
		t.Fatal(err)
	}
	wantText := "q1 Q0 c 1 12 tandem\nq1 Q0 d 2 12 tandem\nq1 Q0 e 3 0.3333333333333333 tandem\n" +
		"q2 Q0 b 1 0.1 tandem\nq2 Q0 a 2 -3e-17 tandem\n"
	if buf.String() != wantText {
		t.Errorf("wrote\n%s\nwant\n%s", buf.String(), wantText)
	}
	got, err := ReadTREC(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, run) {
		t.Errorf("read back %+v, want %+v", got, run)
	}
}

func TestWriteTRECRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		run Run
		tag string
	}{
		"empty tag":   {Run{"q": {{"a", 1}}}, ""},
		"space tag":   {Run{"q": {{"a", 1}}}, "my run"},
		"space query": {Run{"q 1": {{"a", 1}}}, "t"},
		"space doc":   {Run{"q": {{"a b", 1}}}, "t"},
		"dup doc":     {Run{"q": {{"a", 1}, {"a", 0}}}, "t"},
	} {
		if err := WriteTREC(&bytes.Buffer{}, tc.run, tc.tag); !errors.Is(err, ErrInvalidRun) {
			t.Errorf("%s: got %v, want ErrInvalidRun", name, err)
		}
	}
}

// FuzzTRECRoundTrip checks that whatever ReadTREC accepts, WriteTREC writes
// back to an equal run.
func FuzzTRECRoundTrip(f *testing.F) {
	f.Add("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 2.5 t\nq2 Q0 d1 1 -1e300 t\n")
	f.Add("1 Q0 x 9 +Inf r\n")
	f.Fuzz(func(t *testing.T, in string) {
		run, err := ReadTREC(strings.NewReader(in))
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteTREC(&buf, run, "t"); err != nil {
			t.Fatalf("write of a run read back: %v", err)
		}
		again, err := ReadTREC(&buf)
		if err != nil {
			t.Fatalf("reading what was written: %v", err)
		}
		if !reflect.DeepEqual(again, run) {
			t.Fatalf("round trip changed the run: %+v → %+v", run, again)
		}
	})
}
