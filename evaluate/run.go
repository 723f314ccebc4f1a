package evaluate

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ErrInvalidRun is wrapped by errors about a run's content that are not
// tied to a line of a file: a duplicate doc in one query, a NaN score, an id
// that cannot be written to a TREC file.
var ErrInvalidRun = errors.New("evaluate: invalid run")

// Result is one retrieved document and its score.
type Result struct {
	DocID string
	Score float64
}

// Run maps a query id to its retrieved documents. The slice order does not
// matter to [Evaluate], which ranks by score (see the package invariants);
// [WriteTREC] writes it as is.
type Run map[string][]Result

// rank returns a copy of results in trec_eval order: score descending, then
// doc id descending.
func rank(results []Result) []Result {
	r := slices.Clone(results)
	slices.SortStableFunc(r, func(a, b Result) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return strings.Compare(b.DocID, a.DocID)
	})
	return r
}

// checkResults rejects what trec_eval rejects or cannot order.
func checkResults(qid string, results []Result) error {
	seen := make(map[string]struct{}, len(results))
	for _, r := range results {
		if math.IsNaN(r.Score) {
			return fmt.Errorf("%w: query %q doc %q: score is NaN", ErrInvalidRun, qid, r.DocID)
		}
		if _, dup := seen[r.DocID]; dup {
			return fmt.Errorf("%w: query %q: doc %q retrieved twice", ErrInvalidRun, qid, r.DocID)
		}
		seen[r.DocID] = struct{}{}
	}
	return nil
}

// WriteTREC writes run in the six-column TREC format
// "qid Q0 docid rank score tag", queries in byte order of their ids and
// results in slice order with ranks from 1. Scores are written in the
// shortest form that reads back exactly. Ids and tag must be non-empty and
// free of whitespace, or the file could not be read back.
func WriteTREC(w io.Writer, run Run, tag string) error {
	if tag == "" || strings.ContainsFunc(tag, isSpace) {
		return fmt.Errorf("%w: tag %q must be non-empty without whitespace", ErrInvalidRun, tag)
	}
	bw := bufio.NewWriter(w)
	qids := make([]string, 0, len(run))
	for q := range run {
		qids = append(qids, q)
	}
	slices.Sort(qids)
	for _, q := range qids {
		if q == "" || strings.ContainsFunc(q, isSpace) {
			return fmt.Errorf("%w: query id %q must be non-empty without whitespace", ErrInvalidRun, q)
		}
		if err := checkResults(q, run[q]); err != nil {
			return err
		}
		for i, r := range run[q] {
			if r.DocID == "" || strings.ContainsFunc(r.DocID, isSpace) {
				return fmt.Errorf("%w: query %q: doc id %q must be non-empty without whitespace", ErrInvalidRun, q, r.DocID)
			}
			fmt.Fprintf(bw, "%s Q0 %s %d %s %s\n", q, r.DocID, i+1,
				strconv.FormatFloat(r.Score, 'g', -1, 64), tag)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("evaluate: write run: %w", err)
	}
	return nil
}

// WriteTRECFile writes run to a new file at path (WriteTREC), replacing
// any file there.
func WriteTRECFile(path string, run Run, tag string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := WriteTREC(f, run, tag); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

// ReadTREC reads a six-column TREC run file ("qid Q0 docid rank score tag",
// whitespace-separated). Results keep file order; the rank column must be an
// integer but is otherwise ignored, as in trec_eval. Blank lines are skipped;
// a doc retrieved twice for one query is an error.
func ReadTREC(r io.Reader) (Run, error) {
	run := Run{}
	where := map[[2]string]int{}
	err := lines(r, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) == 0 {
			return nil
		}
		if len(f) != 6 {
			return malformed(n, "want 6 fields (qid Q0 docid rank score tag), got %d", len(f))
		}
		if _, err := strconv.Atoi(f[3]); err != nil {
			return fmt.Errorf("%w: line %d: rank: %w", ErrMalformed, n, err)
		}
		score, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			return fmt.Errorf("%w: line %d: score: %w", ErrMalformed, n, err)
		}
		if math.IsNaN(score) {
			return malformed(n, "score is NaN")
		}
		key := [2]string{f[0], f[2]}
		if first, dup := where[key]; dup {
			return malformed(n, "query %q doc %q already retrieved on line %d", f[0], f[2], first)
		}
		where[key] = n
		run[f[0]] = append(run[f[0]], Result{DocID: f[2], Score: score})
		return nil
	})
	return run, err
}
