package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/synth"
)

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
	err := e.Shard().Store().ScanDocs(ctx, func(_ uint64, d tandem.Doc) error {
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
	st := e.Shard().Store()
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
