package dense

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// Retraining in the background. When an updatable index (Flat or IVF)
// needs another type or another IVF training (retypeLocked), Apply starts
// a retrainJob and returns. The job, under no lock of the Index:
//
//  1. samples the vectors of the documents held when it started (held),
//     reading only the sampled blobs, and trains the new index on them;
//  2. fills it with every held document's current vector, read from
//     storage a chunk at a time, each chunk through its own reader;
//  3. catches up: Apply adds every docnum it touches to dirty while the
//     job runs, and the job takes dirty and re-reads those documents into
//     the new index, in passes off the lock while there are many.
//
// The last pass runs holding wmu: writers wait for it, searches do not.
// The job then takes the write lock only to swap the new index in, and
// frees the old one after releasing both. Until the swap, searches and
// writes use the current index; a search never waits for a training or a
// fill. The job reads each document's current blob, which may be newer
// than the last applied change: the change that wrote it is applied later
// and marks it dirty, so that the job reads it again, or, after the swap,
// Apply replaces it as usual. The invariant of Index then holds for the
// new index at the swap.
//
// Nothing of a job persists. Close cancels it and waits for it to stop;
// the next Open catches up from the snapshot and the log and starts it
// again (retypeLocked at the end of Open).
//
// Memory: while the new index fills, both indexes are in memory (the new
// one's size is in Stats.RetrainBytes), and, while training, the sample
// too: max(39·lists, 10,000) vectors. Automatic snapshots wait for the
// swap, so that a serialised copy never adds to the two.

// retrainJob is a retraining running in the background.
type retrainJob struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	desc   string // the new index's description
	nlist  int    // its IVF lists, 0 if not IVF
	target int    // vectors held when the job started
	// held is the set of docnums indexed when the job started, cloned
	// under the lock; the job owns it.
	held *roaring64.Bitmap
	// dirty holds the docnums Apply touched since the job started or
	// since the job last took them. Guarded by wmu (Apply adds to it
	// holding both locks).
	dirty *roaring64.Bitmap

	phase  atomic.Value  // string, for Stats
	filled atomic.Int64  // vectors added to the new index
	bytes  atomic.Uint64 // the new index's native memory
}

// generation is an index being built by a job: the parts of Index.mu it
// replaces at the swap.
type generation struct {
	fx      *faiss.Index
	loc     *faiss.Locations
	ids     *roaring64.Bitmap
	invalid int
}

func (g *generation) close() {
	if g.fx != nil {
		g.fx.Close()
	}
	if g.loc != nil {
		g.loc.Close()
	}
}

func (g *generation) memoryBytes() uint64 {
	m := g.fx.MemoryBytes()
	if g.loc != nil {
		m += g.loc.MemoryBytes()
	}
	return m
}

// retrainHook, when set (tests), is called by a job at the start of each
// phase ("sample", "train", "fill", "catch up") off every lock, and before
// the swap ("swap") holding wmu, with the job's context (cancelled by
// Close).
var retrainHook func(ctx context.Context, phase string)

// lastPassDocs is the number of dirty documents the job re-reads while
// holding wmu (writers wait, about 10 µs each); with more, it re-reads them
// off the lock first, for at most maxPasses passes.
const (
	lastPassDocs = 4096
	maxPasses    = 4
)

// updatable reports whether an index of description desc can remove and
// replace vectors, so that it can keep serving while a job builds the next.
func updatable(desc string) bool {
	return desc == "Flat" || plainIVF(desc)
}

// startRetrainLocked starts a job building an index of description desc
// (nlist lists) over the n documents held now.
func (x *Index) startRetrainLocked(desc string, nlist, n int) {
	x.stopRetrainLocked()
	ctx, cancel := context.WithCancel(context.Background())
	job := &retrainJob{ctx: ctx, cancel: cancel, done: make(chan struct{}),
		desc: desc, nlist: nlist, target: n, held: x.mu.ids.Clone(), dirty: roaring64.New()}
	job.phase.Store("sample")
	x.mu.job = job
	x.mu.retrains++
	x.wg.Add(1)
	go func() {
		defer x.wg.Done()
		defer close(job.done)
		defer cancel()
		err := x.runRetrain(job)
		if err == nil {
			return // swapped, and x.mu.job cleared, under the lock
		}
		// x.mu.job changes under both locks: apply reads it holding wmu.
		x.wmu.Lock()
		defer x.wmu.Unlock()
		x.mu.Lock()
		if x.mu.job == job {
			x.mu.job = nil
			if job.ctx.Err() == nil {
				x.mu.retrainErr = fmt.Errorf("dense %s: retrain %s: %w", x.opts.Model, desc, err)
				x.mu.failedAt = n
			}
		}
		x.mu.Unlock()
	}()
}

// stopRetrainLocked cancels a running job without waiting for it (it may
// be waiting for wmu, which the caller may hold); Close waits on wg.
func (x *Index) stopRetrainLocked() {
	if j := x.mu.job; j != nil {
		j.cancel()
		x.mu.job = nil
	}
}

// WaitRetrain waits until no retraining runs, or ctx ends. It returns the
// last retraining's failure, if any.
func (x *Index) WaitRetrain(ctx context.Context) error {
	for {
		x.mu.RLock()
		j, closed, err := x.mu.job, x.mu.closed, x.mu.retrainErr
		x.mu.RUnlock()
		if closed {
			return ErrClosed
		}
		if j == nil {
			return err
		}
		select {
		case <-j.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runRetrain is the job's work; see above. It returns nil once the new
// index is swapped in.
func (x *Index) runRetrain(job *retrainJob) error {
	g, err := x.buildGeneration(job)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			g.close()
		}
	}()
	job.phase.Store("catch up")
	if retrainHook != nil {
		retrainHook(job.ctx, "catch up")
	}
	for pass := 1; ; pass++ {
		x.wmu.Lock()
		x.mu.RLock()
		current := x.mu.job == job
		x.mu.RUnlock()
		if !current || job.ctx.Err() != nil {
			x.wmu.Unlock()
			return errors.Join(job.ctx.Err(), errors.New("stopped"))
		}
		dirty := job.dirty
		job.dirty = roaring64.New()
		if dirty.GetCardinality() > lastPassDocs && pass < maxPasses {
			x.wmu.Unlock()
			if err := x.catchUp(job, g, dirty); err != nil {
				return err
			}
			continue
		}
		// The last pass: writers wait, searches go on.
		if err := x.catchUp(job, g, dirty); err != nil {
			x.wmu.Unlock()
			return err
		}
		if retrainHook != nil {
			retrainHook(job.ctx, "swap") // holding wmu
		}
		x.mu.Lock()
		old := generation{fx: x.mu.fx, loc: x.mu.loc}
		x.mu.fx, x.mu.loc, x.mu.ids = g.fx, g.loc, g.ids
		x.mu.desc, x.mu.nlist, x.mu.builtN = job.desc, job.nlist, job.target
		x.mu.invalid = g.invalid
		x.mu.job, x.mu.retrainErr, x.mu.failedAt = nil, nil, 0
		x.mu.Unlock()
		x.wmu.Unlock()
		ok = true
		// No search holds the old index: they hold the read lock while
		// they use it, and the swap took the write lock.
		old.close()
		return nil
	}
}

// buildGeneration trains a new index of the job's description on a sample
// of the held documents and fills it with all of them.
func (x *Index) buildGeneration(job *retrainJob) (*generation, error) {
	ctx := job.ctx
	if retrainHook != nil {
		retrainHook(ctx, "sample")
	}
	fx, err := faiss.New(x.opts.Dim, job.desc, faiss.InnerProduct)
	if err != nil {
		return nil, err
	}
	g := &generation{fx: fx, ids: roaring64.New()}
	ok := false
	defer func() {
		if !ok {
			g.close()
		}
	}()
	if !fx.IsTrained() {
		sample, err := x.sampleHeld(ctx, job.held, job.nlist)
		if err != nil {
			return nil, err
		}
		job.phase.Store("train")
		if retrainHook != nil {
			retrainHook(ctx, "train")
		}
		if err := train(fx, job.desc, sample); err != nil {
			return nil, fmt.Errorf("train: %w", err)
		}
	}
	if plainIVF(job.desc) && fx.IsIVF() {
		g.loc = &faiss.Locations{}
	}
	job.phase.Store("fill")
	if retrainHook != nil {
		retrainHook(ctx, "fill")
	}
	if err := x.fill(ctx, job, g, job.held, false); err != nil {
		return nil, err
	}
	ok = true
	return g, nil
}

// sampleHeld returns the vectors of a uniform sample of held, of up to
// maxTrainPerList per list (at least 10,000), chosen by rank with a seeded
// generator (Knuth's selection sampling, so that only the sampled blobs are
// read, in docnum order).
func (x *Index) sampleHeld(ctx context.Context, held *roaring64.Bitmap, nlist int) ([]float32, error) {
	d := x.opts.Dim
	n := int(held.GetCardinality())
	size := min(n, max(maxTrainPerList*max(nlist, 1), 10_000))
	rng := rand.New(rand.NewPCG(x.opts.Seed, 0x7a6e))
	sample := make([]float32, 0, size*d)
	var (
		r   = (*blobChunks)(nil)
		buf []byte
		err error
	)
	defer func() { r.close() }()
	it := held.Iterator()
	for i, sel := 0, 0; it.HasNext() && sel < size; i++ {
		num := it.Next()
		if rng.IntN(n-i) >= size-sel {
			continue
		}
		sel++
		if r, err = r.next(ctx, x.st, sel); err != nil {
			return nil, err
		}
		var ok bool
		buf, _, ok, err = r.r.ReadBlobCRC(num, x.blob, buf[:0])
		if err != nil {
			return nil, fmt.Errorf("sample: read vector of document %d: %w", num, err)
		}
		if !ok {
			continue // deleted since: its change marks it dirty
		}
		sample = sample[:len(sample)+d]
		if decodeInto(sample[len(sample)-d:], buf) != nil {
			sample = sample[:len(sample)-d] // invalid vectors are not trained on
		}
	}
	if len(sample) == 0 {
		return nil, errors.New("sample: no valid vector")
	}
	return sample, nil
}

// blobChunks renews a storage reader every addChunk reads, so that no read
// transaction (and no pin on compacted blob segments) outlives a chunk.
type blobChunks struct {
	r    blobReader
	last int
}

// blobReader is the part of *storage.BlobReader a job uses.
type blobReader interface {
	ReadBlobCRC(num uint64, name string, dst []byte) ([]byte, uint32, bool, error)
	Close()
}

// next returns c, or a new reader when c is nil or the i-th read starts a
// new chunk.
func (c *blobChunks) next(ctx context.Context, st Store, i int) (*blobChunks, error) {
	if c != nil && i-c.last < addChunk {
		return c, nil
	}
	if err := ctx.Err(); err != nil {
		return c, err
	}
	c.close()
	r, err := st.NewBlobReader()
	if err != nil {
		return nil, err
	}
	return &blobChunks{r: r, last: i}, nil
}

func (c *blobChunks) close() {
	if c != nil && c.r != nil {
		c.r.Close()
		c.r = nil
	}
}

// fill adds the current vector of every document of nums to g, addChunk at
// a time. With replace, a document g already holds is removed first, and
// one whose blob is gone or invalid is left out: the catch-up of documents
// applied meanwhile.
func (x *Index) fill(ctx context.Context, job *retrainJob, g *generation, nums *roaring64.Bitmap, replace bool) error {
	d := x.opts.Dim
	ids := make([]int64, 0, addChunk)
	vecs := make([]float32, 0, addChunk*d)
	var remove []int64
	flush := func() error {
		if len(remove) > 0 {
			if err := x.removeFrom(g, remove); err != nil {
				return err
			}
			remove = remove[:0]
		}
		if len(ids) == 0 {
			return nil
		}
		if err := addVectors(g.fx, g.loc, ids, vecs, runtime.GOMAXPROCS(0)); err != nil {
			return fmt.Errorf("add: %w", err)
		}
		for _, id := range ids {
			g.ids.Add(uint64(id))
		}
		job.filled.Add(int64(len(ids)))
		job.bytes.Store(g.memoryBytes())
		ids, vecs = ids[:0], vecs[:0]
		return nil
	}
	var (
		r   *blobChunks
		buf []byte
		err error
	)
	defer func() { r.close() }()
	it := nums.Iterator()
	for i := 0; it.HasNext(); i++ {
		num := it.Next()
		if i > 0 && i%addChunk == 0 {
			if err := flush(); err != nil {
				return err
			}
		}
		if r, err = r.next(ctx, x.st, i); err != nil {
			return err
		}
		if replace && g.ids.Contains(num) {
			remove = append(remove, int64(num))
		}
		var ok bool
		buf, _, ok, err = r.r.ReadBlobCRC(num, x.blob, buf[:0])
		if err != nil {
			return fmt.Errorf("read vector of document %d: %w", num, err)
		}
		if !ok {
			continue // deleted since: its change marks it dirty
		}
		vecs = vecs[:len(vecs)+d]
		if decodeInto(vecs[len(vecs)-d:], buf) != nil {
			vecs = vecs[:len(vecs)-d]
			g.invalid++ // see Stats.Invalid
			continue
		}
		ids = append(ids, int64(num))
	}
	return flush()
}

// catchUp re-reads the dirty documents into g.
func (x *Index) catchUp(job *retrainJob, g *generation, dirty *roaring64.Bitmap) error {
	if dirty.IsEmpty() {
		return nil
	}
	// Removals come first in each chunk (flush), so that a re-added
	// document never meets its old vector.
	return x.fill(job.ctx, job, g, dirty, true)
}

// removeFrom removes nums, which g holds, from g.
func (x *Index) removeFrom(g *generation, nums []int64) error {
	if err := removeVectors(g.fx, g.loc, nums); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	for _, num := range nums {
		g.ids.Remove(uint64(num))
	}
	return nil
}
