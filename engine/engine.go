package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/malloc"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/vfs"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/sparse"
	"github.com/tandemsearch/tandem/storage"
)

// Sentinel errors.
var (
	ErrClosed           = errors.New("engine: closed")
	ErrBadRequest       = errors.New("engine: bad request")
	ErrUnknownRetriever = errors.New("engine: unknown retriever")
	// ErrNoCollection is returned by Open with Options.MustExist when dir
	// holds no collection. It wraps fs.ErrNotExist.
	ErrNoCollection = fmt.Errorf("engine: no collection: %w", fs.ErrNotExist)
)

// Options configure Open. Zero fields mean defaults.
type Options struct {
	// Schema is the schema of a new collection; nil means
	// tandem.DefaultSchema (a BEIR corpus). Ignored for an existing one.
	Schema *tandem.Schema
	// BatchSize is the number of documents Index commits per atomic
	// batch; 0 means 1000, or 256 when the collection encodes documents
	// (so that progress is reported every few seconds).
	BatchSize int
	// NoSync skips fsync on commit (see storage.Options.NoSync).
	NoSync bool
	// Dense and Late name the installed encoder models (see encoder.Find)
	// a new collection indexes for dense retrieval and for late
	// interaction. A model in both is run once per document. Empty means
	// BM25 only. Like Schema, they are stored with the collection and
	// ignored when it exists: its stored models are loaded instead.
	// External models, which Tandem does not run, are declared in
	// Schema.Models with External set. As encoder.Find resolves it, a
	// name may also be a model directory (one with a path separator, or
	// an existing directory), for programs that embed the engine with
	// models of their own; package server takes only the plain names of
	// the installed models from its clients.
	Dense, Late []string
	// LateIndex describes the late-interaction index of the models in
	// Late (latecollect.Options.Description): empty for the default,
	// residual codes ("Residual", see DefaultLateIndex); "FAISS" or a
	// FAISS factory string for FAISS token keys. Stored with the
	// collection like Late, the default spelled out.
	LateIndex string
	// LateEncoding is how a new collection stores the token vectors of
	// the models in Late (latecollect.ParseEncoding): empty for the
	// default, "i8" (DefaultLateEncoding).
	LateEncoding string
	// EncoderThreads caps the threads an encoder takes: a query runs on
	// this many ONNX Runtime threads, and documents in bulk as up to this
	// many concurrent one-thread runs; 0 means min(NumCPU, 4).
	EncoderThreads int
	// DocumentThreads, when positive, gives document encoding a budget of
	// that many one-thread runs apart from queries'
	// (encoder.Options.DocumentThreads), so that indexing never holds a
	// search's query encoding up; 0 shares one budget, the fastest for
	// indexing alone. `tandem serve` sets it.
	DocumentThreads int
	// QueryCacheBytes bounds the memory of each model's cache of query
	// encodings (encoder.Options.QueryCacheBytes): a repeated query text
	// skips the model run. 0 means encoder.DefaultQueryCacheBytes
	// (64 MiB); negative disables the cache. Like the thread budgets, the
	// cache belongs to the loaded model, which the engines of a process
	// that open it with the same options share.
	QueryCacheBytes int64
	// QueryBatch bounds the queries that share one model run: those that
	// arrive while the model's runs are in flight run together next
	// (encoder.Options.QueryBatch); 0 means encoder.DefaultQueryBatch (8,
	// and 1 for an int8 model), 1 runs each query alone.
	QueryBatch int
	// QueryBatchWait lets a query that finds the model idle wait that long
	// for others to share its run (encoder.Options.QueryBatchWait); 0,
	// the default, runs it at once, so that a lone search never waits.
	QueryBatchWait time.Duration
	// MemTableSize and BlockCacheSize size Badger's memtables and block
	// cache (storage.Options); 0 means storage's defaults.
	MemTableSize, BlockCacheSize int64
	// TruncateEvery is how far, in change-log sequences, the lowest
	// sequence every derived index has saved (SavedSeq) may run ahead of
	// the log's floor before a background truncation deletes the entries
	// below it: 0 means DefaultTruncateEvery; negative never truncates
	// (the log then grows by every change, as before). Close truncates
	// to the exact floor. Not stored with the collection.
	TruncateEvery int
	// MustExist makes Open fail with ErrNoCollection, creating nothing,
	// when dir holds no collection: for commands that only read one.
	MustExist bool
	// FilterLimits bound the filters of searches (Request.Filter): one
	// over them is refused with a *filter.Error naming the limit before
	// any work. Zero fields mean filter.DefaultLimits' (1024 clauses,
	// depth 32). Not stored with the collection.
	FilterLimits filter.Limits

	// fs is the file system of the files Tandem writes itself (snapshots,
	// blob segments); nil is the OS's. Tests inject faults through it.
	fs vfs.FS
}

func (o *Options) fill() error {
	if o.EncoderThreads == 0 {
		o.EncoderThreads = defaultEncoderThreads()
	}
	if o.BatchSize < 0 {
		return fmt.Errorf("%w: negative BatchSize", ErrBadRequest)
	}
	if o.DocumentThreads < 0 {
		return fmt.Errorf("%w: negative DocumentThreads", ErrBadRequest)
	}
	if o.QueryBatch < 0 || o.QueryBatchWait < 0 {
		return fmt.Errorf("%w: negative QueryBatch or QueryBatchWait", ErrBadRequest)
	}
	if o.FilterLimits.MaxClauses < 0 || o.FilterLimits.MaxDepth < 0 {
		return fmt.Errorf("%w: negative FilterLimits", ErrBadRequest)
	}
	if o.LateEncoding != "" {
		// Checked whatever models are asked for, so that a bad value is
		// refused, not ignored, when none is a late one.
		if _, err := latecollect.ParseEncoding(o.LateEncoding); err != nil {
			return fmt.Errorf("%w: late_encoding: %w", ErrBadRequest, err)
		}
	}
	if o.Schema != nil {
		s := o.Schema.Clone()
		s.Fill()
		if err := CheckSchema(s); err != nil {
			return err
		}
		o.Schema = s
	}
	return nil
}

// CheckSchema reports what makes a filled schema unusable for a new
// collection, before anything is created: what Schema.Validate reports,
// a text field's analyzer that Bleve does not know, and a model's
// late-interaction index that cannot be built. The last two wrap
// ErrBadRequest.
func CheckSchema(s *tandem.Schema) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := sparse.CheckAnalyzers(s); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	for _, m := range s.Models {
		if m.Late {
			if err := latecollect.CheckDescription(m.LateIndex, m.TokenDim); err != nil {
				return fmt.Errorf("%w: schema model %q: late_index %q: %w", ErrBadRequest, m.Name, m.LateIndex, err)
			}
			if m.LateEncoding != "" {
				if _, err := latecollect.ParseEncoding(m.LateEncoding); err != nil {
					return fmt.Errorf("%w: schema model %q: late_encoding: %w", ErrBadRequest, m.Name, err)
				}
			}
		}
	}
	return nil
}

// DerivedIndex is an index derived from the change log (BM25 here; the
// dense and late-interaction indexes attach themselves with Attach). Open
// catches each one up from its AppliedSeq; every committed batch is then
// applied to it before Write returns. Apply receives changes in sequence
// order and must record the last sequence it applied durably with, or
// after, the changes themselves, so that replaying from AppliedSeq after a
// crash converges.
type DerivedIndex interface {
	Name() string
	AppliedSeq() uint64
	Apply(ctx context.Context, changes []storage.Change) error
	Close() error
}

// derived is an attached DerivedIndex with the lock that serialises its
// catch-up, so that the writer and the ingest pipeline's appliers never
// apply the same changes twice.
type derived struct {
	DerivedIndex
	applyMu sync.Mutex
}

// catchUp applies every change after d's AppliedSeq; see catchUp.
func (d *derived) catchUp(ctx context.Context, st *storage.Store, opening bool) error {
	d.applyMu.Lock()
	defer d.applyMu.Unlock()
	return catchUp(ctx, st, d.DerivedIndex, opening)
}

// bm25 adapts sparse.Index, which needs the current schema to apply.
type bm25 struct {
	*sparse.Index
	st *storage.Store
}

func (b bm25) Apply(ctx context.Context, changes []storage.Change) error {
	return b.Index.Apply(ctx, b.st.Schema(), changes)
}

// Rebuild rebuilds the BM25 index from the stored documents (rebuilder).
func (b bm25) Rebuild(ctx context.Context, st *storage.Store) error {
	return b.Index.Rebuild(ctx, st.Schema(), st)
}

// Engine is an open collection. All methods are safe for concurrent use:
// searches run in parallel with each other and with one writer at a time.
type Engine struct {
	dir    string
	opts   Options
	st     *storage.Store
	sparse *sparse.Index
	models []*model // the collection's encoders and their indexes

	derivedMu sync.Mutex // guards derived (appended to by Attach)
	derived   []*derived

	// writeMu serialises Index and Delete, so that derived indexes see
	// batches in commit order.
	writeMu sync.Mutex

	trunc truncator

	mu struct {
		sync.RWMutex // held for reading by every call, for writing by Close
		closed       bool
	}
}

// catchUpChunk is the number of changes applied per derived-index batch
// during catch-up; it bounds memory, not correctness.
const catchUpChunk = 2000

// Open opens the collection in dir, creating it if needed (unless
// Options.MustExist), and catches up every derived index with the change
// log before returning.
func Open(dir string, opts *Options) (*Engine, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	// FAISS and ONNX Runtime free C memory that glibc keeps resident;
	// the process trims it from now on (internal/malloc).
	malloc.KeepTrimmed()
	_, err := os.Stat(filepath.Join(dir, "badger"))
	exists := err == nil
	if o.MustExist && !exists {
		return nil, fmt.Errorf("engine: open %s: %w", dir, ErrNoCollection)
	}
	// Models requested for a new collection are loaded first, to record
	// their dimensions in its schema; an existing collection keeps its own.
	var loaded map[string]*encoder.Encoder
	schema := o.Schema
	if !exists && len(o.Dense)+len(o.Late) > 0 {
		specs, encs, err := requestedModels(&o)
		if err != nil {
			return nil, err
		}
		loaded = encs
		if schema == nil {
			schema = tandem.DefaultSchema()
		}
		schema = schema.Clone()
		// Models the schema declares itself (external ones) come first.
		schema.Models = append(schema.Models, specs...)
	}
	if !exists && schema != nil {
		// A new collection records the late-interaction index and the
		// token encoding of each late model, the defaults spelled out
		// (DefaultLateIndex, DefaultLateEncoding).
		schema = schema.Clone()
		for i, m := range schema.Models {
			if m.Late {
				schema.Models[i].LateIndex = DefaultLateIndex(m.LateIndex, m.TokenDim)
				schema.Models[i].LateEncoding = cmp.Or(m.LateEncoding, DefaultLateEncoding(m))
			}
		}
	}
	defer func() {
		for _, enc := range loaded { // those the collection did not take
			enc.Close()
		}
	}()
	// The directory is made only once the requested models have loaded,
	// so that a bad model name leaves nothing behind.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	st, err := storage.Open(dir, &storage.Options{Schema: schema, NoSync: o.NoSync, FS: o.fs,
		MemTableSize: o.MemTableSize, BlockCacheSize: o.BlockCacheSize})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	sp, err := sparse.Open(filepath.Join(dir, "bleve"))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{dir: dir, opts: o, st: st, sparse: sp, derived: []*derived{{DerivedIndex: bm25{sp, st}}}}
	for _, d := range e.derived {
		if err := d.catchUp(context.Background(), st, true); err != nil {
			e.closeAll()
			return nil, fmt.Errorf("engine: catch up %s: %w", d.Name(), err)
		}
	}
	ms, err := openModels(context.Background(), st, st.Schema().Models, loaded, &o)
	if err != nil {
		e.closeAll()
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	e.models = ms
	for _, m := range ms {
		if m.dense != nil {
			e.derived = append(e.derived, &derived{DerivedIndex: m.dense})
		}
		if m.late != nil {
			e.derived = append(e.derived, &derived{DerivedIndex: m.late})
		}
	}
	if e.opts.BatchSize == 0 {
		e.opts.BatchSize = 1000
		for _, m := range ms {
			if m.enc != nil {
				// Encoding: batches of a few seconds, so that progress
				// is reported often.
				e.opts.BatchSize = 256
			}
		}
	}
	e.startTruncator()
	return e, nil
}

// catchUp applies every change after d's AppliedSeq. An index that can
// rebuild from the documents (rebuilder) does so instead when the log no
// longer holds the changes it needs (it is behind the log's floor), and,
// when the collection is opening, when it starts from nothing in a
// collection that has documents: scanning the documents costs less than
// replaying every change. Another index behind the floor is an error.
func catchUp(ctx context.Context, st *storage.Store, d DerivedIndex, opening bool) error {
	r, canRebuild := d.(rebuilder)
	rebuild := func() error {
		if err := r.Rebuild(ctx, st); err != nil {
			return fmt.Errorf("rebuild from the documents: %w", err)
		}
		return nil
	}
	if canRebuild {
		applied, ls := d.AppliedSeq(), st.LogStats()
		if applied < ls.Floor || (opening && applied == 0 && ls.Last > 0) {
			if err := rebuild(); err != nil {
				return err
			}
		}
	}
	for {
		changes, err := st.Changes(ctx, d.AppliedSeq(), catchUpChunk)
		if errors.Is(err, storage.ErrTruncated) {
			// Truncated while this index was not yet counted in the
			// floor (Attach), or the floor checked above moved.
			if !canRebuild {
				return fmt.Errorf("%s is behind the change log and cannot rebuild from the documents: %w", d.Name(), err)
			}
			if err := rebuild(); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if len(changes) == 0 {
			return nil
		}
		if err := d.Apply(ctx, changes); err != nil {
			return err
		}
	}
}

// Attach catches d up with the change log and keeps it up to date from
// then on; the engine closes it on Close. Names must be unique.
func (e *Engine) Attach(ctx context.Context, d DerivedIndex) error {
	if err := e.enter(); err != nil {
		return err
	}
	defer e.mu.RUnlock()
	e.writeMu.Lock() // no batch may commit between catch-up and attach
	defer e.writeMu.Unlock()
	for _, x := range e.derivedList() {
		if x.Name() == d.Name() {
			return fmt.Errorf("%w: a derived index named %q is attached already", ErrBadRequest, d.Name())
		}
	}
	x := &derived{DerivedIndex: d}
	if err := x.catchUp(ctx, e.st, true); err != nil {
		return fmt.Errorf("engine: catch up %s: %w", d.Name(), err)
	}
	e.derivedMu.Lock()
	e.derived = append(e.derived, x)
	e.derivedMu.Unlock()
	return nil
}

// derivedList returns the attached derived indexes.
func (e *Engine) derivedList() []*derived {
	e.derivedMu.Lock()
	defer e.derivedMu.Unlock()
	return append([]*derived(nil), e.derived...)
}

// Close releases the collection. It waits for running calls and is
// idempotent.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return nil
	}
	e.mu.closed = true
	snapErr := snapshotModels(context.Background(), e.models)
	e.stopTruncator()
	return errors.Join(snapErr, e.closeAll())
}

func (e *Engine) closeAll() error {
	var errs []error
	for _, d := range e.derived {
		errs = append(errs, d.Close())
	}
	for _, m := range e.models {
		if m.enc != nil {
			errs = append(errs, m.enc.Close())
		}
	}
	// The derived indexes have saved what they will reopen to (BM25's
	// flush, the models' snapshots): the log below it goes. Only an
	// engine that opened whole truncates (its truncator started): one
	// whose models failed to open does not count their indexes. A
	// failure only leaves a longer log for the next truncation.
	if e.trunc.cancel != nil {
		_ = e.truncateLog(context.Background())
	}
	errs = append(errs, e.st.Close())
	return errors.Join(errs...)
}

// enter marks a call in progress; the caller must call e.mu.RUnlock.
func (e *Engine) enter() error {
	e.mu.RLock()
	if e.mu.closed {
		e.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Schema returns a copy of the collection's current schema.
func (e *Engine) Schema() *tandem.Schema { return e.st.Schema() }

// IndexResult counts what Index or Delete did.
type IndexResult struct {
	Put, Deleted int
	Batches      int
}

// Index upserts docs by external id, in atomic batches of
// Options.BatchSize (a batch too large for one Badger transaction is split
// in halves until each part fits), through the write pipeline that
// IndexJSONL uses: checking, encoding, committing and index updates of
// successive batches overlap. Documents bring vectors in Doc.Vectors;
// the others are encoded with the collection's models.
//
// When Index returns, every batch it committed is durable and applied to
// every index. On error, the batches before the failing document's batch
// are committed and the rest are not (IndexResult says how many documents
// were written). A document's error is a *DocError naming the
// document by its index in docs and, when a field or a supplied vector is
// at fault, wrapping a *tandem.FieldError or a *tandem.VectorError.
func (e *Engine) Index(ctx context.Context, docs []tandem.Doc) (IndexResult, error) {
	p, err := e.ingest(ctx, &sliceSource{docs: docs}, pipelineOptions{})
	err = docFailure(err, false)
	return IndexResult{Put: p.Docs, Batches: p.Batches}, err
}

// Delete removes documents by external id in one atomic batch; unknown ids
// are ignored, and an empty one is an ErrBadRequest.
func (e *Engine) Delete(ctx context.Context, ids []string) (IndexResult, error) {
	var b storage.Batch
	for i, id := range ids {
		if id == "" {
			return IndexResult{}, fmt.Errorf("%w: id %d of the %d to delete is empty", ErrBadRequest, i+1, len(ids))
		}
		b.Delete(id)
	}
	r, err := e.write(ctx, &b)
	if err != nil {
		return IndexResult{}, err
	}
	return IndexResult{Deleted: r.Deleted, Batches: 1}, nil
}

// write commits one storage batch atomically and applies it to the derived
// indexes. Once storage commits, the batch is acknowledged: if a derived
// index then fails, the error is returned but the batch stays committed
// and the index catches up on the next Open.
func (e *Engine) write(ctx context.Context, b *storage.Batch) (storage.WriteResult, error) {
	if err := e.enter(); err != nil {
		return storage.WriteResult{}, err
	}
	defer e.mu.RUnlock()
	r, err := e.commit(ctx, b)
	if err != nil {
		return r, err
	}
	for _, d := range e.derivedList() {
		// Apply from the index's own applied sequence, not just this
		// batch, so an earlier failed apply is retried here.
		if err := d.catchUp(context.WithoutCancel(ctx), e.st, false); err != nil {
			return r, fmt.Errorf("engine: batch committed, but updating %s failed (it catches up on reopen): %w", d.Name(), err)
		}
	}
	e.maybeTruncate()
	return r, nil
}

// FilterBitmap returns the internal numbers of the documents matching a
// JSON filter, for retrievers that restrict candidates by bitmap.
func (e *Engine) FilterBitmap(ctx context.Context, filterJSON []byte) (*roaring64.Bitmap, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	schema := e.st.Schema()
	fe, err := e.compileFilter(filterJSON, schema)
	if err != nil {
		return nil, err
	}
	return e.sparse.FilterBitmap(ctx, schema, fe)
}

// Stats describes a collection.
type Stats struct {
	Docs       uint64            `json:"docs"`
	BleveDocs  uint64            `json:"bleve_docs"`
	LastSeq    uint64            `json:"last_seq"`
	AppliedSeq map[string]uint64 `json:"applied_seq"`
	Schema     *tandem.Schema    `json:"schema"`
	// Retrievers lists the collection's retrievers (Engine.Retrievers).
	Retrievers []string `json:"retrievers"`
	// Dense and Late describe each model's index.
	Dense []dense.Stats `json:"dense,omitempty"`
	Late  []LateStats   `json:"late,omitempty"`
	// DiskBytes is the size on disk of each part of the collection
	// directory: badger, blobs (storage's blob segments), bleve,
	// snapshots.
	DiskBytes map[string]int64 `json:"disk_bytes"`
	// QueryEncoding describes each model's query encodings: its cache
	// and its batched runs.
	QueryEncoding []QueryEncodingStats `json:"query_encoding,omitempty"`
	// SavedSeq is, for each derived index, the last sequence whose state
	// it reopens to after a crash; the log keeps what follows the lowest.
	SavedSeq map[string]uint64 `json:"saved_seq"`
	// Log describes the change log.
	Log LogStats `json:"log"`
}

// LogStats describes the change log: storage.LogStats (Entries change
// records, sequences Oldest to LastSeq, all below Floor deleted), the
// derived index whose SavedSeq holds truncation back, and the
// truncations since Open.
type LogStats struct {
	storage.LogStats
	HeldBy      string `json:"held_by"`
	Truncations int64  `json:"truncations"`
}

// QueryEncodingStats describes how one model encoded queries since it was
// loaded (encoder.QueryStats). The model's cache and runs are shared by
// every engine of the process that loaded the model with the same
// options (the collections of a server, say), so the counts are the
// model's, not this collection's.
type QueryEncodingStats struct {
	Model string `json:"model"`
	// CacheHits and CacheMisses count lookups in the cache of query
	// encodings, CacheEvictions the entries dropped to stay within
	// CacheCapacityBytes; CacheEntries and CacheBytes are what it holds.
	// All 0 when the cache is disabled (Options.QueryCacheBytes).
	CacheHits          int64 `json:"cache_hits"`
	CacheMisses        int64 `json:"cache_misses"`
	CacheEvictions     int64 `json:"cache_evictions"`
	CacheEntries       int   `json:"cache_entries"`
	CacheBytes         int64 `json:"cache_bytes"`
	CacheCapacityBytes int64 `json:"cache_capacity_bytes"`
	// Runs is the model runs that encoded queries, Queries the queries
	// they encoded: Queries/Runs is the mean batch.
	Runs    int64 `json:"runs"`
	Queries int64 `json:"queries"`
}

// LateStats describes one model's late-interaction index.
type LateStats struct {
	Model       string `json:"model"`
	Docs        int    `json:"docs"`
	Tokens      int64  `json:"tokens"`       // stored token vectors
	TokenKeys   int64  `json:"token_keys"`   // token vectors in FAISS, or coded
	StoredBytes int64  `json:"stored_bytes"` // token blobs held in memory
	IndexBytes  uint64 `json:"index_bytes"`  // token index memory
	// MemoryBytes is all the memory the index holds for its tokens, and
	// BytesPerToken that over Tokens.
	MemoryBytes   int64   `json:"memory_bytes"`
	BytesPerToken float64 `json:"bytes_per_token"`
	Description   string  `json:"description"`
	// Residual codes only: centroids, mean residual norm over the
	// training sample's, retrainings since Open, and the documents the
	// exact stage scored from their codes instead of their stored tokens:
	// stale ones (changed since they were coded: a change not applied
	// yet) and unreadable ones (a damaged blob), with the latest read
	// error.
	Centroids int     `json:"centroids,omitempty"`
	Drift     float64 `json:"drift,omitempty"`
	Retrains  int     `json:"retrains,omitempty"`
	// Retraining is set while the residual codes retrain in the
	// background (searches and writes go on with the codes in use).
	Retraining      bool   `json:"retraining,omitempty"`
	ExactStale      int64  `json:"exact_stale,omitempty"`
	ExactReadErrors int64  `json:"exact_read_errors,omitempty"`
	ExactReadError  string `json:"exact_read_error,omitempty"`
}

// Stats reports counts, sequences, models and sizes.
func (e *Engine) Stats() (Stats, error) {
	if err := e.enter(); err != nil {
		return Stats{}, err
	}
	defer e.mu.RUnlock()
	n, err := e.sparse.DocCount()
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Docs: e.st.Count(), BleveDocs: n, LastSeq: e.st.LastSeq(), AppliedSeq: map[string]uint64{}, Schema: e.st.Schema(),
		Retrievers: e.Retrievers(), DiskBytes: map[string]int64{}}
	s.SavedSeq = map[string]uint64{}
	for _, d := range e.derivedList() {
		s.AppliedSeq[d.Name()] = d.AppliedSeq()
		s.SavedSeq[d.Name()] = savedSeq(d.DerivedIndex)
	}
	_, held := e.logFloor()
	s.Log = LogStats{LogStats: e.st.LogStats(), HeldBy: held, Truncations: e.trunc.count.Load()}
	for _, m := range e.models {
		if m.enc != nil {
			q := m.enc.QueryStats()
			s.QueryEncoding = append(s.QueryEncoding, QueryEncodingStats{Model: m.spec.Name, CacheHits: q.CacheHits, CacheMisses: q.CacheMisses,
				CacheEvictions: q.CacheEvictions, CacheEntries: q.CacheEntries, CacheBytes: q.CacheBytes, CacheCapacityBytes: q.CacheCapacity,
				Runs: q.Runs, Queries: q.Queries})
		}
		if m.dense != nil {
			s.Dense = append(s.Dense, m.dense.Stats())
		}
		if m.late != nil {
			ls, err := m.late.Stats()
			if err != nil {
				return Stats{}, fmt.Errorf("engine: %s: %w", m.late.Name(), err)
			}
			s.Late = append(s.Late, LateStats{Model: m.spec.Name, Docs: ls.Docs, Tokens: ls.Tokens, TokenKeys: ls.TokenKeys,
				StoredBytes: ls.StoredBytes, IndexBytes: ls.IndexBytes, MemoryBytes: ls.MemoryBytes, BytesPerToken: ls.BytesPerToken,
				Description: ls.Description, Centroids: ls.Centroids, Drift: ls.Drift, Retrains: ls.Retrains, Retraining: ls.Retraining,
				ExactStale: ls.ExactStale, ExactReadErrors: ls.ExactReadErrors})
			if ls.ExactReadErr != nil {
				s.Late[len(s.Late)-1].ExactReadError = ls.ExactReadErr.Error()
			}
		}
	}
	for _, part := range []string{"badger", "blobs", "bleve", "snapshots"} {
		s.DiskBytes[part] = procstat.DirBytes(filepath.Join(e.dir, part))
	}
	return s, nil
}

// Retraining returns the names of the indexes retraining in the
// background ("dense:<model>", "late:<model>"), none when none is or the
// engine is closed. It takes no engine lock (the models are fixed at
// Open), so an ingest's Progress callback may call it.
func (e *Engine) Retraining() []string {
	var out []string
	for _, m := range e.models {
		if m.dense != nil && m.dense.Stats().Retraining {
			out = append(out, m.dense.Name())
		}
		if m.late == nil {
			continue
		}
		if ls, err := m.late.Stats(); err == nil && ls.Retraining {
			out = append(out, m.late.Name())
		}
	}
	return out
}

// retrainer is an index that may retrain in the background.
type retrainer interface {
	Name() string
	WaitRetrain(ctx context.Context) error
}

// WaitRetrain waits until no index retrains in the background, or ctx
// ends; it returns a dense index's last retraining failure. Close cancels
// a retraining (the next Open starts it again); a batch load that should
// leave the collection finished, such as tandem index, waits first.
func (e *Engine) WaitRetrain(ctx context.Context) error {
	if err := e.enter(); err != nil {
		return err
	}
	var xs []retrainer
	for _, m := range e.models {
		if m.dense != nil {
			xs = append(xs, m.dense)
		}
		if m.late != nil {
			xs = append(xs, m.late)
		}
	}
	// Not under the engine's lock, which Close takes: a closed index's
	// retraining is cancelled, and waiting for it then returns.
	e.mu.RUnlock()
	for _, x := range xs {
		if err := x.WaitRetrain(ctx); err != nil {
			return fmt.Errorf("engine: %s: %w", x.Name(), err)
		}
	}
	return nil
}

// Count is the number of live documents.
func (e *Engine) Count() uint64 { return e.st.Count() }

// Get returns the stored document with external id id, and whether there
// is one.
func (e *Engine) Get(ctx context.Context, id string) (tandem.Doc, bool, error) {
	if err := e.enter(); err != nil {
		return tandem.Doc{}, false, err
	}
	defer e.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return tandem.Doc{}, false, err
	}
	num, ok, err := e.st.Lookup(id)
	if err != nil || !ok {
		return tandem.Doc{}, false, err
	}
	return e.st.Get(num)
}
