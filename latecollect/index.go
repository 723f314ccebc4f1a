package latecollect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// DefaultSnapshotEvery is the number of applied changes after which
// the token index is saved, bounding the catch-up work of the next
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
