package synth

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
)

// TextModel is the term statistics of a real collection, from which a
// Generator draws documents of any number with the same statistics: each
// document's length is a real document's, its words are drawn from the
// collection's word frequencies, and a word repeats within a document as
// often as in the real ones (a Pólya urn: each word is, with the
// collection's repeat fraction, one already drawn for the document, which
// keeps every word's overall frequency). Queries are the collection's own
// queries, in turn.
//
// Words are the lowercased runs of letters and digits, as they appear in
// the text: the engine under test analyses them (stop words, stemming).
type TextModel struct {
	Name    string
	words   []string // by decreasing count
	cum     []uint64 // cum[i] = occurrences of words[:i+1]
	lengths []int    // each real document's word count
	repeat  float64  // the urn's probability that a word repeats an earlier one (calibrate)
	real    float64  // the share of a real document's words that repeat an earlier one
	queries []string
}

// LoadTextModel reads a BEIR collection directory (corpus.jsonl with
// title and text, queries.jsonl with text).
func LoadTextModel(dir string) (*TextModel, error) {
	m := &TextModel{Name: filepath.Base(filepath.Clean(dir))}
	counts := map[string]uint64{}
	var words, distinct int
	err := eachJSONL(filepath.Join(dir, "corpus.jsonl"), func(line int, v map[string]any) error {
		title, _ := v["title"].(string)
		text, _ := v["text"].(string)
		ws := tokens(title + " " + text)
		if len(ws) == 0 {
			return nil
		}
		seen := map[string]bool{}
		for _, w := range ws {
			counts[w]++
			seen[w] = true
		}
		m.lengths = append(m.lengths, len(ws))
		words += len(ws)
		distinct += len(seen)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(m.lengths) == 0 {
		return nil, fmt.Errorf("synth: %s: no document with text", dir)
	}
	m.real = 1 - float64(distinct)/float64(words)
	for w := range counts {
		m.words = append(m.words, w)
	}
	slices.SortFunc(m.words, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var c uint64
	for _, w := range m.words {
		c += counts[w]
		m.cum = append(m.cum, c)
	}
	err = eachJSONL(filepath.Join(dir, "queries.jsonl"), func(line int, v map[string]any) error {
		if text, _ := v["text"].(string); strings.TrimSpace(text) != "" {
			m.queries = append(m.queries, text)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(m.queries) == 0 {
		return nil, fmt.Errorf("synth: %s: no query with text", dir)
	}
	m.calibrate(m.real)
	return m, nil
}

// calibrate sets the urn's probability so that generated documents repeat
// the share want of their words, as the real ones do: draws from the word
// frequencies alone already repeat the common words, so the urn adds only
// the rest. It bisects on 400 documents drawn with a fixed seed.
func (m *TextModel) calibrate(want float64) {
	measure := func(p float64) float64 {
		m.repeat = p
		rng := rand.New(rand.NewPCG(0xca1, 0xb7a7e))
		var words, distinct int
		for range 400 {
			ws := strings.Fields(m.text(rng))
			seen := map[string]bool{}
			for _, w := range ws {
				seen[w] = true
			}
			words += len(ws)
			distinct += len(seen)
		}
		return 1 - float64(distinct)/float64(words)
	}
	lo, hi := 0.0, want
	for range 12 {
		mid := (lo + hi) / 2
		if measure(mid) < want {
			lo = mid
		} else {
			hi = mid
		}
	}
	m.repeat = (lo + hi) / 2
}

// Stats describes the model: documents and words read, distinct words,
// the repeat fraction and the number of queries.
func (m *TextModel) Stats() string {
	var words int
	for _, n := range m.lengths {
		words += n
	}
	return fmt.Sprintf("%s: %d documents of %.1f words on average, %d distinct words, %.3f of a document's words repeat one before (urn %.3f), %d queries",
		m.Name, len(m.lengths), float64(words)/float64(len(m.lengths)), len(m.words), m.real, m.repeat, len(m.queries))
}

// text draws one document's words.
func (m *TextModel) text(rng *rand.Rand) string {
	n := m.lengths[rng.IntN(len(m.lengths))]
	total := m.cum[len(m.cum)-1]
	drawn := make([]int, 0, n)
	var b strings.Builder
	for i := range n {
		var w int
		if i > 0 && rng.Float64() < m.repeat {
			w = drawn[rng.IntN(len(drawn))]
		} else {
			r := rng.Uint64N(total)
			w, _ = slices.BinarySearch(m.cum, r+1)
		}
		drawn = append(drawn, w)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.words[w])
	}
	return b.String()
}

// Queries is the number of the collection's queries.
func (m *TextModel) Queries() int { return len(m.queries) }

// query is query i: the collection's queries in turn.
func (m *TextModel) query(i int) string { return m.queries[i%len(m.queries)] }

// tokens splits s into lowercased runs of letters and digits.
func tokens(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// eachJSONL calls fn with each line of a JSON Lines file, decoded.
func eachJSONL(path string, fn func(line int, v map[string]any) error) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("synth: %s: line %d: %w", path, line, err)
		}
		if err := fn(line, v); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return nil
}
