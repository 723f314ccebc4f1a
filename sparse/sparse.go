package sparse

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	_ "github.com/blevesearch/bleve/v2/analysis/lang/en" // registers the "en" analyzer
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/numeric"
	"github.com/blevesearch/bleve/v2/registry"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// Internal Bleve fields. Schema field names cannot start with '_', so these
// never collide with a user's field.
const (
	// CompositeField holds every text field of a document joined by a
	// space, analysed with the first text field's analyzer. Searching it
	// scores better on BEIR than a disjunction over separate fields (see
	// doc.go), so it is the default search field.
	CompositeField = "_text"
	// existsField holds the names of the fields a document has a value for.
	existsField = "_exists"
)

// appliedKey is the Bleve internal key holding the last change-log
// sequence applied. It is written in the same Bleve batch as the changes.
var appliedKey = []byte("tandem.applied_seq")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("sparse: closed")

// ErrNoTextField is the error of a search for text in a schema that has
// no text field.
var ErrNoTextField = errors.New("sparse: the schema has no text field")

// Index is the Bleve BM25 index of a collection. It is safe for concurrent
// use; Apply calls are serialised by the caller (the engine's writer).
type Index struct {
	idx     bleve.Index // replaced by Rebuild, under mu held for writing
	mapping mapping.IndexMapping
	dir     string

	// applyMu serialises Apply; searches do not wait for it, because a
	// Bleve batch becomes visible to searches atomically.
	applyMu sync.Mutex

	mu struct {
		sync.RWMutex // held for reading by every call, for writing by Close
		closed       bool
		applied      atomic.Uint64
		// persisted is the highest applied sequence Bleve has written
		// to disk (see SavedSeq); it only grows.
		persisted atomic.Uint64
	}

	// docNums maps the segments' documents to document numbers for
	// FilterBitmap, and for Search's choice among equal scores.
	docNums docNumCache
	// blocks keeps the textbook scorer's block bounds per segment and
	// term, and the decoded postings of the terms searched repeatedly,
	// up to decodedBytes (prune.go).
	blocks blockCache
	// filters keeps FilterBitmap's matches per segment and filter
	// (filtercache.go).
	filters filterCache
}

// Open opens the Bleve index in dir, creating it if absent. The index is
// derived state: if it cannot be opened (for example a crash during its
// creation), it is removed and created empty, and its applied sequence is
// 0, from which the caller brings it up to date: by rebuilding it from the
// stored documents (Rebuild), or by replaying the whole change log when
// the log still holds it. An index left by an interrupted Rebuild also
// opens at 0.
func Open(dir string) (*Index, error) {
	m := newMapping()
	idx, err := bleve.OpenUsing(dir, scorchConfig())
	if err != nil {
		if !errors.Is(err, bleve.ErrorIndexPathDoesNotExist) {
			if rerr := os.RemoveAll(dir); rerr != nil {
				return nil, fmt.Errorf("sparse: open %s: %w (and cannot remove it: %v)", dir, err, rerr)
			}
		}
		if idx, err = create(dir, m); err != nil {
			return nil, err
		}
	}
	if idx, err = checkLayout(dir, idx, m); err != nil {
		return nil, err
	}
	x := &Index{idx: idx, mapping: m, dir: dir}
	v, err := idx.GetInternal(appliedKey)
	if err != nil {
		idx.Close()
		return nil, fmt.Errorf("sparse: read applied sequence: %w", err)
	}
	if len(v) == 8 {
		x.mu.applied.Store(binary.BigEndian.Uint64(v))
	}
	// What Bleve opened is what it had persisted.
	x.mu.persisted.Store(x.mu.applied.Load())
	return x, nil
}

// layoutKey is the Bleve internal key holding the index's layout version,
// layoutVersion: 2 added the BM25 statistics (statsKey) and the length
// field; 3 the doc values of metadata fields (metadataOptions). An index
// of another layout is replaced by an empty one at applied sequence 0
// (checkLayout).
var layoutKey = []byte("tandem.layout")

const layoutVersion = "3"

// metadataOptions index a keyword, keywords or bool field, and a number
// or date field's value column (valueColumn), for filters (its terms)
// and for facets (its doc values, which ScanValues reads: layout 3).
const metadataOptions = index.IndexField | index.DocValues

// checkLayout returns idx if it has the current layout, having recorded
// it in a new empty index; otherwise it removes the index and returns a
// new empty one, whose applied sequence 0 makes the caller rebuild it
// from the documents or replay the change log.
func checkLayout(dir string, idx bleve.Index, m mapping.IndexMapping) (bleve.Index, error) {
	v, err := idx.GetInternal(layoutKey)
	if err != nil {
		idx.Close()
		return nil, fmt.Errorf("sparse: read layout: %w", err)
	}
	if string(v) == layoutVersion {
		return idx, nil
	}
	applied, err := idx.GetInternal(appliedKey)
	if err != nil {
		idx.Close()
		return nil, fmt.Errorf("sparse: read applied sequence: %w", err)
	}
	if len(applied) > 0 {
		// Built by an older Tandem: rebuild.
		if err := idx.Close(); err != nil {
			return nil, fmt.Errorf("sparse: close %s to rebuild it: %w", dir, err)
		}
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("sparse: remove %s to rebuild it: %w", dir, err)
		}
		return create(dir, m)
	}
	if err := recordLayout(idx); err != nil {
		idx.Close()
		return nil, err
	}
	return idx, nil
}

// create creates an empty index in dir, which must not exist, and
// records the current layout in it.
func create(dir string, m mapping.IndexMapping) (bleve.Index, error) {
	idx, err := bleve.NewUsing(dir, m, bleve.Config.DefaultIndexType, bleve.Config.DefaultKVStore, scorchConfig())
	if err != nil {
		return nil, fmt.Errorf("sparse: create %s: %w", dir, err)
	}
	if err := recordLayout(idx); err != nil {
		idx.Close()
		return nil, err
	}
	return idx, nil
}

// recordLayout records layoutVersion in an index holding no document.
func recordLayout(idx bleve.Index) error {
	if err := idx.SetInternal(layoutKey, []byte(layoutVersion)); err != nil {
		return fmt.Errorf("sparse: record layout: %w", err)
	}
	return nil
}

// scorchConfig is the configuration of the Bleve index. With unsafe_batch,
// Apply returns as soon as a batch is searchable, and Bleve writes it to
// disk in the background (merging small segments first) instead of
// fsyncing each batch before returning. That is safe here because the index
// is derived: a crash can only lose batches whose applied sequence (stored
// in the same batch) is lost with them, and the caller applies them again
// from the change log, after the sequence Open reads. SavedSeq says how
// far the log must reach back for that. Close waits until everything
// applied is on disk.
func scorchConfig() map[string]any {
	return map[string]any{"unsafe_batch": true}
}

func newMapping() *mapping.IndexMappingImpl {
	m := bleve.NewIndexMapping()
	m.ScoringModel = index.BM25Scoring
	m.DefaultAnalyzer = tandem.DefaultAnalyzer
	m.DefaultMapping.Dynamic = false
	m.StoreDynamic = false
	m.IndexDynamic = false
	m.DocValuesDynamic = false
	return m
}

// Name identifies the index among the engine's derived indexes.
func (x *Index) Name() string { return "bm25" }

// AppliedSeq is the last change-log sequence the index contains.
func (x *Index) AppliedSeq() uint64 { return x.mu.applied.Load() }

// SavedSeq is the last change-log sequence whose batch Bleve has written
// to disk, so that the index reopens at it or later after a crash. It is
// never above AppliedSeq: Apply returns once a batch is searchable
// (unsafe_batch), and the batch's persisted callback, which Bleve's
// persister calls after syncing the index's root, raises SavedSeq to the
// batch's sequence. Close's flush raises it to AppliedSeq, Open sets it to
// the sequence it read from disk, and Rebuild resets it to 0 until its
// final batch is on disk. Bleve persists batches in order, so every change
// up to SavedSeq is on disk.
func (x *Index) SavedSeq() uint64 {
	// The persister may run a batch's callback before Apply has
	// published the batch's sequence.
	return min(x.mu.persisted.Load(), x.mu.applied.Load())
}

// persistedUpTo raises the persisted sequence to seq; a callback of an
// older batch, run late, does not lower it.
func (x *Index) persistedUpTo(seq uint64) {
	for {
		cur := x.mu.persisted.Load()
		if seq <= cur || x.mu.persisted.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Close waits until every applied batch is on disk, so that the next Open
// finds the index caught up, then closes it. It is idempotent.
func (x *Index) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return nil
	}
	x.mu.closed = true
	x.docNums.retain(nil)
	x.blocks.retain(nil)
	x.filters.retain(nil)
	ferr := x.flushLocked()
	if err := x.idx.Close(); err != nil {
		return err
	}
	return ferr
}

// flushLocked writes the applied sequence once more, in a batch whose
// persistence it waits for: Bleve persists its in-memory segments in
// order, so every batch before it is then on disk too.
func (x *Index) flushLocked() error {
	x.applyMu.Lock()
	defer x.applyMu.Unlock()
	done := make(chan error, 1)
	b := x.idx.NewBatch()
	b.SetInternal(appliedKey, binary.BigEndian.AppendUint64(nil, x.mu.applied.Load()))
	b.SetPersistedCallback(func(err error) { done <- err })
	if err := x.idx.Batch(b); err != nil {
		return fmt.Errorf("sparse: flush: %w", err)
	}
	if err := <-done; err != nil {
		return fmt.Errorf("sparse: flush: %w", err)
	}
	x.persistedUpTo(x.mu.applied.Load())
	return nil
}

// DocCount is the number of documents in the index.
func (x *Index) DocCount() (uint64, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return 0, ErrClosed
	}
	return x.idx.DocCount()
}

// DocID is the Bleve document id of an internal document number.
func DocID(num uint64) string { return strconv.FormatUint(num, 10) }

// Apply applies changes, in order, in one Bleve batch that also records
// the last sequence applied, so the index and its sequence move together.
// Changes at or below the applied sequence are skipped.
func (x *Index) Apply(ctx context.Context, schema *tandem.Schema, changes []storage.Change) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return ErrClosed
	}
	x.applyMu.Lock()
	defer x.applyMu.Unlock()
	applied := x.mu.applied.Load()
	var todo []storage.Change
	last := applied
	for _, c := range changes {
		if c.Seq <= last {
			continue
		}
		last = c.Seq
		todo = append(todo, c)
	}
	if last == applied {
		return nil
	}
	return x.applyLocked(ctx, schema, todo, last, true)
}

// applyLocked applies changes in one Bleve batch, with the BM25
// statistics they leave; the caller holds applyMu (and mu, for reading
// or writing). With record, the batch also records last as the applied
// sequence, AppliedSeq becomes last, and SavedSeq becomes last once Bleve
// has written the batch to disk; Rebuild's intermediate batches record
// nothing, so an index they leave has no applied sequence.
func (x *Index) applyLocked(ctx context.Context, schema *tandem.Schema, todo []storage.Change, last uint64, record bool) error {
	docs, err := x.buildDocs(ctx, schema, todo)
	if err != nil {
		return err
	}
	r, err := x.reader()
	if err != nil {
		return err
	}
	defer r.Close()
	stats, err := statsOf(r)
	if err != nil {
		return err
	}
	// Each document's lengths leave the statistics when it is replaced or
	// deleted: from this batch if it put the document, else from the
	// index's length field.
	pending := map[string][]fieldLength{}
	held := &lengthReader{r: r}
	b := x.idx.NewBatch()
	for i, c := range todo {
		id := DocID(c.DocNum)
		old, ok := pending[id]
		if !ok {
			if old, err = held.lengths(id); err != nil {
				return fmt.Errorf("sparse: document %q: %w", c.ID, err)
			}
		}
		for _, l := range old {
			fs := stats[l.field]
			fs.Docs--
			fs.Tokens -= l.n
			stats[l.field] = fs
		}
		if docs[i] == nil {
			b.Delete(id)
			pending[id] = nil
			continue
		}
		for _, l := range docs[i].lengths {
			fs := stats[l.field]
			fs.Docs++
			fs.Tokens += l.n
			stats[l.field] = fs
		}
		pending[id] = docs[i].lengths
		if err := b.IndexAdvanced(docs[i].doc); err != nil {
			return fmt.Errorf("sparse: document %q: %w", c.ID, err)
		}
	}
	for f, fs := range stats {
		if fs.Docs == 0 {
			delete(stats, f)
		}
	}
	sv, err := json.Marshal(stats)
	if err != nil {
		return fmt.Errorf("sparse: BM25 statistics: %w", err)
	}
	b.SetInternal(statsKey, sv)
	if !record {
		if err := x.idx.Batch(b); err != nil {
			return fmt.Errorf("sparse: index %d documents: %w", len(todo), err)
		}
		return nil
	}
	b.SetInternal(appliedKey, binary.BigEndian.AppendUint64(nil, last))
	b.SetPersistedCallback(func(err error) {
		if err == nil {
			x.persistedUpTo(last)
		}
	})
	if err := x.idx.Batch(b); err != nil {
		return fmt.Errorf("sparse: apply changes up to %d: %w", last, err)
	}
	x.mu.applied.Store(last)
	return nil
}

// DocSource is what Rebuild reads: a collection's live documents and the
// last sequence of its change log. *storage.Store is one.
type DocSource interface {
	// ScanDocs calls fn for every live document, with its internal
	// number, from one consistent snapshot.
	ScanDocs(ctx context.Context, fn func(num uint64, doc tandem.Doc) error) error
	// LastSeq is the sequence of the last committed change.
	LastSeq() uint64
}

// rebuildChunk is the number of documents in each Bleve batch of a
// Rebuild.
const rebuildChunk = 2000

// Rebuild replaces the index by one built from src's live documents,
// without reading the change log: the index of a collection whose log no
// longer goes back to the index's applied sequence, or whose index is
// missing, is rebuilt this way, then caught up from the sequence it
// returns at (AppliedSeq).
//
// It first reads s0 = src.LastSeq(), then closes Bleve, removes its
// directory (so no document deleted in a gap of the log survives),
// creates it empty with the current layout, and indexes the documents of
// src.ScanDocs as puts, rebuildChunk at a time, through the batches of
// Apply. Only the final batch records the applied sequence, s0, so a
// crash or an error before it leaves an index with no applied sequence,
// which opens at 0 and is rebuilt again. The scan may already hold
// changes after s0; catching up from s0 applies them again, to the same
// result, since a change carries the document as it is now. The index
// then holds what an index applying every change up to its AppliedSeq
// would, with the same BM25 statistics and scores (TestRebuildFromDocs).
//
// Searches wait until Rebuild returns. After an error the index holds
// part of the documents and AppliedSeq is 0; if Bleve could not be closed
// or created again, it is closed.
func (x *Index) Rebuild(ctx context.Context, schema *tandem.Schema, src DocSource) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	x.applyMu.Lock()
	defer x.applyMu.Unlock()
	s0 := src.LastSeq()
	x.docNums.retain(nil)
	x.blocks.retain(nil)
	x.filters.retain(nil)
	// Close waits for Bleve's persister, so no callback of the old
	// index's batches runs after this.
	if err := x.idx.Close(); err != nil {
		x.mu.closed = true
		return fmt.Errorf("sparse: close %s to rebuild it: %w", x.dir, err)
	}
	x.mu.applied.Store(0)
	x.mu.persisted.Store(0)
	if err := os.RemoveAll(x.dir); err != nil {
		x.mu.closed = true
		return fmt.Errorf("sparse: remove %s to rebuild it: %w", x.dir, err)
	}
	idx, err := create(x.dir, x.mapping)
	if err != nil {
		x.mu.closed = true
		return err
	}
	x.idx = idx
	chunk := make([]storage.Change, 0, rebuildChunk)
	err = src.ScanDocs(ctx, func(num uint64, doc tandem.Doc) error {
		chunk = append(chunk, storage.Change{Op: storage.OpPut, DocNum: num, ID: doc.ID, Doc: &doc})
		if len(chunk) < rebuildChunk {
			return nil
		}
		err := x.applyLocked(ctx, schema, chunk, 0, false)
		chunk = chunk[:0]
		return err
	})
	if err != nil {
		return fmt.Errorf("sparse: rebuild %s from the documents: %w", x.dir, err)
	}
	if err := x.applyLocked(ctx, schema, chunk, s0, true); err != nil {
		return fmt.Errorf("sparse: rebuild %s from the documents: %w", x.dir, err)
	}
	return nil
}

// reader returns a reader of the index's current snapshot.
func (x *Index) reader() (index.IndexReader, error) {
	adv, err := x.idx.Advanced()
	if err != nil {
		return nil, fmt.Errorf("sparse: %w", err)
	}
	r, err := adv.Reader()
	if err != nil {
		return nil, fmt.Errorf("sparse: reader: %w", err)
	}
	return r, nil
}

// fieldLength is the number of tokens of a document's text field.
type fieldLength struct {
	field string
	n     uint64
}

// lengthReader reads the field lengths the index holds, through one doc
// values reader per Apply, opened for the first document the index holds.
type lengthReader struct {
	r  index.IndexReader
	dv index.DocValueReader
}

// lengths returns the field lengths of document id, none if the index
// does not hold it.
func (l *lengthReader) lengths(id string) ([]fieldLength, error) {
	iid, err := l.r.InternalID(id)
	if err != nil || iid == nil {
		return nil, err
	}
	if l.dv == nil {
		if l.dv, err = l.r.DocValueReader([]string{lengthField}); err != nil {
			return nil, err
		}
	}
	var out []fieldLength
	var bad error
	err = l.dv.VisitDocValues(iid, func(_ string, term []byte) {
		f, n, ok := parseLengthTerm(string(term))
		if !ok {
			bad = fmt.Errorf("bad length term %q", term)
			return
		}
		out = append(out, fieldLength{f, n})
	})
	if err == nil {
		err = bad
	}
	return out, err
}

// builtDoc is a Bleve document ready for a batch, with the lengths of its
// text fields; nil for a delete.
type builtDoc struct {
	doc     *document.Document
	lengths []fieldLength
}

// buildDocs builds the documents of changes (analysing their text) over
// the cores; a delete, or a put whose document is gone, gives nil.
func (x *Index) buildDocs(ctx context.Context, schema *tandem.Schema, changes []storage.Change) ([]*builtDoc, error) {
	out := make([]*builtDoc, len(changes))
	errs := make([]error, len(changes))
	workers := max(1, min(runtime.GOMAXPROCS(0), len(changes)/16))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(changes) || ctx.Err() != nil {
					return
				}
				c := changes[i]
				if c.Op == storage.OpDelete || c.Doc == nil {
					continue
				}
				d, err := x.buildDoc(schema, DocID(c.DocNum), c.Doc)
				if err != nil {
					errs[i] = fmt.Errorf("sparse: document %q: %w", c.ID, err)
					continue
				}
				out[i] = d
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// CheckAnalyzers reports a text field of schema whose analyzer is not one
// Bleve knows here, naming the field and the analyzers it knows, so that a
// collection is refused when it is created rather than every document
// when it is indexed.
func CheckAnalyzers(schema *tandem.Schema) error {
	m := newMapping()
	for _, f := range schema.Fields {
		if f.Type != tandem.Text {
			continue
		}
		name := f.Analyzer
		if name == "" {
			name = tandem.DefaultAnalyzer
		}
		if m.AnalyzerNamed(name) == nil {
			_, known := registry.AnalyzerTypesAndInstances()
			slices.Sort(known)
			return fmt.Errorf("schema field %q: unknown analyzer %q (known: %s)", f.Name, name, strings.Join(known, ", "))
		}
	}
	return nil
}

func (x *Index) analyzer(name string) (analysis.Analyzer, error) {
	a := x.mapping.AnalyzerNamed(name)
	if a == nil {
		return nil, fmt.Errorf("unknown analyzer %q", name)
	}
	return a, nil
}

func (x *Index) buildDoc(schema *tandem.Schema, id string, doc *tandem.Doc) (*builtDoc, error) {
	d := document.NewDocument(id)
	var lengths []fieldLength
	addText := func(name string, value []byte, a analysis.Analyzer) {
		f := document.NewTextFieldCustom(name, nil, value, index.IndexField, a)
		f.Analyze()
		d.AddField(analyzedText{f})
		if n := f.AnalyzedLength(); n > 0 {
			lengths = append(lengths, fieldLength{name, uint64(n)})
		}
	}
	kw := x.mapping.AnalyzerNamed(keyword.Name)
	var texts []string
	compositeAnalyzer := ""
	var present []string
	for _, f := range schema.Fields {
		v, ok := doc.Fields[f.Name]
		if !ok || v == nil {
			continue
		}
		present = append(present, f.Name)
		switch f.Type {
		case tandem.Text:
			s, _ := v.(string)
			if s == "" {
				continue
			}
			a, err := x.analyzer(f.Analyzer)
			if err != nil {
				return nil, &tandem.FieldError{Field: f.Name, Err: err}
			}
			if compositeAnalyzer == "" {
				compositeAnalyzer = f.Analyzer
			}
			addText(f.Name, []byte(s), a)
			texts = append(texts, s)
		case tandem.Keyword:
			s, _ := v.(string)
			d.AddField(document.NewTextFieldCustom(f.Name, nil, []byte(s), metadataOptions, kw))
		case tandem.Keywords:
			for i, s := range tandem.Strings(v) {
				d.AddField(document.NewTextFieldCustom(f.Name, []uint64{uint64(i)}, []byte(s), metadataOptions, kw))
			}
		case tandem.Number:
			n, _ := v.(float64)
			d.AddField(document.NewNumericFieldWithIndexingOptions(f.Name, nil, plusZero(n), index.IndexField))
			d.AddField(valueColumn(f.Name, numeric.Float64ToInt64(plusZero(n)), kw))
		case tandem.Bool:
			bv, _ := v.(bool)
			d.AddField(document.NewBooleanFieldWithIndexingOptions(f.Name, nil, bv, metadataOptions))
		case tandem.Date:
			s, _ := v.(string)
			t, err := tandem.ParseDate(s)
			if err != nil {
				return nil, &tandem.FieldError{Field: f.Name, Err: err}
			}
			df, err := document.NewDateTimeFieldWithIndexingOptions(f.Name, nil, t, time.RFC3339, index.IndexField)
			if err != nil {
				return nil, &tandem.FieldError{Field: f.Name, Err: err}
			}
			d.AddField(df)
			d.AddField(valueColumn(f.Name, t.UnixNano(), kw))
		}
	}
	if len(texts) > 0 {
		a, err := x.analyzer(compositeAnalyzer)
		if err != nil {
			return nil, err
		}
		addText(CompositeField, []byte(strings.Join(texts, " ")), a)
	}
	for i, name := range present {
		d.AddField(document.NewTextFieldCustom(existsField, []uint64{uint64(i)}, []byte(name), index.IndexField, kw))
	}
	for i, l := range lengths {
		d.AddField(document.NewTextFieldCustom(lengthField, []uint64{uint64(i)}, []byte(lengthTerm(l.field, int(l.n))), index.IndexField|index.DocValues, kw))
	}
	return &builtDoc{doc: d, lengths: lengths}, nil
}

// Query is a BM25 search.
type Query struct {
	// Text is analysed and matched (any term) against the searched fields.
	// Empty Text ranks every document the Filter matches (every document
	// when Filter is nil) with one equal score, by document number.
	Text string
	// Fields are the text fields searched, each with its boost (0 means
	// the schema's boost). Empty means CompositeField, the default.
	Fields map[string]float64
	// Filter, if not nil, must have passed filter.Check. It restricts the
	// ranking without changing any score.
	Filter filter.Expr
	// K is the number of hits to return.
	K int
	// Stats, when not nil, replaces the index's own statistics: N and the
	// total length of each field, and each term's df, come from it (the
	// sum of every shard's QueryStats for this query), so that the shard
	// scores its documents exactly as one index holding every shard's
	// documents would. Terms or fields absent from Stats count as absent
	// from the collection. Only textbook BM25 takes it: with the schema's
	// BM25Bleve scoring, Search returns an error saying so. A search with
	// no Text scores nothing and ignores it.
	Stats *Stats
	// Exhaustive scores every match of the text before taking the top K,
	// where the default skips the documents that cannot enter it
	// (block-max MaxScore, prune.go). Both give the same hits and scores;
	// the exhaustive path is the reference tests and benchmarks compare
	// with.
	Exhaustive bool
}

// Hit is one ranked document.
type Hit struct {
	DocNum uint64
	Score  float64
}

// Search returns the top K documents for q, best first, equal scores by
// ascending document number. When more documents tie at the K-th best
// score than fit, the ones with the smallest numbers are returned: the
// hits depend on the live documents and their scores alone, never on how
// the index was built or merged, and a page cut from the top K+Offset is
// the same whichever index holds the documents (topk.go).
func (x *Index) Search(ctx context.Context, schema *tandem.Schema, q Query) ([]Hit, error) {
	if q.K <= 0 {
		return nil, nil
	}
	if strings.TrimSpace(q.Text) == "" {
		return x.searchAll(ctx, schema, q.Filter, q.K)
	}
	var fq query.Query
	if q.Filter != nil {
		var err error
		if fq, err = Compile(ctx, q.Filter, schema); err != nil {
			return nil, err
		}
	}
	tq, err := x.textQuery(schema, q.Text, q.Fields, q.Stats)
	if err != nil {
		return nil, err
	}
	if bq, ok := tq.(*bm25Query); ok {
		// Textbook BM25 runs the filter itself, and yields only the top K.
		bq.filter, bq.limit, bq.docNums = fq, q.K, &x.docNums
		bq.exhaustive, bq.blocks = q.Exhaustive, &x.blocks
		if q.Filter != nil && !q.Exhaustive {
			// The pruned scorer tests each candidate against the
			// filter's bitmap in its segment.
			if bq.bfilter, err = compileBitmap(ctx, q.Filter, schema); err != nil {
				return nil, err
			}
		}
	} else {
		if fq != nil {
			// A boolean query with only Must and Filter runs Must's
			// searcher and drops the documents the (unscored) filter
			// searcher does not produce, so every surviving score is the
			// unfiltered score.
			bq := query.NewBooleanQuery(nil, nil, nil)
			bq.Must = tq
			bq.AddFilter(fq)
			tq = bq
		}
		tq = &cutQuery{q: tq, limit: q.K, docNums: &x.docNums}
	}
	return x.search(ctx, tq, q.K, "")
}

func (x *Index) search(ctx context.Context, q query.Query, k int, score string) ([]Hit, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return nil, ErrClosed
	}
	req := bleve.NewSearchRequestOptions(q, k, 0, false)
	req.Score = score
	res, err := x.idx.SearchInContext(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sparse: search: %w", err)
	}
	hits := make([]Hit, 0, len(res.Hits))
	for _, h := range res.Hits {
		n, err := strconv.ParseUint(h.ID, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("sparse: bad document id %q in index: %w", h.ID, err)
		}
		hits = append(hits, Hit{DocNum: n, Score: h.Score})
	}
	// Bleve breaks score ties by its hit number, the order of the
	// snapshot's documents, which merges change. Search's queries yield
	// at most k documents, the top k with ties cut by document number
	// (cutQuery, bm25Query), so the collector kept them all and only
	// their order is left to fix: the decimal ids, compared as strings,
	// would put "10" before "9", so compare the numbers.
	slices.SortFunc(hits, func(a, b Hit) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(a.DocNum, b.DocNum)
	})
	return hits, nil
}

// searchField is a text field a query searches, with its analyzer and
// boost.
type searchField struct {
	name, analyzer string
	boost          float64
}

// CheckFields reports the first name of fields (Query.Fields) that is not
// a text field of schema, or whose boost is negative or not finite, as a
// *tandem.FieldError.
func CheckFields(schema *tandem.Schema, fields map[string]float64) error {
	if len(fields) == 0 {
		return nil
	}
	_, err := searchFields(schema, fields)
	return err
}

// searchFields resolves Query.Fields: CompositeField when empty, with
// the first text field's analyzer.
func searchFields(schema *tandem.Schema, fields map[string]float64) ([]searchField, error) {
	if len(fields) == 0 {
		tf := schema.TextFields()
		if len(tf) == 0 {
			return nil, ErrNoTextField
		}
		return []searchField{{CompositeField, tf[0].Analyzer, 1}}, nil
	}
	var out []searchField
	for name, boost := range fields {
		f, ok := schema.Field(name)
		if !ok {
			return nil, &tandem.FieldError{Field: name, Err: tandem.ErrUnknownField}
		}
		if f.Type != tandem.Text {
			return nil, &tandem.FieldError{Field: name, Err: fmt.Errorf("%w: not a text field", tandem.ErrWrongType)}
		}
		if boost == 0 {
			boost = f.Boost
		}
		if boost < 0 || math.IsNaN(boost) || math.IsInf(boost, 0) {
			return nil, &tandem.FieldError{Field: name, Err: fmt.Errorf("invalid boost %v", boost)}
		}
		out = append(out, searchField{name, f.Analyzer, boost})
	}
	slices.SortFunc(out, func(a, b searchField) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// textQuery is the scored part of a search: textbook BM25 (bm25Query),
// scored with stats when not nil, unless the schema chooses Bleve's
// scoring, which takes no stats.
func (x *Index) textQuery(schema *tandem.Schema, text string, fields map[string]float64, stats *Stats) (query.Query, error) {
	sf, err := searchFields(schema, fields)
	if err != nil {
		return nil, err
	}
	scoring, k1, b := schema.BM25.Params()
	if scoring == tandem.BM25Bleve {
		if stats != nil {
			return nil, errBleveStats
		}
		var qs []query.Query
		for _, f := range sf {
			mq := query.NewMatchQuery(text)
			mq.SetField(f.name)
			mq.Analyzer = f.analyzer
			if len(fields) > 0 {
				mq.SetBoost(f.boost)
			}
			qs = append(qs, mq)
		}
		if len(qs) == 1 {
			return qs[0], nil
		}
		return query.NewDisjunctionQuery(qs), nil
	}
	clauses, err := x.bm25Clauses(sf, text)
	if err != nil {
		return nil, err
	}
	return &bm25Query{clauses: clauses, k1: k1, b: b, stats: stats}, nil
}

// bm25Clauses analyses text with each searched field's analyzer: one
// clause per field and distinct term, in the order of sf and then of the
// terms, each weighted by the field's boost times the term's count in
// text. Search scores these clauses and QueryStats reports their
// statistics, so the two always agree on the terms.
func (x *Index) bm25Clauses(sf []searchField, text string) ([]bm25Clause, error) {
	var clauses []bm25Clause
	for _, f := range sf {
		a, err := x.analyzer(f.analyzer)
		if err != nil {
			return nil, &tandem.FieldError{Field: f.name, Err: err}
		}
		count := map[string]int{}
		var terms []string
		for _, t := range a.Analyze([]byte(text)) {
			if count[string(t.Term)] == 0 {
				terms = append(terms, string(t.Term))
			}
			count[string(t.Term)]++
		}
		slices.Sort(terms)
		for _, t := range terms {
			clauses = append(clauses, bm25Clause{field: f.name, term: t, weight: f.boost * float64(count[t])})
		}
	}
	return clauses, nil
}

// FilterBitmap returns the internal numbers of the documents matching e
// (which must have passed filter.Check). The dense and late-interaction
// retrievers use it to restrict their candidates.
//
// It reads the terms Compile's query would search for from each
// segment's postings, as bitmaps that it unites, intersects and
// complements as e says, and maps each match to its document number
// through the index's cache (docNumCache): no searcher runs, and a
// document's stored id is read once per segment, not once per filter.
// Each segment's matches, as document numbers, are kept per filter
// (filterCache): a filter searched again costs a union of the segments'
// bitmaps, less the documents deleted since they were made.
//
// Document numbers are uint64 and never reused, so the bitmap is a
// roaring64 bitmap; a 32-bit roaring bitmap would cap a collection's
// lifetime at 2^32 insertions.
func (x *Index) FilterBitmap(ctx context.Context, schema *tandem.Schema, e filter.Expr) (*roaring64.Bitmap, error) {
	bf, err := compileBitmap(ctx, e, schema)
	if err != nil {
		return nil, err
	}
	key := string(bf.key(nil))
	out := roaring64.New()
	err = x.withSegments("filter bitmap", func(segs []*scorch.SegmentSnapshot) error {
		defer x.filters.retain(segs)
		f := &segmentFilter{ctx: ctx}
		for _, ss := range segs {
			if err := ctx.Err(); err != nil {
				return err
			}
			nums, err := x.segmentMatches(ctx, ss, bf, key, f)
			if err != nil {
				return err
			}
			out.Or(nums)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// withSegments calls f with the segments of the index's current
// snapshot, under the read lock; the docnum cache then keeps the entries
// of those segments only, dropping those of segments merged away. what
// names the caller in the error of an index that is not scorch's.
func (x *Index) withSegments(what string, f func([]*scorch.SegmentSnapshot) error) error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return ErrClosed
	}
	r, err := x.reader()
	if err != nil {
		return err
	}
	defer r.Close()
	snap, ok := r.(postingsSnapshot)
	if !ok {
		return fmt.Errorf("sparse: %s needs scorch's index reader, got %T", what, r)
	}
	segs := snap.Segments()
	defer x.docNums.retain(segs)
	return f(segs)
}
