package faiss

import (
	"errors"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
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

// ErrNoCgo is returned by every constructor when Tandem was built without
// cgo (CGO_ENABLED=0): FAISS is a C++ library.
var ErrNoCgo = errors.New("faiss: not available in a build without cgo")

// SearchOptions tune one search. Zero fields mean the index's defaults.
type SearchOptions struct {
	// Allow, when not nil, restricts the search to these ids: the filter is
	// applied inside FAISS (an ID selector), not to its output.
	Allow *roaring64.Bitmap
	// NProbe overrides the number of IVF lists visited.
	NProbe int
}

// Result holds the hits of one query, best first. Ids of vectors not found
// (fewer than k matches) are dropped, so a result may be shorter than k.
type Result struct {
	IDs    []int64
	Scores []float32
}
