package encoder

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/tandemsearch/tandem/internal/ort"
	"golang.org/x/sync/semaphore"
)

// Options configure Load. Zero fields mean defaults.
type Options struct {
	// IntraOpThreads is the number of threads one model run may use; 0 lets
	// ONNX Runtime use one per physical core. A call whose texts fill one
	// batch (a query, say) runs on that many threads. A call with several
	// batches runs them instead as concurrent one-thread runs, up to
	// IntraOpThreads × MaxConcurrentRuns at once, on a second session
	// opened at the first such call: independent runs need no barrier
	// between the threads of each operator, so they keep the cores busier
	// and suffer less when other work takes a core (SciFact ingest 9%
	// faster, and 1.6× faster encoding with one core taken by another
	// process). ONNX Runtime's CPU kernels split work across threads
	// without changing any sum's order, so a text gets the same vector
	// either way (TestThreadsSameVectors).
	IntraOpThreads int
	// BatchSize is the number of texts per model run. The default is 32
	// for a float32 model and 1 for an int8 one: a quantised model's
	// activation scales are taken per tensor, over the whole padded
	// batch, so batching would make a text's vector depend on the texts
	// run beside it. Run alone, a text gets the same vector at indexing,
	// at re-indexing and as a query, and as texts are sorted by length
	// a run of one costs no more per text on CPU than a batch.
	BatchSize int
	// BatchTokens bounds a run's padded size, texts × longest text in
	// tokens, so that long texts run in small batches (or alone) while
	// short ones, queries say, still share runs; default 1024. Big padded
	// batches are slower per text on CPU: float32 bge-small-en-v1.5 on
	// SciFact abstracts encoded 5.2 documents/s in batches of 32 and 7.8
	// one at a time. A text longer than the bound runs alone.
	BatchTokens int
	// MaxConcurrentRuns bounds model runs of IntraOpThreads threads in
	// flight across goroutines, so that concurrent callers do not
	// oversubscribe the cores; default max(1, NumCPU/IntraOpThreads), and
	// 1 when IntraOpThreads is 0. One-thread bulk runs count as a share.
	MaxConcurrentRuns int
	// DocumentThreads, when positive, gives document encoding a thread
	// budget of its own, apart from queries': document texts then run as
	// one-thread runs on the bulk session, at most DocumentThreads at once,
	// and a query never queues behind them for the query budget (the
	// cores are shared by the OS scheduler instead). A server that indexes
	// while it answers queries sets it, trading ingest speed for query
	// latency; 0 means documents and queries share one budget, the fastest
	// for indexing alone.
	DocumentThreads int
	// MaxTextBytes rejects longer texts with ErrBadText rather than
	// tokenizing megabytes only to keep the first MaxLength tokens;
	// default 1 MiB.
	MaxTextBytes int
	// QueryBatch bounds the queries EncodeQuery runs together in one model
	// run (see EncodeQuery); 1 runs every query alone. The default is
	// DefaultQueryBatch, or BatchSize if smaller: 1 for an int8 model,
	// whose per-tensor activation scales would make a query's vector
	// depend on the others in its run. Runs also stay within BatchTokens.
	QueryBatch int
	// QueryBatchWait is how long EncodeQuery lets a query that finds a
	// run slot free wait for others before its run starts. The default, 0,
	// starts it at once, so that a lone query never waits: queries then
	// share runs only when they arrive while runs are in flight, which is
	// when sharing pays.
	QueryBatchWait time.Duration
	// QueryCacheBytes bounds the memory of EncodeQuery's cache of query
	// encodings (texts, pooled vectors and token output); 0 means
	// DefaultQueryCacheBytes (64 MiB), and a negative value disables the
	// cache.
	QueryCacheBytes int64
	// Config replaces dir/tandem.json when set.
	Config *Config
	// Library overrides the ONNX Runtime shared library path.
	Library string
}

func (o *Options) withDefaults() (Options, error) {
	var opts Options
	if o != nil {
		opts = *o
	}
	if opts.IntraOpThreads < 0 || opts.BatchSize < 0 || opts.BatchTokens < 0 || opts.MaxConcurrentRuns < 0 || opts.MaxTextBytes < 0 ||
		opts.DocumentThreads < 0 || opts.QueryBatch < 0 || opts.QueryBatchWait < 0 {
		return opts, errors.New("encoder: negative option")
	}
	switch {
	case opts.QueryCacheBytes == 0:
		opts.QueryCacheBytes = DefaultQueryCacheBytes
	case opts.QueryCacheBytes < 0:
		opts.QueryCacheBytes = -1 // one spelling of "none", for the Cache key
	}
	if opts.BatchTokens == 0 {
		opts.BatchTokens = 1024
	}
	if opts.MaxConcurrentRuns == 0 {
		opts.MaxConcurrentRuns = 1
		if opts.IntraOpThreads > 0 {
			opts.MaxConcurrentRuns = max(1, runtime.NumCPU()/opts.IntraOpThreads)
		}
	}
	if opts.MaxTextBytes == 0 {
		opts.MaxTextBytes = 1 << 20
	}
	return opts, nil
}

// Side says whether texts are queries or documents; the two may differ in
// prefix, marker, length, augmentation, skipped tokens and model.
type Side int

const (
	Query Side = iota
	Document
)

func (s Side) String() string {
	if s == Query {
		return "query"
	}
	return "document"
}

// Encoder turns texts into vectors with one ONNX model (or two, for
// asymmetric encoders). It is safe for concurrent use; Close waits for
// its calls in flight.
//
// The Encoders a Cache returns for one model directory and Options share
// one loaded model: its ONNX Runtime sessions, its tokenizer and its
// thread budgets. Each has its own Close, and the sessions are released
// when the last one closes.
type Encoder struct {
	*loaded

	mu struct {
		sync.RWMutex
		closed bool
	}
	// queriesClosed is set, under the query batcher's lock, as Close
	// begins: the batcher then refuses this Encoder's queries.
	queriesClosed atomic.Bool
	// release drops this Encoder's hold on loaded; Close calls it once.
	release func() error
}

// loaded is a model loaded once: configuration, tokenizer, ONNX sessions
// and thread budgets, shared by the Encoders of a Cache entry. Nothing in
// it changes after load but the bulk sessions, opened at first use under
// their own lock, and the pooled scratch buffers.
type loaded struct {
	dir      string
	cfg      Config
	opts     Options
	tok      *wordTokenizer
	sides    [2]*sideSpec
	dim      int // pooled dimension, 0 when pooling is none
	tokenDim int // token dimension, 0 when the model has no token output
	// threads is the budget of run threads: a run on the model's main
	// session takes runThreads of it, a bulk run takes one.
	threads    *semaphore.Weighted
	runThreads int64
	// docThreads is the document runs' own budget (Options.DocumentThreads),
	// nil when they share threads.
	docThreads *semaphore.Weighted
	bulkRuns   int       // concurrent bulk runs; < 2 means no bulk session
	scratch    sync.Pool // *buffers
	// queries runs EncodeQuery's model runs; qcache is its cache, nil
	// when disabled.
	queries *queryBatcher
	qcache  *queryCache

	sessions []*ort.Session // distinct sessions, closed by close
	models   []*model       // their models, whose bulk sessions close closes
}

// model is one ONNX session and how to feed it.
type model struct {
	file    string
	sess    *ort.Session
	inputs  []string // model inputs in feed order
	output  string
	rank    int // 3 for [batch, seq, dim], 2 for [batch, dim]
	dim     int // last output dimension, -1 when dynamic
	hasType bool
	sopts   ort.SessionOptions

	bulk struct {
		sync.Mutex
		s *ort.Session // one intra-op thread; opened at first use
	}
}

// bulkSession returns m's one-thread session, opening it at first use.
func (m *model) bulkSession() (*ort.Session, error) {
	m.bulk.Lock()
	defer m.bulk.Unlock()
	if m.bulk.s == nil {
		o := m.sopts
		o.IntraOpThreads = 1
		s, err := ort.OpenSession(m.file, m.inputs, []string{m.output}, &o)
		if err != nil {
			return nil, err
		}
		m.bulk.s = s
	}
	return m.bulk.s, nil
}

// Load opens the model in dir: tandem.json, the tokenizer and the ONNX
// file(s). It checks the configuration against the model's inputs and
// outputs and the tokenizer's vocabulary. The Encoder owns its sessions;
// Cache.Load shares them instead.
func Load(dir string, opts *Options) (*Encoder, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l, err := loadModel(dir, o)
	if err != nil {
		return nil, err
	}
	return l.handle(l.close), nil
}

// handle returns a new Encoder on l; its Close calls release.
func (l *loaded) handle(release func() error) *Encoder {
	return &Encoder{loaded: l, release: release}
}

// loadModel loads the model in dir with options o, defaults filled.
func loadModel(dir string, o Options) (*loaded, error) {
	var err error
	var cfg *Config
	if o.Config != nil {
		c := *o.Config
		if err := c.Validate(); err != nil {
			return nil, err
		}
		cfg = &c
	} else if cfg, err = ReadConfig(dir); err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		abs, _ := filepath.Abs(dir)
		cfg.Name = filepath.Base(abs)
	}
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = "tokenizer.json"
	}
	if o.BatchSize == 0 {
		o.BatchSize = 32
		if cfg.Precision == Int8 {
			o.BatchSize = 1
		}
	}
	if o.QueryBatch == 0 {
		o.QueryBatch = min(o.BatchSize, DefaultQueryBatch)
	}
	threads := o.IntraOpThreads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	l := &loaded{dir: dir, cfg: *cfg, opts: o, runThreads: int64(threads),
		threads: semaphore.NewWeighted(int64(threads * o.MaxConcurrentRuns)), bulkRuns: threads * o.MaxConcurrentRuns}
	if threads == 1 {
		l.bulkRuns = 0 // the main session is already one thread per run
	}
	if o.DocumentThreads > 0 {
		l.docThreads = semaphore.NewWeighted(int64(o.DocumentThreads))
	}
	l.scratch.New = func() any { return new(buffers) }
	l.queries = newQueryBatcher(l)
	l.qcache = newQueryCache(o.QueryCacheBytes)
	// The loading Encoder probes the model (setDims) and is then dropped.
	if err := l.handle(nil).load(); err != nil {
		l.close()
		return nil, fmt.Errorf("encoder: load %s: %w", dir, err)
	}
	return l, nil
}

func (e *Encoder) load() error {
	var err error
	if e.tok, err = loadTokenizer(filepath.Join(e.dir, e.cfg.Tokenizer)); err != nil {
		return err
	}
	models := map[string]*model{}
	projs := map[string]*projection{}
	for _, side := range []Side{Query, Document} {
		sc := e.cfg.side(side)
		spec := &sideSpec{cfg: sc, marker: -1, mask: -1, lead: e.tok.lead, trail: e.tok.trail, maxLength: sc.MaxLength}
		field := side.String()
		if sc.Marker != "" {
			id, ok := e.tok.tokenID(sc.Marker)
			if !ok {
				return fmt.Errorf("%w: field %q: token %q is not in the tokenizer vocabulary", ErrModelMismatch, field+".marker", sc.Marker)
			}
			spec.marker = id
		}
		if sc.Augment {
			id, ok := e.tok.tokenID(sc.MaskToken)
			if !ok {
				return fmt.Errorf("%w: field %q: token %q is not in the tokenizer vocabulary", ErrModelMismatch, field+".mask_token", sc.MaskToken)
			}
			spec.mask = id
		}
		if spec.budget() < 0 {
			return fmt.Errorf("%w: field %q: %d leaves no room beside the special tokens", ErrBadConfig, field+".max_length", sc.MaxLength)
		}
		spec.skip = map[int64]bool{}
		for _, t := range sc.SkipTokens {
			id, ok := e.tok.tokenID(t)
			if !ok {
				return fmt.Errorf("%w: field %q: token %q is not in the tokenizer vocabulary", ErrModelMismatch, field+".skip_tokens", t)
			}
			spec.skip[id] = true
		}
		if sc.SkipPunctuation {
			for _, r := range asciiPunctuation {
				if id, ok := e.tok.tokenID(string(r)); ok {
					spec.skip[id] = true
				}
			}
		}
		m, ok := models[sc.Model]
		if !ok {
			if m, err = e.openModel(sc.Model, sc.Output); err != nil {
				return err
			}
			models[sc.Model] = m
		} else if m.output != pickOutputName(sc.Output, m) {
			// The same file read at another output needs its own session.
			if m, err = e.openModel(sc.Model, sc.Output); err != nil {
				return err
			}
		}
		spec.model = m
		if p := sc.Projection; p != nil {
			if spec.proj, ok = projs[p.File]; !ok {
				if spec.proj, err = loadProjection(filepath.Join(e.dir, p.File), p); err != nil {
					return err
				}
				projs[p.File] = spec.proj
			}
			if m.dim >= 0 && m.dim != p.InputDim {
				return fmt.Errorf("%w: field %q: input_dim %d, but output %q of %s has dimension %d",
					ErrModelMismatch, field+".projection", p.InputDim, m.output, m.file, m.dim)
			}
		}
		e.sides[side] = spec
	}
	return e.setDims()
}

// pickOutputName is the output a side would read from m.
func pickOutputName(want string, m *model) string {
	if want == "" {
		return m.output
	}
	return want
}

// asciiPunctuation is Python's string.punctuation, ColBERT's skiplist.
const asciiPunctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

func (e *Encoder) openModel(file, output string) (*model, error) {
	path := filepath.Join(e.dir, file)
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w: model %s", ErrMissingFile, path)
		}
		return nil, fmt.Errorf("encoder: %w", err)
	}
	sopts := &ort.SessionOptions{IntraOpThreads: e.opts.IntraOpThreads, Library: e.opts.Library}
	ins, outs, err := ort.Inspect(path, sopts)
	if err != nil {
		return nil, err
	}
	m := &model{file: path, sopts: *sopts}
	have := map[string]bool{}
	for _, in := range ins {
		switch in.Name {
		case "input_ids", "attention_mask", "token_type_ids":
		default:
			return nil, fmt.Errorf("%w: %s has input %q; Tandem feeds only input_ids, attention_mask and token_type_ids",
				ErrModelMismatch, path, in.Name)
		}
		if in.Type != "int64" {
			return nil, fmt.Errorf("%w: %s input %q is %s; Tandem feeds int64", ErrModelMismatch, path, in.Name, in.Type)
		}
		have[in.Name] = true
		m.inputs = append(m.inputs, in.Name)
	}
	if !have["input_ids"] {
		return nil, fmt.Errorf("%w: %s has no input_ids input", ErrModelMismatch, path)
	}
	m.hasType = have["token_type_ids"]
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.Name
	}
	var info *ort.IOInfo
	switch {
	case output != "":
		for i := range outs {
			if outs[i].Name == output {
				info = &outs[i]
			}
		}
		if info == nil {
			return nil, fmt.Errorf("%w: field \"output\": %s has no output %q (it has %q)", ErrModelMismatch, path, output, names)
		}
	case len(outs) == 1:
		info = &outs[0]
	default:
		for i := range outs {
			if outs[i].Name == "last_hidden_state" {
				info = &outs[i]
			}
		}
		if info == nil {
			return nil, fmt.Errorf("%w: field \"output\" is required: %s has outputs %q", ErrModelMismatch, path, names)
		}
	}
	if info.Type != "float32" {
		return nil, fmt.Errorf("%w: %s output %q is %s; Tandem reads float32", ErrModelMismatch, path, info.Name, info.Type)
	}
	m.output, m.rank = info.Name, len(info.Shape)
	switch {
	case e.cfg.Pooling == PoolModel && m.rank != 2:
		return nil, fmt.Errorf("%w: pooling %q needs a [batch, dim] output, but %q of %s has shape %v",
			ErrModelMismatch, PoolModel, m.output, path, info.Shape)
	case e.cfg.Pooling != PoolModel && m.rank != 3:
		return nil, fmt.Errorf("%w: pooling %q needs a [batch, sequence, dim] output, but %q of %s has shape %v (use pooling \"model\" for pooled outputs)",
			ErrModelMismatch, e.cfg.Pooling, m.output, path, info.Shape)
	}
	m.dim = int(info.Shape[len(info.Shape)-1])
	if m.dim <= 0 {
		m.dim = -1
	}
	if m.sess, err = ort.OpenSession(path, m.inputs, []string{m.output}, sopts); err != nil {
		return nil, err
	}
	e.sessions = append(e.sessions, m.sess)
	e.models = append(e.models, m)
	return m, nil
}

// setDims fixes Dim and TokenDim, probing the model when its output
// dimension is dynamic, and checks that both sides agree.
func (e *Encoder) setDims() error {
	var dims [2]int
	for side, spec := range e.sides {
		d := spec.model.dim
		if spec.proj != nil {
			d = spec.proj.out
		}
		if d < 0 {
			b, err := e.encode(context.Background(), Side(side), []string{""}, true)
			if err != nil {
				return fmt.Errorf("probe output dimension: %w", err)
			}
			if b.Vectors != nil {
				d = len(b.Vectors[0])
			} else {
				d = b.Tokens[0].Dim
			}
		}
		dims[side] = d
	}
	if dims[Query] != dims[Document] {
		return fmt.Errorf("%w: queries get %d-dim vectors but documents %d-dim", ErrModelMismatch, dims[Query], dims[Document])
	}
	switch e.cfg.Pooling {
	case PoolNone:
		e.tokenDim = dims[0]
	case PoolModel:
		e.dim = dims[0]
	default:
		e.dim, e.tokenDim = dims[0], dims[0]
	}
	return nil
}

// Name is the model's name.
func (e *Encoder) Name() string { return e.cfg.Name }

// Dir is the model directory.
func (e *Encoder) Dir() string { return e.dir }

// Config returns a copy of the configuration with defaults filled in.
func (e *Encoder) Config() Config {
	c := e.cfg
	c.Query, c.Document = c.side(Query), c.side(Document)
	return c
}

// BatchSize is the most texts per model run.
func (e *Encoder) BatchSize() int { return e.opts.BatchSize }

// BatchTokens is the most padded tokens per model run (Options.BatchTokens).
func (e *Encoder) BatchTokens() int { return e.opts.BatchTokens }

// Dim is the length of pooled vectors, 0 when pooling is none.
func (e *Encoder) Dim() int { return e.dim }

// TokenDim is the length of token vectors, 0 when the model only produces
// pooled vectors.
func (e *Encoder) TokenDim() int { return e.tokenDim }

// Similarity is the score the model was trained with.
func (e *Encoder) Similarity() Similarity { return e.cfg.Similarity }

// Pooling is the configured pooling.
func (e *Encoder) Pooling() Pooling { return e.cfg.Pooling }

// CheckDim reports ErrDimMismatch when an index built for indexDim-long
// pooled vectors cannot take this model's.
func (e *Encoder) CheckDim(indexDim int) error {
	if e.dim != indexDim {
		return fmt.Errorf("%w: model %s produces %d-dim vectors, the index holds %d-dim vectors; rebuild the index or load the model it was built with",
			ErrDimMismatch, e.cfg.Name, e.dim, indexDim)
	}
	return nil
}

// CheckTokenDim is CheckDim for token vectors.
func (e *Encoder) CheckTokenDim(indexDim int) error {
	if e.tokenDim != indexDim {
		return fmt.Errorf("%w: model %s produces %d-dim token vectors, the index holds %d-dim token vectors; rebuild the index or load the model it was built with",
			ErrDimMismatch, e.cfg.Name, e.tokenDim, indexDim)
	}
	return nil
}

// Close releases the ONNX sessions, or, for an Encoder of a Cache, its
// hold on them: the last Encoder of a model to close releases them. It
// waits for this Encoder's calls in flight and is idempotent.
func (e *Encoder) Close() error {
	// Queued queries would hold Close up until their run: answer them
	// first (those in a run in flight finish).
	e.queries.dropOwner(e)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mu.closed {
		return nil
	}
	e.mu.closed = true
	return e.release()
}

// close releases the sessions; no Encoder may use l afterwards.
func (l *loaded) close() error {
	if l.queries != nil {
		l.queries.close()
	}
	var errs []error
	for _, s := range l.sessions {
		errs = append(errs, s.Close())
	}
	for _, m := range l.models {
		m.bulk.Lock()
		if m.bulk.s != nil {
			errs = append(errs, m.bulk.s.Close())
			m.bulk.s = nil
		}
		m.bulk.Unlock()
	}
	l.sessions, l.models = nil, nil
	return errors.Join(errs...)
}

// Batch is the output for a list of texts, in input order. Its slices are
// owned by the caller.
type Batch struct {
	// Vectors holds one pooled vector per text, Dim() long; nil when
	// pooling is none.
	Vectors [][]float32
	// Tokens holds the token output per text; nil unless asked for, and
	// always set when pooling is none.
	Tokens []Tokens
	// InputTokens is the number of tokens the model read, special tokens
	// included and padding excluded: the unit of encoding throughput.
	InputTokens int
}

// Tokens is the token output of one text: the vectors of attended tokens
// (special tokens and markers included, ColBERT's augmentation tokens
// included, skipped tokens and padding removed), after projection and
// normalisation.
type Tokens struct {
	Dim int
	// Vectors holds Len() vectors of Dim values, row-major.
	Vectors []float32
	// IDs are the vocabulary ids of the kept tokens.
	IDs []int32
	// Positions are the kept tokens' positions in the model input (0 is
	// the first special token), increasing.
	Positions []int32
}

// Len is the number of kept tokens.
func (t *Tokens) Len() int { return len(t.IDs) }

// Vector returns the i-th token vector, aliasing Vectors.
func (t *Tokens) Vector(i int) []float32 { return t.Vectors[i*t.Dim : (i+1)*t.Dim] }

// Request is one call to Encode.
type Request struct {
	Side  Side
	Texts []string
	// Tokens asks for token output even when the model pools.
	Tokens bool
}

// EncodeQueries encodes queries. Token output is returned when pooling is
// none.
func (e *Encoder) EncodeQueries(ctx context.Context, texts []string) (*Batch, error) {
	return e.Encode(ctx, Request{Side: Query, Texts: texts})
}

// EncodeDocuments encodes documents. Token output is returned when pooling
// is none.
func (e *Encoder) EncodeDocuments(ctx context.Context, texts []string) (*Batch, error) {
	return e.Encode(ctx, Request{Side: Document, Texts: texts})
}

// Encode encodes texts in batches of Options.BatchSize, sorted by length so
// that little padding is computed. It checks ctx between batches and
// cancels the model run in progress. An invalid text fails the whole call
// with ErrBadText naming its index. Encode is Prepare then Run.
func (e *Encoder) Encode(ctx context.Context, req Request) (*Batch, error) {
	p, err := e.Prepare(req)
	if err != nil {
		return nil, err
	}
	return e.Run(ctx, p)
}

// Prepared is a request tokenized and sorted by length, ready to Run. It
// lets a caller tokenize the next texts while the model runs on the
// current ones.
type Prepared struct {
	side   Side
	tokens bool
	seqs   []sequence
	order  []int // indexes of seqs, shortest first
}

// InputTokens is the number of tokens the model will read, padding
// excluded.
func (p *Prepared) InputTokens() int {
	n := 0
	for _, sq := range p.seqs {
		n += len(sq.ids)
	}
	return n
}

// Prepare checks and tokenizes req's texts. It does not run the model.
func (e *Encoder) Prepare(req Request) (*Prepared, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	if req.Side != Query && req.Side != Document {
		return nil, fmt.Errorf("encoder: unknown side %d", req.Side)
	}
	tokens := req.Tokens || e.cfg.Pooling == PoolNone
	if tokens && e.cfg.Pooling == PoolModel {
		return nil, fmt.Errorf("%w: %s pools inside the model", ErrNoTokens, e.cfg.Name)
	}
	return e.prepare(req.Side, req.Texts, tokens)
}

// Run runs the model on prepared texts.
func (e *Encoder) Run(ctx context.Context, p *Prepared) (*Batch, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.mu.closed {
		return nil, ErrClosed
	}
	return e.run(ctx, p)
}

// buffers are the per-run input and output slices, pooled across runs.
type buffers struct {
	ids, attn, types []int64
	out              []float32
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func (e *Encoder) encode(ctx context.Context, side Side, texts []string, tokens bool) (*Batch, error) {
	p, err := e.prepare(side, texts, tokens)
	if err != nil {
		return nil, err
	}
	return e.run(ctx, p)
}

func (e *Encoder) prepare(side Side, texts []string, tokens bool) (*Prepared, error) {
	spec := e.sides[side]
	seqs := make([]sequence, len(texts))
	for i, text := range texts {
		if len(text) > e.opts.MaxTextBytes {
			return nil, fmt.Errorf("%w: text %d: %d bytes exceeds the %d-byte limit", ErrBadText, i, len(text), e.opts.MaxTextBytes)
		}
		if !utf8.ValidString(text) {
			return nil, fmt.Errorf("%w: text %d: invalid UTF-8 at byte %d", ErrBadText, i, firstInvalid(text))
		}
		content, err := e.tok.content(spec.cfg.Prefix + text)
		if err != nil {
			return nil, fmt.Errorf("%w: text %d: %v", ErrBadText, i, err)
		}
		seqs[i] = spec.build(content)
	}
	order := make([]int, len(texts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(len(seqs[a].ids), len(seqs[b].ids)) })
	return &Prepared{side: side, tokens: tokens, seqs: seqs, order: order}, nil
}

func (e *Encoder) run(ctx context.Context, p *Prepared) (*Batch, error) {
	spec, seqs, order := e.sides[p.side], p.seqs, p.order
	out := &Batch{InputTokens: p.InputTokens()}
	if e.cfg.Pooling != PoolNone {
		out.Vectors = make([][]float32, len(seqs))
	}
	if p.tokens {
		out.Tokens = make([]Tokens, len(seqs))
	}
	// order is sorted by length, so the last text of a batch is its
	// longest: a batch ends at BatchSize texts, or before its padded size
	// would pass BatchTokens.
	var batches [][]int
	for start := 0; start < len(order); {
		end := start + 1
		for end < len(order) && end-start < e.opts.BatchSize && (end-start+1)*len(seqs[order[end]].ids) <= e.opts.BatchTokens {
			end++
		}
		batches = append(batches, order[start:end])
		start = end
	}
	// One batch runs on the main session's threads. Several run as
	// concurrent one-thread runs on the bulk session (see
	// Options.IntraOpThreads), or, when runs are one thread anyway, as up
	// to MaxConcurrentRuns runs of the main session; each batch writes
	// only its own texts' slots of out.
	// Documents with a budget of their own always run one thread each.
	own := p.side == Document && e.docThreads != nil
	bulk := (own || len(batches) > 1) && e.bulkRuns > 1
	workers := min(e.opts.MaxConcurrentRuns, len(batches))
	switch {
	case own:
		workers = min(e.opts.DocumentThreads, len(batches))
	case bulk:
		workers = min(e.bulkRuns, len(batches))
	}
	if workers <= 1 {
		for _, b := range batches {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if err := e.runBatch(ctx, spec, seqs, b, out, bulk && own, own); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		errs = make([]error, workers)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(batches) || ctx.Err() != nil {
					return
				}
				if err := e.runBatch(ctx, spec, seqs, batches[i], out, bulk, own); err != nil {
					errs[w] = err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return nil, err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// testHookDocRun, set by tests, is called as each run on the document
// budget starts, holding that budget.
var testHookDocRun func(l *loaded)

func firstInvalid(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return i
			}
		}
	}
	return len(s)
}

// runBatch runs the model on the texts idx (sorted by length) and stores
// their vectors in out; on the one-thread bulk session if bulk is set.
// runBatch runs one batch: on the bulk session with one thread if bulk,
// else on the main session; from the document budget if own, else from
// the shared one.
func (e *loaded) runBatch(ctx context.Context, spec *sideSpec, seqs []sequence, idx []int, out *Batch, bulk, own bool) error {
	m := spec.model
	B := len(idx)
	L := 0
	for _, i := range idx {
		L = max(L, len(seqs[i].ids))
	}
	buf := e.scratch.Get().(*buffers)
	defer e.scratch.Put(buf)
	buf.ids, buf.attn, buf.types = grow(buf.ids, B*L), grow(buf.attn, B*L), grow(buf.types, B*L)
	for b, i := range idx {
		row := buf.ids[b*L : (b+1)*L]
		n := copy(row, seqs[i].ids)
		for t := n; t < L; t++ {
			row[t] = e.tok.padID
		}
		arow := buf.attn[b*L : (b+1)*L]
		n = copy(arow, seqs[i].attn)
		clear(arow[n:])
	}
	clear(buf.types)
	shape := []int64{int64(B), int64(L)}
	feeds := make([]ort.Tensor, len(m.inputs))
	for k, name := range m.inputs {
		switch name {
		case "input_ids":
			feeds[k] = ort.Tensor{Shape: shape, Int64: buf.ids}
		case "attention_mask":
			feeds[k] = ort.Tensor{Shape: shape, Int64: buf.attn}
		case "token_type_ids":
			feeds[k] = ort.Tensor{Shape: shape, Int64: buf.types}
		}
	}
	res := []ort.Tensor{{}}
	if m.dim > 0 {
		if m.rank == 3 {
			buf.out = grow(buf.out, B*L*m.dim)
			res[0] = ort.Tensor{Shape: []int64{int64(B), int64(L), int64(m.dim)}, Float32: buf.out}
		} else {
			buf.out = grow(buf.out, B*m.dim)
			res[0] = ort.Tensor{Shape: []int64{int64(B), int64(m.dim)}, Float32: buf.out}
		}
	}
	sess, weight := m.sess, e.runThreads
	if bulk {
		var err error
		if sess, err = m.bulkSession(); err != nil {
			return fmt.Errorf("encoder: %s: %w", e.cfg.Name, err)
		}
		weight = 1
	}
	budget := e.threads
	if own {
		budget = e.docThreads
	}
	if err := budget.Acquire(ctx, weight); err != nil {
		return err
	}
	if own && testHookDocRun != nil {
		testHookDocRun(e)
	}
	err := sess.Run(ctx, feeds, res)
	budget.Release(weight)
	if err != nil {
		return fmt.Errorf("encoder: %s: %w", e.cfg.Name, err)
	}
	hidden := res[0].Float32
	H := int(res[0].Shape[len(res[0].Shape)-1])
	for b, i := range idx {
		seq := seqs[i]
		if m.rank == 2 {
			out.Vectors[i] = e.finish(spec, append([]float32(nil), hidden[b*H:(b+1)*H]...))
			continue
		}
		rows := hidden[b*L*H : (b*L+len(seq.ids))*H]
		switch e.cfg.Pooling {
		case PoolCLS:
			out.Vectors[i] = e.finish(spec, poolCLS(rows, H))
		case PoolMean:
			out.Vectors[i] = e.finish(spec, poolMean(rows, seq.attn, H))
		}
		if out.Tokens != nil {
			out.Tokens[i] = e.tokenOutput(spec, seq, rows, H)
		}
	}
	return nil
}

// finish projects and normalises one vector.
func (e *loaded) finish(spec *sideSpec, v []float32) []float32 {
	if spec.proj != nil {
		v = spec.proj.apply(v)
	}
	if e.cfg.Normalize {
		normalize(v)
	}
	return v
}

func (e *loaded) tokenOutput(spec *sideSpec, seq sequence, rows []float32, H int) Tokens {
	dim := H
	if spec.proj != nil {
		dim = spec.proj.out
	}
	n := 0
	for _, k := range seq.keep {
		if k {
			n++
		}
	}
	t := Tokens{Dim: dim, Vectors: make([]float32, 0, n*dim), IDs: make([]int32, 0, n), Positions: make([]int32, 0, n)}
	for p, k := range seq.keep {
		if !k {
			continue
		}
		v := e.finish(spec, slices.Clone(rows[p*H:(p+1)*H]))
		t.Vectors = append(t.Vectors, v...)
		t.IDs = append(t.IDs, int32(seq.ids[p]))
		t.Positions = append(t.Positions, int32(p))
	}
	return t
}
