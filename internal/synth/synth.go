// Package synth generates synthetic collections for benchmarks that need
// more documents than any shared data set has: text with Zipfian term
// frequencies, metadata for filters, and clustered vectors, so that BM25
// postings, filter selectivities and nearest neighbours all behave as in
// real collections.
//
// Generation is deterministic: document i depends only on the corpus's
// parameters and i, so documents can be made in any order, in parallel,
// and again later (to compute exact answers) without being stored.
package synth

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/blevesearch/bleve/v2/analysis/lang/en"

	"github.com/tandemsearch/tandem"
)

// Corpus describes a synthetic collection. The zero value is not usable:
// start from Default.
type Corpus struct {
	Seed uint64
	// Vocab is the number of distinct words. The most frequent ones are
	// English stop words, which the "en" analyzer drops, as real text's
	// most frequent words are.
	Vocab int
	// ZipfS is the Zipf exponent of word frequencies (>1; English text is
	// about 1.07).
	ZipfS float64
	// MinWords and MaxWords bound a document's length, drawn uniformly.
	MinWords, MaxWords int
	// Categories is the number of values of the keyword field "cat",
	// drawn uniformly: a term filter on one value keeps 1/Categories of
	// the documents.
	Categories int
	// Dim is the dimension of the dense vectors, Clusters the number of
	// cluster centres they are drawn around.
	Dim, Clusters int
	// Model names the model the vectors are supplied for (Doc.Vectors).
	Model string
	// TextFrom, when set, is a BEIR collection directory whose term
	// statistics the text follows instead (TextModel): real document
	// lengths, word frequencies and repeats, and its queries. Vocab,
	// ZipfS, MinWords and MaxWords then do not apply.
	TextFrom string
}

// Default is a corpus of short English-like passages (20 to 130 words,
// about as long as MS MARCO's) with 384-d vectors, the size of the
// default encoder's.
func Default() Corpus {
	return Corpus{Seed: 1, Vocab: 100_000, ZipfS: 1.07, MinWords: 20, MaxWords: 130, Categories: 100,
		Dim: 384, Clusters: 256, Model: "synthetic-384"}
}

// ModelSpec is the external model the corpus's vectors belong to.
func (c Corpus) ModelSpec() tandem.Model {
	return tandem.Model{Name: c.Model, Dense: true, Dim: c.Dim, Similarity: tandem.Cosine, External: true}
}

// Generator makes the documents and queries of a Corpus. It is safe for
// concurrent use.
type Generator struct {
	c       Corpus
	real    *TextModel // Corpus.TextFrom's, or nil
	words   []string   // by frequency rank
	stop    int        // words[:stop] are stop words
	centres [][]float32
	basis   [][]float32
}

// New prepares a generator for c.
func New(c Corpus) (*Generator, error) {
	if c.Vocab < 1000 || c.ZipfS <= 1 || c.MinWords < 1 || c.MaxWords < c.MinWords || c.Categories < 1 || c.Dim < 1 || c.Clusters < 1 {
		return nil, fmt.Errorf("synth: invalid corpus %+v", c)
	}
	g := &Generator{c: c}
	if c.TextFrom != "" {
		var err error
		if g.real, err = LoadTextModel(c.TextFrom); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(en.EnglishStopWords))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "|")
		for _, w := range strings.Fields(line) {
			if !seen[w] {
				seen[w] = true
				g.words = append(g.words, w)
			}
		}
	}
	g.stop = len(g.words)
	for r := 0; len(g.words) < c.Vocab; r++ {
		if w := word(r); !seen[w] {
			seen[w] = true
			g.words = append(g.words, w)
		}
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x5ce7))
	for range c.Clusters {
		g.centres = append(g.centres, gauss(rng, c.Dim, 1))
	}
	for range min(32, c.Dim) {
		g.basis = append(g.basis, gauss(rng, c.Dim, 1))
	}
	return g, nil
}

// word spells rank r as consonant-vowel syllables ending in a consonant,
// which the English stemmer leaves mostly alone.
func word(r int) string {
	const cons, vows = "bdfgklmnprstvz", "aeiou"
	var b strings.Builder
	for {
		b.WriteByte(cons[r%len(cons)])
		r /= len(cons)
		b.WriteByte(vows[r%len(vows)])
		r /= len(vows)
		if r == 0 {
			break
		}
		r--
	}
	b.WriteByte('x')
	return b.String()
}

func gauss(rng *rand.Rand, d int, scale float64) []float32 {
	v := make([]float32, d)
	sd := scale / math.Sqrt(float64(d))
	for i := range v {
		v[i] = float32(rng.NormFloat64() * sd)
	}
	return v
}

// vector draws a unit vector near a random centre, spread over a shared
// low-rank subspace, as embeddings of related texts are.
func (g *Generator) vector(rng *rand.Rand) []float32 {
	c := g.centres[rng.IntN(len(g.centres))]
	v := gauss(rng, g.c.Dim, 0.1)
	sd := 1 / math.Sqrt(float64(len(g.basis)))
	for _, b := range g.basis {
		z := float32(rng.NormFloat64() * sd)
		for i := range v {
			v[i] += z * b[i]
		}
	}
	var n float64
	for i := range v {
		v[i] += c[i]
		n += float64(v[i]) * float64(v[i])
	}
	inv := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= inv
	}
	return v
}

// text draws n words with Zipfian frequencies.
func (g *Generator) text(rng *rand.Rand, n int) string {
	z := rand.NewZipf(rng, g.c.ZipfS, 1, uint64(len(g.words)-1))
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(g.words[z.Uint64()])
	}
	return b.String()
}

// docText is a document's text: n Zipfian words, or a document drawn
// from the real collection's statistics.
func (g *Generator) docText(rng *rand.Rand, n int) string {
	if g.real != nil {
		return g.real.text(rng)
	}
	return g.text(rng, n)
}

// TextModel is the real collection's statistics the text follows, nil
// for Zipfian words.
func (g *Generator) TextModel() *TextModel { return g.real }

// DocText is document i's text, as Doc(i) has it, without the rest.
func (g *Generator) DocText(i int) string {
	rng := rand.New(rand.NewPCG(g.c.Seed, uint64(i)))
	n := g.c.MinWords + rng.IntN(g.c.MaxWords-g.c.MinWords+1)
	return g.docText(rng, n)
}

// ID is document i's id.
func ID(i int) string { return fmt.Sprintf("d%08d", i) }

// Category is the value of "cat" that a filter on category k matches.
func Category(k int) string { return fmt.Sprintf("c%03d", k) }

// Doc returns document i: fields "text", "cat" (one of Categories
// keywords) and "year" (1990 to 2024), and its vector under Model.
func (g *Generator) Doc(i int) tandem.Doc {
	rng := rand.New(rand.NewPCG(g.c.Seed, uint64(i)))
	n := g.c.MinWords + rng.IntN(g.c.MaxWords-g.c.MinWords+1)
	return tandem.Doc{
		ID: ID(i),
		Fields: map[string]any{
			"text": g.docText(rng, n),
			"cat":  Category(rng.IntN(g.c.Categories)),
			"year": float64(1990 + rng.IntN(35)),
		},
		Vectors: map[string]tandem.Vectors{g.c.Model: {Dense: g.vector(rng)}},
	}
}

// Query returns query i: 2 to 4 words drawn as document words are, stop
// words left out (as a searcher's words are content words), or the real
// collection's query i (in turn), and a vector drawn as documents'
// vectors are, so that it has near neighbours.
func (g *Generator) Query(i int) (string, []float32) {
	rng := rand.New(rand.NewPCG(g.c.Seed^0xc0ffee, uint64(i)))
	z := rand.NewZipf(rng, g.c.ZipfS, 1, uint64(len(g.words)-1))
	if g.real != nil {
		return g.real.query(i), g.vector(rng)
	}
	n := 2 + rng.IntN(3)
	var words []string
	for len(words) < n {
		if r := z.Uint64(); int(r) >= g.stop {
			words = append(words, g.words[r])
		}
	}
	return strings.Join(words, " "), g.vector(rng)
}
