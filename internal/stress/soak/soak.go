package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/malloc"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
)

// The soak's bounds on growth after warm-up (the first fifth of the run, at
// most maxWarmup: long enough for the Go heap, Badger's memtables and
// caches and the derived indexes to reach their working sizes). The end of a
// run is the smallest of its last three samples: a leak raises every later
// sample, while one GC cycle or one Badger flush raises only the sample it
// lands in.
const (
	// rssGrowth and rssSlack bound the resident set at the end to
	// the warm-up's peak plus 25% or 64 MiB, whichever is larger. A flat
	// process still moves that much: the Go heap may reach twice its live
	// size before a collection (GOGC=100), a Badger memtable is 64 MiB and
	// is replaced as it flushes, and Badger's block cache fills as
	// compactions write new tables.
	rssGrowth = 0.25
	rssSlack  = 64 << 20
	// goroutineSlack bounds goroutines at the end to the warm-up's
	// peak plus this many. Each sample records the floor of readings four
	// times a second, which leaves out most of what in-flight searches and
	// writes start; what remains varies by a few (Badger's compactions,
	// a search that spans the interval), while a leak grows without bound.
	goroutineSlack = 16
	// fileSlack bounds open files the same way (their floor too):
	// Badger opens a table file per flush and closes those a compaction
	// merges, and Bleve opens and merges segment files, so the count
	// moves with the data, not with time.
	fileSlack = 16
	// maxWarmup caps the warm-up, otherwise a fifth of the run.
	maxWarmup = 10 * time.Minute
)

// judgesMemory says whether the RSS bound applies: not under the race
// detector, whose own memory is no measure of Tandem's. ThreadSanitizer
// keeps shadow and metadata for every heap address and sync object a run
// touches, and its allocator for goroutine histories, none of which goes
// back to the OS (Go's documentation: memory may grow 5-10x). Measured
// one after the other, 5-minute soaks of the same code with and without
// -race:
// anonymous RSS 502 -> 831 MiB with it, its metadata mapping 18 -> 66 MiB
// and its allocator's 160 -> 344 MiB, while the Go heap held (97 -> 182
// MiB) and the C heap held (92 -> 108 MiB) stayed within what the run
// without it reached in its first minute (Go 141-186, C 84-139 MiB; its
// anonymous RSS 199 -> 235 MiB, within bounds). A race run does a fifth
// of the work in its time, so its minutes are all warm-up: it checks
// correctness, goroutines and open files, and the memory bound is the job
// of the long run without it.
const judgesMemory = !raceEnabled

// Config configures one soak run. Duration, Sample, Docs and Searchers
// must be set (Run refuses a Config without them, naming the field); the
// other zero fields have the meaning their comments give.
type Config struct {
	Dir       string        // the collection; "" means a new one in a temporary directory, removed afterwards
	Duration  time.Duration // of the load, after prefill
	Sample    time.Duration // between samples of the process
	Warmup    time.Duration // 0 means min(maxWarmup, Duration/5)
	Docs      int           // prefilled documents, and the live count the deleter keeps; at least 100
	Searchers int           // concurrent searchers; at least 1
	Model     bool          // the default ONNX model instead of external vectors
	LateIndex string        // the late-interaction index of the first late model; "" means the engine's default
	Seed      uint64        // of documents, queries and operations
	// Progress receives a line as the prefill starts and ends and one
	// with each sample; nil means none.
	Progress io.Writer
	// AtStop, if set, is called when the load stops, before the
	// collection closes (the command writes its heap profile there); its
	// error ends the run.
	AtStop func() error
}

// validate names the first field of c that Run cannot run with.
func (c *Config) validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("soak: Config.Duration is %s, must be positive", c.Duration)
	case c.Sample <= 0:
		return fmt.Errorf("soak: Config.Sample is %s, must be positive", c.Sample)
	case c.Warmup < 0:
		return fmt.Errorf("soak: Config.Warmup is %s, must not be negative", c.Warmup)
	case c.Docs < 100:
		return fmt.Errorf("soak: Config.Docs is %d, must be at least 100", c.Docs)
	case c.Searchers < 1:
		return fmt.Errorf("soak: Config.Searchers is %d, must be at least 1", c.Searchers)
	}
	return nil
}

// The external models of a soak collection: documents and queries bring
// their vectors, so the load stays on the engine, not on ONNX inference.
const (
	denseModel     = "soak-dense"
	lateModel      = "soak-late"
	lateFAISSModel = "soak-late-faiss"
)

// Sample is one look at the process.
type Sample struct {
	Elapsed         time.Duration
	RSS, HWM, Heap  int64
	Anon, File      int64 // RSS's anonymous and file-backed parts (RssAnon, RssFile)
	GoSys           int64 // what the Go runtime holds from the OS (Sys - HeapReleased)
	CInUse, CHeld   int64 // the C heap (FAISS, ONNX Runtime): malloc's bytes in use, and held from the OS
	Disk            int64 // the collection's bytes on disk (allocated blocks: Badger's logs are sparse)
	Goroutines      int
	Files           int
	Docs            uint64
	Searches        uint64 // cumulative
	Writes, Deletes uint64 // documents upserted and deleted, cumulative
	Errors          uint64
	Violations      uint64
}

// Report is what a soak saw.
type Report struct {
	Config   Config // as run, its Warmup filled in
	Samples  []Sample
	Prefill  time.Duration
	Searches uint64
	Hits     uint64
	PerMode  map[string]uint64
	Upserts  uint64 // documents
	Created  uint64 // of which ids not live when picked (new or re-created)
	Deletes  uint64 // documents
	// Errors are the engine's errors; Violations the hits that broke a
	// check (first few of each kept, all counted).
	Errors, Violations         []string
	ErrorCount, ViolationCount uint64
	ViolationKinds             map[string]uint64
	Growth                     []string // bounds exceeded after warm-up
	Interrupted                bool
	Final                      string // the end-of-run check of storage against the ledger
}

// Verdict is nil when the soak passed, else an error that gives every
// reason it failed: an interruption, engine errors, violating hits (with
// the first of each), the bounds exceeded and the end-of-run check.
func (r *Report) Verdict() error {
	var why []string
	if r.Interrupted {
		why = append(why, "interrupted")
	}
	if r.ErrorCount > 0 {
		why = append(why, fmt.Sprintf("%d engine errors (first: %s)", r.ErrorCount, r.Errors[0]))
	}
	if r.ViolationCount > 0 {
		why = append(why, fmt.Sprintf("%d violating hits (first: %s)", r.ViolationCount, r.Violations[0]))
	}
	why = append(why, r.Growth...)
	if r.Final != "" {
		why = append(why, r.Final)
	}
	if len(why) > 0 {
		return fmt.Errorf("soak failed: %s", strings.Join(why, "; "))
	}
	return nil
}

// Run runs the whole soak: open or create the collection, prefill it,
// run the load for c.Duration while sampling, then judge. An error means
// the soak could not run (a bad Config, a collection that is not a soak's,
// a failed prefill); what a run that ran found is in the Report, and its
// Verdict says whether it passed. Cancelling ctx stops the load early and
// the Report says it was interrupted.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Warmup == 0 {
		c.Warmup = min(maxWarmup, c.Duration/5)
	}
	progress := c.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir := c.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tandem-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp + "/collection"
	}
	w, err := newWorld(c)
	if err != nil {
		return nil, err
	}
	e, err := engine.Open(dir, &engine.Options{Schema: w.schema(), Dense: w.onnx(), Late: w.onnx(), LateIndex: c.LateIndex})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	if err := w.checkCollection(e); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	res := &Report{Config: c, PerMode: map[string]uint64{}, ViolationKinds: map[string]uint64{}}
	fmt.Fprintf(progress, "soak: %s, prefilling %d documents (ids %s..%s live, the next %d deleted)\n", dir, c.Docs, synth.ID(0), synth.ID(c.Docs-1), c.Docs)
	start := time.Now()
	if err := w.prefill(ctx, e); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	res.Prefill = time.Since(start)
	fmt.Fprintf(progress, "soak: prefilled in %s; load for %s: %d searchers, 1 writer, 1 deleter; samples every %s, warm-up %s\n",
		res.Prefill.Round(time.Millisecond), c.Duration, c.Searchers, c.Sample, c.Warmup)

	run := c
	run.Dir = dir // the samples measure it on disk
	w.run(ctx, e, run, res, progress)
	if c.AtStop != nil {
		if err := c.AtStop(); err != nil {
			return nil, err
		}
	}

	if err := ctx.Err(); err != nil {
		res.Interrupted = true
	}
	if res.ErrorCount == 0 && !res.Interrupted {
		if err := w.checkFinal(e); err != nil {
			res.Final = err.Error()
		}
	}
	err = e.Close()
	e = nil
	if err != nil {
		res.ErrorCount++
		res.Errors = append(res.Errors, "close: "+err.Error())
	}
	res.Growth = judgeGrowth(res.Samples, c.Warmup+min(time.Second, c.Sample/2), judgesMemory)
	return res, nil
}

// world is the soak's documents, queries, filters and ledger.
type world struct {
	c      Config
	gen    *synth.Generator
	dense  tandem.Model // gen's external model
	tgen   *synth.TokenGenerator
	ledger *ledger
	// modes are the searches every searcher cycles through: a name and
	// its request's retrievers, fusion and weights.
	modes   []searchMode
	filters []searchFilter
	queries []query
}

type searchMode struct {
	name       string
	retrievers []string
	fusion     string
	weight     map[string]float64
}

type searchFilter struct {
	json string
	expr filter.Expr // checked against the collection's schema
}

type query struct {
	text   string
	dense  []float32
	tokens [][]float32
}

func newWorld(c Config) (*world, error) {
	corpus := synth.Default()
	corpus.Seed, corpus.Vocab, corpus.MinWords, corpus.MaxWords, corpus.Categories, corpus.Dim, corpus.Clusters, corpus.Model =
		c.Seed, 20_000, 8, 40, 20, 64, 64, denseModel
	gen, err := synth.New(corpus)
	if err != nil {
		return nil, err
	}
	tc := synth.DefaultTokens()
	tc.Seed, tc.Dim, tc.Tokens, tc.QueryTokens, tc.Centres, tc.Common, tc.Topics, tc.Model = c.Seed, 32, 16, 8, 1024, 64, 64, lateModel
	tgen, err := synth.NewTokens(tc)
	if err != nil {
		return nil, err
	}
	w := &world{c: c, gen: gen, dense: corpus.ModelSpec(), tgen: tgen, ledger: newLedger(2 * c.Docs)}
	for i := range 256 {
		text, dense := gen.Query(i)
		tokens, _ := tgen.Query(i, c.Docs)
		w.queries = append(w.queries, query{text: text, dense: dense, tokens: tokens})
	}
	return w, nil
}

func (w *world) onnx() []string {
	if w.c.Model {
		return []string{encoder.DefaultModel}
	}
	return nil
}

// schema is the soak collection's: a text field, a keyword, a number and
// a date for filters, "owner" and "ver" to check each hit's fields, and
// the external models unless --model.
func (w *world) schema() *tandem.Schema {
	s := &tandem.Schema{IDField: "_id", Strict: true, Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "cat", Type: tandem.Keyword},
		{Name: "year", Type: tandem.Number},
		{Name: "published", Type: tandem.Date},
		{Name: "owner", Type: tandem.Keyword},
		{Name: "ver", Type: tandem.Number},
	}}
	if !w.c.Model {
		late := w.tgen.Corpus().ModelSpec()
		late.LateIndex = w.c.LateIndex
		faiss := late
		faiss.Name, faiss.LateIndex = lateFAISSModel, "FAISS"
		s.Models = []tandem.Model{w.dense, late, faiss}
	}
	return s
}

// checkCollection makes sure a given collection is a soak collection,
// then prepares the modes and filters for it.
func (w *world) checkCollection(e *engine.Engine) error {
	s := e.Schema()
	for _, f := range w.schema().Fields {
		if g, ok := s.Field(f.Name); !ok || g.Type != f.Type {
			return fmt.Errorf("not a soak collection: no %s field %q", f.Type, f.Name)
		}
	}
	var dense, late []string
	for _, r := range e.Retrievers() {
		kind, _, _ := strings.Cut(r, ":")
		switch kind {
		case "dense":
			dense = append(dense, r)
		case "late":
			late = append(late, r)
		}
	}
	if len(dense) == 0 || len(late) == 0 {
		return fmt.Errorf("not a soak collection: retrievers %v (want dense and late ones)", e.Retrievers())
	}
	for _, m := range e.Models() {
		if m.External != !w.c.Model {
			return fmt.Errorf("a soak collection made %s --model; run this one the same way", map[bool]string{true: "without", false: "with"}[w.c.Model])
		}
	}
	all := e.Retrievers()
	w.modes = []searchMode{{name: "bm25", retrievers: []string{"bm25"}}}
	for _, r := range append(slices.Clone(dense), late...) {
		w.modes = append(w.modes, searchMode{name: r, retrievers: []string{r}})
	}
	for _, f := range []string{"minmax", "rrf", "zscore", "dbsf", "combmnz", "max"} {
		w.modes = append(w.modes, searchMode{name: "hybrid " + f, retrievers: all, fusion: f})
	}
	w.modes = append(w.modes,
		searchMode{name: "hybrid wrrf bm25+dense", retrievers: []string{"bm25", dense[0]}, fusion: "wrrf", weight: map[string]float64{"bm25": 0.5, "dense": 2}},
		searchMode{name: "hybrid combsum dense+late", retrievers: []string{dense[0], late[0]}, fusion: "combsum"})
	for _, js := range []string{
		fmt.Sprintf(`{"term":{"cat":%q}}`, synth.Category(3)),
		`{"range":{"year":{"gte":2000,"lt":2010}}}`,
		`{"range":{"published":{"gte":"2015-06-01"}}}`,
		fmt.Sprintf(`{"and":[{"terms":{"cat":[%q,%q,%q]}},{"not":{"range":{"year":{"lt":1995}}}}]}`, synth.Category(1), synth.Category(5), synth.Category(9)),
		fmt.Sprintf(`{"or":[{"prefix":{"cat":"c01"}},{"term":{"year":2001}},{"not":{"exists":"published"}}]}`),
	} {
		x, err := filter.Parse([]byte(js))
		if err == nil {
			err = filter.Check(x, s)
		}
		if err != nil {
			return fmt.Errorf("soak filter %s: %w", js, err)
		}
		w.filters = append(w.filters, searchFilter{json: js, expr: x})
	}
	return nil
}

// doc is version ver of document id: its content is drawn from ver, so
// every version differs, and "owner" and "ver" record what it is.
func (w *world) doc(id int, ver uint64) tandem.Doc {
	d := w.gen.Doc(int(ver))
	d.ID = synth.ID(id)
	d.Fields["owner"] = d.ID
	d.Fields["ver"] = float64(ver)
	if ver%10 != 0 { // a tenth of the versions have no date
		d.Fields["published"] = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, int(ver*7919%9000)).Format("2006-01-02")
	}
	if w.c.Model {
		d.Vectors = nil
	} else {
		tokens := w.tgen.Doc(int(ver)).Vectors[lateModel].Tokens
		d.Vectors[lateModel] = tandem.Vectors{Tokens: tokens}
		d.Vectors[lateFAISSModel] = tandem.Vectors{Tokens: tokens}
	}
	return d
}

// prefill upserts ids 0..Docs-1 and deletes ids Docs..2*Docs-1, so that
// the ledger knows the state of every id, in a new collection or in one
// an earlier soak left; any other document such a collection holds (from
// a soak with more --docs) is deleted first.
func (w *world) prefill(ctx context.Context, e *engine.Engine) error {
	n := w.c.Docs
	var others []string
	err := e.Store().ScanDocs(ctx, func(_ uint64, d tandem.Doc) error {
		if id, err := strconv.Atoi(strings.TrimPrefix(d.ID, "d")); err != nil || id < 0 || id >= 2*n {
			others = append(others, d.ID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(others) > 0 {
		if _, err := e.Delete(ctx, others); err != nil {
			return fmt.Errorf("delete %d documents beyond the soak's ids: %w", len(others), err)
		}
	}
	for lo := 0; lo < n; lo += 500 {
		ids := make([]int, 0, 500)
		for i := lo; i < min(n, lo+500); i++ {
			ids = append(ids, i)
		}
		if err := w.upsert(ctx, e, ids); err != nil {
			return err
		}
	}
	ids := make([]int, 0, n)
	for i := n; i < 2*n; i++ {
		ids = append(ids, i)
	}
	w.ledger.beginDelete(ids)
	return w.delete(ctx, e, ids)
}

func (w *world) upsert(ctx context.Context, e *engine.Engine, ids []int) error {
	vers := w.ledger.beginUpsert(ids)
	docs := make([]tandem.Doc, len(ids))
	for i, id := range ids {
		docs[i] = w.doc(id, vers[i])
	}
	if _, err := e.Index(ctx, docs); err != nil {
		return fmt.Errorf("upsert %d documents: %w", len(docs), err)
	}
	w.ledger.ackUpsert(ids, vers)
	return nil
}

// delete deletes ids, whose deletion the ledger has begun (beginDelete or
// pickDeletes).
func (w *world) delete(ctx context.Context, e *engine.Engine, ids []int) error {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = synth.ID(id)
	}
	if _, err := e.Delete(ctx, names); err != nil {
		return fmt.Errorf("delete %d documents: %w", len(ids), err)
	}
	w.ledger.ackDelete(ids)
	return nil
}

// counters are the load's running totals, shared by its goroutines.
type counters struct {
	searches, hits, upserts, created, deletes atomic.Uint64
	errors, violations                        atomic.Uint64
	mu                                        struct {
		sync.Mutex
		perMode        map[string]uint64
		errors         []string
		violations     []string
		violationKinds map[string]uint64
	}
}

const keepFirst = 10 // errors and violations kept verbatim

func (k *counters) fail(err error) {
	k.errors.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.mu.errors) < keepFirst {
		k.mu.errors = append(k.mu.errors, err.Error())
	}
}

func (k *counters) violation(kind, msg string) {
	k.violations.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.violationKinds[kind]++
	if len(k.mu.violations) < keepFirst {
		k.mu.violations = append(k.mu.violations, kind+": "+msg)
	}
}

// run runs the load until c.Duration has passed, ctx is done or the engine
// fails, sampling the process as it goes.
func (w *world) run(ctx context.Context, e *engine.Engine, c Config, res *Report, progress io.Writer) {
	var k counters
	k.mu.perMode, k.mu.violationKinds = map[string]uint64{}, map[string]uint64{}
	// Workers stop between operations when stop closes; their own calls
	// run to completion, so the end of the run is never an error.
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	work := func(f func(rng *rand.Rand) error, stream uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.Seed, stream))
			if err := f(rng); err != nil {
				k.fail(err)
				halt()
			}
		}()
	}
	bg := context.Background()
	work(func(rng *rand.Rand) error { // the writer
		for !stopped() {
			ids := w.ledger.pickUpserts(rng, 1+rng.IntN(16))
			if err := w.upsert(bg, e, ids.all); err != nil {
				return err
			}
			k.upserts.Add(uint64(len(ids.all)))
			k.created.Add(uint64(ids.created))
		}
		return nil
	}, 1)
	work(func(rng *rand.Rand) error { // the deleter keeps about Docs live
		for !stopped() {
			ids := w.ledger.pickDeletes(rng, 1+rng.IntN(8), c.Docs)
			if len(ids) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err := w.delete(bg, e, ids); err != nil {
				return err
			}
			k.deletes.Add(uint64(len(ids)))
		}
		return nil
	}, 2)
	for s := range c.Searchers {
		work(func(rng *rand.Rand) error {
			for i := s; !stopped(); i += c.Searchers {
				if err := w.search(e, i, rng, &k); err != nil {
					return err
				}
			}
			return nil
		}, 100+uint64(s))
	}

	// Goroutines and open files are each sample's floor: the least of
	// readings every probeEvery since the previous sample, so that the
	// goroutines and files of operations in flight at one instant do not
	// count; a leak raises the floor.
	const probeEvery = 250 * time.Millisecond
	floorG, floorF := -1, -1
	probe := func() {
		g, f := runtime.NumGoroutine(), procstat.OpenFiles()
		if floorG < 0 || g < floorG {
			floorG = g
		}
		if floorF < 0 || f < floorF {
			floorF = f
		}
	}
	start := time.Now()
	sample := func() {
		probe()
		s := takeSample(e, time.Since(start), &k)
		s.Goroutines, s.Files = floorG, floorF
		s.Disk = procstat.DirBytes(c.Dir)
		floorG, floorF = -1, -1
		res.Samples = append(res.Samples, s)
		fmt.Fprintln(progress, progressLine(res.Samples, c.Duration))
	}
	sample()
	probes := time.NewTicker(probeEvery)
	defer probes.Stop()
	tick := time.NewTicker(c.Sample)
	deadline := time.NewTimer(c.Duration)
	failed := make(chan struct{})
	go func() { wg.Wait(); close(failed) }() // every worker returned: the load failed or stopped
loop:
	for {
		select {
		case <-probes.C:
			probe()
		case <-tick.C:
			if c.Duration-time.Since(start) > c.Sample/4 { // else the deadline's sample is this one
				sample()
			}
		case <-deadline.C:
			sample()
			break loop
		case <-ctx.Done():
			sample()
			break loop
		case <-failed:
			sample()
			break loop
		}
	}
	tick.Stop()
	deadline.Stop()
	halt()
	<-failed

	res.Searches, res.Hits = k.searches.Load(), k.hits.Load()
	res.Upserts, res.Created, res.Deletes = k.upserts.Load(), k.created.Load(), k.deletes.Load()
	res.ErrorCount, res.ViolationCount = k.errors.Load(), k.violations.Load()
	k.mu.Lock()
	res.PerMode, res.Errors, res.Violations, res.ViolationKinds = k.mu.perMode, k.mu.errors, k.mu.violations, k.mu.violationKinds
	k.mu.Unlock()
}

// search runs search i: mode i mod len(modes), and the filters in turn
// (one search in len(filters)+1 has none), then checks every hit.
func (w *world) search(e *engine.Engine, i int, rng *rand.Rand, k *counters) error {
	mode := w.modes[i%len(w.modes)]
	q := w.queries[rng.IntN(len(w.queries))]
	req := engine.Request{Text: q.text, K: 10, Retrievers: mode.retrievers, Fusion: mode.fusion, Weight: mode.weight}
	if rng.IntN(5) == 0 {
		req.K, req.Offset = 25, 5
	}
	if !w.c.Model {
		req.Vectors = map[string]tandem.Vectors{denseModel: {Dense: q.dense}, lateModel: {Tokens: q.tokens}, lateFAISSModel: {Tokens: q.tokens}}
	}
	var f *searchFilter
	if j := (i / len(w.modes)) % (len(w.filters) + 1); j < len(w.filters) {
		f = &w.filters[j]
		req.Filter = []byte(f.json)
	}
	began := w.ledger.now()
	res, err := e.Search(context.Background(), req)
	if err != nil {
		return fmt.Errorf("search %s (filter %s): %w", mode.name, req.Filter, err)
	}
	k.searches.Add(1)
	k.hits.Add(uint64(len(res.Hits)))
	k.mu.Lock()
	k.mu.perMode[mode.name]++
	k.mu.Unlock()
	schema := e.Schema()
	seen := map[string]bool{}
	for _, h := range res.Hits {
		where := fmt.Sprintf("hit %s of %s search (filter %s)", h.ID, mode.name, req.Filter)
		if seen[h.ID] {
			k.violation("duplicate", where)
		}
		seen[h.ID] = true
		if owner, _ := h.Fields["owner"].(string); owner != h.ID {
			k.violation("owner", fmt.Sprintf("%s: fields of %q", where, owner))
			continue
		}
		if f != nil && !filter.Match(f.expr, schema, h.Fields) {
			k.violation("filter", fmt.Sprintf("%s: fields %v", where, h.Fields))
		}
		id, err := strconv.Atoi(strings.TrimPrefix(h.ID, "d"))
		ver, ok := h.Fields["ver"].(float64)
		if err != nil || id < 0 || id >= w.ledger.size || !ok {
			k.violation("unknown", where)
			continue
		}
		if kind, msg := w.ledger.checkHit(id, began, uint64(ver)); kind != "" {
			k.violation(kind, where+": "+msg)
		}
	}
	return nil
}

// checkFinal compares storage with the ledger once the load has stopped:
// every live id is stored at its last acknowledged version, no other id
// is stored, and the count agrees.
func (w *world) checkFinal(e *engine.Engine) error {
	st := e.Store()
	live := 0
	for id := range w.ledger.size {
		want, ver := w.ledger.final(id)
		num, ok, err := st.Lookup(synth.ID(id))
		if err != nil {
			return fmt.Errorf("final check: %w", err)
		}
		if want == finalLive && !ok {
			return fmt.Errorf("final check: %s is not stored, but its last upsert began after its last delete was acknowledged", synth.ID(id))
		}
		if want == finalGone && ok {
			return fmt.Errorf("final check: %s is stored, but its last delete began after its last upsert was acknowledged (or it was never upserted)", synth.ID(id))
		}
		if !ok {
			continue
		}
		live++
		d, ok, err := st.Get(num)
		if err != nil || !ok {
			return fmt.Errorf("final check: %s: document %d: found %v, %v", synth.ID(id), num, ok, err)
		}
		if got, _ := d.Fields["ver"].(float64); uint64(got) != ver {
			return fmt.Errorf("final check: %s stored at version %v, last acknowledged %d", synth.ID(id), got, ver)
		}
	}
	if n := e.Count(); n != uint64(live) {
		return fmt.Errorf("final check: the collection counts %d documents, the ledger %d", n, live)
	}
	return nil
}

// ledger records, per id, what the writer and the deleter began and
// had acknowledged, on one logical clock that searches read too. It lets
// a search's hit be judged against what was certainly true when the
// search began, whatever the writer and deleter did meanwhile.
type ledger struct {
	size int // ids 0..size-1
	mu   struct {
		sync.Mutex
		clock uint64
		ids   []idState
		live  []int // ids acknowledged upserted and not since picked for deletion
		pos   []int // index in live, or -1
	}
}

// idState is one id's history. Versions are clock values of upsert
// starts, so they grow with each upsert of an id.
type idState struct {
	upStart    uint64 // clock at the start of the last upsert (its version)
	upInflight bool   // an upsert has begun and is not acknowledged
	// The last acknowledged delete: clock at its start and its
	// acknowledgement, and whether no upsert was in flight when it began
	// (then every earlier upsert was committed before it).
	delStart, delAck uint64
	delClean         bool
	pendStart        uint64 // a delete begun and not yet acknowledged
	pendClean        bool
	acks             [4]ack // the last acknowledged upserts, a ring
	nacks            int
}

type ack struct{ clock, ver uint64 }

func newLedger(size int) *ledger {
	l := &ledger{size: size}
	l.mu.ids = make([]idState, size)
	l.mu.pos = make([]int, size)
	for i := range l.mu.pos {
		l.mu.pos[i] = -1
	}
	return l
}

func (l *ledger) now() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	return l.mu.clock
}

func (l *ledger) beginUpsert(ids []int) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	vers := make([]uint64, len(ids))
	for i, id := range ids {
		l.mu.clock++
		s := &l.mu.ids[id]
		s.upStart, s.upInflight, vers[i] = l.mu.clock, true, l.mu.clock
	}
	return vers
}

func (l *ledger) ackUpsert(ids []int, vers []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	for i, id := range ids {
		s := &l.mu.ids[id]
		s.upInflight = false
		s.acks[s.nacks%len(s.acks)] = ack{clock: l.mu.clock, ver: vers[i]}
		s.nacks++
		if l.mu.pos[id] < 0 {
			l.mu.pos[id] = len(l.mu.live)
			l.mu.live = append(l.mu.live, id)
		}
	}
}

func (l *ledger) beginDelete(ids []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beginDeleteLocked(ids)
}

func (l *ledger) beginDeleteLocked(ids []int) {
	l.mu.clock++
	for _, id := range ids {
		s := &l.mu.ids[id]
		s.pendStart, s.pendClean = l.mu.clock, !s.upInflight
		l.unliveLocked(id)
	}
}

func (l *ledger) ackDelete(ids []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	for _, id := range ids {
		s := &l.mu.ids[id]
		s.delStart, s.delAck, s.delClean = s.pendStart, l.mu.clock, s.pendClean
	}
}

func (l *ledger) unliveLocked(id int) {
	p := l.mu.pos[id]
	if p < 0 {
		return
	}
	last := l.mu.live[len(l.mu.live)-1]
	l.mu.live[p], l.mu.pos[last] = last, p
	l.mu.live = l.mu.live[:len(l.mu.live)-1]
	l.mu.pos[id] = -1
}

// pick is the writer's next batch: distinct ids, of which created
// were not live (new, deleted, or being deleted).
type pick struct {
	all     []int
	created int
}

// pickUpserts picks n distinct ids: each a new version of a live id or,
// half the time, an id that is not live, which may be one the deleter is
// deleting at that moment.
func (l *ledger) pickUpserts(rng *rand.Rand, n int) pick {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p pick
	seen := map[int]bool{}
	for tries := 0; len(p.all) < n && tries < 8*n; tries++ {
		var id int
		if rng.IntN(2) == 0 && len(l.mu.live) > 0 {
			id = l.mu.live[rng.IntN(len(l.mu.live))]
		} else {
			id = rng.IntN(l.size)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		p.all = append(p.all, id)
		if l.mu.pos[id] < 0 {
			p.created++
		}
	}
	return p
}

// pickDeletes picks up to n live ids to delete, none while no more than
// keep are live, and begins their deletion.
func (l *ledger) pickDeletes(rng *rand.Rand, n, keep int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int
	for len(ids) < n && len(l.mu.live) > keep {
		id := l.mu.live[rng.IntN(len(l.mu.live))]
		l.unliveLocked(id)
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		l.beginDeleteLocked(ids)
	}
	return ids
}

// checkHit judges a hit on id at version ver, from a search that began at
// clock began. It returns the kind of violation and a message, or "".
func (l *ledger) checkHit(id int, began, ver uint64) (kind, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.mu.ids[id]
	// Deleted before the search began, with nothing upserting the id
	// when the delete began, and no upsert begun since (acknowledged or
	// not): the document was gone for the whole search.
	if s.delAck != 0 && s.delAck < began && s.delClean && s.upStart < s.delStart {
		return "deleted", fmt.Sprintf("deleted at clock %d (begun %d), search began at %d, last upsert began at %d", s.delAck, s.delStart, began, s.upStart)
	}
	if ver > s.upStart {
		return "version", fmt.Sprintf("version %d was never written (last upsert began at %d)", ver, s.upStart)
	}
	// Hits are read from storage, so a hit is at least at the last
	// version acknowledged before the search began; the ring knows it
	// unless every version it holds came after.
	var floor uint64
	known := s.nacks <= len(s.acks)
	for _, a := range s.acks[:min(s.nacks, len(s.acks))] {
		if a.clock < began {
			floor, known = max(floor, a.ver), true
		}
	}
	if known && ver < floor {
		return "stale", fmt.Sprintf("version %d, but %d was acknowledged before the search began", ver, floor)
	}
	return "", ""
}

// finalState is what storage must hold for an id once the load has
// stopped.
type finalState int

const (
	finalGone   finalState = iota
	finalLive              // at the last acknowledged version
	finalEither            // the last upsert and delete overlapped: either committed last
)

// final is id's state once the load has stopped, and its last
// acknowledged version.
func (l *ledger) final(id int) (want finalState, ver uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.mu.ids[id]
	if s.nacks == 0 {
		return finalGone, 0
	}
	last := s.acks[(s.nacks-1)%len(s.acks)]
	switch {
	case s.delAck == 0 || s.upStart > s.delAck:
		return finalLive, last.ver
	case s.delStart > last.clock:
		return finalGone, last.ver
	}
	return finalEither, last.ver
}

// takeSample looks at the process.
func takeSample(e *engine.Engine, elapsed time.Duration, k *counters) Sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := Sample{Elapsed: elapsed, Heap: int64(ms.HeapInuse), Goroutines: runtime.NumGoroutine(), Docs: e.Count(),
		Searches: k.searches.Load(), Writes: k.upserts.Load(), Deletes: k.deletes.Load(),
		Errors: k.errors.Load(), Violations: k.violations.Load()}
	m := procstat.ReadMemory()
	s.RSS, s.HWM, s.Anon, s.File = m.RSS, m.Peak, m.Anon, m.File
	s.GoSys = int64(ms.Sys - ms.HeapReleased)
	s.Files = procstat.OpenFiles()
	if u, h, ok := malloc.Stats(); ok {
		s.CInUse, s.CHeld = int64(u), int64(h)
	}
	return s
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// progressLine is the line printed with each sample.
func progressLine(samples []Sample, total time.Duration) string {
	s := samples[len(samples)-1]
	var searchRate, writeRate float64
	if len(samples) > 1 {
		p := samples[len(samples)-2]
		if dt := (s.Elapsed - p.Elapsed).Seconds(); dt > 0 {
			searchRate = float64(s.Searches-p.Searches) / dt
			writeRate = float64(s.Writes+s.Deletes-p.Writes-p.Deletes) / dt
		}
	}
	eta := max(0, total-s.Elapsed)
	return fmt.Sprintf("soak: %s of %s (ETA %s): %.1f searches/s, %.1f writes/s, %d searches, %d upserted, %d deleted, %d errors, %d violations | RSS %.0f MiB (%.0f anonymous, %.0f files; peak %.0f), Go heap %.0f MiB of %.0f held, C heap %.0f MiB of %.0f held, %d goroutines, %d open files, disk %.0f MiB, %d docs",
		s.Elapsed.Round(time.Second), total, eta.Round(time.Second), searchRate, writeRate, s.Searches, s.Writes, s.Deletes, s.Errors, s.Violations,
		mib(s.RSS), mib(s.Anon), mib(s.File), mib(s.HWM), mib(s.Heap), mib(s.GoSys), mib(s.CInUse), mib(s.CHeld), s.Goroutines, s.Files, mib(s.Disk), s.Docs)
}

// judgeGrowth applies the bounds: the end of the run (the smallest of its
// last three samples after warm-up) against the warm-up's peak (its
// samples up to warmup, the first taken as the load starts). The caller
// adds to warmup the delay a sample due at its end may take. RSS is
// judged only when memory is (judgesMemory).
func judgeGrowth(samples []Sample, warmup time.Duration, memory bool) []string {
	var base, tail []Sample
	for _, s := range samples {
		if s.Elapsed <= warmup {
			base = append(base, s)
		} else {
			tail = append(tail, s)
		}
	}
	if len(base) == 0 || len(tail) == 0 {
		return []string{fmt.Sprintf("no growth check: %d samples in the warm-up of %s and %d after it (lengthen --duration or shorten --sample)", len(base), warmup, len(tail))}
	}
	tail = tail[max(0, len(tail)-3):]
	peak := func(ss []Sample, f func(Sample) int64) int64 {
		m := f(ss[0])
		for _, s := range ss[1:] {
			m = max(m, f(s))
		}
		return m
	}
	low := func(ss []Sample, f func(Sample) int64) int64 {
		m := f(ss[0])
		for _, s := range ss[1:] {
			m = min(m, f(s))
		}
		return m
	}
	var out []string
	rss := func(s Sample) int64 { return s.RSS }
	baseRSS, endRSS := peak(base, rss), low(tail, rss)
	if limit := baseRSS + max(int64(float64(baseRSS)*rssGrowth), rssSlack); memory && endRSS > limit {
		out = append(out, fmt.Sprintf("RSS grew from %.0f MiB (warm-up peak) to %.0f MiB, above the bound of %.0f MiB", mib(baseRSS), mib(endRSS), mib(limit)))
	}
	gor := func(s Sample) int64 { return int64(s.Goroutines) }
	if b, e := peak(base, gor), low(tail, gor); e > b+goroutineSlack {
		out = append(out, fmt.Sprintf("goroutines grew from %d (warm-up peak) to %d, more than %d more", b, e, goroutineSlack))
	}
	files := func(s Sample) int64 { return int64(s.Files) }
	if b, e := peak(base, files), low(tail, files); e > b+fileSlack {
		out = append(out, fmt.Sprintf("open files grew from %d (warm-up peak) to %d, more than %d more", b, e, fileSlack))
	}
	return out
}

// Markdown is the run's report: the samples, the totals and the verdict.
func (r *Report) Markdown() string {
	c := r.Config
	var b strings.Builder
	models := "external dense (64-d) and late-interaction (16 tokens of 32 values; " + strconv.Quote(c.LateIndex) + " and FAISS) models"
	if c.Model {
		models = encoder.DefaultModel + " (dense and late, " + strconv.Quote(c.LateIndex) + ")"
	}
	race := ""
	if raceEnabled {
		race = ", race detector on"
	}
	fmt.Fprintf(&b, "## Tandem soak: %s, %d searchers, 1 writer, 1 deleter, %d documents kept live, %s%s\n\n", c.Duration, c.Searchers, c.Docs, models, race)
	fmt.Fprintf(&b, "Prefill %s; warm-up %s (the bounds compare the end of the run with the warm-up's peak).\n\n", r.Prefill.Round(time.Millisecond), c.Warmup)
	b.WriteString("| elapsed | RSS MiB | anonymous | files | peak RSS | Go heap in use | Go held | C heap in use | C held | goroutines (floor) | open files (floor) | disk MiB | documents | searches | upserted | deleted | errors | violations |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %d | %.0f | %d | %d | %d | %d | %d | %d |\n", s.Elapsed.Round(time.Second),
			mib(s.RSS), mib(s.Anon), mib(s.File), mib(s.HWM), mib(s.Heap), mib(s.GoSys), mib(s.CInUse), mib(s.CHeld),
			s.Goroutines, s.Files, mib(s.Disk), s.Docs, s.Searches, s.Writes, s.Deletes, s.Errors, s.Violations)
	}
	secs := c.Duration.Seconds()
	if n := len(r.Samples); n > 0 {
		secs = r.Samples[n-1].Elapsed.Seconds()
	}
	fmt.Fprintf(&b, "\n%d searches (%.1f/s), %d hits checked; %d documents upserted (%d of them new or re-created ids), %d deleted (%.1f writes/s).\n\n",
		r.Searches, float64(r.Searches)/secs, r.Hits, r.Upserts, r.Created, r.Deletes, float64(r.Upserts+r.Deletes)/secs)
	modes := make([]string, 0, len(r.PerMode))
	for m := range r.PerMode {
		modes = append(modes, m)
	}
	slices.Sort(modes)
	b.WriteString("Searches by mode: ")
	for i, m := range modes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", m, r.PerMode[m])
	}
	b.WriteString(".\n\n")
	if judgesMemory {
		fmt.Fprintf(&b, "Bounds after warm-up: RSS at most the warm-up's peak + max(%.0f%%, %d MiB); goroutines + %d; open files + %d.\n\n",
			rssGrowth*100, rssSlack>>20, goroutineSlack, fileSlack)
	} else {
		fmt.Fprintf(&b, "Bounds after warm-up: goroutines + %d; open files + %d. Memory is reported, not judged: the race detector's own memory grows with every address and sync object the run touches (the long soak without it bounds RSS).\n\n",
			goroutineSlack, fileSlack)
	}
	fmt.Fprintf(&b, "Errors: %d. Violating hits: %d %v.\n", r.ErrorCount, r.ViolationCount, r.ViolationKinds)
	for _, s := range r.Errors {
		fmt.Fprintf(&b, "- error: %s\n", s)
	}
	for _, s := range r.Violations {
		fmt.Fprintf(&b, "- violation: %s\n", s)
	}
	if err := r.Verdict(); err != nil {
		fmt.Fprintf(&b, "\n**FAIL**: %v\n", err)
	} else {
		bounded := "RSS, goroutines and open files"
		if !judgesMemory {
			bounded = "goroutines and open files"
		}
		fmt.Fprintf(&b, "\n**PASS**: no error, every hit matched its filter and none was deleted before its search began, storage agreed with the ledger at the end, and %s stayed within their bounds.\n", bounded)
	}
	return b.String()
}
