package latecollect

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// encodeBatchTokens is the number of tokens assigned to centroids per
// FAISS call while building (one BLAS product per batch).
const encodeBatchTokens = 32768

// residualFamily keeps each document token as its nearest centroid's id and
// a one-bit-per-dimension residual code (residualIndex); the full-precision
// tokens stay in the store alone, read for the exact stage.
type residualFamily struct {
	source

	rc       *residualIndex // nil while no document has tokens
	retrains int            // retrainings started since Open
	skipped  []error        // bad blobs met while building, newest last
	pend     batchEncoder   // apply's, reused (under the write lock)
	// exactStale counts the documents the exact stage scored from their
	// codes because their stored blob was not the one they were coded
	// from (a change not applied yet); exactReadErrors those whose blob
	// could not be read (storage.ErrCorruption), the latest error in
	// exactReadErr.
	exactStale      atomic.Int64
	exactReadErrors atomic.Int64
	exactReadErr    atomic.Pointer[error]
	// unsettled is set when documents were applied to a provisional
	// codebook since it was trained on every document held: until
	// settleLocked retrains it, the codes depend on how the log was cut
	// into Apply calls. settleErr is why the last settling failed (a
	// blob that cannot be read); searches do not try again before the
	// next Apply.
	unsettled bool
	settleErr error

	// Retraining in the background (residual_retrain.go). lock is the
	// Index's, which the family's fields are read and written under, and
	// onSwap tells the Index that a job swapped new codes in (under it).
	lock       *sync.RWMutex
	onSwap     func()
	job        *retrainJob // running, nil when none
	retrainErr error       // why the last job, or settling, failed
	wg         sync.WaitGroup
}

// newResidualFamily returns an empty residual family; load or build then
// fills it.
func newResidualFamily(s source) (*residualFamily, error) {
	// Residual codes need the native stack (OpenBLAS, which comes with
	// FAISS, for training and assignment) once documents arrive: without
	// it, fail now rather than after the first commit.
	if err := faiss.Available(); err != nil {
		return nil, fmt.Errorf("residual codes: %w", err)
	}
	if err := removeTokenFiles(s.st, s.opts.Model); err != nil {
		return nil, fmt.Errorf("residual codes: %w", err)
	}
	return &residualFamily{source: s}, nil
}

// removeTokenFiles removes the model's token file, where residual codes
// kept a copy of every blob until format 2 of their snapshot (see
// residualVersion), with what a compaction or a build left of its
// temporary files, and the derived/ directory that held them when empty.
// Nothing reads them: the tokens are read from the store.
func removeTokenFiles(st *storage.Store, model string) error {
	dir := st.Dir()
	if dir == "" {
		return nil
	}
	path := filepath.Join(dir, "derived", "late-"+model+".tokens")
	for _, p := range []string{path, path + ".tmp", path + ".build"} {
		if err := st.FS().Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the old token file: %w", err)
		}
	}
	st.FS().Remove(filepath.Dir(path)) // fails unless empty
	return nil
}

// build codes every document with a usable blob in the store, as a
// retraining codes the documents held (trainAndCode): one scan of the
// store finds them and their token counts, then the sample and the coding
// read their blobs again.
func (f *residualFamily) build(ctx context.Context) error {
	var (
		held    []heldDoc
		total   int64
		skipped []error
	)
	err := f.st.ScanBlobs(ctx, f.blob, func(num uint64, value []byte) error {
		e, err := f.entryNoCopy(num, value)
		if err != nil {
			skipped = append(skipped, err)
			return nil
		}
		held = append(held, heldDoc{num: num, count: e.h.count, held: true})
		total += int64(e.h.count)
		return nil
	})
	if err != nil {
		return fmt.Errorf("build residual codes: scan token matrices: %w", err)
	}
	if total == 0 {
		f.rc, f.skipped = nil, skipped
		return nil
	}
	nlist := f.configuredCentroids()
	if nlist == 0 {
		nlist = autoCentroids(total)
	}
	r, missing, err := f.trainAndCode(ctx, held, nlist, total, nil)
	if err != nil {
		return fmt.Errorf("build residual codes: %w", err)
	}
	for _, num := range missing {
		skipped = append(skipped, fmt.Errorf("document %d: blob %s gone while building", num, f.blob))
	}
	if r.tokens == 0 {
		r.close()
		r = nil
	}
	r.compact()
	f.rc, f.skipped = r, skipped
	return nil
}

func (f *residualFamily) has(num uint64) bool {
	if f.rc == nil {
		return false
	}
	_, ok := f.rc.docs[num]
	return ok
}

func (f *residualFamily) docNums() *roaring64.Bitmap {
	bm := roaring64.New()
	if f.rc != nil {
		for num := range f.rc.docs {
			bm.Add(num)
		}
	}
	return bm
}

func (f *residualFamily) stats(s *Stats) {
	s.Description, s.Skipped, s.Retrains = f.description(), len(f.skipped), f.retrains
	s.Retraining, s.RetrainErr = f.job != nil, f.retrainErr
	if r := f.rc; r != nil {
		s.Docs, s.Tokens, s.TokenKeys = len(r.docs), r.tokens, r.tokens
		s.IndexBytes = uint64(r.memoryBytes())
		s.Centroids, s.Drift = r.cb.nlist, r.drift()
	}
	s.ExactStale, s.ExactReadErrors = f.exactStale.Load(), f.exactReadErrors.Load()
	if err := f.exactReadErr.Load(); err != nil {
		s.ExactReadErr = *err
	}
}

func (f *residualFamily) close() error {
	f.stopBackground()() // Index.Close has waited already
	f.rc.close()
	f.rc = nil
	return nil
}

// configuredCentroids is the number of centroids Options.Description
// fixes, 0 when automatic.
func (f *residualFamily) configuredCentroids() int {
	n, _ := residualLists(f.opts.Description)
	return n
}

// batchEncoder gathers the tokens of several documents so that they are
// assigned to centroids in one call.
type batchEncoder struct {
	nums   []uint64
	counts []int
	rows   []float32
	stamps []blobStamp
}

// add gathers a document: e is decoded now and not kept, and e.crc must
// be its blob's CRC-32C.
func (b *batchEncoder) add(num uint64, e docEntry) {
	b.nums = append(b.nums, num)
	b.counts = append(b.counts, e.h.count)
	b.rows = appendRows(b.rows, e, e.h.count)
	b.stamps = append(b.stamps, stampOf(e))
}

// full reports whether b holds a batch's worth of tokens (of dim values),
// to be flushed before more are added: a caller with many documents
// flushes as it goes, so that what it gathers stays bounded.
func (b *batchEncoder) full(dim int) bool {
	return len(b.rows) >= encodeBatchTokens*dim
}

// reset empties b, keeping its buffers unless they grew past a batch.
func (b *batchEncoder) reset(dim int) {
	b.nums, b.counts, b.stamps = b.nums[:0], b.counts[:0], b.stamps[:0]
	if cap(b.rows) > 2*encodeBatchTokens*dim {
		b.rows = nil
	} else {
		b.rows = b.rows[:0]
	}
}

// flush encodes the gathered documents into r and empties b.
func (b *batchEncoder) flush(r *residualIndex) error { return b.flushInto(r, nil) }

// flushInto is flush, and when side is not nil, encodes the documents
// into side too, with its codebook.
func (b *batchEncoder) flushInto(r, side *residualIndex) error {
	if err := b.encode(r); err != nil {
		return err
	}
	if side != nil {
		if err := b.encode(side); err != nil {
			return fmt.Errorf("with the codebook in training: %w", err)
		}
	}
	b.reset(r.cb.dim)
	return nil
}

// encode encodes the gathered documents into r.
func (b *batchEncoder) encode(r *residualIndex) error {
	if len(b.nums) == 0 {
		return nil
	}
	cb := r.cb
	n := len(b.rows) / cb.dim
	cids := make([]uint16, n)
	codes := make([]byte, n*cb.codeBytes())
	norms := make([]float32, n)
	if err := cb.encode(b.rows, cids, codes, norms); err != nil {
		return err
	}
	off := 0
	for i, num := range b.nums {
		c := b.counts[i]
		d := docCodes{
			cids:  slices.Clone(cids[off : off+c]),
			codes: slices.Clone(codes[off*cb.codeBytes() : (off+c)*cb.codeBytes()]),
			blob:  b.stamps[i],
		}
		var sum float64
		for _, v := range norms[off : off+c] {
			sum += float64(v)
		}
		d.normSum = float32(sum)
		r.put(num, d)
		off += c
	}
	return nil
}

// side is the running retraining's side index (retrainJob.side), nil when
// none runs or its codebook is not trained yet.
func (f *residualFamily) side() *residualIndex {
	if f.job == nil {
		return nil
	}
	return f.job.side
}

// apply applies one run of changes (see family). Documents are coded
// against the current centroids; where a new run starts, a provisional
// codebook is retrained (unless it is settled: trained on every document
// held), and so is one the documents no longer fit (shouldRetrainLocked).
// The first documents train a provisional codebook (applyFirst).
func (f *residualFamily) apply(ctx context.Context, final []storage.Change, newRun bool) ([]error, error) {
	if newRun && f.rc != nil {
		// A provisional codebook holds one run at most. Trained on every
		// document held (settled), it is what retraining them would give;
		// otherwise it is retrained now, under the lock (its retraining is
		// small). Others retrain in the background.
		switch {
		case f.rc.cb.provisional && !f.unsettled:
			f.rc.cb.provisional = false
		case f.rc.cb.provisional:
			if err := f.retrainNowLocked(ctx); err != nil {
				return nil, fmt.Errorf("latecollect: apply: %w", err)
			}
		case f.shouldRetrainLocked():
			f.startRetrainLocked()
			f.retrains++
		}
		f.unsettled, f.settleErr = false, nil
	}
	if f.rc == nil {
		return f.applyFirst(ctx, final)
	}
	var bad []error
	// One encoder, kept between runs: gathering each run's rows into a new
	// one allocated several times the tokens' bytes as it grew.
	pend := &f.pend
	defer pend.reset(f.opts.Dim)
	for _, c := range final {
		num := c.DocNum
		if f.job != nil {
			f.job.changed[num] = struct{}{}
			f.job.side.drop(num)
		}
		f.rc.drop(num)
		if num > maxResidualDoc && c.Op == storage.OpPut {
			bad = append(bad, fmt.Errorf("document %d: %w: the residual-code index holds docnums below 2^32", num, ErrBadOptions))
			continue
		}
		e, ok, err := f.changedEntry(c, &bad)
		if err != nil {
			return nil, err
		}
		if ok {
			pend.add(num, e)
		}
		if pend.full(f.opts.Dim) {
			if err := pend.flushInto(f.rc, f.side()); err != nil {
				return nil, fmt.Errorf("latecollect: apply: encode: %w", err)
			}
		}
	}
	if err := pend.flushInto(f.rc, f.side()); err != nil {
		return nil, fmt.Errorf("latecollect: apply: encode: %w", err)
	}
	if f.rc.cb.provisional {
		// Trained on fewer documents, or others, than it now holds.
		f.unsettled, f.settleErr = true, nil
	}
	return bad, nil
}

// applyFirst applies a run to a family that holds no tokens: it trains a
// provisional codebook on the run's documents and codes them with
// trainAndCode, as retraining them would (settleLocked), so that the
// codebook of a run's documents is the same whether they came in one
// Apply call or in several and a settling.
func (f *residualFamily) applyFirst(ctx context.Context, final []storage.Change) ([]error, error) {
	var (
		bad   []error
		held  []heldDoc
		total int64
	)
	for _, c := range final {
		num := c.DocNum
		if num > maxResidualDoc && c.Op == storage.OpPut {
			bad = append(bad, fmt.Errorf("document %d: %w: the residual-code index holds docnums below 2^32", num, ErrBadOptions))
			continue
		}
		e, ok, err := f.changedEntry(c, &bad)
		if err != nil {
			return nil, err
		}
		if ok {
			held = append(held, heldDoc{num: num, count: e.h.count, held: true})
			total += int64(e.h.count)
		}
	}
	if total == 0 {
		return bad, nil
	}
	nlist := f.configuredCentroids()
	if nlist == 0 {
		nlist = autoCentroids(total)
	}
	next, missing, err := f.trainAndCode(ctx, held, nlist, total, nil)
	if err != nil {
		return nil, fmt.Errorf("latecollect: apply: %w", err)
	}
	// A blob gone since it was read above belongs to a change not applied
	// yet, which applies it.
	f.skipGone(missing)
	if next.tokens == 0 {
		next.close()
		return bad, nil
	}
	next.cb.provisional = true
	f.rc, f.unsettled, f.settleErr = next, false, nil
	return bad, nil
}

// maxResidualDoc is the largest docnum the residual-code lists hold.
const maxResidualDoc = 1<<32 - 1

// description is the description of the residual index in use.
func (f *residualFamily) description() string {
	if f.rc == nil {
		return residualDesc
	}
	return fmt.Sprintf("%s%d", residualDesc, f.rc.cb.nlist)
}

// shouldRetrainLocked reports whether the centroids no longer fit: the
// automatic number of centroids is at least double the current one (the
// tokens grew about RetrainGrowth-fold), or the mean residual norm rose by
// RetrainDrift over the training sample's. While a retraining runs,
// growth is measured against the codebook it trains, and drift (a
// measure of the old codes) is not.
func (f *residualFamily) shouldRetrainLocked() bool {
	r := f.rc
	nlist, trained := r.cb.nlist, r.cb.trained
	if f.job != nil {
		nlist, trained = f.job.nlist, f.job.trained
	}
	if f.configuredCentroids() == 0 && autoCentroids(r.tokens) >= 2*nlist && r.tokens >= RetrainGrowth*trained {
		return true
	}
	return f.job == nil && r.tokens >= 1000 && r.drift() > RetrainDrift
}
