package latecollect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Retraining in the background. Where a run of the change log starts and
// the centroids no longer fit (shouldRetrainLocked), apply starts a
// retrainJob and goes on coding documents with the centroids in use. The
// job, off the Index's lock:
//
//  1. trains a codebook on a sample of the tokens held when it started
//     (every stride-th, about kmeansPerCentroid per centroid), read from the
//     store;
//  2. codes every document held then with it into a new residualIndex,
//     reading each blob once more;
//  3. codes again the documents applied meanwhile (apply records them in
//     changed), in passes off the lock while there are many.
//
// From the moment the new codebook is trained, apply codes the documents
// it applies with it too, into the job's side index, as well as with the
// centroids in use. The job takes the side index in each pass and adds
// its codes to the new index as they are (absorb), instead of reading and
// coding those documents again: an ingest faster than the job no longer
// leaves it most of the collection to code after the ingest ends (at a
// million documents, 7.4 minutes of 21.7). Only the documents applied
// while the codebook was being trained, and the deleted ones, are coded
// or dropped from changed.
//
// It then takes the write lock, codes the last few changed documents, and
// swaps the new index in. Searches and Apply use the old codes until then
// and never wait for the training or the coding; the swap holds the lock
// for the last pass only. The job reads each document's current blob: one
// changed since the job started is coded from its newer blob, stamped with
// it (blobStamp), and coded again once the change is applied (apply
// records it in changed, or the change comes after the swap).
//
// Close cancels a running job and waits for it to stop; the index keeps
// the old codes, valid, and the next Open starts the retraining again
// (openedLocked). WaitRetrain waits for a job to finish.

// retrainJob is a retraining running in the background.
type retrainJob struct {
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
	// nlist and trained are the new codebook's centroids and the tokens
	// held when the job started, which shouldRetrainLocked measures growth
	// against while the job runs.
	nlist   int
	trained int64
	// changed holds the documents applied since the job started, or
	// since the job last took them (under the Index's write lock).
	changed map[uint64]struct{}
	// side holds the documents applied since the job's codebook was
	// trained, or since the job last took it, coded with that codebook
	// by apply (under the Index's write lock); nil before then. Every
	// document it holds is also in changed.
	side *residualIndex
}

// heldDoc is a document the old index holds, as the job reads it: its
// token count.
type heldDoc struct {
	num   uint64
	count int
	held  bool // false: the document left the index; drop it
}

// retrainHook, when set (tests), is called by a job off the lock after it
// has coded the documents held when it started and before it takes the
// lock to swap, with the job's context (cancelled by Close).
var retrainHook func(ctx context.Context)

// lastDeltaDocs is the number of changed documents a job codes under the
// write lock; with more, it codes them off the lock first.
const lastDeltaDocs = 64

// startRetrainLocked starts a job that retrains the centroids on the
// documents held now, cancelling one already running (whose work the new
// one replaces).
func (f *residualFamily) startRetrainLocked() {
	if f.job != nil {
		f.job.cancel()
		f.job = nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	nlist := f.configuredCentroids()
	if nlist == 0 {
		nlist = autoCentroids(f.rc.tokens)
	}
	job := &retrainJob{ctx: ctx, cancel: cancel, done: make(chan struct{}), nlist: nlist,
		trained: f.rc.tokens, changed: map[uint64]struct{}{}}
	held := f.heldLocked(slices.Sorted(maps.Keys(f.rc.docs)))
	f.job = job
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(job.done)
		err := f.runRetrain(job, held)
		// However it ended, it is no longer running (before done closes,
		// which WaitRetrain waits for).
		f.lock.Lock()
		if f.job == job {
			f.job = nil
			if err != nil && job.ctx.Err() == nil {
				f.retrainErr = err
			}
		}
		f.lock.Unlock()
		cancel()
	}()
}

// heldLocked returns nums as the job reads them.
func (f *residualFamily) heldLocked(nums []uint64) []heldDoc {
	out := make([]heldDoc, len(nums))
	for i, num := range nums {
		d, ok := f.rc.docs[num]
		out[i] = heldDoc{num: num, count: int(d.count), held: ok}
	}
	return out
}

// retrainNowLocked retrains in place, under the lock, on every document
// held: for a provisional codebook, whose retraining is small (it holds one
// run of the log, at most applyStride documents).
func (f *residualFamily) retrainNowLocked(ctx context.Context) error {
	if f.job != nil {
		f.job.cancel()
		f.job = nil
	}
	nlist := f.configuredCentroids()
	if nlist == 0 {
		nlist = autoCentroids(f.rc.tokens)
	}
	held := f.heldLocked(slices.Sorted(maps.Keys(f.rc.docs)))
	next, missing, err := f.trainAndCode(ctx, held, nlist, f.rc.tokens, nil)
	if err == nil && len(missing) > 0 {
		missing, err = f.codeDelta(next, f.heldLocked(missing))
		f.skipGone(missing)
	}
	if err != nil {
		next.close()
		return err
	}
	f.swapLocked(next)
	return nil
}

// settleDue reports whether a search should settle first: documents were
// applied to a provisional codebook since it was trained on every
// document held, and no settling failed since.
func (f *residualFamily) settleDue() bool { return f.unsettled && f.settleErr == nil }

// settleLocked retrains an unsettled provisional codebook on every document
// held and codes them again (retrainNowLocked), as where the next run
// starts, keeping it provisional: the codebook and the codes are then those
// the same documents applied in one call would have (applyFirst trains the
// same way), however the run was cut into Apply calls. It costs one
// training, on one run's documents at most.
//
// A failure leaves the codes in use, which stay valid. When ctx ended,
// nothing else changes; any other failure (a blob that cannot be read) is
// kept in settleErr and Stats.RetrainErr, and searches use the codes in
// use until the next Apply (settleDue).
func (f *residualFamily) settleLocked(ctx context.Context) error {
	if !f.unsettled {
		return nil
	}
	if f.rc != nil && f.rc.cb.provisional {
		if err := f.retrainNowLocked(ctx); err != nil {
			err = fmt.Errorf("settle the provisional codebook: %w", err)
			if ctx.Err() == nil {
				f.settleErr, f.retrainErr = err, err
			}
			return err
		}
		if f.rc != nil {
			f.rc.cb.provisional = true
		}
	}
	f.unsettled, f.settleErr, f.retrainErr = false, nil, nil
	return nil
}

// runRetrain is the job's work; see above.
func (f *residualFamily) runRetrain(job *retrainJob, held []heldDoc) error {
	trained := func(cb *codebook) {
		f.lock.Lock()
		if f.job == job && job.ctx.Err() == nil {
			job.side = newResidualIndex(cb)
		}
		f.lock.Unlock()
	}
	next, missing, err := f.trainAndCode(job.ctx, held, job.nlist, job.trained, trained)
	if err != nil {
		return err
	}
	if retrainHook != nil {
		retrainHook(job.ctx)
	}
	for pass := 0; ; pass++ {
		f.lock.Lock()
		if job.ctx.Err() != nil || f.job != job || f.rc == nil {
			f.lock.Unlock()
			next.close()
			return job.ctx.Err()
		}
		for _, num := range missing {
			job.changed[num] = struct{}{}
		}
		missing = nil
		// The documents in side are coded already, from the blob they
		// were applied with; the others changed are coded (or dropped)
		// from the store.
		side := job.side
		if side != nil {
			job.side = newResidualIndex(side.cb)
		}
		var nums []uint64
		for num := range job.changed {
			if _, ok := side.held(num); !ok {
				nums = append(nums, num)
			}
		}
		slices.Sort(nums)
		delta := f.heldLocked(nums)
		clear(job.changed)
		if len(delta)+side.docCount() <= lastDeltaDocs || pass >= 3 {
			gone, err := f.codeDelta(next, delta)
			f.skipGone(gone)
			if err == nil {
				next.absorb(side)
				f.swapLocked(next)
				f.job, f.retrainErr = nil, nil
			}
			f.lock.Unlock()
			if err != nil {
				next.close()
			}
			return err
		}
		f.lock.Unlock()
		if missing, err = f.codeDelta(next, delta); err != nil {
			next.close()
			return err
		}
		next.absorb(side)
	}
}

// skipGone records the held documents a retraining could not code (their
// blob is gone or cannot be used: the change that did it is applied next).
func (f *residualFamily) skipGone(nums []uint64) {
	for _, num := range nums {
		f.skipped = append(f.skipped, fmt.Errorf("document %d: blob %s gone or unusable while retraining", num, f.blob))
	}
}

// swapLocked replaces the index in use by next.
func (f *residualFamily) swapLocked(next *residualIndex) {
	old := f.rc
	old.close()
	if next.tokens == 0 {
		// No document held has tokens any more.
		next.close()
		next = nil
	}
	f.rc = next
	if f.onSwap != nil {
		f.onSwap()
	}
}

// trainAndCode trains a codebook of nlist centroids on a sample of held
// and codes every document of held with it. It returns the documents whose
// blob could not be read (gone from the store, or replaced by one that
// cannot be used), to be coded again under the lock. When trained is not
// nil, it is called with the codebook once it is trained, before the
// documents are coded; the codebook is then safe for concurrent coding.
func (f *residualFamily) trainAndCode(ctx context.Context, held []heldDoc, nlist int, total int64, trained func(*codebook)) (*residualIndex, []uint64, error) {
	dim := f.opts.Dim
	// The sample is every stride-th token of the documents in docnum
	// order, about kmeansPerCentroid per centroid, as a build from the
	// store took it. (Whole documents chosen by a hash of their docnum,
	// which would read only the sample's blobs, made worse codes on
	// SciFact: recall@100 against exhaustive 0.685 against 0.75, see
	// README.) Blobs without a sampled token are not read.
	want := int64(kmeansPerCentroid * nlist)
	stride := max(1, total/max(want, 1))
	var sample []float32
	var missing []uint64
	var buf []byte
	row := make([]float32, dim)
	var at int64
	for _, h := range held {
		first := (stride - at%stride) % stride
		at += int64(h.count)
		if first >= int64(h.count) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		e, ok, err := f.heldEntry(h, &buf)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		for t := int(first); t < e.h.count; t += int(stride) {
			decodeRows(e.blob, e.h, t, t+1, row)
			sample = append(sample, row...)
		}
	}
	if len(sample) == 0 {
		return newResidualIndex(&codebook{dim: dim}), nil, nil
	}
	cb, err := trainCodebook(ctx, sample, dim, nlist, total)
	if err != nil {
		return nil, nil, fmt.Errorf("retrain: %w", err)
	}
	sample = nil
	if trained != nil {
		// The assigner is made now, not at the first coding, which would
		// race with apply's.
		if err := cb.ready(); err != nil {
			cb.close()
			return nil, nil, fmt.Errorf("retrain: %w", err)
		}
		trained(cb)
	}
	next := newResidualIndex(cb)
	var pend batchEncoder
	for _, h := range held {
		if err := ctx.Err(); err != nil {
			next.close()
			return nil, nil, err
		}
		e, ok, err := f.heldEntry(h, &buf)
		if err != nil {
			next.close()
			return nil, nil, err
		}
		if !ok {
			missing = append(missing, h.num)
			continue
		}
		pend.add(h.num, e)
		if pend.full(dim) {
			if err := pend.flush(next); err != nil {
				next.close()
				return nil, nil, fmt.Errorf("retrain: encode: %w", err)
			}
		}
	}
	if err := pend.flush(next); err != nil {
		next.close()
		return nil, nil, fmt.Errorf("retrain: encode: %w", err)
	}
	next.compact()
	return next, missing, nil
}

// codeDelta codes the documents of delta into next with its codebook, or
// drops those that left the index. It returns the documents held whose
// blob could not be read.
func (f *residualFamily) codeDelta(next *residualIndex, delta []heldDoc) ([]uint64, error) {
	var pend batchEncoder
	var buf []byte
	var gone []uint64
	for _, h := range delta {
		next.drop(h.num)
		if !h.held {
			continue
		}
		e, ok, err := f.heldEntry(h, &buf)
		if err != nil {
			return nil, err
		}
		if !ok {
			gone = append(gone, h.num)
			continue
		}
		if next.cb.nlist == 0 {
			return nil, errors.New("retrain: no codebook for the documents applied meanwhile")
		}
		pend.add(h.num, e)
		// Flushed as it goes: the documents applied while a long job ran
		// can be most of the collection.
		if pend.full(next.cb.dim) {
			if err := pend.flush(next); err != nil {
				return nil, fmt.Errorf("retrain: encode: %w", err)
			}
		}
	}
	if err := pend.flush(next); err != nil {
		return nil, fmt.Errorf("retrain: encode: %w", err)
	}
	return gone, nil
}

// heldEntry reads a held document's current blob from the store into
// buf, with its CRC-32C. ok is false when the blob is gone or cannot be
// used; a failure to read it (storage.ErrCorruption among them) is an
// error, which fails the build or the retraining, as it fails Apply. The
// entry is valid until the next call with buf.
func (f *residualFamily) heldEntry(h heldDoc, buf *[]byte) (docEntry, bool, error) {
	value, crc, ok, err := f.st.ReadBlobCRC(h.num, f.blob, (*buf)[:0])
	if err != nil {
		return docEntry{}, false, fmt.Errorf("read %s of document %d: %w", f.blob, h.num, err)
	}
	if !ok {
		return docEntry{}, false, nil
	}
	*buf = value
	e, err := f.entryNoCopy(h.num, value)
	e.crc = crc
	return e, err == nil, nil
}

// stopBackground cancels a running job and returns a function that waits
// for it to stop (called without the lock, which the job may be waiting
// for).
func (f *residualFamily) stopBackground() func() {
	if f.job != nil {
		f.job.cancel()
		f.job = nil
	}
	return f.wg.Wait
}

// retrainDone returns a channel closed when the running job ends, nil when
// none runs.
func (f *residualFamily) retrainDone() <-chan struct{} {
	if f.job == nil {
		return nil
	}
	return f.job.done
}

// openedLocked starts the retraining a closed index left undone.
func (f *residualFamily) openedLocked() {
	if f.rc != nil && !f.rc.cb.provisional && f.job == nil && f.shouldRetrainLocked() {
		f.startRetrainLocked()
		f.retrains++
	}
}

// backgrounder is a family with work running in the background.
type backgrounder interface {
	// stopBackground cancels it and returns a function that waits for it
	// to stop, to be called without the lock.
	stopBackground() func()
	// retrainDone returns a channel closed when the running retraining
	// ends, nil when none runs.
	retrainDone() <-chan struct{}
	// openedLocked starts what Open should, once caught up.
	openedLocked()
}

var _ backgrounder = (*residualFamily)(nil)

// WaitRetrain settles a provisional codebook that documents were applied
// to since it was trained (as the next search would: see settler; a
// failure is Stats.RetrainErr), then waits until no retraining runs in the
// background (see Stats.Retraining), or ctx ends. After it, at rest, Stats
// describe the codes that every search uses.
func (x *Index) WaitRetrain(ctx context.Context) error {
	if err := x.settle(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	for {
		x.mu.RLock()
		var done <-chan struct{}
		if b, ok := x.mu.fam.(backgrounder); ok && !x.mu.closed {
			done = b.retrainDone()
		}
		x.mu.RUnlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// lockFor hands a family the Index's lock and the swap callback.
func (x *Index) lockFor(f family) {
	if rf, ok := f.(*residualFamily); ok {
		rf.lock = &x.mu.RWMutex
		rf.onSwap = func() { x.mu.unsaved = true }
	}
}
