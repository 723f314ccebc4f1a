//go:build cgo

package faiss

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	gofaiss "github.com/blevesearch/go-faiss"
)

// Index is a FAISS index whose vectors carry caller-chosen int64 ids (the
// caller's internal document or token numbers). Descriptions without their
// own id support are wrapped in IDMap2, so ids are always the caller's.
//
// An Index is safe for concurrent use: searches share a read lock, while
// Add, Remove, Train and Close take the write lock. FAISS itself is not
// safe for concurrent writes and reads.
//
// The native index is freed by Close; an Index must not be dropped without
// it.
type Index struct {
	mu struct {
		sync.RWMutex
		idx    *gofaiss.IndexImpl
		closed bool
	}
	d      int
	metric Metric
	desc   string
}

// New creates an empty index of dimension d from a FAISS factory
// description such as "Flat", "IVF1024,Flat", "HNSW32" or "IVF256,SQ8".
// Descriptions that cannot add vectors with ids ("Flat", "HNSW...") are
// wrapped in "IDMap2,".
func New(d int, description string, metric Metric) (*Index, error) {
	if d <= 0 {
		return nil, fmt.Errorf("faiss: dimension must be positive, got %d", d)
	}
	desc := strings.TrimSpace(description)
	if desc == "" {
		return nil, errors.New("faiss: empty index description")
	}
	if needsIDMap(desc) {
		desc = "IDMap2," + desc
	}
	idx, err := gofaiss.IndexFactory(d, desc, metric.faiss())
	if err != nil {
		return nil, fmt.Errorf("faiss: create %q (d=%d): %w", desc, d, err)
	}
	return wrap(idx, desc, metric), nil
}

// needsIDMap reports whether an index built from desc lacks add_with_ids.
// IVF indexes store ids in their inverted lists; everything else used here
// (flat, HNSW, scalar quantizer, PQ without IVF) needs the IDMap2 wrapper.
func needsIDMap(desc string) bool {
	u := strings.ToUpper(desc)
	if strings.HasPrefix(u, "IDMAP") {
		return false
	}
	for _, part := range strings.Split(u, ",") {
		if strings.HasPrefix(strings.TrimSpace(part), "IVF") {
			return false
		}
	}
	return true
}

func wrap(idx *gofaiss.IndexImpl, desc string, metric Metric) *Index {
	x := &Index{d: idx.D(), metric: metric, desc: desc}
	x.mu.idx = idx
	return x
}

// D returns the vector dimension.
func (x *Index) D() int { return x.d }

// Metric returns the index's metric.
func (x *Index) Metric() Metric { return x.metric }

// Description returns the factory description the index was built from,
// including any IDMap2 wrapper added by New.
func (x *Index) Description() string { return x.desc }

// Len returns the number of vectors in the index.
func (x *Index) Len() int64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return 0
	}
	return x.mu.idx.Ntotal()
}

// IsTrained reports whether the index can accept vectors. Flat and HNSW
// indexes are always trained; IVF and quantizers need Train.
func (x *Index) IsTrained() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return !x.mu.closed && x.mu.idx.IsTrained()
}

// MemoryBytes estimates the native memory the index holds.
func (x *Index) MemoryBytes() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return 0
	}
	return x.mu.idx.Size()
}

// Train trains the index on a sample of n vectors laid out row after row.
func (x *Index) Train(vecs []float32) error {
	if err := x.checkVectors(vecs); err != nil {
		return fmt.Errorf("faiss: train: %w", err)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	if err := x.mu.idx.Train(vecs); err != nil {
		return fmt.Errorf("faiss: train on %d vectors: %w", len(vecs)/x.d, err)
	}
	return nil
}

// Add adds vectors (row after row) with their ids. Ids must be
// non-negative; adding an id that is already present stores it twice, so
// callers remove before re-adding.
func (x *Index) Add(ids []int64, vecs []float32) error {
	if len(ids) == 0 && len(vecs) == 0 {
		return nil
	}
	if err := x.checkAdd(ids, vecs); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	if !x.mu.idx.IsTrained() {
		return errors.New("faiss: add: index is not trained")
	}
	if err := x.mu.idx.AddWithIDs(vecs, ids); err != nil {
		return fmt.Errorf("faiss: add %d vectors: %w", len(ids), err)
	}
	return nil
}

// checkAdd checks what Add and AddLocated are given.
func (x *Index) checkAdd(ids []int64, vecs []float32) error {
	if err := x.checkVectors(vecs); err != nil {
		return fmt.Errorf("faiss: add: %w", err)
	}
	if len(vecs)/x.d != len(ids) {
		return fmt.Errorf("faiss: add: %d ids for %d vectors", len(ids), len(vecs)/x.d)
	}
	for i, id := range ids {
		if id < 0 {
			return fmt.Errorf("faiss: add: id %d at position %d is negative", id, i)
		}
	}
	return nil
}

// Remove removes the vectors with the given ids and returns how many were
// removed. Ids that are absent are ignored.
func (x *Index) Remove(ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	sel, err := gofaiss.NewIDSelectorBatch(ids)
	if err != nil {
		return 0, fmt.Errorf("faiss: remove: %w", err)
	}
	defer sel.Delete()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return 0, ErrClosed
	}
	n, err := x.mu.idx.RemoveIDs(sel.(*gofaiss.IDSelector))
	if err != nil {
		return 0, fmt.Errorf("faiss: remove %d ids: %w", len(ids), err)
	}
	return n, nil
}

// Search finds the k nearest vectors of each query (queries row after
// row). Scores are inner products, or squared L2 distances, as FAISS
// returns them. ctx is checked before the native call; a search in
// progress runs to completion.
func (x *Index) Search(ctx context.Context, queries []float32, k int, opts SearchOptions) ([]Result, error) {
	if err := x.checkVectors(queries); err != nil {
		return nil, fmt.Errorf("faiss: search: %w", err)
	}
	if k <= 0 {
		return nil, fmt.Errorf("faiss: search: k must be positive, got %d", k)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	nq := len(queries) / x.d
	if opts.Allow != nil && opts.Allow.IsEmpty() {
		return make([]Result, nq), nil
	}
	if nq == 1 && x.metric == InnerProduct {
		x.mu.RLock()
		res, ok, err := x.searchFlatLocked(queries, k, opts.Allow, opts.AllowShift)
		x.mu.RUnlock()
		if ok || err != nil {
			return []Result{res}, err
		}
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	idx := x.mu.idx
	k64 := int64(k)
	if n := idx.Ntotal(); n < k64 {
		k64 = max(n, 1)
	}
	var (
		dist   []float32
		labels []int64
		err    error
	)
	if opts.Allow != nil || (opts.NProbe > 0 && idx.IsIVFIndex()) {
		dist, labels, err = x.searchWithParamsLocked(queries, k64, opts)
	} else {
		dist, labels, err = idx.Search(queries, k64)
	}
	if err != nil {
		return nil, fmt.Errorf("faiss: search %d queries: %w", nq, err)
	}
	out := make([]Result, nq)
	for q := range out {
		r := &out[q]
		for j := int64(0); j < k64; j++ {
			id := labels[int64(q)*k64+j]
			if id < 0 {
				continue
			}
			r.IDs = append(r.IDs, id)
			r.Scores = append(r.Scores, dist[int64(q)*k64+j])
		}
	}
	return out, nil
}

// allowBits returns allow as a bitmap of bytes: id i is bit i&7 of byte
// i>>3. Its size follows allow's largest id, which for a set of documents
// is a few KiB.
func allowBits(allow *roaring64.Bitmap) ([]byte, error) {
	maxID := allow.Maximum()
	if maxID > math.MaxInt32*8 {
		return nil, fmt.Errorf("faiss: filter id %d too large for a bitmap selector", maxID)
	}
	bits := make([]byte, maxID/8+1)
	buf := make([]uint64, 4096)
	it := allow.ManyIterator()
	for n := it.NextMany(buf); n > 0; n = it.NextMany(buf) {
		for _, id := range buf[:n] {
			bits[id>>3] |= 1 << (id & 7)
		}
	}
	return bits, nil
}

// Reconstruct returns the stored vector of id (exact for flat storage,
// decoded for quantized indexes). IVF indexes need a direct map, which
// Load and New do not set up; Tandem keeps vectors in storage instead.
func (x *Index) Reconstruct(id int64) ([]float32, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	v, err := x.mu.idx.Reconstruct(id)
	if err != nil {
		return nil, fmt.Errorf("faiss: reconstruct %d: %w", id, err)
	}
	return v, nil
}

// Marshal serialises the index (FAISS's own format) for a snapshot.
func (x *Index) Marshal() ([]byte, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	buf, err := gofaiss.WriteIndexIntoBuffer(x.mu.idx)
	if err != nil {
		return nil, fmt.Errorf("faiss: serialise %s: %w", x.desc, err)
	}
	return buf, nil
}

// Unmarshal loads an index serialised by Marshal. description and metric
// are recorded for reporting; the index itself comes from buf.
func Unmarshal(buf []byte, description string, metric Metric) (*Index, error) {
	if len(buf) == 0 {
		return nil, errors.New("faiss: load: empty buffer")
	}
	idx, err := gofaiss.ReadIndexFromBuffer(buf, 0)
	if err != nil {
		return nil, fmt.Errorf("faiss: load %d bytes: %w", len(buf), err)
	}
	if got := idx.MetricType(); got != metric.faiss() {
		idx.Close()
		return nil, fmt.Errorf("faiss: load: snapshot metric %d, want %s", got, metric)
	}
	return wrap(idx, description, metric), nil
}

// Close frees the native index. It is idempotent.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.mu.closed {
		x.mu.closed = true
		x.mu.idx.Close()
		x.mu.idx = nil
	}
	return nil
}

// SetEfSearch sets how many graph candidates an HNSW index explores per
// query (FAISS's default is 16, which trades recall for speed). It applies
// to every later search; indexes that are not HNSW return an error.
func (x *Index) SetEfSearch(ef int) error {
	if ef <= 0 {
		return fmt.Errorf("faiss: efSearch must be positive, got %d", ef)
	}
	if !strings.Contains(strings.ToUpper(x.desc), "HNSW") {
		return fmt.Errorf("faiss: efSearch: %s is not an HNSW index", x.desc)
	}
	ps, err := gofaiss.NewParameterSpace()
	if err != nil {
		return fmt.Errorf("faiss: efSearch: %w", err)
	}
	defer ps.Delete()
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	if err := ps.SetIndexParameter(x.mu.idx, "efSearch", float64(ef)); err != nil {
		return fmt.Errorf("faiss: set efSearch=%d on %s: %w", ef, x.desc, err)
	}
	return nil
}

// Available reports whether FAISS is linked into this build: nil here; an
// error wrapping ErrNoCgo in a build without cgo. Callers whose own open
// path does not touch FAISS check it there, so that a collection that
// cannot index fails when it is opened rather than at its first write.
func Available() error { return nil }

// SetThreads sets the number of OpenMP threads FAISS uses process-wide.
func SetThreads(n int) {
	if n > 0 {
		gofaiss.SetOMPThreads(uint(n))
	}
}

func (x *Index) checkVectors(vecs []float32) error {
	if len(vecs) == 0 {
		return errors.New("no vectors")
	}
	if len(vecs)%x.d != 0 {
		return fmt.Errorf("%w: %d floats is not a multiple of d=%d", ErrDimension, len(vecs), x.d)
	}
	for i, v := range vecs {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("vector %d component %d is %v", i/x.d, i%x.d, v)
		}
	}
	return nil
}

func (m Metric) faiss() int {
	if m == L2 {
		return gofaiss.MetricL2
	}
	return gofaiss.MetricInnerProduct
}
