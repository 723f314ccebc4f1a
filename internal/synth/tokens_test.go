package synth

import (
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// smallTokens is a corpus small enough to score exhaustively in a test.
func smallTokens() TokenCorpus {
	c := DefaultTokens()
	c.Dim, c.Tokens, c.QueryTokens = 64, 32, 16
	c.Centres, c.Common, c.Topics = 1024, 64, 32
	return c
}

func TestTokenCorpusDeterministic(t *testing.T) {
	c := smallTokens()
	g, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	a, b := g.Doc(7), g.Doc(3)
	if !reflect.DeepEqual(a, g.Doc(7)) || reflect.DeepEqual(a.Vectors, b.Vectors) {
		t.Fatal("documents are not a function of their number")
	}
	// Another generator from the same corpus makes the same documents
	// and queries: exact answers can be computed again later.
	g2, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, g2.Doc(7)) {
		t.Error("a second generator makes another document 7")
	}
	q, target := g.Query(5, 1000)
	q2, target2 := g2.Query(5, 1000)
	if !reflect.DeepEqual(q, q2) || target != target2 {
		t.Error("query 5 differs between generators")
	}
	// The seed changes everything.
	c.Seed++
	g3, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Vectors, g3.Doc(7).Vectors) {
		t.Error("another seed makes the same document 7")
	}
}

func TestTokenCorpusShape(t *testing.T) {
	c := smallTokens()
	g, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	cats, groups := map[string]int{}, map[string]int{}
	for i := range n {
		d := g.Doc(i)
		if d.ID != ID(i) || len(d.Fields) != 2 {
			t.Fatalf("doc %d: id %q, fields %v", i, d.ID, d.Fields)
		}
		cats[d.Fields["cat"].(string)]++
		groups[d.Fields["group"].(string)]++
		rows := d.Vectors[c.Model].Tokens
		if len(rows) != c.Tokens || len(d.Vectors) != 1 || d.Vectors[c.Model].Dense != nil {
			t.Fatalf("doc %d: %d token rows, vectors %d", i, len(rows), len(d.Vectors))
		}
		if i < 50 {
			checkUnitRows(t, "doc", rows, c.Dim)
		}
	}
	uniform := func(name string, counts map[string]int, values int) {
		if len(counts) != values {
			t.Errorf("%d values of %s seen, want %d", len(counts), name, values)
		}
		for v, k := range counts {
			if k < n/values/3 || k > n/values*3 {
				t.Errorf("%s %s: %d of %d documents", name, v, k, n)
			}
		}
	}
	uniform("cat", cats, c.Categories)
	uniform("group", groups, c.Groups)
	for i := range 20 {
		q, target := g.Query(i, 300)
		if len(q) != c.QueryTokens || target < 0 || target >= 300 {
			t.Fatalf("query %d: %d rows, target %d", i, len(q), target)
		}
		checkUnitRows(t, "query", q, c.Dim)
	}
	if _, target := g.Query(3, 1); target != 0 {
		t.Errorf("query over one document targets %d", target)
	}
}

func checkUnitRows(t *testing.T, what string, rows [][]float32, dim int) {
	t.Helper()
	for r, row := range rows {
		if len(row) != dim || math.Abs(dot(row, row)-1) > 1e-5 {
			t.Fatalf("%s row %d: %d values, squared norm %v", what, r, len(row), dot(row, row))
		}
	}
}

// TestTokenCorpusNeighbours checks the clustering a late-interaction
// benchmark needs: a query's target document is among its exhaustive
// avg-max top 10, and far above a typical document.
func TestTokenCorpusNeighbours(t *testing.T) {
	c := smallTokens()
	g, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	const n, queries = 400, 20
	docs := make([][][]float32, n)
	mains := make([]int, n)
	for i := range docs {
		docs[i] = g.Doc(i).Vectors[c.Model].Tokens
		mains[i] = g.draw(i).main
	}
	inTop10, topicGap := 0, 0.0
	for qi := range queries {
		q, target := g.Query(qi, n)
		scores := make([]float64, n)
		var sum, sameTopic, other float64
		var nSame, nOther int
		for i, d := range docs {
			scores[i] = avgMax(q, d)
			sum += scores[i]
			if i == target {
				continue
			}
			if mains[i] == mains[target] {
				sameTopic += scores[i]
				nSame++
			} else {
				other += scores[i]
				nOther++
			}
		}
		sorted := slices.Clone(scores)
		slices.SortFunc(sorted, func(a, b float64) int { return cmp.Compare(b, a) })
		if scores[target] >= sorted[9] {
			inTop10++
		}
		if mean := sum / n; scores[target] < mean+0.2 {
			t.Errorf("query %d: target scores %.3f, mean %.3f", qi, scores[target], mean)
		}
		if nSame > 0 {
			topicGap += sameTopic/float64(nSame) - other/float64(nOther)
		}
	}
	if inTop10 < queries*9/10 {
		t.Errorf("target in the exhaustive top 10 for %d of %d queries", inTop10, queries)
	}
	// Documents of the target's main topic are nearer than the others.
	if gap := topicGap / queries; gap < 0.05 {
		t.Errorf("documents of the target's topic score %.3f above the others on average", gap)
	}
}

func avgMax(q, d [][]float32) float64 {
	var s float64
	for _, qt := range q {
		best := math.Inf(-1)
		for _, dt := range d {
			best = max(best, dot(qt, dt))
		}
		s += best
	}
	return s / float64(len(q))
}

func TestTokenCorpusInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*TokenCorpus)
		want string
	}{
		{"no dimension", func(c *TokenCorpus) { c.Dim = 0 }, "dimension"},
		{"no tokens", func(c *TokenCorpus) { c.Tokens = 0 }, "tokens"},
		{"too many query tokens", func(c *TokenCorpus) { c.QueryTokens = 5000 }, "tokens"},
		{"centres for no topic", func(c *TokenCorpus) { c.Centres, c.Common, c.Topics = 300, 256, 64 }, "centres"},
		{"no categories", func(c *TokenCorpus) { c.Categories = 0 }, "categories"},
		{"no model", func(c *TokenCorpus) { c.Model = "" }, "model"},
	} {
		c := DefaultTokens()
		tc.edit(&c)
		if _, err := NewTokens(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one mentioning %q", tc.name, err, tc.want)
		}
	}
	// The smallest corpus: one common centre and one per topic.
	c := DefaultTokens()
	c.Centres, c.Common, c.Topics = 3, 1, 2
	g, err := NewTokens(c)
	if err != nil {
		t.Fatal(err)
	}
	checkUnitRows(t, "doc", g.Doc(0).Vectors[c.Model].Tokens, c.Dim)
}

// TestTokenCorpusStable holds the default corpus's document 0 to the
// checksum of its rows when the benchmarks' figures of earlier sessions
// were measured (b232afe): bench late at a given size builds the same
// collection whatever binary runs it, so two binaries compare on the same
// data.
func TestTokenCorpusStable(t *testing.T) {
	g, err := NewTokens(DefaultTokens())
	if err != nil {
		t.Fatal(err)
	}
	h := fnv.New64a()
	for _, row := range g.Doc(0).Vectors[g.c.Model].Tokens {
		for _, v := range row {
			binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
	}
	if sum := h.Sum64(); sum != goldenDoc0 {
		t.Errorf("default corpus, document 0: checksum %#x, want %#x", sum, uint64(goldenDoc0))
	}
}

// BenchmarkTokenDoc makes documents of the default corpus (128 tokens of
// 128 values), as bench late does for each document it ingests.
func BenchmarkTokenDoc(b *testing.B) {
	g, err := NewTokens(DefaultTokens())
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; b.Loop(); i++ {
		g.Doc(i)
	}
}

// goldenDoc0 is the FNV-64a of document 0's rows (DefaultTokens), as the
// generator of b232afe made them.
const goldenDoc0 = 0xca7ba81f805ced0b
