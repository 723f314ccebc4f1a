package synth

import (
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/tandemsearch/tandem"
)

// TokenCorpus describes a synthetic collection for late interaction: each
// document is a token matrix, one unit vector per token, clustered as
// contextual token embeddings are (the tokens of one word lie near one
// another, the words of a document come from a few topics, and frequent
// words are shared by every topic), plus metadata for filters. It has no
// text: a benchmark searches it with query token matrices alone.
//
// Invariants: document i depends only on the corpus's parameters and i;
// query i depends only on them, i and the number of documents it may
// target. Every row, of documents and queries, has Dim values and unit
// length.
//
// The zero value is not usable: start from DefaultTokens.
type TokenCorpus struct {
	Seed uint64
	// Dim is the token dimension; Tokens the rows of every document's
	// matrix, QueryTokens those of every query's.
	Dim, Tokens, QueryTokens int
	// Centres is the number of token cluster centres (the "words"). The
	// first Common are shared by every topic, as frequent words are; the
	// others are split evenly among Topics (the remainder is unused).
	Centres, Common, Topics int
	// Categories is the number of values of the keyword field "cat"
	// (Category), Groups of "group" (Group), both drawn uniformly and
	// independently of the tokens: a term filter on one value keeps
	// 1/Categories or 1/Groups of the documents.
	Categories, Groups int
	// Model names the external model the token matrices are supplied for
	// (Doc.Vectors).
	Model string
}

// DefaultTokens is a corpus of 128 tokens of 128 values per document and 32
// per query, ColBERTv2's shapes for a short passage, with 8192 centres in
// 256 topics: at 100,000 documents a topic has about 400 documents.
func DefaultTokens() TokenCorpus {
	return TokenCorpus{Seed: 1, Dim: 128, Tokens: 128, QueryTokens: 32, Centres: 8192, Common: 256, Topics: 256,
		Categories: 100, Groups: 10, Model: "synthetic-tokens"}
}

// ModelSpec is the external late-interaction model the token matrices
// belong to, with the default late-interaction index; the caller sets
// LateIndex to choose another.
func (c TokenCorpus) ModelSpec() tandem.Model {
	return tandem.Model{Name: c.Model, Late: true, TokenDim: c.Dim, Similarity: tandem.Cosine, External: true}
}

// How a token is drawn. A document has a main topic and a second one; each
// of its tokens comes from a common centre (shareCommon), from the second
// topic (shareSecond) or from the main one, and within the chosen set the
// centres are Zipf-distributed (exponent centreZipf), so that a few centres
// of each set are most of its tokens, as frequent words are. A token is its
// centre plus a spread along a low-rank subspace shared by all tokens
// (contextual embeddings are anisotropic) plus isotropic noise, of the
// norms below beside the centre's 1, then normalised. A query token is, with
// probability queryFromDoc, one of its target document's tokens plus noise
// of norm queryNoise (the query asks for what the document says), otherwise
// drawn as a token of the target's topics.
const (
	shareCommon  = 0.2
	shareSecond  = 0.2
	centreZipf   = 1.1
	spreadNorm   = 0.4
	noiseNorm    = 0.4
	spreadRank   = 16
	queryFromDoc = 0.5
	queryNoise   = 0.3
)

// Seeds of the random streams, so that documents, queries and the shared
// centres draw independent numbers from one Seed.
const (
	tokenCentreStream = 0x70c3
	tokenDocStream    = 0x70c0ffee
	tokenQueryStream  = 0x7a11
)

// TokenGenerator makes the documents and queries of a TokenCorpus. It is
// safe for concurrent use.
type TokenGenerator struct {
	c        TokenCorpus
	perTopic int         // centres per topic
	centres  [][]float32 // c.Centres centres, of norm about 1
	basis    [][]float32 // the shared low-rank subspace
}

// NewTokens prepares a generator for c.
func NewTokens(c TokenCorpus) (*TokenGenerator, error) {
	switch {
	case c.Dim < 1 || c.Dim > math.MaxUint16:
		return nil, fmt.Errorf("synth: token corpus: dimension %d", c.Dim)
	case c.Tokens < 1 || c.Tokens > tandem.MaxTokens || c.QueryTokens < 1 || c.QueryTokens > tandem.MaxTokens:
		return nil, fmt.Errorf("synth: token corpus: %d document and %d query tokens (1 to %d)", c.Tokens, c.QueryTokens, tandem.MaxTokens)
	case c.Topics < 1 || c.Common < 1 || c.Centres < c.Common+c.Topics:
		return nil, fmt.Errorf("synth: token corpus: %d centres cannot give %d common ones and at least one to each of %d topics", c.Centres, c.Common, c.Topics)
	case c.Categories < 1 || c.Groups < 1:
		return nil, fmt.Errorf("synth: token corpus: %d categories, %d groups", c.Categories, c.Groups)
	case c.Model == "":
		return nil, fmt.Errorf("synth: token corpus: no model name")
	}
	g := &TokenGenerator{c: c, perTopic: (c.Centres - c.Common) / c.Topics}
	rng := rand.New(rand.NewPCG(c.Seed, tokenCentreStream))
	for range c.Centres {
		g.centres = append(g.centres, gauss(rng, c.Dim, 1))
	}
	for range min(spreadRank, c.Dim) {
		g.basis = append(g.basis, gauss(rng, c.Dim, 1))
	}
	return g, nil
}

// Corpus returns the generator's corpus.
func (g *TokenGenerator) Corpus() TokenCorpus { return g.c }

// Group is the value of "group" that a filter on group k matches.
func Group(k int) string { return fmt.Sprintf("g%02d", k) }

// tokenDoc is a document as drawn: its topics, fields and token rows (all
// in one backing array).
type tokenDoc struct {
	main, second int
	cat, group   int
	rows         [][]float32
}

// draw makes document i.
func (g *TokenGenerator) draw(i int) tokenDoc {
	rng := rand.New(rand.NewPCG(g.c.Seed^tokenDocStream, uint64(i)))
	d := tokenDoc{main: rng.IntN(g.c.Topics), second: rng.IntN(g.c.Topics)}
	d.cat, d.group = rng.IntN(g.c.Categories), rng.IntN(g.c.Groups)
	pick := g.picker(rng, d)
	backing := make([]float32, g.c.Tokens*g.c.Dim)
	d.rows = make([][]float32, g.c.Tokens)
	for r := range d.rows {
		d.rows[r] = backing[r*g.c.Dim : (r+1)*g.c.Dim : (r+1)*g.c.Dim]
		g.token(rng, pick(), d.rows[r])
	}
	return d
}

// picker returns a function drawing the centre of a token of d.
func (g *TokenGenerator) picker(rng *rand.Rand, d tokenDoc) func() int {
	common := rand.NewZipf(rng, centreZipf, 1, uint64(g.c.Common-1))
	topic := rand.NewZipf(rng, centreZipf, 1, uint64(g.perTopic-1))
	return func() int {
		switch u := rng.Float64(); {
		case u < shareCommon:
			return int(common.Uint64())
		case u < shareCommon+shareSecond:
			return g.c.Common + d.second*g.perTopic + int(topic.Uint64())
		default:
			return g.c.Common + d.main*g.perTopic + int(topic.Uint64())
		}
	}
}

// token writes into out a unit vector near centre c.
func (g *TokenGenerator) token(rng *rand.Rand, c int, out []float32) {
	dim := len(out)
	sdNoise := noiseNorm / math.Sqrt(float64(dim))
	for j := range out {
		out[j] = g.centres[c][j] + float32(rng.NormFloat64()*sdNoise)
	}
	// The basis rows have norm about 1, so coefficients of this spread
	// give the spread a norm of about spreadNorm.
	sd := spreadNorm / math.Sqrt(float64(len(g.basis)))
	for _, b := range g.basis {
		z := float32(rng.NormFloat64() * sd)
		for j := range out {
			out[j] += z * b[j]
		}
	}
	normalise(out)
}

func normalise(v []float32) {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	inv := float32(1 / math.Sqrt(n))
	for j := range v {
		v[j] *= inv
	}
}

// Doc returns document i: its id (ID), fields "cat" (Category) and
// "group" (Group), and its token matrix under Model.
func (g *TokenGenerator) Doc(i int) tandem.Doc {
	d := g.draw(i)
	return tandem.Doc{
		ID:      ID(i),
		Fields:  map[string]any{"cat": Category(d.cat), "group": Group(d.group)},
		Vectors: map[string]tandem.Vectors{g.c.Model: {Tokens: d.rows}},
	}
}

// Query returns query i over a collection of documents 0..docs-1: its
// QueryTokens rows and the document it was drawn from (target, below
// docs). About half its tokens are near the target's own tokens, the rest
// drawn from the target's topics, so that the target and the documents
// sharing its topics and centres are its near neighbours.
func (g *TokenGenerator) Query(i, docs int) (tokens [][]float32, target int) {
	rng := rand.New(rand.NewPCG(g.c.Seed^tokenQueryStream, uint64(i)))
	target = rng.IntN(max(1, docs))
	d := g.draw(target)
	pick := g.picker(rng, d)
	dim := g.c.Dim
	backing := make([]float32, g.c.QueryTokens*dim)
	tokens = make([][]float32, g.c.QueryTokens)
	sd := queryNoise / math.Sqrt(float64(dim))
	for r := range tokens {
		row := backing[r*dim : (r+1)*dim : (r+1)*dim]
		if rng.Float64() < queryFromDoc {
			src := d.rows[rng.IntN(len(d.rows))]
			for j := range row {
				row[j] = src[j] + float32(rng.NormFloat64()*sd)
			}
			normalise(row)
		} else {
			g.token(rng, pick(), row)
		}
		tokens[r] = row
	}
	return tokens, target
}
