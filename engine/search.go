package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/fusion"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/sparse"
)

// DefaultFusion is the fusion method when Request.Fusion is empty. Min-max
// is the default because, with equal weights, it is the best method or
// within a few thousandths of the best over every collection, query split
// and combination of retrievers measured, and RRF, which ignores the
// scores, trails it in each. docs/evaluation.md ("Fusion: why min-max is
// the default") has the figures and the commands that reproduce them; a
// change of default should be measured the same way.
const DefaultFusion = "minmax"

// DefaultDepth is how many hits each retriever contributes to fusion when
// Request.Depth does not say (raised to K+Offset when that is larger).
const DefaultDepth = 100

// Request is a search.
type Request struct {
	// Text is the query text. Without it, bm25 ranks every document the
	// filter matches (every document when there is none) with one equal
	// score.
	Text string
	// Filter is a JSON filter (see package filter); empty means none.
	// It is compiled once: into a Bleve clause for bm25 and a bitmap of
	// document numbers for dense and late retrievers.
	Filter []byte
	// K is the number of hits; 0 means 10. Offset skips hits, for paging.
	K, Offset int
	// Retrievers lists the rankings to run and fuse: "bm25",
	// "dense:<model>", "late:<model>" ("dense" and "late" alone name the
	// collection's first model of that kind). Empty means ["bm25"];
	// Engine.Retrievers lists every one the collection has.
	// "late-exact:<model>" (or "late-exact") scores every document exactly
	// in float32 (latecollect.Reference): the reference late-interaction
	// search, and its exact stage, are measured against, slow on purpose.
	Retrievers []string
	// Fusion names the fusion method when several retrievers run (see
	// fusion.ParseMethod); empty means DefaultFusion.
	Fusion string
	// Depth is the number of hits each retriever contributes to fusion,
	// keyed by its name in Retrievers, its full name or its kind ("bm25",
	// "dense", "late"); a missing or 0 entry means DefaultDepth. Every
	// depth is raised to K+Offset, and to FacetWindow for facets of
	// FacetScopeResults.
	Depth map[string]int
	// Weight is each retriever's weight, keyed like Depth, for the fusion
	// methods that take weights; missing or 0 means 1.
	Weight map[string]float64
	// LateScoring is the late-interaction score: "avg-max" (default) or
	// "sum-max". They rank alike; they differ in scale, which score-based
	// fusion sees.
	LateScoring string
	// IDsOnly skips loading stored fields: hits carry id and score only.
	// Evaluation runs use it; it is several times faster for large K.
	IDsOnly bool
	// Fields restricts BM25 to these text fields with these boosts (0 means
	// the schema's boost). Empty searches every text field as one.
	Fields map[string]float64
	// Vectors brings query vectors, keyed by model name: Dense for the
	// model's dense retriever, Tokens for its late-interaction retriever.
	// A retriever whose vector is given does not encode Text; those of an
	// external model need it. They are checked as documents' vectors are
	// (tandem.Model.CheckVectors).
	Vectors map[string]tandem.Vectors
	// Highlight, when not nil, shows on each hit returned what the query
	// matched in it (tandem.Hit.Highlights; see HighlightRequest).
	Highlight *HighlightRequest
	// Facets asks for facet counts (facets.go, and doc.go's "Facets");
	// none costs nothing. FacetScope is the documents they count,
	// FacetScopeFilter (also when empty) or FacetScopeResults, whose
	// window is FacetWindow fused hits (0 means DefaultFacetWindow,
	// raised to K+Offset).
	Facets      []FacetRequest
	FacetScope  string
	FacetWindow int
}

// Result is a search result.
type Result struct {
	Hits []tandem.Hit `json:"hits"`
	// Retrievers are the rankings that ran, in the order of each hit's
	// Sources; Fusion is the method that fused them ("" for one).
	Retrievers []string `json:"retrievers"`
	Fusion     string   `json:"fusion,omitempty"`
	// Facets are the request's facets, in its order.
	Facets []Facet `json:"facets,omitempty"`
	// Took is the whole search's time. RetrieverTook is each retriever's,
	// in the order of Retrievers: from its start to its ranked list, with
	// the query encoding it waited for (one per model, shared by the
	// model's dense and late retrievers, which run concurrently).
	Took          time.Duration   `json:"-"`
	RetrieverTook []time.Duration `json:"-"`
}

// MaxQueryBytes bounds query text: each distinct term becomes a clause.
const MaxQueryBytes = 16 << 10

// maxK bounds K+Offset so that one request cannot allocate without limit.
const maxK = 100_000

// Retrievers lists the collection's retrievers: "bm25", then
// "dense:<model>" and "late:<model>" for each model it indexes.
func (e *Engine) Retrievers() []string {
	out := []string{"bm25"}
	for _, m := range e.models {
		if m.dense != nil {
			out = append(out, m.dense.Name())
		}
	}
	for _, m := range e.models {
		if m.late != nil {
			out = append(out, m.late.Name())
		}
	}
	return out
}

// Models describes the collection's models.
func (e *Engine) Models() []tandem.Model {
	out := make([]tandem.Model, len(e.models))
	for i, m := range e.models {
		out[i] = m.spec
	}
	return out
}

// retriever is one resolved entry of Request.Retrievers.
type retriever struct {
	name   string // canonical: bm25, dense:<model>, late:<model>
	kind   string // bm25, dense, late
	model  *model
	exact  bool // late interaction in latecollect.Reference mode
	depth  int
	weight float64
	hits   []fusion.Item
	took   time.Duration
	// query is the request's own query vector (dense) or row-major token
	// matrix (late), when it brings one.
	query []float32
	// tokens is the query token matrix a late-interaction retriever
	// searched with, for highlights.
	tokens []float32
}

// resolve maps a requested retriever name to the collection's.
func (e *Engine) resolve(name string) (retriever, error) {
	kind, modelName, _ := strings.Cut(strings.TrimSpace(name), ":")
	switch kind {
	case "bm25":
		if modelName == "" {
			return retriever{name: "bm25", kind: kind}, nil
		}
	case "late-exact":
		r, err := e.resolve("late:" + modelName)
		if err != nil {
			return retriever{}, err
		}
		r.name, r.exact = "late-exact:"+r.model.spec.Name, true
		return r, nil
	case "dense", "late":
		for _, m := range e.models {
			if modelName != "" && m.spec.Name != modelName {
				continue
			}
			if kind == "dense" && m.dense != nil {
				return retriever{name: m.dense.Name(), kind: kind, model: m}, nil
			}
			if kind == "late" && m.late != nil {
				return retriever{name: m.late.Name(), kind: kind, model: m}, nil
			}
		}
	}
	return retriever{}, fmt.Errorf("%w: %q (this collection has: %s)", ErrUnknownRetriever, name, strings.Join(e.Retrievers(), ", "))
}

// Plan is a search request checked and resolved against a collection:
// its retrievers with their depths and weights, its fusion method and its
// compiled filter. Search makes one per request. Package cluster makes one
// on the coordinating node and fuses every shard's rankings with it
// (Plan.Fuse), so that a collection split over several engines fuses
// exactly as one engine would. A Plan holds no lock and no native object.
type Plan struct {
	req        Request // K filled in, Retrievers at least bm25
	schema     *tandem.Schema
	rets       []retriever
	method     fusion.Method
	filter     filter.Expr
	scoring    latecollect.Scoring
	qvecs      map[string]tandem.Vectors // the request's query vectors, checked
	needBitmap bool
	hl         *highlightPlan // nil unless the request highlights
	facets     *facetPlan     // nil without facets
}

// Plan checks req against the collection and resolves it.
func (s *Shard) Plan(req Request) (*Plan, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	e.mu.RUnlock()
	return p, nil
}

// enterPlan enters the engine (the caller calls e.mu.RUnlock when err is
// nil) and plans req.
func (e *Engine) enterPlan(req Request) (*Plan, error) {
	if err := e.enter(); err != nil {
		return nil, err
	}
	p, err := e.plan(req)
	if err != nil {
		e.mu.RUnlock()
		return nil, err
	}
	return p, nil
}

func (e *Engine) plan(req Request) (*Plan, error) {
	if req.K == 0 {
		req.K = 10
	}
	// Compared without adding, so that no k or offset overflows.
	if req.K < 0 || req.Offset < 0 || req.K > maxK || req.Offset > maxK-req.K {
		return nil, fmt.Errorf("%w: k=%d offset=%d (each at least 0, and k+offset at most %d)", ErrBadRequest, req.K, req.Offset, maxK)
	}
	if len(req.Retrievers) == 0 {
		req.Retrievers = []string{"bm25"}
	}
	// The fused ranking reaches K+Offset, and the results scope's facet
	// window.
	want := max(req.K+req.Offset, facetWindow(req))
	p := &Plan{req: req}
	rets := make([]retriever, 0, len(req.Retrievers))
	seen := map[string]bool{}
	for _, name := range req.Retrievers {
		r, err := e.resolve(name)
		if err != nil {
			return nil, err
		}
		if seen[r.name] {
			return nil, fmt.Errorf("%w: retriever %q listed twice", ErrBadRequest, r.name)
		}
		seen[r.name] = true
		r.depth = DefaultDepth
		if d := lookup(req.Depth, name, r); d != 0 {
			if d < 0 || d > maxK {
				return nil, fmt.Errorf("%w: depth %d for %s (0 to %d)", ErrBadRequest, d, name, maxK)
			}
			r.depth = d
		}
		r.depth = max(r.depth, want)
		if len(req.Retrievers) == 1 {
			r.depth = want
		}
		r.weight = lookup(req.Weight, name, r)
		p.needBitmap = p.needBitmap || r.kind != "bm25"
		rets = append(rets, r)
	}
	known := func(n string) bool {
		return seen[n] || slices.Contains(req.Retrievers, n) || slices.ContainsFunc(rets, func(r retriever) bool { return r.kind == n })
	}
	for n := range req.Depth {
		if !known(n) {
			return nil, fmt.Errorf("%w: depth given for %q, which is not among the retrievers", ErrBadRequest, n)
		}
	}
	for n, w := range req.Weight {
		if !known(n) {
			return nil, fmt.Errorf("%w: weight given for %q, which is not among the retrievers", ErrBadRequest, n)
		}
		if w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: weight %v for %q", ErrBadRequest, w, n)
		}
	}
	method := DefaultFusion
	if req.Fusion != "" {
		method = req.Fusion
	}
	var err error
	if p.method, err = fusion.ParseMethod(method); err != nil {
		return nil, fmt.Errorf("%w: fusion: %w", ErrBadRequest, err)
	}
	switch req.LateScoring {
	case "", string(latecollect.ScoreAvgMax):
		p.scoring = latecollect.ScoreAvgMax
	case string(latecollect.ScoreSumMax):
		p.scoring = latecollect.ScoreSumMax
	default:
		return nil, fmt.Errorf("%w: late scoring %q (avg-max or sum-max)", ErrBadRequest, req.LateScoring)
	}
	schema := e.st.Schema()
	if len(strings.TrimSpace(string(req.Filter))) > 0 {
		if p.filter, err = e.compileFilter(req.Filter, schema); err != nil {
			return nil, err
		}
	}
	if p.facets, err = planFacets(req, schema, p.filter); err != nil {
		return nil, err
	}
	if !utf8.ValidString(req.Text) {
		return nil, fmt.Errorf("%w: query text is not valid UTF-8", ErrBadRequest)
	}
	if len(req.Text) > MaxQueryBytes {
		return nil, fmt.Errorf("%w: query text of %d bytes (limit %d)", ErrBadRequest, len(req.Text), MaxQueryBytes)
	}
	if err := sparse.CheckFields(schema, req.Fields); err != nil {
		return nil, fmt.Errorf("%w: fields: %w", ErrBadRequest, err)
	}
	if p.hl, err = planHighlight(schema, req.Highlight, req.K, req.Fields); err != nil {
		return nil, err
	}
	if p.qvecs, err = e.queryVectors(req.Vectors); err != nil {
		return nil, err
	}
	noText := strings.TrimSpace(req.Text) == ""
	for i := range rets {
		r := &rets[i]
		if r.model == nil {
			continue
		}
		v := p.qvecs[r.model.spec.Name]
		if r.kind == "dense" {
			r.query = v.Dense
		} else if v.Tokens != nil {
			r.query = v.Flatten(r.model.spec.TokenDim)
		}
		switch {
		case r.query != nil:
		case r.model.enc == nil:
			part := "dense"
			if r.kind == "late" {
				part = "tokens"
			}
			return nil, fmt.Errorf("%w: %s: %s is an external model, so the request must bring its query vector (Request.Vectors[%q].%s)", ErrBadRequest, r.name, r.model.spec.Name, r.model.spec.Name, strings.ToUpper(part[:1])+part[1:])
		case noText:
			return nil, fmt.Errorf("%w: empty query text: %s needs text or a query vector (bm25 alone ranks a filter's documents)", ErrBadRequest, r.name)
		}
	}
	if !noText && len(req.Fields) == 0 && len(schema.TextFields()) == 0 && slices.ContainsFunc(rets, func(r retriever) bool { return r.kind == "bm25" }) {
		return nil, fmt.Errorf("%w: text: the collection has no text field for bm25 to search; search it with a filter alone (no text), or with a dense or late-interaction retriever", ErrBadRequest)
	}
	p.req, p.rets, p.schema = req, rets, schema
	return p, nil
}

// Retrievers names the plan's retrievers, canonically ("dense:<model>"),
// in the request's order: the order of Fuse's lists and of each hit's
// Sources.
func (p *Plan) Retrievers() []string {
	out := make([]string, len(p.rets))
	for i, r := range p.rets {
		out[i] = r.name
	}
	return out
}

// Depth is the number of hits retriever i contributes to fusion.
func (p *Plan) Depth(i int) int { return p.rets[i].depth }

// Fusion names the fusion method, "" when one retriever runs alone.
func (p *Plan) Fusion() string {
	if len(p.rets) == 1 {
		return ""
	}
	return p.method.String()
}

// Fuse fuses the retrievers' rankings as Search does and returns the
// request's page of hits (Offset to Offset+K). lists[i] is retriever i's
// ranking, best first, cut to Depth(i); fusion.Item.Doc is any key that
// identifies a document across the lists, and breaks ties in the fused
// order.
func (p *Plan) Fuse(lists [][]fusion.Item) ([]fusion.Hit, error) {
	all, err := p.FuseAll(lists)
	return p.Page(all), err
}

// FuseAll fuses the retrievers' rankings as Fuse does and returns the
// fused ranking down to K+Offset, or to the facet window (FacetWindow)
// when that is longer: the ranking the page (Page) and the window are
// cut from.
func (p *Plan) FuseAll(lists [][]fusion.Item) ([]fusion.Hit, error) {
	if len(lists) != len(p.rets) {
		return nil, fmt.Errorf("engine: fuse: %d lists for %d retrievers", len(lists), len(p.rets))
	}
	want := max(p.req.K+p.req.Offset, p.FacetWindow())
	var fused []fusion.Hit
	if len(p.rets) == 1 {
		fused = make([]fusion.Hit, len(lists[0]))
		for i, it := range lists[0] {
			fused[i] = fusion.Hit{Doc: it.Doc, Score: it.Score, Sources: []fusion.Source{{Rank: i + 1, RawScore: it.Score, Normalised: it.Score, Contribution: it.Score}}}
		}
	} else {
		fl := make([]fusion.List, len(p.rets))
		for i, r := range p.rets {
			fl[i] = fusion.List{Name: r.name, Weight: r.weight, Depth: r.depth, Items: lists[i]}
		}
		var err error
		if fused, err = fusion.Fuse(fl, fusion.Options{Method: p.method, Limit: want}); err != nil {
			return nil, fmt.Errorf("engine: fuse: %w", err)
		}
	}
	return fused[:min(len(fused), want)], nil
}

// Page is the request's page (Offset to Offset+K) of a fused ranking
// FuseAll returned.
func (p *Plan) Page(all []fusion.Hit) []fusion.Hit {
	if p.req.Offset >= len(all) {
		return nil
	}
	return all[p.req.Offset:min(len(all), p.req.Offset+p.req.K)]
}

// Hit is the result hit of fused hit h: its document's id and fields, and
// each retriever's part in its score.
func (p *Plan) Hit(h fusion.Hit, id string, fields map[string]any) tandem.Hit {
	src := make([]tandem.Source, len(h.Sources))
	for i, s := range h.Sources {
		src[i] = tandem.Source{Retriever: p.rets[i].name, Rank: s.Rank, Score: s.RawScore, Contribution: s.Contribution}
	}
	return tandem.Hit{ID: id, DocNum: h.Doc, Score: h.Score, Fields: fields, Sources: src}
}

// Search runs req: each retriever concurrently, their rankings fused when
// there are several. Hits are materialised from storage, so a document
// deleted after a derived index last caught up is never returned. With a
// filter, a hit never contradicts it even while a write is being applied:
// when an index lags the change log, each hit's stored fields are checked
// against the filter again.
func (e *Engine) Search(ctx context.Context, req Request) (*Result, error) {
	start := time.Now()
	searching.Add(1)
	defer searching.Add(-1)
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	// Hits given by id alone are checked against the filter again, on
	// their stored documents, only if an index lagged the change log when
	// the search began; else each retriever's snapshot had each document
	// at its latest version, or at a newer one written during the search.
	// Hits with fields are always checked, so the fields never contradict
	// the filter.
	recheck := p.filter != nil && !e.indexesCurrent()
	rets, err := e.run(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	res := &Result{Retrievers: p.Retrievers(), Fusion: p.Fusion(), RetrieverTook: make([]time.Duration, len(rets))}
	lists := make([][]fusion.Item, len(rets))
	for i, r := range rets {
		lists[i], res.RetrieverTook[i] = r.hits, r.took
	}
	all, err := p.FuseAll(lists)
	if err != nil {
		return nil, err
	}
	if err := e.materialise(ctx, p, recheck, res, p.Page(all)); err != nil {
		return nil, err
	}
	if p.hl != nil {
		if err := e.highlightHits(ctx, p, rets, res); err != nil {
			return nil, err
		}
	}
	if p.facets != nil {
		if res.Facets, err = e.searchFacets(ctx, p, all); err != nil {
			return nil, err
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// run runs the plan's retrievers, as one shard of a collection when so is
// not nil, and returns them with their hits.
func (e *Engine) run(ctx context.Context, p *Plan, so *ShardOptions) ([]retriever, error) {
	s := &search{p: p, q: newQueries(p), shard: so}
	if p.needBitmap {
		var err error
		if s.allow, err = e.allowed(ctx, p); err != nil {
			return nil, err
		}
	}
	rets := slices.Clone(p.rets)
	if err := e.retrieve(ctx, s, rets); err != nil {
		return nil, err
	}
	return rets, nil
}

// allowed returns the documents p's filter allows, nil when it has none:
// the bitmap dense and late retrieval search under, made once per search
// (by a search of this engine and by a shard's phases).
func (e *Engine) allowed(ctx context.Context, p *Plan) (*roaring64.Bitmap, error) {
	if p.filter == nil {
		return nil, nil
	}
	allow, err := e.sparse.FilterBitmap(ctx, p.schema, p.filter)
	if err != nil {
		return nil, fmt.Errorf("engine: filter: %w", err)
	}
	return allow, nil
}

// compileFilter parses a JSON filter within Options.FilterLimits and
// checks it against schema: what a search plans with and FilterBitmap
// answers from.
func (e *Engine) compileFilter(filterJSON []byte, schema *tandem.Schema) (filter.Expr, error) {
	fe, err := e.opts.FilterLimits.Parse(filterJSON)
	if err != nil {
		return nil, err
	}
	if err := filter.Check(fe, schema); err != nil {
		return nil, err
	}
	return fe, nil
}

// queryVectors checks a request's query vectors against the collection's
// models.
func (e *Engine) queryVectors(vs map[string]tandem.Vectors) (map[string]tandem.Vectors, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	out := make(map[string]tandem.Vectors, len(vs))
	for name, v := range vs {
		i := e.modelIndex(name)
		if i < 0 {
			return nil, fmt.Errorf("%w: query vectors for %q: the collection has no such model (it has: %s)", ErrBadRequest, name, e.modelNames())
		}
		c, err := e.models[i].spec.CheckVectors(v)
		if err != nil {
			return nil, fmt.Errorf("%w: query %w", ErrBadRequest, err)
		}
		out[name] = c
	}
	return out, nil
}

// lookup finds a retriever's entry in a per-retriever map: under the name
// the request used, its full name, or its kind ("dense").
func lookup[T int | float64](m map[string]T, name string, r retriever) T {
	for _, k := range []string{name, r.name, r.kind} {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}

// search is what the retrievers of one search share: its plan, the
// filter's bitmap (nil without a filter), the query encodings, and, when
// the engine searches as one shard of a collection, the shard's options
// (nil for a search of this engine alone).
type search struct {
	p     *Plan
	allow *roaring64.Bitmap
	q     *queries
	shard *ShardOptions
}

// retrieve runs the retrievers concurrently, filling each one's hits and
// time. The goroutines are joined before it returns; the first error
// cancels the others.
func (e *Engine) retrieve(ctx context.Context, s *search, rets []retriever) error {
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(rets))
	for i := range rets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &rets[i]
			start := time.Now()
			defer func() { r.took = time.Since(start) }()
			hits, err := e.rank(ctx, s, r)
			if err != nil {
				errs[i] = fmt.Errorf("engine: %s: %w", r.name, err)
				cancel()
				return
			}
			if r.kind != "bm25" {
				// Deterministic ties: score descending, then docnum.
				slices.SortStableFunc(hits, func(a, b fusion.Item) int {
					if c := cmp.Compare(b.Score, a.Score); c != 0 {
						return c
					}
					return cmp.Compare(a.Doc, b.Doc)
				})
			}
			r.hits = hits
		}()
	}
	wg.Wait()
	if err := parent.Err(); err != nil {
		return err
	}
	// The first failure cancelled the others: report it, not theirs.
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// rank runs one retriever of s, by its kind. Dense and late retrievers
// return no hits at once when the filter allows no document.
func (e *Engine) rank(ctx context.Context, s *search, r *retriever) ([]fusion.Item, error) {
	empty := s.allow != nil && s.allow.IsEmpty()
	switch r.kind {
	case "bm25":
		return e.rankBM25(ctx, s, r)
	case "dense":
		if empty {
			return nil, nil
		}
		return e.rankDense(ctx, s, r)
	case "late":
		if empty {
			return nil, nil
		}
		return e.rankLate(ctx, s, r)
	}
	return nil, fmt.Errorf("engine: no ranker for retriever kind %q", r.kind)
}

// rankBM25 ranks by BM25, with the collection's statistics when a shard
// is given them. It waits for the query encodings first: beside an ONNX
// Runtime run, whose intra-op threads take both cores and wait for each
// other at every operator, its goroutine preempted one of them and held
// the encoding back by about 2 ms a query, ten times its own cost
// (SciFact, `tandem eval --mode late,bm25+late`: p50 19.5 and 21.9 ms).
// An encoding's error is its retriever's to report.
func (e *Engine) rankBM25(ctx context.Context, s *search, r *retriever) ([]fusion.Item, error) {
	s.q.all(ctx)
	req := s.p.req
	q := sparse.Query{Text: req.Text, Fields: req.Fields, Filter: s.p.filter, K: r.depth}
	if s.shard != nil {
		q.Stats = s.shard.BM25
	}
	hits, err := e.sparse.Search(ctx, s.p.schema, q)
	return items(hits, func(h sparse.Hit) fusion.Item { return fusion.Item{Doc: h.DocNum, Score: h.Score} }), err
}

// rankDense ranks by the model's vectors, under the filter's bitmap.
func (e *Engine) rankDense(ctx context.Context, s *search, r *retriever) ([]fusion.Item, error) {
	qv, err := s.q.dense(ctx, r)
	if err != nil {
		return nil, err
	}
	hits, err := r.model.dense.Search(ctx, qv, r.depth, s.allow)
	return items(hits, func(h dense.Hit) fusion.Item { return fusion.Item{Doc: h.DocNum, Score: float64(h.Score)} }), err
}

// rankLate ranks by late interaction under the filter's bitmap: the
// index's search, exhaustive for late-exact, or, as one shard of a
// collection, the work the coordinator chose for this shard.
func (e *Engine) rankLate(ctx context.Context, s *search, r *retriever) ([]fusion.Item, error) {
	qt, err := s.q.tokens(ctx, r)
	if err != nil {
		return nil, err
	}
	r.tokens = qt
	lo := &latecollect.SearchOptions{K: r.depth, Allow: s.allow, Scoring: s.p.scoring}
	if r.exact {
		lo.Mode = latecollect.Reference
	}
	var hits []latecollect.Hit
	if w, ok := s.shard.late(r.name); ok && !r.exact {
		if w.AllAllowed {
			// The union of the shards allows no more documents than
			// the candidate cap: each scores all it allows, as one
			// engine would.
			lo.Mode = latecollect.Exhaustive
			hits, err = r.model.late.Search(ctx, qt, lo)
		} else {
			hits, err = r.model.late.Rescore(ctx, qt, w.Docs, lo)
		}
	} else {
		hits, err = r.model.late.Search(ctx, qt, lo)
	}
	return items(hits, func(h latecollect.Hit) fusion.Item { return fusion.Item{Doc: h.DocNum, Score: float64(h.Score)} }), err
}

// items turns a retriever's hits into the items fusion takes.
func items[H any](hits []H, item func(H) fusion.Item) []fusion.Item {
	out := make([]fusion.Item, len(hits))
	for i, h := range hits {
		out[i] = item(h)
	}
	return out
}

// queries encodes a search's query text once per model, for the
// retrievers given no query vector: one forward pass gives the model's
// pooled vector and, when one of its late-interaction retrievers runs,
// its tokens. A search of this engine, EncodeQuery and a shard's Collect
// all encode through it. Safe for concurrent use.
type queries struct {
	text string
	m    map[*model]*encoding
}

// encoding is one model's encoding of the query text, made once.
type encoding struct {
	once   sync.Once
	tokens bool
	out    *encoder.Batch
	err    error
}

func newQueries(p *Plan) *queries {
	q := &queries{text: p.req.Text, m: map[*model]*encoding{}}
	for _, r := range p.rets {
		if r.model == nil || r.query != nil {
			continue
		}
		x := q.m[r.model]
		if x == nil {
			x = &encoding{}
			q.m[r.model] = x
		}
		x.tokens = x.tokens || r.kind == "late"
	}
	return q
}

// searching counts the searches in flight in the process, over every
// engine: more than one, and a query's model run takes one thread
// (encoder.Busy).
var searching atomic.Int64

// encode returns m's encoding of the text, running the model the first
// time it is asked.
func (q *queries) encode(ctx context.Context, m *model) (*encoder.Batch, error) {
	x := q.m[m]
	x.once.Do(func() {
		if searching.Load() > 1 {
			ctx = encoder.Busy(ctx) // the model's run leaves the other cores to the other searches
		}
		x.out, x.err = m.enc.EncodeQuery(ctx, q.text, x.tokens)
		if x.err != nil {
			x.err = fmt.Errorf("engine: encode query with %s: %w", m.spec.Name, x.err)
		}
	})
	return x.out, x.err
}

// all encodes the text with every model that needs it.
func (q *queries) all(ctx context.Context) {
	for m := range q.m {
		q.encode(ctx, m)
	}
}

// dense is r's query vector: the request's own, or the model's encoding.
func (q *queries) dense(ctx context.Context, r *retriever) ([]float32, error) {
	if r.query != nil {
		return r.query, nil
	}
	b, err := q.encode(ctx, r.model)
	if err != nil {
		return nil, err
	}
	return b.Vectors[0], nil
}

// tokens is r's row-major query token matrix: the request's own, or the
// model's encoding.
func (q *queries) tokens(ctx context.Context, r *retriever) ([]float32, error) {
	if r.query != nil {
		return r.query, nil
	}
	b, err := q.encode(ctx, r.model)
	if err != nil {
		return nil, err
	}
	return b.Tokens[0].Vectors, nil
}

// indexesCurrent reports whether every derived index has applied every
// committed change.
func (e *Engine) indexesCurrent() bool {
	last := e.st.LastSeq() // first: applied sequences only grow
	for _, d := range e.derivedList() {
		if d.AppliedSeq() < last {
			return false
		}
	}
	return true
}

// materialise turns fused hits into the result's hits, with their ids
// and, unless req.IDsOnly, their stored fields. It drops hits whose
// document is gone, and hits whose stored document no longer matches fe:
// always when it loads the documents, which it does for their fields or
// when recheck is set.
func (e *Engine) materialise(ctx context.Context, p *Plan, recheck bool, res *Result, fused []fusion.Hit) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	schema, req, fe := p.schema, p.req, p.filter
	nums := make([]uint64, len(fused))
	for i, h := range fused {
		nums[i] = h.Doc
	}
	res.Hits = make([]tandem.Hit, 0, len(fused))
	add := func(h fusion.Hit, id string, fields map[string]any) {
		res.Hits = append(res.Hits, p.Hit(h, id, fields))
	}
	if req.IDsOnly && (fe == nil || !recheck) {
		idOf, err := e.st.IDs(nums)
		if err != nil {
			return fmt.Errorf("engine: load hits: %w", err)
		}
		for _, h := range fused {
			if id, ok := idOf[h.Doc]; ok { // else deleted since the index was updated
				add(h, id, nil)
			}
		}
		return nil
	}
	docs, err := e.st.GetMany(nums)
	if err != nil {
		return fmt.Errorf("engine: load hits: %w", err)
	}
	for i, h := range fused {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		d, ok := docs[h.Doc]
		if !ok {
			continue // deleted since the index was updated
		}
		if fe != nil && !filter.Match(fe, schema, d.Fields) {
			continue // updated since the index was; the filter is the contract
		}
		fields := d.Fields
		if req.IDsOnly {
			fields = nil
		}
		add(h, d.ID, fields)
	}
	return nil
}
