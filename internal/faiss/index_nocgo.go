//go:build !cgo

package faiss

import "context"

// Index is unavailable without cgo; every constructor returns ErrNoCgo, so
// the engine can fall back to BM25-only search.
type Index struct{}

// New returns ErrNoCgo.
func New(int, string, Metric) (*Index, error) { return nil, ErrNoCgo }

// Unmarshal returns ErrNoCgo.
func Unmarshal([]byte, string, Metric) (*Index, error) { return nil, ErrNoCgo }

// SetThreads does nothing without cgo.
func SetThreads(int) {}

func (*Index) D() int                               { return 0 }
func (*Index) Metric() Metric                       { return InnerProduct }
func (*Index) Description() string                  { return "" }
func (*Index) Len() int64                           { return 0 }
func (*Index) IsTrained() bool                      { return false }
func (*Index) MemoryBytes() uint64                  { return 0 }
func (*Index) Train([]float32) error                { return ErrNoCgo }
func (*Index) Add([]int64, []float32) error         { return ErrNoCgo }
func (*Index) Remove([]int64) (int, error)          { return 0, ErrNoCgo }
func (*Index) Reconstruct(int64) ([]float32, error) { return nil, ErrNoCgo }
func (*Index) Marshal() ([]byte, error)             { return nil, ErrNoCgo }
func (*Index) SetEfSearch(int) error                { return ErrNoCgo }
func (*Index) Close() error                         { return nil }

// Search returns ErrNoCgo.
func (*Index) Search(context.Context, []float32, int, SearchOptions) ([]Result, error) {
	return nil, ErrNoCgo
}

// KMeansOptions configure KMeans.
type KMeansOptions struct {
	Iterations int
	Spherical  bool
	Seed       int
}

func KMeans([]float32, int, int, KMeansOptions) ([]float32, error) { return nil, ErrNoCgo }

// Quantizer is unavailable without cgo.
type Quantizer struct{}

func NewQuantizer([]float32, int) (*Quantizer, error) { return nil, ErrNoCgo }
func (*Quantizer) Assign([]float32, []int32) error    { return ErrNoCgo }
func (*Quantizer) Close() error                       { return nil }
