package tandem

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	strict := DefaultSchema()
	strict.Strict = true
	strict.Fields = append(strict.Fields, Field{Name: "year", Type: Number}, Field{Name: "tags", Type: Keywords})
	strict.Fill()
	small := DefaultSchema()
	small.MaxTextBytes = 10
	tests := []struct {
		name   string
		schema *Schema
		doc    Doc
		field  string // "" for a document-level error
		err    error
	}{
		{"missing id", DefaultSchema(), Doc{Fields: map[string]any{"text": "x"}}, "_id", ErrMissingID},
		{"unknown field under strict", strict, Doc{ID: "1", Fields: map[string]any{"text": "x", "author": "a"}}, "author", ErrUnknownField},
		{"wrong type", strict, Doc{ID: "1", Fields: map[string]any{"text": "x", "year": "1999"}}, "year", ErrWrongType},
		{"text not a string", DefaultSchema(), Doc{ID: "1", Fields: map[string]any{"text": 3.0}}, "text", ErrWrongType},
		{"list element", strict, Doc{ID: "1", Fields: map[string]any{"text": "x", "tags": []any{"a", 2.0}}}, "tags", ErrWrongType},
		{"empty text", DefaultSchema(), Doc{ID: "1", Fields: map[string]any{"title": "", "text": "  "}}, "", ErrEmptyText},
		{"huge text", small, Doc{ID: "1", Fields: map[string]any{"text": strings.Repeat("a", 11)}}, "text", ErrTextTooLarge},
		{"invalid utf8", DefaultSchema(), Doc{ID: "1", Fields: map[string]any{"text": "a\xffb"}}, "text", ErrInvalidUTF8},
		{"reserved name", DefaultSchema(), Doc{ID: "1", Fields: map[string]any{"text": "a", "_x": "b"}}, "_x", ErrUnknownField},
		{"nested list", DefaultSchema(), Doc{ID: "1", Fields: map[string]any{"text": "a", "m": []any{[]any{}}}}, "m", ErrWrongType},
	}
	for _, tc := range tests {
		_, _, err := tc.schema.Check(tc.doc)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.err)
			continue
		}
		var fe *FieldError
		if tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field) {
			t.Errorf("%s: err = %v, want it to name field %q", tc.name, err, tc.field)
		}
	}
}

func TestCheckInfersTypes(t *testing.T) {
	doc, err := DecodeJSON([]byte(`{"_id": 7, "title": "t", "text": "x", "year": 1999, "lang": "en", "when": "2020-02-03", "open": true, "tags": ["a","b"], "meta": {"src": "pubmed"}}`), "_id")
	if err != nil {
		t.Fatal(err)
	}
	if doc.ID != "7" {
		t.Errorf("id = %q, want 7", doc.ID)
	}
	s := DefaultSchema()
	norm, added, err := s.Check(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]FieldType{}
	for _, f := range added {
		got[f.Name] = f.Type
	}
	want := map[string]FieldType{"year": Number, "lang": Keyword, "when": Date, "open": Bool, "tags": Keywords, "meta.src": Keyword}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("inferred %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("inferred %v, want %v", got, want)
	}
	if norm.Fields["when"] != "2020-02-03T00:00:00Z" || norm.Fields["year"] != 1999.0 {
		t.Errorf("normal form: when=%v year=%v", norm.Fields["when"], norm.Fields["year"])
	}
}

func TestDecodeJSONErrors(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"_id": "1", "text": `, "malformed JSON"},
		{`[1]`, "malformed JSON"},
		{`null`, "want an object"},
		{`{"_id":"1"} x`, "trailing data"},
		{`{"_id":"1"}}`, "trailing data"},
		{`{"_id":"1","_vectors":{}}]`, "trailing data"},
		{`{"text":"a"}`, `field "_id": tandem: missing id`},
		{`{"_id":["a"]}`, `field "_id"`},
		{"{\"_id\":\"1\",\"text\":\"\xc3\x28\"}", "invalid UTF-8 at byte 19"},
	}
	for _, tc := range tests {
		_, err := DecodeJSON([]byte(tc.in), "_id")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("DecodeJSON(%q) = %v, want error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestSchemaValidate(t *testing.T) {
	for _, s := range []*Schema{
		{Fields: []Field{{Name: "a", Type: "blob"}}},
		{Fields: []Field{{Name: "a", Type: Text}, {Name: "a", Type: Keyword}}},
		{Fields: []Field{{Name: "_a", Type: Text}}},
		{Fields: []Field{{Name: "a", Type: Number, Analyzer: "en"}}},
		{Fields: []Field{{Name: "a", Type: Text, Boost: -1}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s.Fields)
		}
	}
}

func TestSchemaBM25(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, b := range []*BM25{
		{Scoring: "tfidf"},
		{K1: f(-0.1)},
		{K1: f(math.Inf(1))},
		{B: f(1.5)},
		{B: f(math.NaN())},
	} {
		err := (&Schema{BM25: b}).Validate()
		if err == nil || !strings.Contains(err.Error(), "bm25.") {
			t.Errorf("Validate with BM25 %+v = %v, want an error naming the bm25 parameter", b, err)
		}
	}
	for _, tc := range []struct {
		b         *BM25
		scoring   string
		k1, bb    float64
		serialise string
	}{
		{nil, BM25Textbook, DefaultK1, DefaultB, `{"id_field":"","fields":null}`},
		{&BM25{Scoring: BM25Bleve}, BM25Bleve, DefaultK1, DefaultB, `{"id_field":"","fields":null,"bm25":{"scoring":"bleve"}}`},
		{&BM25{K1: f(0.9), B: f(0)}, BM25Textbook, 0.9, 0, `{"id_field":"","fields":null,"bm25":{"k1":0.9,"b":0}}`},
	} {
		s := &Schema{BM25: tc.b}
		if err := s.Validate(); err != nil {
			t.Errorf("Validate with BM25 %+v: %v", tc.b, err)
		}
		scoring, k1, bb := s.BM25.Params()
		if scoring != tc.scoring || k1 != tc.k1 || bb != tc.bb {
			t.Errorf("Params of %+v = %s %v %v, want %s %v %v", tc.b, scoring, k1, bb, tc.scoring, tc.k1, tc.bb)
		}
		js, err := json.Marshal(s)
		if err != nil || string(js) != tc.serialise {
			t.Errorf("schema with BM25 %+v marshals as %s (%v), want %s", tc.b, js, err, tc.serialise)
		}
		var back Schema
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if s2, k2, b2 := back.BM25.Params(); s2 != scoring || k2 != k1 || b2 != bb {
			t.Errorf("%s reads back as %s %v %v", js, s2, k2, b2)
		}
	}
}

func TestFragmentMarked(t *testing.T) {
	f := Fragment{Text: "Café runs, running", Marks: []Mark{{Start: 5, End: 9, Term: "run"}, {Start: 11, End: 18, Term: "run"}}}
	if got, want := f.Marked("[", "]"), "Café [runs], [running]"; got != want {
		t.Errorf("Marked = %q, want %q", got, want)
	}
	if got := (Fragment{Text: "no marks"}).Marked("[", "]"); got != "no marks" {
		t.Errorf("Marked without marks = %q", got)
	}
}
