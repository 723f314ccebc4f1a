package latecollect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/storage"
)

// DefaultSnapshotEvery is the number of change-log sequences applied
// after which the token index is saved, bounding the catch-up work of the next
// Open.
const DefaultSnapshotEvery = 20000

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
	// one-bit-per-dimension residual code; the full-precision tokens are
	// read from the store only for the final exact stage.
	//
	// Otherwise every token key is in FAISS and every token matrix in
	// memory: empty (or "FAISS") chooses the FAISS description
	// automatically (see targetDescription); anything else is a FAISS
	// factory description ("Flat", "IVF2048,SQ8", "IVF512,PQ48"...).
	Description string
	// KPrime is the number of document tokens each query token
	// retrieves from FAISS; default DefaultKPrime. FAISS token keys only.
	KPrime int
	// CandidateCap bounds the candidate documents: for the FAISS index,
	// those rescored exactly (default DefaultCandidateCap); for the
	// residual codes, those the list stage scores (default
	// DefaultCentroidCandidates, raised with the hits asked for).
	CandidateCap int
	// NProbe is the number of IVF lists (FAISS, default DefaultNProbe) or
	// centroids (residual codes, default DefaultCentroidProbe) each query
	// token visits.
	NProbe int
	// ExactCap is the number of documents rescored exactly from the
	// stored tokens, at least the hits asked for (only they are ranked),
	// negative for none. The default (0) is as many as make up
	// ExactBudget full-precision values at the index's mean document
	// length, at least DefaultExactCandidates and at most
	// MaxExactCandidates (short or low-dimensional documents, whose
	// residual codes carry fewer bits, get more), and at least the depth
	// rule's (DepthExactValues). Residual codes only.
	ExactCap int
	// Scoring is the default score; default ScoreAvgMax.
	Scoring Scoring
	// SnapshotEvery saves a snapshot after this many applied change-log
	// sequences;
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
	// The family's limits and defaults.
	candidateCap, nprobe := DefaultCandidateCap, DefaultNProbe
	if n, ok := residualLists(c.Description); ok {
		if n < 0 {
			return c, fmt.Errorf("%w: Options.Description %q: want Residual or Residual<n>, n a power of two up to %d", ErrBadOptions, c.Description, maxCentroids)
		}
		if c.Dim%8 != 0 {
			return c, fmt.Errorf("%w: Options.Description %q needs Options.Dim divisible by 8, have %d", ErrBadOptions, c.Description, c.Dim)
		}
		candidateCap, nprobe = DefaultCentroidCandidates, DefaultCentroidProbe
	}
	if c.CandidateCap == 0 {
		c.CandidateCap = candidateCap
	}
	if c.NProbe == 0 {
		c.NProbe = nprobe
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
	case c.Parallelism < 0:
		return c, fmt.Errorf("%w: Options.Parallelism %d is negative", ErrBadOptions, c.Parallelism)
	case !c.Scoring.valid():
		return c, fmt.Errorf("%w: Options.Scoring %q (want %q or %q)", ErrBadOptions, c.Scoring, ScoreAvgMax, ScoreSumMax)
	}
	return c, nil
}

// Index is the late-interaction retriever of one model over a Store.
//
// It holds one family (see family), chosen at Open from
// Options.Description, and what both families share: the options and the
// store, the lock, the applied sequence, the cutting of the change log into
// runs, automatic snapshots and the assembly of Stats.
//
// Invariant, under mu: the family holds every live document that has a
// valid token blob as of mu.applied, and no other (see DocNums).
//
// An Index is safe for concurrent use: searches share a read lock, Apply
// and Snapshot take the write lock.
type Index struct {
	source

	// loadedSnapshot records that Open loaded the snapshot (tests).
	loadedSnapshot bool

	mu struct {
		sync.RWMutex
		closed    bool
		fam       family
		applied   uint64
		sinceSnap int
		savedSeq  uint64 // of the last snapshot saved or loaded
		snapErr   error  // why the last automatic snapshot failed
		// unsaved is set when a background retraining swapped new codes
		// in since the last snapshot (see Unsaved).
		unsaved bool
	}
}

// family is one way of holding the documents' tokens for search: token
// keys in FAISS with every token matrix in memory (faissFamily), or
// residual codes with the token matrices read from the store
// (residualFamily). A
// family owns its own state and nothing else. The Index calls it under its
// lock (or in Open, before anything else can): the write lock for load,
// build, apply, save and close, at least the read lock for the others,
// which may then run concurrently.
type family interface {
	// load loads the family from its snapshot and returns the sequence
	// the snapshot includes. It reports false, with no error, when there
	// is no snapshot or it was saved with other options; an error means
	// it is damaged (wrapping ErrCorruption). Either way the caller
	// builds, and a failed load leaves the family as it was.
	load() (loaded bool, seq uint64, err error)
	// build makes the family from the documents' current blobs in the
	// store.
	build(ctx context.Context) error
	// apply applies one run of the change log: final holds the last
	// change of each document of the run, in docnum order. newRun is set
	// when the run starts at another stride of the log (applyStride) than
	// the last one applied: only there may the family rebuild, so that it
	// does not depend on how the log was cut into Apply calls (a settler
	// also settles before it is read). bad lists the documents left out
	// (their blob cannot be used); err stops Apply.
	apply(ctx context.Context, final []storage.Change, newRun bool) (bad []error, err error)
	// search ranks the documents for query in so.Mode, best first, ties
	// by ascending docnum.
	search(ctx context.Context, query []float32, so SearchOptions) ([]Hit, error)
	// rescore scores docs (held, allowed, sorted and distinct) exactly
	// and returns the best so.K as search does.
	rescore(ctx context.Context, query []float32, docs []uint64, so SearchOptions) ([]Hit, error)
	// has reports whether the family holds document num.
	has(num uint64) bool
	// docNums returns the documents the family holds.
	docNums() *roaring64.Bitmap
	// stats fills the family's fields of s: every field but AppliedSeq,
	// SnapshotErr, MemoryBytes and BytesPerToken.
	stats(s *Stats)
	// save writes the family's snapshot, which includes the change log up
	// to seq.
	save(ctx context.Context, seq uint64) error
	// close frees what the family holds.
	close() error
}

// settler is a family that, within a run of the log, may hold an index
// that depends on how the run was cut into Apply calls (residual codes: a
// codebook trained on the first documents of the run, the others coded
// with it) until it settles. The Index settles it before it is searched
// and before it is saved, so that every search and every snapshot sees the
// index the documents applied call for, however the log was cut.
type settler interface {
	// settleDue reports whether a search should settle the family first
	// (under at least the read lock).
	settleDue() bool
	// settleLocked settles the family (under the write lock). A failure
	// leaves it searchable; settleDue is false after one, until the next
	// apply.
	settleLocked(ctx context.Context) error
}

// collector is a family whose token search shards can run apart and
// merge (see Collect).
type collector interface {
	// collect runs the token search of Candidates mode and returns what
	// it collected.
	collect(ctx context.Context, query []float32, so SearchOptions) (*Collection, error)
}

// Open loads the token index of the family Options.Description names from
// its snapshot (or builds it from the stored blobs when there is none or
// it does not match Options), and catches up with the change log. The
// Index does not own st.
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
	x := &Index{source: source{st: st, opts: o, blob: BlobName(o.Model)}}
	startSeq := st.LastSeq()
	newFamily := func() (family, error) {
		var f family
		var err error
		if isResidual(o.Description) {
			f, err = newResidualFamily(x.source)
		} else {
			f, err = newFAISSFamily(ctx, x.source)
		}
		if err != nil {
			return nil, fmt.Errorf("latecollect: open %s: %w", o.Model, err)
		}
		x.lockFor(f)
		return f, nil
	}
	f, err := newFamily()
	if err != nil {
		return nil, err
	}
	loaded, seq, err := f.load()
	x.loadedSnapshot = loaded && err == nil
	if x.loadedSnapshot && seq < st.LogStats().Floor {
		// The changes after the snapshot are gone from the log (a
		// snapshot put back from elsewhere): build from the stored tokens,
		// which hold the state they led to.
		f.close()
		if f, err = newFamily(); err != nil {
			return nil, err
		}
		x.loadedSnapshot = false
	}
	if x.loadedSnapshot {
		x.mu.applied, x.mu.savedSeq = seq, seq
	} else {
		if err := f.build(ctx); err != nil {
			f.close()
			return nil, fmt.Errorf("latecollect: open %s: %w", o.Model, err)
		}
		x.mu.applied = startSeq
	}
	x.mu.fam = f
	if err := x.CatchUp(ctx); err != nil {
		x.Close()
		return nil, fmt.Errorf("latecollect: open %s: %w", o.Model, err)
	}
	if b, ok := f.(backgrounder); ok {
		x.mu.Lock()
		b.openedLocked()
		x.mu.Unlock()
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
	return x.mu.fam.docNums()
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

// SavedSeq is the sequence of the snapshot a reopen would load (0
// without one): the lowest change the log must keep for this index.
func (x *Index) SavedSeq() uint64 {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.mu.savedSeq
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
		b, err := x.applyRunLocked(ctx, changes[:end])
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

// applyRunLocked applies one run of changes (see Apply). It returns the
// errors of documents left out (bad blobs) apart from a failure that stops
// it.
func (x *Index) applyRunLocked(ctx context.Context, changes []storage.Change) ([]error, error) {
	final, last := x.finalChangesLocked(changes)
	if len(final) == 0 {
		return nil, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	newRun := changes[0].Seq/applyStride != x.mu.applied/applyStride
	bad, err := x.mu.fam.apply(ctx, final, newRun)
	if err != nil {
		return nil, err
	}
	// Spaced by sequences, not documents, as dense's: see SavedSeq.
	x.mu.sinceSnap += int(last - x.mu.applied)
	x.mu.applied = last
	if x.opts.SnapshotEvery > 0 && x.mu.sinceSnap >= x.opts.SnapshotEvery {
		// The changes are applied whatever happens here: a failed
		// automatic snapshot (a full disk; an in-memory store has none)
		// only costs the next Open a rebuild, so it is reported by Stats
		// and tried again SnapshotEvery sequences later, as dense's is.
		// Until one succeeds, SavedSeq holds the collection's change log
		// back.
		x.mu.sinceSnap = 0
		x.mu.snapErr = x.saveSnapshotLocked(ctx)
	}
	return bad, nil
}

// finalChangesLocked returns the last change of each document among those
// after AppliedSeq, in docnum order, and the last sequence among them. The
// last change wins: a change carries the document as it is now, so reading
// the current blob converges.
func (x *Index) finalChangesLocked(changes []storage.Change) ([]storage.Change, uint64) {
	final := map[uint64]storage.Change{}
	last := x.mu.applied
	for _, c := range changes {
		if c.Seq <= x.mu.applied {
			continue
		}
		final[c.DocNum] = c
		last = max(last, c.Seq)
	}
	out := make([]storage.Change, 0, len(final))
	for _, num := range slices.Sorted(maps.Keys(final)) {
		out = append(out, final[num])
	}
	return out, last
}

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
	// Drift the mean residual norm over that of the training sample: of
	// the codes in use, which for a provisional codebook applied to since
	// it was trained are those of before the next search settles it (see
	// WaitRetrain).
	Centroids int
	Drift     float64
	// Retrains counts the residual codes' retrainings started since Open
	// (a provisional codebook's aside). Retraining is set while one runs
	// in the background; searches and Apply use the codes in use until it
	// swaps its own in. RetrainErr is why the last one failed, if it did
	// (the next run of the log that calls for one starts it again), or
	// why the last settling of a provisional codebook failed (see
	// WaitRetrain; the next search after an Apply tries again).
	Retrains   int
	Retraining bool
	RetrainErr error
	// ExactStale counts the documents the residual codes' exact stage
	// scored from their codes because the store's blob was not the one
	// they were coded from (changed or deleted: a change not applied
	// yet). ExactReadErrors counts those scored from their codes because
	// their blob could not be read (storage.ErrCorruption), and
	// ExactReadErr is the latest such error, naming the document and
	// the blob segment.
	ExactStale      int64
	ExactReadErrors int64
	ExactReadErr    error
	Description     string // description in use
	AppliedSeq      uint64
	Skipped         int // documents whose blob could not be used when loading
	// SnapshotErr is why the last automatic snapshot failed, if it did
	// (the next is tried SnapshotEvery sequences later).
	SnapshotErr error
}

// Stats reports sizes and counts.
func (x *Index) Stats() (Stats, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return Stats{}, ErrClosed
	}
	var s Stats
	x.mu.fam.stats(&s)
	s.AppliedSeq, s.SnapshotErr = x.mu.applied, x.mu.snapErr
	s.MemoryBytes = int64(s.IndexBytes) + s.StoredBytes
	if s.Tokens > 0 {
		s.BytesPerToken = float64(s.MemoryBytes) / float64(s.Tokens)
	}
	return s, nil
}

// settle settles the family (see settler); nothing when the index is
// closed.
func (x *Index) settle(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.settleLocked(ctx)
}

func (x *Index) settleLocked(ctx context.Context) error {
	s, ok := x.mu.fam.(settler)
	if x.mu.closed || !ok {
		return nil
	}
	if err := s.settleLocked(ctx); err != nil {
		return fmt.Errorf("latecollect: %w", err)
	}
	return nil
}

// rLockSettled takes the read lock on the open index once no settling is
// due (settling under the write lock first when one is); it returns an
// error, without the lock, when the index is closed or ctx ends. A
// settling that fails otherwise does not fail the search, which uses the
// codes in use (see settler).
func (x *Index) rLockSettled(ctx context.Context) error {
	for {
		x.mu.RLock()
		if x.mu.closed {
			x.mu.RUnlock()
			return ErrClosed
		}
		if s, ok := x.mu.fam.(settler); !ok || !s.settleDue() {
			return nil
		}
		x.mu.RUnlock()
		// An Apply may come between settling and the read lock: then
		// settle again.
		if err := x.settle(ctx); err != nil && ctx.Err() != nil {
			return err
		}
	}
}

// Close frees the token index. It is idempotent and does not close the
// Store.
//
// A retraining running in the background is cancelled (Close waits for it
// to stop): the index keeps the codes in use, and the next Open starts the
// retraining again. WaitRetrain first lets it finish.
func (x *Index) Close() error {
	x.mu.Lock()
	if x.mu.closed {
		x.mu.Unlock()
		return nil
	}
	x.mu.closed = true
	if b, ok := x.mu.fam.(backgrounder); ok {
		wait := b.stopBackground()
		x.mu.Unlock()
		wait() // the job may be waiting for the lock
		x.mu.Lock()
	}
	defer x.mu.Unlock()
	return x.mu.fam.close()
}

// Unsaved reports whether the index changed since its last snapshot
// without applying changes: a background retraining swapped new codes in.
// (AppliedSeq tells whether it applied changes.)
func (x *Index) Unsaved() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.mu.unsaved
}
