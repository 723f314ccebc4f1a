//go:build !cgo

package faiss

import (
	"context"
	"fmt"
	"io"
)

// Without cgo there is no FAISS: every constructor fails with ErrNoCgo
// (native.ErrNoCgo) wrapped with what was attempted, so no Index or
// Quantizer ever exists and their methods are never reached on a value
// this package returned. They fail the same way on a zero value.

// Index is unavailable without cgo.
type Index struct{}

// New returns an error wrapping ErrNoCgo.
func New(d int, description string, m Metric) (*Index, error) {
	return nil, fmt.Errorf("faiss: new index %q (d=%d, %s): %w", description, d, m, ErrNoCgo)
}

// Unmarshal returns an error wrapping ErrNoCgo.
func Unmarshal(data []byte, description string, m Metric) (*Index, error) {
	return nil, fmt.Errorf("faiss: read index %q (%d bytes): %w", description, len(data), ErrNoCgo)
}

// Read returns an error wrapping ErrNoCgo.
func Read(_ io.Reader, description string, _ Metric) (*Index, int64, error) {
	return nil, 0, fmt.Errorf("faiss: read index %q: %w", description, ErrNoCgo)
}

// SetThreads does nothing without cgo.
func SetThreads(int) {}

func noCgo(op string) error { return fmt.Errorf("faiss: %s: %w", op, ErrNoCgo) }

func (*Index) D() int                               { return 0 }
func (*Index) Metric() Metric                       { return InnerProduct }
func (*Index) Description() string                  { return "" }
func (*Index) Len() int64                           { return 0 }
func (*Index) IsTrained() bool                      { return false }
func (*Index) MemoryBytes() uint64                  { return 0 }
func (*Index) Train([]float32) error                { return noCgo("train") }
func (*Index) Add([]int64, []float32) error         { return noCgo("add") }
func (*Index) Remove([]int64) (int, error)          { return 0, noCgo("remove") }
func (*Index) Reconstruct(int64) ([]float32, error) { return nil, noCgo("reconstruct") }
func (*Index) Marshal() ([]byte, error)             { return nil, noCgo("write index") }
func (*Index) WriteTo(io.Writer) (int64, error)     { return 0, noCgo("write index") }
func (*Index) SetEfSearch(int) error                { return noCgo("set efSearch") }
func (*Index) Close() error                         { return nil }
func (*Index) IsIVF() bool                          { return false }
func (*Index) Locate(func(int64, uint64)) error     { return noCgo("locate") }

// AddLocated returns an error wrapping ErrNoCgo.
func (*Index) AddLocated([]int64, []float32, func(int64, uint64)) error { return noCgo("add") }

// Assign, AddLocatedAssigned and TrainThreaded need cgo.
func (*Index) Assign([]float32, int) ([]int64, error) { return nil, noCgo("assign") }
func (*Index) AddLocatedAssigned([]int64, []float32, []int64, func(int64, uint64)) error {
	return noCgo("add")
}
func (*Index) TrainThreaded([]float32, int) error { return noCgo("train") }

// RemoveLocated returns an error wrapping ErrNoCgo.
func (*Index) RemoveLocated([]int64, []uint64, func(int64, uint64)) error { return noCgo("remove") }

// SearchLocated returns an error wrapping ErrNoCgo.
func (*Index) SearchLocated(context.Context, []float32, []uint64, *Locations, int, int) (Result, error) {
	return Result{}, noCgo("search located")
}

// Locations keeps nothing without cgo: no located index exists.
type Locations struct{}

func (*Locations) Get(uint64) (uint64, bool) { return 0, false }
func (*Locations) Set(uint64, uint64)        {}
func (*Locations) Clear(uint64)              {}
func (*Locations) Len() int                  { return 0 }
func (*Locations) MemoryBytes() uint64       { return 0 }
func (*Locations) Close()                    {}

// Search returns an error wrapping ErrNoCgo.
func (*Index) Search(context.Context, []float32, int, SearchOptions) ([]Result, error) {
	return nil, noCgo("search")
}

// KMeans returns an error wrapping ErrNoCgo.
func KMeans(x []float32, d, k int, _ KMeansOptions) ([]float32, error) {
	return nil, fmt.Errorf("faiss: k-means of %d vectors (d=%d) into %d centroids: %w", len(x)/max(d, 1), d, k, ErrNoCgo)
}

// Quantizer is unavailable without cgo.
type Quantizer struct{}

// NewQuantizer returns an error wrapping ErrNoCgo.
func NewQuantizer(centroids []float32, d int) (*Quantizer, error) {
	return nil, fmt.Errorf("faiss: quantizer over %d centroids (d=%d): %w", len(centroids)/max(d, 1), d, ErrNoCgo)
}

func (*Quantizer) Assign([]float32, []int32) error { return noCgo("assign") }
func (*Quantizer) Close() error                    { return nil }

// Available returns an error wrapping ErrNoCgo: FAISS is not linked.
func Available() error { return fmt.Errorf("faiss: %w", ErrNoCgo) }
