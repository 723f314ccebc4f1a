package sparse

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHighlighterMarksAnalysedTerms: the marks are exactly the tokens
// whose analysed term is one of the query's, with the field's analyzer:
// with "en", stemmed forms are marked ("running" marks "runs" and "run")
// and stop words never (the query's "the" and "and" mark nothing); with
// "standard", which lower-cases and drops stop words but does not stem,
// only the same word is marked.
func TestHighlighterMarksAnalysedTerms(t *testing.T) {
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const query = "Running the cats and dogs"
	const value = "The runner runs; a cat ran. Dogs running and the CATS' run, the cat's dog."
	for _, tc := range []struct {
		analyzer string
		terms    []string
		marked   []string // the marked ranges' text, in order
	}{
		{"en", []string{"cat", "dog", "run"}, []string{"runs", "cat", "Dogs", "running", "CATS", "run", "cat's", "dog"}},
		{"", []string{"cat", "dog", "run"}, []string{"runs", "cat", "Dogs", "running", "CATS", "run", "cat's", "dog"}},
		{"standard", []string{"cats", "dogs", "running"}, []string{"Dogs", "running", "CATS"}},
	} {
		h, err := x.Highlighter(tc.analyzer, query)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Terms(); !slices.Equal(got, tc.terms) {
			t.Errorf("%q: query terms %v, want %v", tc.analyzer, got, tc.terms)
		}
		marks := h.Marks(value)
		var got []string
		for _, m := range marks {
			got = append(got, value[m.Start:m.End])
		}
		if !slices.Equal(got, tc.marked) {
			t.Errorf("%q: marked %q, want %q", tc.analyzer, got, tc.marked)
		}
		// Exactly the analysed query terms: every token of the value
		// whose term is a query term is marked, and no other.
		name := tc.analyzer
		if name == "" {
			name = "en"
		}
		a, err := x.analyzer(name)
		if err != nil {
			t.Fatal(err)
		}
		var want []Mark
		for _, tok := range a.Analyze([]byte(value)) {
			if slices.Contains(tc.terms, string(tok.Term)) {
				want = append(want, Mark{tok.Start, tok.End, string(tok.Term)})
			}
		}
		if !slices.Equal(marks, want) {
			t.Errorf("%q: marks %+v, the analysed value's tokens with query terms %+v", tc.analyzer, marks, want)
		}
		for _, stop := range []string{"The", "the", "and", "a"} {
			for _, m := range marks {
				if strings.EqualFold(value[m.Start:m.End], stop) {
					t.Errorf("%q: stop word %q marked", tc.analyzer, stop)
				}
			}
		}
	}
	// A query of stop words has no term and marks nothing.
	h, err := x.Highlighter("en", "the and of a")
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Terms()) != 0 || h.Marks(value) != nil {
		t.Errorf("stop-word query: terms %v, marks %v", h.Terms(), h.Marks(value))
	}
	if _, err := x.Highlighter("klingon", query); err == nil || !strings.Contains(err.Error(), `"klingon"`) {
		t.Errorf("unknown analyzer: %v", err)
	}
}
