package sparse

import (
	"fmt"
	"slices"

	"github.com/blevesearch/bleve/v2/analysis"

	"github.com/tandemsearch/tandem"
)

// Highlighter marks, in the values of a text field, the tokens a query's
// terms match as that field's analyzer sees them: the query text and each
// value are analysed with the same analyzer, and a token is marked when
// its analysed term (lower-cased, stemmed: "runs" and "running" are both
// "run" to "en") is one of the query's analysed terms. A stop word is
// marked never: the analyzer drops it from both. It is safe for
// concurrent use.
type Highlighter struct {
	a     analysis.Analyzer
	terms map[string]bool
}

// Mark is one marked token of a value: its byte range [Start, End) in the
// value and its analysed term. A token keeps the range of the word it was
// analysed from ("cat's" for the term "cat").
type Mark struct {
	Start, End int
	Term       string
}

// Highlighter analyses the query text with the named analyzer (a text
// field's tandem.Field.Analyzer; "" means tandem.DefaultAnalyzer) and
// returns a Highlighter of its terms.
func (x *Index) Highlighter(analyzer, text string) (*Highlighter, error) {
	if analyzer == "" {
		analyzer = tandem.DefaultAnalyzer
	}
	a, err := x.analyzer(analyzer)
	if err != nil {
		return nil, fmt.Errorf("sparse: highlight: %w", err)
	}
	h := &Highlighter{a: a, terms: map[string]bool{}}
	for _, t := range a.Analyze([]byte(text)) {
		h.terms[string(t.Term)] = true
	}
	return h, nil
}

// Terms returns the query's analysed terms, sorted.
func (h *Highlighter) Terms() []string {
	out := make([]string, 0, len(h.terms))
	for t := range h.terms {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Marks analyses value and returns its marked tokens in order of their
// start, overlapping ranges (an n-gram analyzer's) merged into one mark
// with the first token's term.
func (h *Highlighter) Marks(value string) []Mark {
	if len(h.terms) == 0 || value == "" {
		return nil
	}
	var out []Mark
	for _, t := range h.a.Analyze([]byte(value)) {
		if !h.terms[string(t.Term)] || t.Start < 0 || t.End > len(value) || t.Start >= t.End {
			continue
		}
		out = append(out, Mark{Start: t.Start, End: t.End, Term: string(t.Term)})
	}
	slices.SortStableFunc(out, func(a, b Mark) int { return a.Start - b.Start })
	merged := out[:0]
	for _, m := range out {
		if n := len(merged); n > 0 && m.Start < merged[n-1].End {
			merged[n-1].End = max(merged[n-1].End, m.End)
			continue
		}
		merged = append(merged, m)
	}
	return merged
}
