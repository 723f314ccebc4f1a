package fusion

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrInvalid is wrapped by every error [Fuse] returns; the message names the
// list (by index and name), the item and the field.
var ErrInvalid = errors.New("fusion: invalid input")

// DefaultK is the RRF constant used when Options.K is zero, from Cormack,
// Clarke and Büttcher (SIGIR 2009).
const DefaultK = 60

// epsilon floors the max denominator, as ranx does, and is the spread
// (max − min, or σ) below which a list's scores count as all equal.
const epsilon = 1e-9

// Item is one retrieved document. Doc is the engine's internal document
// number: uint64 keys keep the fusion maps cheap; callers that hold string
// ids number them first.
type Item struct {
	Doc   uint64
	Score float64
}

// List is one retriever's ranking for one query.
type List struct {
	// Name identifies the retriever in explanations and errors.
	Name string
	// Weight scales this list's contribution in WeightedRRF, MinMax, ZScore,
	// Max and DBSF; RRF, CombSUM and CombMNZ ignore it. Zero means 1; to
	// drop a retriever, leave its list out. Negative is an error.
	Weight float64
	// Depth is how many items, from the top, take part; zero means all.
	// Normalisation statistics are computed over these items only.
	Depth int
	// Items are in rank order, best first: an item's rank is its position
	// plus one, whatever its score. A doc may appear once per list.
	Items []Item
}

// Options configures [Fuse]. The zero value is RRF with K = 60, all hits.
type Options struct {
	// Method is the combination; see [Method].
	Method Method
	// K is the RRF constant for RRF and WeightedRRF; zero means DefaultK.
	K float64
	// Limit caps the number of hits returned; zero means all.
	Limit int
}

// Source explains one list's part in a fused hit.
type Source struct {
	// Rank is the doc's 1-based rank in the list, or 0 if the list (cut to
	// its depth) does not hold it; then every other field is 0.
	Rank int
	// RawScore is the retriever's score.
	RawScore float64
	// Normalised is the score after the method's normalisation: 1/(K+rank)
	// for the RRF methods, the normalised score for the others.
	Normalised float64
	// Contribution is this list's share of Hit.Score; the shares add up to
	// the score. For CombMNZ it is Normalised times the number of lists
	// holding the doc.
	Contribution float64
}

// Hit is one fused result.
type Hit struct {
	Doc   uint64
	Score float64
	// Sources[i] explains lists[i]. The slices of all hits from one call
	// share one backing array.
	Sources []Source
}

// Fuse combines the lists into one ranking: fused score descending, ties
// broken by Doc ascending so equal inputs always give equal outputs. A doc
// missing from a list gets nothing from it, which for the score methods is
// the same as a normalised score of 0 (ranx's convention). Fuse does not
// modify lists.
func Fuse(lists []List, opts Options) ([]Hit, error) {
	if opts.Method < 0 || int(opts.Method) >= len(methodNames) {
		return nil, fmt.Errorf("%w: method %d", ErrInvalid, int(opts.Method))
	}
	k := opts.K
	if k == 0 {
		k = DefaultK
	}
	if k < 0 || math.IsNaN(k) || math.IsInf(k, 0) {
		return nil, fmt.Errorf("%w: K = %v, want a finite value ≥ 0", ErrInvalid, opts.K)
	}
	if opts.Limit < 0 {
		return nil, fmt.Errorf("%w: Limit = %d, want ≥ 0", ErrInvalid, opts.Limit)
	}

	// Cut each list to its depth, check it, and number the distinct docs.
	cut := make([][]Item, len(lists))
	weights := make([]float64, len(lists))
	slot := map[uint64]int{}
	var docs []uint64
	for i, l := range lists {
		where := func() string { return fmt.Sprintf("list %d (%q)", i, l.Name) }
		switch {
		case l.Depth < 0:
			return nil, fmt.Errorf("%w: %s: Depth = %d, want ≥ 0", ErrInvalid, where(), l.Depth)
		case l.Weight < 0 || math.IsNaN(l.Weight) || math.IsInf(l.Weight, 0):
			return nil, fmt.Errorf("%w: %s: Weight = %v, want a finite value ≥ 0", ErrInvalid, where(), l.Weight)
		}
		weights[i] = 1
		if l.Weight != 0 && opts.Method.Weighted() {
			weights[i] = l.Weight
		}
		items := l.Items
		if l.Depth > 0 && l.Depth < len(items) {
			items = items[:l.Depth]
		}
		cut[i] = items
		for j, it := range items {
			if math.IsNaN(it.Score) || math.IsInf(it.Score, 0) {
				return nil, fmt.Errorf("%w: %s: item %d (doc %d): score %v is not finite", ErrInvalid, where(), j, it.Doc, it.Score)
			}
			if _, ok := slot[it.Doc]; !ok {
				slot[it.Doc] = len(docs)
				docs = append(docs, it.Doc)
			}
		}
	}

	n := len(lists)
	hits := make([]Hit, len(docs))
	sources := make([]Source, len(docs)*n)
	for h, d := range docs {
		hits[h] = Hit{Doc: d, Sources: sources[h*n : (h+1)*n : (h+1)*n]}
	}
	for i, items := range cut {
		norm := normaliser(opts.Method, k, items)
		for j, it := range items {
			src := &hits[slot[it.Doc]].Sources[i]
			if src.Rank != 0 {
				return nil, fmt.Errorf("%w: list %d (%q): doc %d at ranks %d and %d", ErrInvalid, i, lists[i].Name, it.Doc, src.Rank, j+1)
			}
			src.Rank = j + 1
			src.RawScore = it.Score
			src.Normalised = norm(j+1, it.Score)
			src.Contribution = weights[i] * src.Normalised
		}
	}
	for h := range hits {
		var sum float64
		present := 0
		for _, s := range hits[h].Sources {
			if s.Rank != 0 {
				sum += s.Contribution
				present++
			}
		}
		if opts.Method == CombMNZ {
			for i := range hits[h].Sources {
				hits[h].Sources[i].Contribution *= float64(present)
			}
			sum *= float64(present)
		}
		hits[h].Score = sum
	}

	slices.SortFunc(hits, func(a, b Hit) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		case a.Doc < b.Doc:
			return -1
		case a.Doc > b.Doc:
			return 1
		}
		return 0
	})
	if opts.Limit > 0 && opts.Limit < len(hits) {
		hits = hits[:opts.Limit]
	}
	return hits, nil
}

// normaliser returns the function that maps (rank, score) of one list to
// its normalised value under m. The statistics match ranx 0.3 (min-max,
// max, zmuv with population σ) and Qdrant's DBSF, with ranx's 1e-9 floor on
// the max denominator. A list whose scores are all equal (one item, say)
// normalises to 1 under min-max, 0.5 under DBSF and 0 under z-score.
func normaliser(m Method, k float64, items []Item) func(rank int, s float64) float64 {
	switch m {
	case RRF, WeightedRRF:
		return func(rank int, _ float64) float64 { return 1 / (k + float64(rank)) }
	case Max:
		mx := math.Inf(-1)
		for _, it := range items {
			mx = max(mx, it.Score)
		}
		d := max(mx, epsilon)
		return func(_ int, s float64) float64 { return s / d }
	case ZScore, DBSF:
		mean, sd := meanStd(items)
		if sd < epsilon {
			// Every score is the mean: z-score 0, the centre of mean ± 3σ.
			c := 0.0
			if m == DBSF {
				c = 0.5
			}
			return func(int, float64) float64 { return c }
		}
		if m == ZScore {
			return func(_ int, s float64) float64 { return (s - mean) / sd }
		}
		lo, d := mean-3*sd, 6*sd
		return func(_ int, s float64) float64 { return (s - lo) / d }
	default: // MinMax, CombSUM, CombMNZ
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, it := range items {
			lo, hi = min(lo, it.Score), max(hi, it.Score)
		}
		if hi-lo < epsilon {
			// One score, or all equal: each is the list's best.
			return func(int, float64) float64 { return 1 }
		}
		d := hi - lo
		return func(_ int, s float64) float64 { return (s - lo) / d }
	}
}

// meanStd returns the mean and population standard deviation of the scores.
func meanStd(items []Item) (mean, sd float64) {
	if len(items) == 0 {
		return 0, 0
	}
	for _, it := range items {
		mean += it.Score
	}
	mean /= float64(len(items))
	var ss float64
	for _, it := range items {
		ss += (it.Score - mean) * (it.Score - mean)
	}
	return mean, math.Sqrt(ss / float64(len(items)))
}
