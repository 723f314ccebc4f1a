package faiss

import (
	"errors"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/native"
)

// Metric is the similarity an index ranks by.
type Metric int

const (
	// InnerProduct ranks by the largest dot product (cosine for
	// L2-normalised vectors). Tandem's retrievers use it.
	InnerProduct Metric = iota
	// L2 ranks by the smallest squared Euclidean distance.
	L2
)

// String names the metric.
func (m Metric) String() string {
	if m == L2 {
		return "l2"
	}
	return "ip"
}

var (
	// ErrClosed is returned by every method of a closed Index.
	ErrClosed = errors.New("faiss: index closed")
	// ErrDimension is returned when vectors do not match the index's
	// dimension.
	ErrDimension = errors.New("faiss: dimension mismatch")
)

// ErrNoCgo is native.ErrNoCgo, which every constructor returns, wrapped,
// when Tandem was built without cgo (CGO_ENABLED=0): FAISS is a C++
// library.
var ErrNoCgo = native.ErrNoCgo

// SearchOptions tune one search. Zero fields mean the index's defaults.
type SearchOptions struct {
	// Allow, when not nil, restricts the search to these ids: the filter is
	// applied inside FAISS (an ID selector), not to its output.
	Allow *roaring64.Bitmap
	// AllowShift makes Allow a set of id >> AllowShift: an id is allowed
	// when it is, shifted right this many bits. Token ids that are a
	// document number shifted left past the token's position are then
	// filtered by a set of documents, and the selector FAISS gets is a
	// bitmap of documents, not of every token id up to the largest.
	AllowShift uint
	// NProbe overrides the number of IVF lists visited.
	NProbe int
}

// Result holds the hits of one query, best first. Ids of vectors not found
// (fewer than k matches) are dropped, so a result may be shorter than k.
type Result struct {
	IDs    []int64
	Scores []float32
}

// KMeansOptions configure KMeans. Zero fields mean defaults.
type KMeansOptions struct {
	// Iterations of Lloyd's algorithm; default 20.
	Iterations int
	// Spherical normalises the centroids to unit length after each
	// iteration (for inner-product data such as unit token vectors).
	Spherical bool
	// Seed of FAISS's random initialisation; the same seed, data and
	// thread count give the same centroids.
	Seed int
}
