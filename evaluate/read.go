package evaluate

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by every error about the content of an input
// file; the message names the line and the field.
var ErrMalformed = errors.New("evaluate: malformed input")

// Query is one BEIR query. Fields other than _id and text are ignored.
type Query struct {
	ID   string
	Text string
}

// Qrels maps a query id to its judged docs and their graded relevance. A
// grade ≤ 0 means judged not relevant.
type Qrels map[string]map[string]int

// malformed builds an error that wraps ErrMalformed and names the line.
func malformed(line int, format string, args ...any) error {
	return fmt.Errorf("%w: line %d: %s", ErrMalformed, line, fmt.Sprintf(format, args...))
}

// lines calls fn with each line of r (1-based number, without the line
// ending). Unlike bufio.Scanner it has no line-length limit.
func lines(r io.Reader, fn func(n int, line string) error) error {
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if len(line) > 0 {
			line = strings.TrimSuffix(line, "\n")
			line = strings.TrimSuffix(line, "\r")
			if ferr := fn(n, line); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
	}
}

// ReadQueries reads BEIR queries.jsonl: one JSON object per line with a
// string "_id" and a string "text". Blank lines are skipped; a duplicate id
// is an error.
func ReadQueries(r io.Reader) ([]Query, error) {
	var out []Query
	seen := map[string]int{}
	err := lines(r, func(n int, line string) error {
		if strings.TrimSpace(line) == "" {
			return nil
		}
		var raw struct {
			ID   *string `json:"_id"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal([]byte(line), &raw); err != nil {
			return fmt.Errorf("%w: line %d: %w", ErrMalformed, n, err)
		}
		switch {
		case raw.ID == nil || *raw.ID == "":
			return malformed(n, `field "_id" is missing or empty`)
		case raw.Text == nil:
			return malformed(n, `field "text" is missing`)
		}
		if first, dup := seen[*raw.ID]; dup {
			return malformed(n, "query id %q already defined on line %d", *raw.ID, first)
		}
		seen[*raw.ID] = n
		out = append(out, Query{ID: *raw.ID, Text: *raw.Text})
		return nil
	})
	return out, err
}

// qrelsHeader is the first line of a BEIR qrels file.
const qrelsHeader = "query-id\tcorpus-id\tscore"

// ReadQrels reads a BEIR qrels TSV: an optional header line
// "query-id corpus-id score", then one tab-separated judgment per line with
// an integer grade. Blank lines are skipped; judging the same (query, doc)
// twice is an error.
func ReadQrels(r io.Reader) (Qrels, error) {
	qrels := Qrels{}
	where := map[[2]string]int{}
	err := lines(r, func(n int, line string) error {
		if strings.TrimSpace(line) == "" || (n == 1 && line == qrelsHeader) {
			return nil
		}
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			return malformed(n, "want 3 tab-separated fields (query-id, corpus-id, score), got %d", len(f))
		}
		qid, did := strings.TrimSpace(f[0]), strings.TrimSpace(f[1])
		if qid == "" {
			return malformed(n, "query-id is empty")
		}
		if did == "" {
			return malformed(n, "corpus-id is empty")
		}
		grade, err := strconv.Atoi(strings.TrimSpace(f[2]))
		if err != nil {
			return fmt.Errorf("%w: line %d: score: %w", ErrMalformed, n, err)
		}
		key := [2]string{qid, did}
		if first, dup := where[key]; dup {
			return malformed(n, "query %q doc %q already judged on line %d", qid, did, first)
		}
		where[key] = n
		if qrels[qid] == nil {
			qrels[qid] = map[string]int{}
		}
		qrels[qid][did] = grade
		return nil
	})
	return qrels, err
}

// LoadQueries reads a BEIR queries.jsonl file.
func LoadQueries(path string) ([]Query, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("evaluate: load queries: %w", err)
	}
	defer f.Close()
	q, err := ReadQueries(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}

// LoadQrels reads a BEIR qrels TSV file.
func LoadQrels(path string) (Qrels, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("evaluate: load qrels: %w", err)
	}
	defer f.Close()
	q, err := ReadQrels(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return q, nil
}
