package engine

import (
	"context"

	"errors"
	"fmt"
	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/sparse"
	"github.com/tandemsearch/tandem/storage"
)

// Sentinel errors.
var (
	ErrClosed           = errors.New("engine: closed")
	ErrBadRequest       = errors.New("engine: bad request")
	ErrUnknownRetriever = errors.New("engine: unknown retriever")
)

// Options configure Open. Zero fields mean defaults.
type Options struct {
	// Schema is the schema of a new collection; nil means
	// tandem.DefaultSchema (a BEIR corpus). Ignored for an existing one.
	Schema *tandem.Schema
	// BatchSize is the number of documents Index commits per atomic
	// batch; 0 means 1000.
	BatchSize int
	// NoSync skips fsync on commit (see storage.Options.NoSync).
	NoSync bool
}

func (o *Options) fill() error {
	if o.BatchSize == 0 {
		o.BatchSize = 1000
	}
	if o.BatchSize < 0 {
		return fmt.Errorf("%w: negative BatchSize", ErrBadRequest)
	}
	if o.Schema != nil {
		s := o.Schema.Clone()
		s.Fill()
		if err := s.Validate(); err != nil {
			return err
		}
		o.Schema = s
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

type derived = DerivedIndex

// bm25 adapts sparse.Index, which needs the current schema to apply.
type bm25 struct {
	*sparse.Index
	st *storage.Store
}

func (b bm25) Apply(ctx context.Context, changes []storage.Change) error {
	return b.Index.Apply(ctx, b.st.Schema(), changes)
}

// Engine is an open collection. All methods are safe for concurrent use:
// searches run in parallel with each other and with one writer at a time.
type Engine struct {
	opts   Options
	st     *storage.Store
	sparse *sparse.Index

	derivedMu sync.Mutex // guards derived (appended to by Attach)
	derived   []derived

	// writeMu serialises Index and Delete, so that derived indexes see
	// batches in commit order.
	writeMu sync.Mutex

	mu struct {
		sync.RWMutex // held for reading by every call, for writing by Close
		closed       bool
	}
}

// catchUpChunk is the number of changes applied per derived-index batch
// during catch-up; it bounds memory, not correctness.
const catchUpChunk = 2000

// Open opens the collection in dir, creating it if needed, and catches up
// every derived index with the change log before returning.
func Open(dir string, opts *Options) (*Engine, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("engine: open %s: %w", dir, err)
	}
	st, err := storage.Open(dir, &storage.Options{Schema: o.Schema, NoSync: o.NoSync})
	if err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	sp, err := sparse.Open(filepath.Join(dir, "bleve"))
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("engine: %w", err)
	}
	e := &Engine{opts: o, st: st, sparse: sp, derived: []derived{bm25{sp, st}}}
	for _, d := range e.derived {
		if err := catchUp(context.Background(), st, d); err != nil {
			e.closeAll()
			return nil, fmt.Errorf("engine: catch up %s: %w", d.Name(), err)
		}
	}
	return e, nil
}

func catchUp(ctx context.Context, st *storage.Store, d derived) error {
	for {
		changes, err := st.Changes(ctx, d.AppliedSeq(), catchUpChunk)
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
	if err := catchUp(ctx, e.st, d); err != nil {
		return fmt.Errorf("engine: catch up %s: %w", d.Name(), err)
	}
	e.derivedMu.Lock()
	e.derived = append(e.derived, d)
	e.derivedMu.Unlock()
	return nil
}

// derivedList returns the attached derived indexes.
func (e *Engine) derivedList() []derived {
	e.derivedMu.Lock()
	defer e.derivedMu.Unlock()
	return append([]derived(nil), e.derived...)
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
	return e.closeAll()
}

func (e *Engine) closeAll() error {
	var errs []error
	for _, d := range e.derived {
		errs = append(errs, d.Close())
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
// in halves until each part fits). When Index returns, every batch it committed is
// durable; on error, the batches before the failing one are committed and
// the rest are not (IndexResult says how many documents were written). A
// document's error is a *storage.BatchError naming the document and, when
// a field is at fault, wrapping a *tandem.FieldError.
func (e *Engine) Index(ctx context.Context, docs []tandem.Doc) (IndexResult, error) {
	var res IndexResult
	for start := 0; start < len(docs); start += e.opts.BatchSize {
		end := min(start+e.opts.BatchSize, len(docs))
		n, batches, err := e.putSplitting(ctx, docs[start:end])
		res.Put += n
		res.Batches += batches
		if err != nil {
			var be *storage.BatchError
			if errors.As(err, &be) {
				be.Index += start
			}
			return res, err
		}
	}
	return res, nil
}

// putSplitting commits docs as one batch or, if that is too large for one
// Badger transaction, as two halves, recursively. Each committed part is
// atomic. It returns the documents written and the batches committed; a
// *storage.BatchError's Index is relative to docs.
func (e *Engine) putSplitting(ctx context.Context, docs []tandem.Doc) (put, batches int, err error) {
	var b storage.Batch
	for _, d := range docs {
		b.Put(d, nil)
	}
	r, err := e.Write(ctx, &b)
	if errors.Is(err, storage.ErrBatchTooLarge) && len(docs) > 1 {
		half := len(docs) / 2
		p1, b1, err := e.putSplitting(ctx, docs[:half])
		if err != nil {
			return p1, b1, err
		}
		p2, b2, err := e.putSplitting(ctx, docs[half:])
		var be *storage.BatchError
		if errors.As(err, &be) {
			be.Index += half
		}
		return p1 + p2, b1 + b2, err
	}
	if err != nil {
		return 0, 0, err
	}
	return r.Put, 1, nil
}

// Delete removes documents by external id in one atomic batch; unknown ids
// are ignored.
func (e *Engine) Delete(ctx context.Context, ids []string) (IndexResult, error) {
	var b storage.Batch
	for _, id := range ids {
		b.Delete(id)
	}
	r, err := e.Write(ctx, &b)
	if err != nil {
		return IndexResult{}, err
	}
	return IndexResult{Deleted: r.Deleted, Batches: 1}, nil
}

// Write commits one storage batch atomically and applies it to the derived
// indexes. Callers that attach blobs (vectors) to documents use it
// directly. Once storage commits, the batch is acknowledged: if a derived
// index then fails, the error is returned but the batch stays committed
// and the index catches up on the next Open.
func (e *Engine) Write(ctx context.Context, b *storage.Batch) (storage.WriteResult, error) {
	if err := e.enter(); err != nil {
		return storage.WriteResult{}, err
	}
	defer e.mu.RUnlock()
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	r, err := e.st.Write(ctx, b)
	if err != nil {
		return r, fmt.Errorf("engine: %w", err)
	}
	for _, d := range e.derivedList() {
		// Apply from the index's own applied sequence, not just this
		// batch, so an earlier failed apply is retried here.
		if err := catchUp(context.WithoutCancel(ctx), e.st, d); err != nil {
			return r, fmt.Errorf("engine: batch committed, but updating %s failed (it catches up on reopen): %w", d.Name(), err)
		}
	}
	return r, nil
}

// Request is a search.
type Request struct {
	// Text is the query text.
	Text string
	// Filter is a JSON filter (see package filter); empty means none.
	Filter []byte
	// K is the number of hits; 0 means 10. Offset skips hits, for paging.
	K, Offset int
	// Retrievers lists the rankings to run and fuse: "bm25" now, later
	// "dense:<model>" and "late:<model>". Empty means ["bm25"].
	Retrievers []string
	// Fusion names the fusion method when several retrievers run
	// (reserved; only one retriever is supported now).
	Fusion string
	// IDsOnly skips loading stored fields: hits carry id and score only.
	// Evaluation runs use it; it is several times faster for large K.
	IDsOnly bool
	// Fields restricts BM25 to these text fields with these boosts (0 means
	// the schema's boost). Empty searches every text field as one.
	Fields map[string]float64
}

// Result is a search result.
type Result struct {
	Hits []tandem.Hit  `json:"hits"`
	Took time.Duration `json:"-"`
}

// MaxQueryBytes bounds query text: each distinct term becomes a clause.
const MaxQueryBytes = 16 << 10

// maxK bounds K+Offset so that one request cannot allocate without limit.
const maxK = 100_000

// Search runs req. Hits are materialised from storage, so a document
// deleted after the derived index last caught up is never returned.
func (e *Engine) Search(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	if req.K == 0 {
		req.K = 10
	}
	if req.K < 0 || req.Offset < 0 || req.K+req.Offset > maxK {
		return nil, fmt.Errorf("%w: k=%d offset=%d (k+offset must be at most %d)", ErrBadRequest, req.K, req.Offset, maxK)
	}
	if len(req.Retrievers) == 0 {
		req.Retrievers = []string{"bm25"}
	}
	for _, r := range req.Retrievers {
		if r != "bm25" {
			return nil, fmt.Errorf("%w: %q (available: bm25)", ErrUnknownRetriever, r)
		}
	}
	if len(req.Retrievers) > 1 {
		return nil, fmt.Errorf("%w: fusion of several retrievers is not available yet", ErrBadRequest)
	}
	schema := e.st.Schema()
	var fe filter.Expr
	if len(strings.TrimSpace(string(req.Filter))) > 0 {
		var err error
		if fe, err = filter.Parse(req.Filter); err != nil {
			return nil, err
		}
		if err := filter.Check(fe, schema); err != nil {
			return nil, err
		}
	}
	if !utf8.ValidString(req.Text) {
		return nil, fmt.Errorf("%w: query text is not valid UTF-8", ErrBadRequest)
	}
	if len(req.Text) > MaxQueryBytes {
		return nil, fmt.Errorf("%w: query text of %d bytes (limit %d)", ErrBadRequest, len(req.Text), MaxQueryBytes)
	}
	if strings.TrimSpace(req.Text) == "" && fe == nil {
		return nil, fmt.Errorf("%w: empty query text and no filter", ErrBadRequest)
	}
	hits, err := e.sparse.Search(ctx, schema, sparse.Query{Text: req.Text, Fields: req.Fields, Filter: fe, K: req.K + req.Offset})
	if err != nil {
		return nil, err
	}
	if req.Offset >= len(hits) {
		hits = nil
	} else {
		hits = hits[req.Offset:]
	}
	nums := make([]uint64, len(hits))
	for i, h := range hits {
		nums[i] = h.DocNum
	}
	res := &Result{Hits: make([]tandem.Hit, 0, len(hits))}
	if req.IDsOnly {
		idOf, err := e.st.IDs(nums)
		if err != nil {
			return nil, fmt.Errorf("engine: load hits: %w", err)
		}
		for _, h := range hits {
			if id, ok := idOf[h.DocNum]; ok { // else deleted since the index was updated
				res.Hits = append(res.Hits, tandem.Hit{ID: id, DocNum: h.DocNum, Score: h.Score})
			}
		}
		res.Took = time.Since(start)
		return res, nil
	}
	docs, err := e.st.GetMany(nums)
	if err != nil {
		return nil, fmt.Errorf("engine: load hits: %w", err)
	}
	for _, h := range hits {
		d, ok := docs[h.DocNum]
		if !ok {
			continue // deleted since the index was updated
		}
		res.Hits = append(res.Hits, tandem.Hit{ID: d.ID, DocNum: h.DocNum, Score: h.Score, Fields: d.Fields})
	}
	res.Took = time.Since(start)
	return res, nil
}

// FilterBitmap returns the internal numbers of the documents matching a
// JSON filter, for retrievers that restrict candidates by bitmap.
func (e *Engine) FilterBitmap(ctx context.Context, filterJSON []byte) (*roaring64.Bitmap, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	schema := e.st.Schema()
	fe, err := filter.Parse(filterJSON)
	if err != nil {
		return nil, err
	}
	if err := filter.Check(fe, schema); err != nil {
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
}

// Stats reports counts and sequences.
func (e *Engine) Stats() (Stats, error) {
	if err := e.enter(); err != nil {
		return Stats{}, err
	}
	defer e.mu.RUnlock()
	n, err := e.sparse.DocCount()
	if err != nil {
		return Stats{}, err
	}
	s := Stats{Docs: e.st.Count(), BleveDocs: n, LastSeq: e.st.LastSeq(), AppliedSeq: map[string]uint64{}, Schema: e.st.Schema()}
	for _, d := range e.derivedList() {
		s.AppliedSeq[d.Name()] = d.AppliedSeq()
	}
	return s, nil
}

// Store exposes the source of truth, for retrievers that read blobs and
// the change log.
func (e *Engine) Store() *storage.Store { return e.st }

// Count is the number of live documents.
func (e *Engine) Count() uint64 { return e.st.Count() }
