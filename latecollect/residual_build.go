package latecollect

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/tandemsearch/tandem/storage"
)

// encodeBatchTokens is the number of tokens assigned to centroids per
// FAISS call while building (one BLAS product per batch).
const encodeBatchTokens = 32768

// configuredCentroids is the number of centroids Options.Description
// fixes, 0 when automatic.
func (x *Index) configuredCentroids() int {
	n, _ := residualLists(x.opts.Description)
	return n
}

// buildResidual trains a codebook and encodes documents from their
// current blobs in the store: those keep accepts (every document with a
// blob when keep is nil). Blobs that cannot be used are returned as
// errors, their documents left out. It reads the store three times (token
// counts, training sample, encoding), so memory stays at the sample and
// one batch of tokens.
func (x *Index) buildResidual(ctx context.Context, keep func(uint64) bool) (*residualIndex, []error, error) {
	dim := x.opts.Dim
	var (
		skipped []error
		counts  = map[uint64]int{}
		total   int64
	)
	err := x.st.ScanBlobs(ctx, x.blob, func(num uint64, value []byte) error {
		if keep != nil && !keep(num) {
			return nil
		}
		e, err := x.entryNoCopy(num, value)
		if err != nil {
			skipped = append(skipped, err)
			return nil
		}
		counts[num] = e.h.count
		total += int64(e.h.count)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("build residual codes: scan token matrices: %w", err)
	}
	nlist := x.configuredCentroids()
	if nlist == 0 {
		nlist = autoCentroids(total)
	}
	want := int64(trainPerCentroid * nlist)
	stride := max(int64(1), total/max(want, 1))
	var sample []float32
	var row int64
	buf := make([]float32, dim)
	err = x.st.ScanBlobs(ctx, x.blob, func(num uint64, value []byte) error {
		n, ok := counts[num]
		if !ok {
			return nil
		}
		e, err := x.entryNoCopy(num, value)
		if err != nil || e.h.count != n {
			return fmt.Errorf("document %d changed while building", num)
		}
		for t := range n {
			if row%stride == 0 {
				decodeRows(e.blob, e.h, t, t+1, buf)
				sample = append(sample, buf...)
			}
			row++
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("build residual codes: sample: %w", err)
	}
	if len(sample) == 0 {
		return nil, skipped, nil
	}
	cb, err := trainCodebook(sample, dim, nlist, total)
	if err != nil {
		return nil, nil, fmt.Errorf("build residual codes: %w", err)
	}
	sample = nil
	r := newResidualIndex(cb)
	final := ""
	if dir := x.st.Dir(); dir != "" {
		final = tokenFilePath(dir, x.opts.Model)
		if r.tf, err = createTokenFile(x.st.FS(), final+".build"); err != nil {
			r.close()
			return nil, nil, fmt.Errorf("build residual codes: %w", err)
		}
	}
	var pend batchEncoder
	err = x.st.ScanBlobs(ctx, x.blob, func(num uint64, value []byte) error {
		if _, ok := counts[num]; !ok {
			return nil
		}
		e, err := x.entryNoCopy(num, value)
		if err != nil {
			return err
		}
		if r.tf != nil {
			e.blob = slices.Clone(value) // valid only during the scan
		}
		pend.add(num, e)
		if len(pend.rows) >= encodeBatchTokens*dim {
			return pend.flush(r)
		}
		return nil
	})
	if err == nil {
		err = pend.flush(r)
	}
	if err == nil && r.tf != nil {
		if err = r.tf.sync(); err == nil {
			if err = x.st.FS().Rename(r.tf.path, final); err == nil {
				r.tf.path = final
				err = x.st.FS().SyncDir(filepath.Dir(final))
			}
		}
	}
	if err != nil {
		if r.tf != nil && r.tf.path != final {
			x.st.FS().Remove(r.tf.path)
		}
		r.close()
		return nil, nil, fmt.Errorf("build residual codes: encode: %w", err)
	}
	return r, skipped, nil
}

// batchEncoder gathers the tokens of several documents so that they are
// assigned to centroids in one call.
type batchEncoder struct {
	nums   []uint64
	counts []int
	rows   []float32
	blobs  [][]byte
}

// add gathers a document. Its blob goes to the token file at flush, so it
// must stay valid until then (a copy, when it comes from a scan).
func (b *batchEncoder) add(num uint64, e docEntry) {
	b.nums = append(b.nums, num)
	b.counts = append(b.counts, e.h.count)
	b.rows = appendRows(b.rows, e, e.h.count)
	b.blobs = append(b.blobs, e.blob)
}

// flush encodes the gathered documents into r and empties b.
func (b *batchEncoder) flush(r *residualIndex) error {
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
		}
		var sum float64
		for _, v := range norms[off : off+c] {
			sum += float64(v)
		}
		d.normSum = float32(sum)
		if r.tf != nil {
			loc, err := r.tf.append(b.blobs[i])
			if err != nil {
				return err
			}
			d.loc = loc
		}
		r.put(num, d)
		off += c
	}
	b.nums, b.counts, b.rows, b.blobs = b.nums[:0], b.counts[:0], b.rows[:0], b.blobs[:0]
	return nil
}

// applyResidualLocked applies one run of changes to the residual-code
// index (see applyLocked for the FAISS index).
func (x *Index) applyResidualLocked(ctx context.Context, changes []storage.Change) ([]error, error) {
	final, last := x.finalChangesLocked(changes)
	if len(final) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if changes[0].Seq/applyStride != x.mu.applied/applyStride && x.mu.rc != nil {
		// A provisional codebook was trained on whatever part of a run
		// came first; retraining it where the next run starts makes the
		// index the same however the caller cut the log.
		if prov := x.mu.rc.cb.provisional; prov || x.shouldRetrainLocked() {
			if err := x.retrainLocked(ctx); err != nil {
				return nil, fmt.Errorf("latecollect: apply: %w", err)
			}
			if !prov {
				x.mu.retrains++
			}
		}
	}
	nums := make([]uint64, 0, len(final))
	for num := range final {
		nums = append(nums, num)
	}
	slices.Sort(nums)
	var (
		bad  []error
		pend batchEncoder
	)
	for _, num := range nums {
		c := final[num]
		if x.mu.rc != nil {
			x.mu.rc.drop(num)
		}
		if num > maxResidualDoc && c.Op == storage.OpPut {
			bad = append(bad, fmt.Errorf("document %d: %w: the residual-code index holds docnums below 2^32", num, ErrBadOptions))
			continue
		}
		e, ok, err := x.changedEntry(c, &bad)
		if err != nil {
			return nil, err
		}
		if ok {
			pend.add(num, e)
		}
	}
	if x.mu.rc == nil && len(pend.rows) > 0 {
		// The first tokens: train on them.
		nlist := x.configuredCentroids()
		if nlist == 0 {
			nlist = autoCentroids(int64(len(pend.rows) / x.opts.Dim))
		}
		sample := pend.rows
		if want := trainPerCentroid * nlist * x.opts.Dim; len(sample) > want {
			sample = everyNthRow(sample, x.opts.Dim, len(sample)/want)
		}
		cb, err := trainCodebook(sample, x.opts.Dim, nlist, int64(len(pend.rows)/x.opts.Dim))
		if err != nil {
			return nil, fmt.Errorf("latecollect: apply: %w", err)
		}
		cb.provisional = true
		x.mu.rc = newResidualIndex(cb)
		if dir := x.st.Dir(); dir != "" {
			if x.mu.rc.tf, err = createTokenFile(x.st.FS(), tokenFilePath(dir, x.opts.Model)); err != nil {
				x.mu.rc.close()
				x.mu.rc = nil
				return nil, fmt.Errorf("latecollect: apply: %w", err)
			}
		}
		x.mu.desc = x.residualDescription()
	}
	if x.mu.rc != nil {
		if err := pend.flush(x.mu.rc); err != nil {
			return nil, fmt.Errorf("latecollect: apply: encode: %w", err)
		}
	}
	x.mu.applied = last
	x.mu.sinceSnap += len(final)
	if x.opts.SnapshotEvery > 0 && x.mu.sinceSnap >= x.opts.SnapshotEvery && x.mu.snapErr == nil {
		x.mu.snapErr = x.saveSnapshotLocked(ctx)
	}
	return bad, nil
}

// maxResidualDoc is the largest docnum the residual-code lists hold.
const maxResidualDoc = 1<<32 - 1

// everyNthRow returns every n-th row of rows.
func everyNthRow(rows []float32, dim, n int) []float32 {
	var out []float32
	for i := 0; i*dim < len(rows); i += n {
		out = append(out, rows[i*dim:(i+1)*dim]...)
	}
	return out
}

// residualDescription is the description of the residual index in use.
func (x *Index) residualDescription() string {
	if x.mu.rc == nil {
		return residualDesc
	}
	return fmt.Sprintf("%s%d", residualDesc, x.mu.rc.cb.nlist)
}

// shouldRetrainLocked reports whether the centroids no longer fit: the
// automatic number of centroids is at least double the current one (the
// tokens grew about RetrainGrowth-fold), or the mean residual norm rose by
// RetrainDrift over the training sample's.
func (x *Index) shouldRetrainLocked() bool {
	r := x.mu.rc
	if x.configuredCentroids() == 0 && autoCentroids(r.tokens) >= 2*r.cb.nlist && r.tokens >= RetrainGrowth*r.cb.trained {
		return true
	}
	return r.tokens >= 1000 && r.drift() > RetrainDrift
}

// retrainLocked retrains the centroids on the documents held and
// re-encodes them from their current blobs.
func (x *Index) retrainLocked(ctx context.Context) error {
	held := x.mu.rc.docs
	r, skipped, err := x.buildResidual(ctx, func(num uint64) bool { _, ok := held[num]; return ok })
	if err != nil {
		return err
	}
	x.mu.skipped = append(x.mu.skipped, skipped...)
	x.mu.rc.close() // r is nil when no held document has tokens any more
	x.mu.rc = r
	x.mu.desc = x.residualDescription()
	return nil
}

// openResidual finishes Open for the residual-code index: from its
// snapshot, or built from the blobs, then caught up.
func (x *Index) openResidual(ctx context.Context, startSeq uint64) (*Index, error) {
	loaded, err := x.loadResidualSnapshot()
	x.loadedSnapshot = loaded && err == nil
	if !x.loadedSnapshot {
		r, skipped, err := x.buildResidual(ctx, nil)
		if err != nil {
			return nil, fmt.Errorf("latecollect: open %s: %w", x.opts.Model, err)
		}
		x.mu.rc, x.mu.skipped, x.mu.applied = r, skipped, startSeq
		x.mu.desc = x.residualDescription()
	}
	if err := x.CatchUp(ctx); err != nil {
		x.Close()
		return nil, fmt.Errorf("latecollect: open %s: %w", x.opts.Model, err)
	}
	return x, nil
}
