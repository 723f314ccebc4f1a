package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

// The write pipeline behind Index and IndexJSONL. A document passes five
// stages, each its own goroutine, joined by channels that hold one batch:
//
//	read      decode the input and check each document against the
//	          schema and its supplied vectors, in input order; cut
//	          batches of Options.BatchSize
//	tokenize  tokenize the texts that need encoding, per model
//	encode    run each model once over the batch (the encoder sorts the
//	          texts by length, so little padding is computed), and turn
//	          every vector into its blob
//	commit    write the batch to Badger in one transaction, fsynced: the
//	          batch is acknowledged when this returns
//	apply     one goroutine per derived index (BM25, each dense and each
//	          late-interaction index) catches up with the change log
//
// So while the encoder runs on batch n, batch n+1 is being tokenized,
// batch n+2 read and checked, batch n-1 commits and the indexes apply what
// came before. The appliers may fall behind the commits by at most maxApplyLag batches;
// committed changes they have not applied are in the change log, so a
// crash loses none of them (Open catches every index up). The pipeline
// returns once every index has applied every committed batch.
//
// Errors keep the guarantees of a single batch: a document that fails a
// check (or, with SkipBad, is skipped) stops the pipeline with nothing of
// its batch stored, after every batch before it has committed.

// maxApplyLag bounds how many committed batches the derived indexes may
// not have applied yet before the commit stage waits for them.
const maxApplyLag = 8

// docSource yields the documents to write, in order.
type docSource interface {
	// next returns the next document and its position (a 1-based line
	// for JSONL, a 0-based index for a slice). io.EOF ends the input. An
	// error wrapped in *docError is the document's own (malformed JSON,
	// a line too long): it can be skipped; any other error stops the
	// pipeline.
	next() (tandem.Doc, int, error)
	// consumed is how much input has been read: lines (or documents)
	// and bytes (0 when unknown).
	consumed() (int, int64)
}

// pipelineOptions configure one run of the pipeline.
type pipelineOptions struct {
	skipBad  bool
	onSkip   func(*docError)
	progress func(Progress)
}

// batch is one unit of the pipeline: documents in input order and, once
// encoded, their blobs.
type batch struct {
	docs  []checked
	pos   []int // input position of each document
	input []modelInput
	blobs []map[string][]byte
	// tokens is the number of input tokens the encoders read for it.
	tokens int
	// lines and bytes are the input consumed up to the batch's end, and
	// skipped the documents skipped so far, for Progress.
	lines   int
	bytes   int64
	skipped int
	// err, when set, ends the input: the batch carries no documents, and
	// every batch before it is committed before the error is returned.
	err error
}

// ingest runs the pipeline over src. On error, Progress counts what was
// committed (and applied) before it; a document's error is a *docError.
func (e *Engine) ingest(ctx context.Context, src docSource, opts pipelineOptions) (Progress, error) {
	if err := e.enter(); err != nil {
		return Progress{}, err
	}
	defer e.mu.RUnlock()
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return Progress{}, err
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	read := make(chan *batch, 1)
	tokenized := make(chan *batch, 1)
	encoded := make(chan *batch, 1)
	var stages sync.WaitGroup
	stages.Add(3)
	go func() {
		defer stages.Done()
		defer close(read)
		e.readStage(ctx, src, opts, read)
	}()
	go func() {
		defer stages.Done()
		defer close(tokenized)
		e.tokenizeStage(ctx, read, tokenized)
	}()
	go func() {
		defer stages.Done()
		defer close(encoded)
		e.encodeStage(ctx, tokenized, encoded)
	}()

	appliers := e.startAppliers(context.WithoutCancel(ctx))
	var p Progress
	commitSkipped := 0 // documents the store refused and SkipBad skipped
	err := func() error {
		for b := range encoded {
			if b.err != nil {
				return b.err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			n, commits, skipped, err := e.commitBatch(ctx, b, opts)
			commitSkipped += skipped
			p.Docs += n
			p.Batches += commits
			p.Tokens += int64(b.tokens)
			p.Lines, p.Bytes, p.Skipped = b.lines, b.bytes, b.skipped+commitSkipped
			if err != nil {
				return err
			}
			// A committed batch is acknowledged: report it, then let the
			// indexes apply it.
			p.Elapsed = time.Since(start)
			if opts.progress != nil {
				opts.progress(p)
			}
			if err := appliers.committed(e.st.LastSeq()); err != nil {
				return err
			}
			e.maybeTruncate()
		}
		return nil
	}()
	cancel() // stop reading and encoding, if they are still going
	for range encoded {
	}
	stages.Wait()
	if aerr := appliers.finish(); err == nil {
		err = aerr
	}
	e.maybeTruncate()
	if err == nil {
		err = parent.Err() // the reader saw the cancellation first
	}
	p.Elapsed = time.Since(start)
	return p, err
}

// readStage decodes and checks documents and sends them in batches; a
// document that fails (unless skipped) or an input error is sent as a
// batch's err, after which the stage stops. Documents checked after the
// last full batch and before an error are dropped with it, so that an
// error stores nothing of its batch.
func (e *Engine) readStage(ctx context.Context, src docSource, opts pipelineOptions, out chan<- *batch) {
	var (
		cur     = &batch{}
		skipped int
		schema  = e.st.Schema()
	)
	send := func(b *batch) bool {
		select {
		case out <- b:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fail := func(err error) { send(&batch{err: err}) }
	for {
		if err := ctx.Err(); err != nil {
			return
		}
		doc, pos, err := src.next()
		if err == io.EOF {
			break
		}
		if err == nil {
			var c checked
			if c, err = e.check(schema, doc); err == nil {
				cur.docs = append(cur.docs, c)
				cur.pos = append(cur.pos, pos)
			} else {
				err = &docError{pos: pos, id: doc.ID, err: err}
			}
		}
		if err != nil {
			var de *docError
			if !errors.As(err, &de) || !opts.skipBad {
				fail(err)
				return
			}
			skipped++
			if opts.onSkip != nil {
				opts.onSkip(de)
			}
			continue
		}
		if len(cur.docs) >= e.opts.BatchSize {
			cur.lines, cur.bytes = src.consumed()
			cur.skipped = skipped
			if !send(cur) {
				return
			}
			cur = &batch{}
			// Fields that earlier batches added are known from here on.
			schema = e.st.Schema()
		}
	}
	cur.lines, cur.bytes = src.consumed()
	cur.skipped = skipped
	send(cur)
}

// tokenizeStage tokenizes each batch's texts for the models that encode
// them.
func (e *Engine) tokenizeStage(ctx context.Context, in <-chan *batch, out chan<- *batch) {
	for b := range in {
		if b.err == nil && len(b.docs) > 0 && len(e.models) > 0 {
			input, err := e.tokenize(b.docs)
			if err != nil {
				b = &batch{err: err}
			} else {
				b.input = input
			}
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// encodeStage computes each batch's blobs.
func (e *Engine) encodeStage(ctx context.Context, in <-chan *batch, out chan<- *batch) {
	for b := range in {
		if b.err == nil && len(b.docs) > 0 {
			blobs, tokens, err := e.encodeChecked(ctx, b.docs, b.input)
			if err != nil {
				var de *docError
				if errors.As(err, &de) {
					de.pos = b.pos[de.pos]
				}
				b = &batch{err: err}
			} else {
				b.blobs, b.tokens = blobs, tokens
			}
		}
		select {
		case out <- b:
		case <-ctx.Done():
			return
		}
		if b.err != nil {
			return
		}
	}
}

// commitBatch commits b, split into halves while it is too large for one
// Badger transaction. A document the store refuses (a field whose type an
// earlier batch fixed otherwise) is skipped with SkipBad, and the rest
// committed; otherwise it is a *docError, with the parts before it
// committed. It returns the documents committed, the storage batches
// they took and the documents skipped.
func (e *Engine) commitBatch(ctx context.Context, b *batch, opts pipelineOptions) (committed, commits, skipped int, err error) {
	docs, blobs, pos := b.docs, b.blobs, b.pos
	for len(docs) > 0 {
		n, c, err := e.commitSplitting(ctx, docs, blobs)
		committed += n
		commits += c
		var be *storage.BatchError
		if !errors.As(err, &be) {
			return committed, commits, skipped, err
		}
		// be.Index is relative to docs[n:], the part that failed.
		bad := n + be.Index
		de := &docError{pos: pos[bad], id: docs[bad].doc.ID, err: be.Err}
		if !opts.skipBad {
			return committed, commits, skipped, de
		}
		skipped++
		if opts.onSkip != nil {
			opts.onSkip(de)
		}
		docs, pos = append(docs[n:bad:bad], docs[bad+1:]...), append(pos[n:bad:bad], pos[bad+1:]...)
		if blobs != nil {
			blobs = append(blobs[n:bad:bad], blobs[bad+1:]...)
		}
	}
	return committed, commits, skipped, nil
}

// commitSplitting writes docs to storage as one batch or, when that is too
// large for one Badger transaction, as two halves, recursively; each part
// is atomic. It returns the documents committed before an error, whose
// *storage.BatchError Index is relative to docs[committed:], and the
// storage batches committed.
func (e *Engine) commitSplitting(ctx context.Context, docs []checked, blobs []map[string][]byte) (committed, commits int, err error) {
	var sb storage.Batch
	for i, d := range docs {
		var bl map[string][]byte
		if blobs != nil {
			bl = blobs[i]
		}
		sb.Put(d.doc, bl)
	}
	r, err := e.commit(ctx, &sb)
	if errors.Is(err, storage.ErrBatchTooLarge) && len(docs) > 1 {
		half := len(docs) / 2
		var b1, b2 []map[string][]byte
		if blobs != nil {
			b1, b2 = blobs[:half], blobs[half:]
		}
		n1, c1, err := e.commitSplitting(ctx, docs[:half], b1)
		if err != nil {
			return n1, c1, err
		}
		n2, c2, err := e.commitSplitting(ctx, docs[half:], b2)
		return half + n2, c1 + c2, err
	}
	if err != nil {
		return 0, 0, err
	}
	return r.Put, 1, nil
}

// commit writes one storage batch, serialised with every other writer.
func (e *Engine) commit(ctx context.Context, b *storage.Batch) (storage.WriteResult, error) {
	e.writeMu.Lock()
	defer e.writeMu.Unlock()
	r, err := e.st.Write(ctx, b)
	if err != nil {
		return r, fmt.Errorf("engine: %w", err)
	}
	return r, nil
}

// appliers keep the derived indexes caught up with the commits of one
// pipeline run, one goroutine each.
type appliers struct {
	st   *storage.Store
	list []*derived
	wg   sync.WaitGroup

	mu      sync.Mutex
	cond    sync.Cond
	target  uint64   // the last sequence committed
	applied []uint64 // per index, the sequence it has applied
	lags    []uint64 // sequences of the last commits, oldest first
	err     error
	done    bool
}

func (e *Engine) startAppliers(ctx context.Context) *appliers {
	a := &appliers{st: e.st, list: e.derivedList()}
	a.cond.L = &a.mu
	a.applied = make([]uint64, len(a.list))
	for i, d := range a.list {
		a.applied[i] = d.AppliedSeq()
	}
	for i := range a.list {
		a.wg.Add(1)
		go a.run(ctx, i)
	}
	return a
}

func (a *appliers) run(ctx context.Context, i int) {
	defer a.wg.Done()
	d := a.list[i]
	for {
		a.mu.Lock()
		for !a.done && a.applied[i] >= a.target {
			a.cond.Wait()
		}
		if a.applied[i] >= a.target {
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		err := d.catchUp(ctx, a.st, false)
		a.mu.Lock()
		a.applied[i] = d.AppliedSeq()
		if err != nil {
			if a.err == nil {
				a.err = fmt.Errorf("engine: batch committed, but updating %s failed (it catches up on reopen): %w", d.Name(), err)
			}
			a.applied[i] = math.MaxUint64 // nobody waits for it any more
		}
		a.cond.Broadcast()
		a.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// committed tells the appliers that seq is committed, then waits while
// they are more than maxApplyLag commits behind. It returns the first
// apply error.
func (a *appliers) committed(seq uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.target = seq
	a.lags = append(a.lags, seq)
	if len(a.lags) > maxApplyLag {
		a.lags = a.lags[1:]
	}
	a.cond.Broadcast()
	for a.err == nil && len(a.lags) == maxApplyLag && a.minApplied() < a.lags[0] {
		a.cond.Wait()
	}
	return a.err
}

func (a *appliers) minApplied() uint64 {
	m := uint64(math.MaxUint64)
	for _, s := range a.applied {
		m = min(m, s)
	}
	return m
}

// finish waits until every index has applied every committed batch, stops
// the goroutines and returns the first apply error.
func (a *appliers) finish() error {
	a.mu.Lock()
	a.done = true
	a.cond.Broadcast()
	a.mu.Unlock()
	a.wg.Wait()
	return a.err
}

// sliceSource yields a slice's documents, at their indexes.
type sliceSource struct {
	docs []tandem.Doc
	i    int
}

func (s *sliceSource) next() (tandem.Doc, int, error) {
	if s.i >= len(s.docs) {
		return tandem.Doc{}, 0, io.EOF
	}
	s.i++
	return s.docs[s.i-1], s.i - 1, nil
}

func (s *sliceSource) consumed() (int, int64) { return s.i, 0 }

// StreamOptions configure IndexStream.
type StreamOptions struct {
	// SkipBad skips (and counts) documents that fail their checks instead
	// of stopping at the first one.
	SkipBad bool
	// OnSkip, if set, is called with each skipped document's
	// *DocError (its Index is the position in the stream).
	OnSkip func(error)
	// Progress, if set, is called after each committed batch.
	Progress func(Progress)
}

// IndexStream is Index over a stream of documents: next returns them in
// order and io.EOF after the last; any other error from next stops the
// stream (batches before it stay committed). Documents are held in memory
// a few batches at a time, so a stream may be far larger than memory. A
// document's error is a *DocError whose Index is the document's
// position in the stream; Progress.Lines counts the documents read.
func (e *Engine) IndexStream(ctx context.Context, next func() (tandem.Doc, error), opts StreamOptions) (Progress, error) {
	po := pipelineOptions{skipBad: opts.SkipBad, progress: opts.Progress}
	if opts.OnSkip != nil {
		po.onSkip = func(de *docError) { opts.OnSkip(de.public(false)) }
	}
	p, err := e.ingest(ctx, &funcSource{fn: next}, po)
	return p, docFailure(err, false)
}

// funcSource yields the documents of a function, at their positions.
type funcSource struct {
	fn func() (tandem.Doc, error)
	n  int
}

func (s *funcSource) next() (tandem.Doc, int, error) {
	d, err := s.fn()
	if err != nil {
		return tandem.Doc{}, 0, err
	}
	s.n++
	return d, s.n - 1, nil
}

func (s *funcSource) consumed() (int, int64) { return s.n, 0 }
