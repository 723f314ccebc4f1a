package engine

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/tandemsearch/tandem"
)

// WriteText writes the result as `tandem search` prints it: the fusion,
// then a line a hit (its rank counting from offset+1, id, score and title,
// or the start of its text), each retriever's rank, score and contribution
// when several were fused, its highlights, then the facets (Facet.String).
// It returns the first error writing to w.
func (res *Result) WriteText(w io.Writer, offset int) error {
	ew := &errWriter{w: w}
	w = ew
	if res.Fusion != "" {
		fmt.Fprintf(w, "%s fused with %s\n", strings.Join(res.Retrievers, " + "), res.Fusion)
	}
	width := 0
	for _, r := range res.Retrievers {
		width = max(width, len(r))
	}
	for i, h := range res.Hits {
		title, _ := h.Fields["title"].(string)
		if title == "" {
			title, _ = h.Fields["text"].(string)
		}
		if r := []rune(title); len(r) > 80 {
			title = string(r[:80]) + "..."
		}
		fmt.Fprintf(w, "%3d  %-12s %8.4f  %s\n", i+1+offset, h.ID, h.Score, title)
		if len(h.Sources) > 1 {
			for _, s := range h.Sources {
				if s.Rank == 0 {
					fmt.Fprintf(w, "       %-*s      -\n", width, s.Retriever)
					continue
				}
				fmt.Fprintf(w, "       %-*s rank %3d  score %8.4f  contribution %.4f\n", width, s.Retriever, s.Rank, s.Score, s.Contribution)
			}
		}
		if h.Highlights != nil {
			writeHighlights(w, h.Highlights)
		}
	}
	for _, f := range res.Facets {
		fmt.Fprintln(w, f)
	}
	return ew.err
}

// errWriter keeps the first error of the writes to w, and writes nothing
// after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

// writeHighlights writes a hit's fragments with their marked words in
// brackets, then each late-interaction retriever's query words with the
// document token each matched and that match's score.
func writeHighlights(w io.Writer, hl *tandem.Highlights) {
	for _, f := range slices.Sorted(maps.Keys(hl.Fields)) {
		for _, fr := range hl.Fields[f] {
			fmt.Fprintf(w, "       %s: %s\n", f, fr.Marked("[", "]"))
		}
	}
	for _, l := range hl.Late {
		var parts []string
		for _, t := range l.Tokens {
			if t.Query.Kind == tandem.TokenText && t.Doc != nil {
				parts = append(parts, fmt.Sprintf("%s→%s %.2f", t.Query.Text, cmp.Or(t.Doc.Text, t.Doc.Token), t.Score))
			}
		}
		fmt.Fprintf(w, "       %s: %s\n", l.Retriever, strings.Join(parts, ", "))
	}
}
