package latecollect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// PositionBits is the number of low bits of a FAISS token id that hold the
// token's row in its document's matrix: id = docnum<<PositionBits | row.
// The map from token id to (document, row) is therefore implicit, needs no
// storage, and a document filter becomes token-id ranges. Limits: a
// document has at most 4096 token keys (rows beyond are still scored when
// the document is a candidate, but cannot make it one), and docnums must be
// below 2^51 for ids to stay positive int64.
const PositionBits = 12

// maxKeysPerDoc is the number of rows of a document that get a token key.
const maxKeysPerDoc = 1 << PositionBits

// maxFilterDoc bounds the document numbers a filter can hand to FAISS:
// internal/faiss turns an allow-list into a bitmap of maxID/8 bytes and
// refuses ids beyond MaxInt32*8. Past it, the filter is applied to the
// documents during collection instead.
const maxFilterDoc = math.MaxInt32 * 8

// Defaults, measured on SciFact (5,183 documents, 1.24M MiniLM tokens);
// see the README for the sweeps behind them.
const (
	// DefaultKPrime is the number of document tokens each query token
	// collects from FAISS. At k'=16 and 32 recall@10 stayed below 0.97
	// whatever the cap.
	DefaultKPrime = 64
	// DefaultCandidateCap bounds the documents rescored exactly per query;
	// rescoring cost grows linearly with it. With k'=64, recall@10
	// against exhaustive was 0.967 at 64, 0.977 at 128 and 0.993 at 256.
	DefaultCandidateCap = 256
	// DefaultNProbe is the number of IVF lists visited per query token.
	// With the automatic description (IVF2048 on SciFact), recall@10
	// against exhaustive over the 300 test queries was 0.989 at 8, 16
	// and 32 (it is bounded by k' and the cap, not by the scan), while
	// the FAISS time doubles with each step.
	DefaultNProbe = 8
	// DefaultSnapshotEvery is the number of applied changes after which
	// the token index is saved, bounding the catch-up work of the next
	// Open.
	DefaultSnapshotEvery = 20000
	// autoFlatTokens is the token count up to which the automatic
	// description is an exact flat index; above it, an exact scan per query
	// token costs more than the rescoring it feeds.
	autoFlatTokens = 100_000
)

// Options configure Open. Zero fields mean defaults.
type Options struct {
	// Model names the token vectors: they are read from the blob
	// BlobName(Model), the snapshot is "late-"+Model and Name() is
	// "late:"+Model. Required.
	Model string
	// Dim is the token dimension. Required; blobs of another dimension are
	// refused.
	Dim int
	// Description chooses the token index.
	//
	// "Residual" is the residual-code index with an automatic number of
	// centroids (autoCentroids); "Residual<n>" fixes n, a power of two up
	// to 65536. It keeps each token as a centroid id and a
	// one-bit-per-dimension residual code, and its full-precision tokens
	// in a file of its own, read only for the final exact stage.
	//
	// Otherwise every token key is in FAISS and every token matrix in
	// memory: empty (or "FAISS") chooses the FAISS description
	// automatically (see targetDescription); anything else is a FAISS
	// factory description ("Flat", "IVF2048,SQ8", "IVF512,PQ48"...).
	Description string
	// KPrime is the number of document tokens each query token
	// retrieves from FAISS; default DefaultKPrime.
	KPrime int
	// CandidateCap bounds the candidate documents: for the FAISS index,
	// those rescored exactly (default DefaultCandidateCap); for the
	// residual codes, those scored through their tokens' centroids
	// (default DefaultCentroidCandidates).
	CandidateCap int
	// NProbe is the number of IVF lists (FAISS, default DefaultNProbe) or
	// centroids (residual codes, default DefaultCentroidProbe) each query
	// token visits.
	NProbe int
	// ResidualCap bounds the documents scored from their residual codes;
	// default DefaultResidualCandidates. Residual codes only.
	ResidualCap int
	// ExactCap is the number of documents rescored exactly from the
	// stored tokens, negative for none. The default (0) is as many as
	// make up ExactBudget full-precision values at the index's mean
	// document length, at least DefaultExactCandidates and at most
	// MaxExactCandidates: short or low-dimensional documents, whose
	// residual codes carry fewer bits, get more. Residual codes only.
	ExactCap int
	// TokenPrune skips, at the residual stage, the tokens of a document
	// whose centroid scores against every query token are more than
	// TokenPrune below the document's best centroid score for that query
	// token: they are unlikely to be its best match once residuals are
	// added. Default DefaultTokenPrune, negative for none. Residual codes
	// only.
	TokenPrune float32
	// Scoring is the default score; default ScoreAvgMax.
	Scoring Scoring
	// SnapshotEvery saves a snapshot after this many applied changes;
	// default DefaultSnapshotEvery; negative never saves automatically.
	SnapshotEvery int
	// Parallelism bounds the goroutines one search rescores with;
	// default GOMAXPROCS.
	Parallelism int
}

func (o *Options) fill() (Options, error) {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Model == "" || strings.ContainsAny(c.Model, "/\\") {
		return c, fmt.Errorf("%w: Options.Model %q must be a non-empty name without slashes", ErrBadOptions, c.Model)
	}
	if c.Dim <= 0 || c.Dim > maxDim {
		return c, fmt.Errorf("%w: Options.Dim %d out of range 1..%d", ErrBadOptions, c.Dim, maxDim)
	}
	if c.KPrime == 0 {
		c.KPrime = DefaultKPrime
	}
	residual := isResidual(c.Description)
	if n, ok := residualLists(c.Description); ok && n < 0 {
		return c, fmt.Errorf("%w: Options.Description %q: want Residual or Residual<n>, n a power of two up to %d", ErrBadOptions, c.Description, maxCentroids)
	}
	if residual && c.Dim%8 != 0 {
		return c, fmt.Errorf("%w: Options.Description %q needs Options.Dim divisible by 8, have %d", ErrBadOptions, c.Description, c.Dim)
	}
	if c.CandidateCap == 0 {
		c.CandidateCap = DefaultCandidateCap
		if residual {
			c.CandidateCap = DefaultCentroidCandidates
		}
	}
	if c.NProbe == 0 {
		c.NProbe = DefaultNProbe
		if residual {
			c.NProbe = DefaultCentroidProbe
		}
	}
	if c.ResidualCap == 0 {
		c.ResidualCap = DefaultResidualCandidates
	}
	if c.TokenPrune == 0 {
		c.TokenPrune = DefaultTokenPrune
	}
	if c.Scoring == "" {
		c.Scoring = ScoreAvgMax
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.Parallelism == 0 {
		c.Parallelism = runtime.GOMAXPROCS(0)
	}
	switch {
	case c.KPrime < 0:
		return c, fmt.Errorf("%w: Options.KPrime %d is negative", ErrBadOptions, c.KPrime)
	case c.CandidateCap < 0:
		return c, fmt.Errorf("%w: Options.CandidateCap %d is negative", ErrBadOptions, c.CandidateCap)
	case c.NProbe < 0:
		return c, fmt.Errorf("%w: Options.NProbe %d is negative", ErrBadOptions, c.NProbe)
	case c.ResidualCap < 0:
		return c, fmt.Errorf("%w: Options.ResidualCap %d is negative", ErrBadOptions, c.ResidualCap)
	case math.IsNaN(float64(c.TokenPrune)) || math.IsInf(float64(c.TokenPrune), 0):
		return c, fmt.Errorf("%w: Options.TokenPrune %v is not a finite number", ErrBadOptions, c.TokenPrune)
	case c.Parallelism < 0:
		return c, fmt.Errorf("%w: Options.Parallelism %d is negative", ErrBadOptions, c.Parallelism)
	case !c.Scoring.valid():
		return c, fmt.Errorf("%w: Options.Scoring %q (want %q or %q)", ErrBadOptions, c.Scoring, ScoreAvgMax, ScoreSumMax)
	}
	return c, nil
}

// docEntry is a document's stored token matrix, kept in memory in its
// stored encoding for rescoring.
type docEntry struct {
	blob []byte
	h    blobHeader
}

// keys is the number of token keys the document has in FAISS.
func (d docEntry) keys() int { return min(d.h.count, maxKeysPerDoc) }

// Index is the late-interaction retriever of one model over a Store.
//
// Invariants, under mu: docs holds the token matrix of every live document
// that has a valid blob as of appliedSeq; keys[doc] is the number of token
// ids doc<<PositionBits|0..n-1 present in fx, and fx holds no other ids.
//
// An Index is safe for concurrent use: searches share a read lock, Apply
// and Snapshot take the write lock.
type Index struct {
	st   *storage.Store
	opts Options
	blob string

	// filterAtCollection forces the filter onto the documents during
	// collection instead of translating it to token ids (benchmarks
	// compare the two).
	filterAtCollection bool
	// loadedSnapshot records that Open loaded the snapshot (tests).
	loadedSnapshot bool
	// tokenFileErrors counts exact-stage reads of the token file that
	// failed (the store was read instead).
	tokenFileErrors atomic.Int64

	// residual is set when the index is the residual-code index: then
	// mu.rc holds it (nil while no document has tokens), and mu.fx,
	// mu.docs and mu.keys stay empty.
	residual bool

	mu struct {
		sync.RWMutex
		closed    bool
		rc        *residualIndex
		retrains  int // residual-code retrainings since Open
		fx        *faiss.Index
		desc      string // description fx was built from (before IDMap2)
		docs      map[uint64]docEntry
		keys      map[uint64]int
		tokens    int64 // rows in docs
		bytes     int64 // blob bytes in docs
		applied   uint64
		sinceSnap int
		skipped   []error // bad blobs met while loading, newest last
		snapErr   error   // why the last automatic snapshot failed
	}
}

// Open loads the token matrices of every document from st, loads the
// token index from its snapshot (or rebuilds it when there is none or it
// does not match Options), and catches up with the change log. The Index
// does not own st.
func Open(ctx context.Context, st *storage.Store, opts *Options) (*Index, error) {
	o, err := opts.fill()
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, fmt.Errorf("%w: nil store", ErrBadOptions)
	}
	if err := checkFAISSDescription(o); err != nil {
		return nil, err
	}
	x := &Index{st: st, opts: o, blob: BlobName(o.Model), residual: isResidual(o.Description)}
	x.mu.docs = map[uint64]docEntry{}
	x.mu.keys = map[uint64]int{}
	startSeq := st.LastSeq()
	if x.residual {
		// Residual codes need FAISS only to train and assign, once
		// documents arrive: without it, fail now rather than after the
		// first commit.
		if err := faiss.Available(); err != nil {
			return nil, fmt.Errorf("latecollect: open %s: residual codes: %w", o.Model, err)
		}
		return x.openResidual(ctx, startSeq)
	}
	err = st.ScanBlobs(ctx, x.blob, func(num uint64, value []byte) error {
		e, err := x.entry(num, value)
		if err != nil {
			x.mu.skipped = append(x.mu.skipped, err)
			return nil
		}
		x.putDocLocked(num, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("latecollect: open %s: load token matrices: %w", o.Model, err)
	}
	loaded, err := x.loadSnapshot()
	x.loadedSnapshot = loaded && err == nil
	if !x.loadedSnapshot {
		if err := x.rebuildLocked(x.targetDescription()); err != nil {
			return nil, fmt.Errorf("latecollect: open %s: %w", o.Model, err)
		}
		x.mu.applied = startSeq
	}
	if err := x.CatchUp(ctx); err != nil {
		x.Close()
		return nil, fmt.Errorf("latecollect: open %s: %w", o.Model, err)
	}
	return x, nil
}

// CheckDescription reports whether Open would accept desc as
// Options.Description for tokens of dim values, without opening anything:
// an error wraps ErrBadOptions and says why.
func CheckDescription(desc string, dim int) error {
	o, err := (&Options{Model: "check", Dim: dim, Description: desc}).fill()
	if err != nil {
		return err
	}
	return checkFAISSDescription(o)
}

// checkFAISSDescription fails early on a FAISS description FAISS cannot
// build.
func checkFAISSDescription(o Options) error {
	if o.Description == "" || o.Description == legacyAuto || isResidual(o.Description) {
		return nil
	}
	fx, err := faiss.New(o.Dim, o.Description, faiss.InnerProduct)
	if err != nil {
		return fmt.Errorf("%w: Options.Description: %w", ErrBadOptions, err)
	}
	return fx.Close()
}

// entry checks a stored blob and copies it.
func (x *Index) entry(num uint64, value []byte) (docEntry, error) {
	e, err := x.entryNoCopy(num, value)
	e.blob = slices.Clone(e.blob)
	return e, err
}

func (x *Index) putDocLocked(num uint64, e docEntry) {
	x.dropDocLocked(num)
	x.mu.docs[num] = e
	x.mu.tokens += int64(e.h.count)
	x.mu.bytes += int64(len(e.blob))
}

func (x *Index) dropDocLocked(num uint64) {
	if old, ok := x.mu.docs[num]; ok {
		x.mu.tokens -= int64(old.h.count)
		x.mu.bytes -= int64(len(old.blob))
		delete(x.mu.docs, num)
	}
}

// LoadedSnapshot reports whether Open loaded the saved index (and so only
// caught up) rather than rebuilding it; after a rebuild the caller should
// Snapshot, so that the next Open does not rebuild again.
func (x *Index) LoadedSnapshot() bool { return x.loadedSnapshot }

// DocNums returns the documents the token index holds: those with codes
// (residual codes) or with token keys in FAISS. By the invariant on Index
// it is the set of live documents with a valid token blob as of
// AppliedSeq; consistency checks (tandem torture) compare it with storage.
func (x *Index) DocNums() *roaring64.Bitmap {
	x.mu.RLock()
	defer x.mu.RUnlock()
	bm := roaring64.New()
	if x.mu.rc != nil {
		for num := range x.mu.rc.docs {
			bm.Add(num)
		}
	}
	for num := range x.mu.keys {
		bm.Add(num)
	}
	return bm
}

// Name is the derived index's name in the engine: "late:<model>".
func (x *Index) Name() string { return "late:" + x.opts.Model }

// Dim is the token dimension.
func (x *Index) Dim() int { return x.opts.Dim }

// AppliedSeq is the last change-log sequence the index includes.
func (x *Index) AppliedSeq() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.mu.applied
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

// CatchUp applies every change committed after AppliedSeq.
func (x *Index) CatchUp(ctx context.Context) error {
	for {
		after := x.AppliedSeq()
		ch, err := x.st.Changes(ctx, after, 4096)
		if err != nil {
			return fmt.Errorf("latecollect: catch up after %d: %w", after, err)
		}
		if len(ch) == 0 {
			return nil
		}
		if err := x.Apply(ctx, ch); err != nil {
			return err
		}
	}
}

// Apply brings the index up to date with committed changes, in order.
// Changes at or below AppliedSeq are ignored, so a replay is harmless.
// A put reads the document's current blob; a document without one (or
// deleted since) leaves the index. A blob that cannot be decoded leaves its
// document out; Apply still applies everything else and then returns an
// error wrapping ErrCorruption or ErrBadVector naming the document.
func (x *Index) Apply(ctx context.Context, changes []storage.Change) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	// Changes are applied in runs that end at fixed points of the log
	// (every applyStride sequences), and a rebuild is decided only where
	// a run starts: so the index built from a log is the same however the
	// caller cut it into Apply calls, and a collection indexed twice
	// ranks the same.
	var bad []error
	for len(changes) > 0 {
		end := 1
		for end < len(changes) && changes[end].Seq/applyStride == changes[0].Seq/applyStride {
			end++
		}
		apply := x.applyLocked
		if x.residual {
			apply = x.applyResidualLocked
		}
		b, err := apply(ctx, changes[:end])
		if err != nil {
			return err
		}
		bad = append(bad, b...)
		changes = changes[end:]
	}
	if len(bad) > 0 {
		return fmt.Errorf("latecollect: apply: %d documents left out: %w", len(bad), errors.Join(bad...))
	}
	return nil
}

// applyStride is the length of the runs of the change log between which
// Apply decides whether to rebuild.
const applyStride = 256

// changedEntry returns the current blob of the document a change names,
// checked, when the change is a put and the document has a usable blob
// (Store.Blob returns a copy, which the entry keeps). A blob that cannot
// be used is appended to bad; err is a failure to read the store.
func (x *Index) changedEntry(c storage.Change, bad *[]error) (docEntry, bool, error) {
	if c.Op != storage.OpPut || c.Doc == nil {
		return docEntry{}, false, nil
	}
	value, ok, err := x.st.Blob(c.DocNum, x.blob)
	if err != nil {
		return docEntry{}, false, fmt.Errorf("latecollect: apply: read %s of document %d: %w", x.blob, c.DocNum, err)
	}
	if !ok {
		return docEntry{}, false, nil
	}
	e, err := x.entryNoCopy(c.DocNum, value)
	if err != nil {
		*bad = append(*bad, err)
		return docEntry{}, false, nil
	}
	return e, true, nil
}

// finalChangesLocked returns the last change of each document among those
// after AppliedSeq, and the last sequence among them. The last change
// wins: a change carries the document as it is now, so reading the
// current blob converges.
func (x *Index) finalChangesLocked(changes []storage.Change) (map[uint64]storage.Change, uint64) {
	final := map[uint64]storage.Change{}
	last := x.mu.applied
	for _, c := range changes {
		if c.Seq <= x.mu.applied {
			continue
		}
		final[c.DocNum] = c
		last = max(last, c.Seq)
	}
	return final, last
}

// applyLocked applies one run of changes. It returns the errors of
// documents left out (bad blobs) apart from a failure that stops it.
func (x *Index) applyLocked(ctx context.Context, changes []storage.Change) ([]error, error) {
	final, last := x.finalChangesLocked(changes)
	if len(final) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Decide on a rebuild when a new run of the log starts, from the
	// documents of every run before it: that state does not depend on how
	// the caller cut the log.
	if changes[0].Seq/applyStride != x.mu.applied/applyStride {
		if target := x.targetDescription(); target != x.mu.desc && trainable(target, x.mu.tokens) {
			if err := x.rebuildLocked(target); err != nil {
				return nil, fmt.Errorf("latecollect: apply: %w", err)
			}
		}
	}
	var (
		removeIDs []int64
		addIDs    []int64
		addVecs   []float32
		bad       []error
	)
	nums := make([]uint64, 0, len(final))
	for num := range final {
		nums = append(nums, num)
	}
	slices.Sort(nums)
	for _, num := range nums {
		c := final[num]
		if n := x.mu.keys[num]; n > 0 {
			removeIDs = appendIDs(removeIDs, num, n)
			delete(x.mu.keys, num)
		}
		x.dropDocLocked(num)
		e, ok, err := x.changedEntry(c, &bad)
		if err != nil {
			return nil, err
		}
		if ok {
			x.putDocLocked(num, e)
		}
	}
	if _, err := x.mu.fx.Remove(removeIDs); err != nil {
		return nil, fmt.Errorf("latecollect: apply: remove %d token keys: %w", len(removeIDs), err)
	}
	for _, num := range nums {
		e, ok := x.mu.docs[num]
		if !ok {
			continue
		}
		n := e.keys()
		addIDs = appendIDs(addIDs, num, n)
		addVecs = appendRows(addVecs, e, n)
		x.mu.keys[num] = n
	}
	if err := x.mu.fx.Add(addIDs, addVecs); err != nil {
		return nil, fmt.Errorf("latecollect: apply: add %d token keys: %w", len(addIDs), err)
	}
	x.mu.applied = last
	x.mu.sinceSnap += len(final)
	if x.opts.SnapshotEvery > 0 && x.mu.sinceSnap >= x.opts.SnapshotEvery && x.mu.snapErr == nil {
		// The changes are applied whatever happens here: a failed
		// automatic snapshot (an in-memory store has none) only costs the
		// next Open a rebuild, so it is reported by Stats and automatic
		// snapshots stop; Snapshot still returns its error.
		x.mu.snapErr = x.saveSnapshotLocked(ctx)
	}
	return bad, nil
}

// appendIDs appends the token ids of a document's first n rows.
func appendIDs(ids []int64, num uint64, n int) []int64 {
	base := int64(num << PositionBits)
	for i := range n {
		ids = append(ids, base|int64(i))
	}
	return ids
}

// appendRows appends the first n decoded rows of e.
func appendRows(vecs []float32, e docEntry, n int) []float32 {
	start := len(vecs)
	vecs = append(vecs, make([]float32, n*e.h.dim)...)
	decodeRows(e.blob, e.h, 0, n, vecs[start:])
	return vecs
}

// targetDescription is the description the index should have now: the
// configured one, or automatically Flat up to autoFlatTokens tokens, then
// "IVF<n>,SQ8" with n the least power of two ≥ sqrt(tokens), at most 8192.
//
// Why, measured on SciFact's 1.24M MiniLM tokens with k'=64, cap 256 (see
// the README): the cost of a candidate search is the IVF scan, about
// nprobe × tokens/n codes per query token, and Debian's generic FAISS
// build scans SQ8 codes without AVX2 (its ScalarQuantizer has no FMA
// and next to no 256-bit instructions). Going from n = sqrt(tokens)/4
// (512 lists) to sqrt(tokens) (2048) cut the FAISS time per query from
// 385 to 59 ms (nprobe 16 then, 8 now) with recall@10 against exhaustive
// unchanged (0.988 → 0.989, 300 queries); training and filling took 54 s
// instead of 10 s. 4096 lists saved another 14 ms but took 2m15s to
// build. Flat codes scan no faster than SQ8 there and take 4× the memory;
// PQ48 scans about 5× faster but took 5 minutes to train. The IVF lists hold
// about sqrt(tokens) keys each, so the share of keys scanned falls as
// the collection grows.
func (x *Index) targetDescription() string {
	if x.opts.Description != "" && x.opts.Description != legacyAuto {
		return x.opts.Description
	}
	if x.mu.tokens <= autoFlatTokens {
		return "Flat"
	}
	nlist := 64
	for nlist*nlist < int(x.mu.tokens) && nlist < 8192 {
		nlist *= 2
	}
	return fmt.Sprintf("IVF%d,SQ8", nlist)
}

// trainable reports whether tokens suffice to train desc: FAISS wants about
// 39 training points per IVF list.
func trainable(desc string, tokens int64) bool {
	n := ivfLists(desc)
	return n == 0 || tokens >= int64(40*n)
}

// ivfLists returns the number of IVF lists in desc, 0 if it is not IVF.
func ivfLists(desc string) int {
	for _, part := range strings.Split(strings.ToUpper(desc), ",") {
		part = strings.TrimSpace(part)
		if rest, ok := strings.CutPrefix(part, "IVF"); ok {
			n := 0
			for _, r := range rest {
				if r < '0' || r > '9' {
					break
				}
				n = n*10 + int(r-'0')
			}
			return n
		}
	}
	return 0
}

// rebuildLocked replaces the token index by one built with desc from the
// matrices in memory. Until desc is trainable, a Flat index stands in.
func (x *Index) rebuildLocked(desc string) error {
	if !trainable(desc, x.mu.tokens) {
		desc = "Flat"
	}
	fx, err := faiss.New(x.opts.Dim, desc, faiss.InnerProduct)
	if err != nil {
		return fmt.Errorf("build %q: %w", desc, err)
	}
	if !fx.IsTrained() {
		if err := fx.Train(x.trainingSampleLocked(64 * ivfLists(desc))); err != nil {
			fx.Close()
			return fmt.Errorf("train %q: %w", desc, err)
		}
	}
	keys := make(map[uint64]int, len(x.mu.docs))
	var (
		ids  []int64
		vecs []float32
	)
	flush := func() error {
		if err := fx.Add(ids, vecs); err != nil {
			return fmt.Errorf("build %q: %w", desc, err)
		}
		ids, vecs = ids[:0], vecs[:0]
		return nil
	}
	for _, num := range sortedDocs(x.mu.docs) {
		e := x.mu.docs[num]
		n := e.keys()
		ids = appendIDs(ids, num, n)
		vecs = appendRows(vecs, e, n)
		keys[num] = n
		if len(ids) >= 65536 {
			if err := flush(); err != nil {
				fx.Close()
				return err
			}
		}
	}
	if err := flush(); err != nil {
		fx.Close()
		return err
	}
	if x.mu.fx != nil {
		x.mu.fx.Close()
	}
	x.mu.fx, x.mu.desc, x.mu.keys = fx, desc, keys
	return nil
}

// trainingSampleLocked returns about n token rows spread evenly over the
// documents in docnum order (deterministic, so rebuilds are repeatable).
func (x *Index) trainingSampleLocked(n int) []float32 {
	total := x.mu.tokens
	stride := max(int64(1), total/int64(max(n, 1)))
	var out []float32
	var row int64
	buf := make([]float32, x.opts.Dim)
	for _, num := range sortedDocs(x.mu.docs) {
		e := x.mu.docs[num]
		for r := range e.h.count {
			if row%stride == 0 {
				decodeRows(e.blob, e.h, r, r+1, buf)
				out = append(out, buf...)
			}
			row++
		}
	}
	return out
}

// legacyAuto is the description of the FAISS index with an automatic
// description (see targetDescription).
const legacyAuto = "FAISS"

// Stats describes the index.
type Stats struct {
	Docs        int
	Tokens      int64  // stored token rows
	TokenKeys   int64  // token keys in FAISS, or tokens coded (residual codes)
	StoredBytes int64  // bytes of the token blobs held in memory (none for residual codes)
	IndexBytes  uint64 // memory of the token index: FAISS's estimate, or the residual codes' bytes
	// MemoryBytes is all the memory the index holds for its tokens
	// (IndexBytes + StoredBytes), and BytesPerToken that over Tokens.
	MemoryBytes   int64
	BytesPerToken float64
	// Centroids is the number of centroids of the residual codes, and
	// Drift the mean residual norm over that of the training sample.
	Centroids int
	Drift     float64
	// Retrains counts the residual codes' retrainings since Open.
	Retrains int
	// TokenFileBytes is the size of the residual codes' file of
	// full-precision tokens (garbage included), TokenFileErrors the
	// reads of it that failed its checksum or I/O (the store was read
	// instead).
	TokenFileBytes  int64
	TokenFileErrors int64
	Description     string // description in use
	AppliedSeq      uint64
	Skipped         int // documents whose blob could not be used when loading
	// SnapshotErr is why automatic snapshots stopped, if they did.
	SnapshotErr error
}

// Stats reports sizes and counts.
func (x *Index) Stats() (Stats, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return Stats{}, ErrClosed
	}
	if x.residual {
		s := Stats{Description: x.residualDescription(), AppliedSeq: x.mu.applied, Skipped: len(x.mu.skipped), SnapshotErr: x.mu.snapErr, Retrains: x.mu.retrains}
		if r := x.mu.rc; r != nil {
			s.Docs, s.Tokens, s.TokenKeys = len(r.docs), r.tokens, r.tokens
			s.IndexBytes = uint64(r.memoryBytes())
			s.Centroids, s.Drift = r.cb.nlist, r.drift()
			if r.tf != nil {
				s.TokenFileBytes = r.tf.size
			}
		}
		s.TokenFileErrors = x.tokenFileErrors.Load()
		s.MemoryBytes = int64(s.IndexBytes)
		if s.Tokens > 0 {
			s.BytesPerToken = float64(s.MemoryBytes) / float64(s.Tokens)
		}
		return s, nil
	}
	fxBytes := x.mu.fx.MemoryBytes()
	memory := int64(fxBytes) + x.mu.bytes
	var perToken float64
	if x.mu.tokens > 0 {
		perToken = float64(memory) / float64(x.mu.tokens)
	}
	return Stats{
		MemoryBytes:   memory,
		BytesPerToken: perToken,
		Docs:          len(x.mu.docs),
		Tokens:        x.mu.tokens,
		TokenKeys:     x.mu.fx.Len(),
		StoredBytes:   x.mu.bytes,
		IndexBytes:    fxBytes,
		Description:   x.mu.desc,
		AppliedSeq:    x.mu.applied,
		Skipped:       len(x.mu.skipped),
		SnapshotErr:   x.mu.snapErr,
	}, nil
}

// Close frees the token index. It is idempotent and does not close the
// Store.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return nil
	}
	x.mu.closed = true
	x.mu.docs, x.mu.keys = nil, nil
	x.mu.rc.close()
	x.mu.rc = nil
	if x.mu.fx != nil {
		return x.mu.fx.Close()
	}
	return nil
}
