package synth

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestCorpus(t *testing.T) {
	g, err := New(Default())
	if err != nil {
		t.Fatal(err)
	}
	// Deterministic, whatever the order of generation.
	a, b := g.Doc(7), g.Doc(3)
	if !reflect.DeepEqual(a, g.Doc(7)) || reflect.DeepEqual(a, b) {
		t.Fatal("documents are not a function of their number")
	}
	const n = 2000
	cats := map[string]int{}
	stops, words := 0, 0
	isStop := map[string]bool{}
	for _, w := range g.words[:g.stop] {
		isStop[w] = true
	}
	for i := range n {
		d := g.Doc(i)
		ws := strings.Fields(d.Fields["text"].(string))
		if len(ws) < 20 || len(ws) > 130 {
			t.Fatalf("doc %d has %d words", i, len(ws))
		}
		for _, w := range ws {
			words++
			if isStop[w] {
				stops++
			}
		}
		cats[d.Fields["cat"].(string)]++
		v := d.Vectors["synthetic-384"].Dense
		var ss float64
		for _, x := range v {
			ss += float64(x) * float64(x)
		}
		if len(v) != 384 || math.Abs(ss-1) > 1e-4 {
			t.Fatalf("doc %d: vector of %d values, squared norm %v", i, len(v), ss)
		}
	}
	// As in English, stop words are a large share of the running text.
	if frac := float64(stops) / float64(words); frac < 0.3 || frac > 0.8 {
		t.Errorf("stop words are %.2f of the words", frac)
	}
	if len(cats) != 100 {
		t.Errorf("%d categories seen", len(cats))
	}
	for c, k := range cats {
		if k < n/100/3 || k > n/100*3 {
			t.Errorf("category %s: %d of %d documents", c, k, n)
		}
	}
	q, v := g.Query(1)
	if nw := len(strings.Fields(q)); nw < 2 || nw > 4 || len(v) != 384 {
		t.Errorf("query %q, vector of %d", q, len(v))
	}
	for _, w := range strings.Fields(q) {
		if isStop[w] {
			t.Errorf("query %q has stop word %q", q, w)
		}
	}
	// A query's nearest documents are far nearer than a random one.
	best, sum := -1.0, 0.0
	for i := range n {
		s := dot(v, g.Doc(i).Vectors["synthetic-384"].Dense)
		best = max(best, s)
		sum += s
	}
	if mean := sum / n; best < mean+0.2 {
		t.Errorf("best cosine %.3f, mean %.3f: no near neighbours", best, mean)
	}
}

func dot(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// TestTextFrom draws documents from SciFact's statistics: deterministic,
// real lengths, words of the collection, about as many repeats within a
// document and as many distinct words per document as the real ones, and
// the real queries in turn.
func TestTextFrom(t *testing.T) {
	dir := filepath.Join("..", "..", "..", "shared", "data", "scifact")
	if _, err := os.Stat(filepath.Join(dir, "corpus.jsonl")); err != nil {
		t.Skipf("SciFact is not in ../shared/data (%v): skipping", err)
	}
	c := Default()
	c.TextFrom = dir
	g, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	m := g.TextModel()
	t.Log(m.Stats())
	if !reflect.DeepEqual(g.Doc(11), g.Doc(11)) {
		t.Fatal("documents are not a function of their number")
	}
	for _, i := range []int{0, 11, 12345} {
		if g.DocText(i) != g.Doc(i).Fields["text"] {
			t.Fatalf("DocText(%d) is not Doc(%d)'s text", i, i)
		}
	}
	known := map[string]bool{}
	for _, w := range m.words {
		known[w] = true
	}
	lengths := map[int]bool{}
	for _, n := range m.lengths {
		lengths[n] = true
	}
	var words, distinct int
	for i := range 2000 {
		ws := strings.Fields(g.Doc(i).Fields["text"].(string))
		if !lengths[len(ws)] {
			t.Fatalf("doc %d has %d words, the length of no SciFact document", i, len(ws))
		}
		seen := map[string]bool{}
		for _, w := range ws {
			if !known[w] {
				t.Fatalf("doc %d: %q is not a SciFact word", i, w)
			}
			seen[w] = true
		}
		words += len(ws)
		distinct += len(seen)
	}
	if rep := 1 - float64(distinct)/float64(words); math.Abs(rep-m.real) > 0.02 {
		t.Errorf("generated documents repeat %.3f of their words, SciFact's %.3f", rep, m.real)
	}
	q0, _ := g.Query(0)
	qn, _ := g.Query(len(m.queries))
	if q0 != m.queries[0] || qn != q0 {
		t.Errorf("queries: %q, %q; want SciFact's first, twice", q0, qn)
	}
}
