package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/storage"
)

// needModel skips when the default model is not installed.
func needModel(t testing.TB) {
	t.Helper()
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model %s not installed (run scripts/setup.sh): %v", encoder.DefaultModel, err)
	}
}

// animals is a small corpus where each topic has one obvious document, in
// words that BM25 cannot match from the queries below.
var animals = []tandem.Doc{
	{ID: "cat", Fields: map[string]any{"title": "Cats", "text": "Domestic cats are small felines that purr and hunt mice.", "lang": "en", "year": 2001.0}},
	{ID: "dog", Fields: map[string]any{"title": "Dogs", "text": "Dogs are loyal canines that bark and fetch sticks.", "lang": "en", "year": 2005.0}},
	{ID: "chat", Fields: map[string]any{"title": "Chats", "text": "Les chats domestiques sont de petits félins qui ronronnent.", "lang": "fr", "year": 2010.0}},
	{ID: "stock", Fields: map[string]any{"title": "Stock markets", "text": "Equity prices fell sharply as investors sold shares.", "lang": "en", "year": 2015.0}},
	{ID: "rain", Fields: map[string]any{"title": "Weather", "text": "Heavy rain and thunderstorms are expected this weekend.", "lang": "en", "year": 2020.0}},
	{ID: "heart", Fields: map[string]any{"title": "Cardiology", "text": "Myocardial infarction is caused by blocked coronary arteries.", "lang": "en", "year": 2022.0}},
}

func modelOpts() *Options {
	return &Options{Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}}
}

func TestHybridSearchWithModel(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, dir, modelOpts())
	want := []string{"bm25", "dense:" + encoder.DefaultModel, "late:" + encoder.DefaultModel}
	if got := e.Retrievers(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Retrievers = %v, want %v", got, want)
	}
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	// Semantic queries with no word in common with the answer.
	for _, tc := range []struct{ query, want string }{
		{"kitten", "cat"},
		{"heart attack", "heart"},
		{"puppy", "dog"},
	} {
		for _, r := range []string{"dense", "late"} {
			res, err := e.Search(ctx, Request{Text: tc.query, Retrievers: []string{r}, K: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Hits) == 0 || res.Hits[0].ID != tc.want {
				t.Errorf("%s %q: hits %v, want %s first", r, tc.query, ids(res.Hits), tc.want)
			}
		}
	}
	// Hybrid: each hit explains all three retrievers, and the shares add
	// up to the score.
	for _, method := range []string{"rrf", "wrrf", "minmax", "zscore", "max", "dbsf", "combsum", "combmnz"} {
		res, err := e.Search(ctx, Request{Text: "cats purr", Retrievers: e.Retrievers(), Fusion: method, K: 4})
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if res.Fusion != method || len(res.Hits) != 4 || res.Hits[0].ID != "cat" {
			t.Fatalf("%s: fusion %q, hits %v, want cat first of 4", method, res.Fusion, ids(res.Hits))
		}
		for _, h := range res.Hits {
			if len(h.Sources) != 3 {
				t.Fatalf("%s: hit %s has %d sources", method, h.ID, len(h.Sources))
			}
			sum := 0.0
			for i, s := range h.Sources {
				if s.Retriever != want[i] {
					t.Errorf("%s: source %d is %q, want %q", method, i, s.Retriever, want[i])
				}
				sum += s.Contribution
			}
			if math.Abs(sum-h.Score) > 1e-9 {
				t.Errorf("%s: hit %s: contributions add to %v, score %v", method, h.ID, sum, h.Score)
			}
		}
		top := res.Hits[0].Sources
		if top[0].Rank != 1 || top[1].Rank != 1 || top[2].Rank != 1 || top[1].Score <= 0.5 {
			t.Errorf("%s: cat's sources %+v, want rank 1 in each", method, top)
		}
	}
	// Filters apply to every retriever.
	for _, r := range append(e.Retrievers(), "hybrid") {
		rs := []string{r}
		if r == "hybrid" {
			rs = e.Retrievers()
		}
		res, err := e.Search(ctx, Request{Text: "cats", Retrievers: rs, Filter: []byte(`{"term":{"lang":"fr"}}`)})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(ids(res.Hits), ",") != "chat" && !(r == "bm25" && len(res.Hits) == 0) {
			t.Errorf("%s filtered to fr: hits %v, want [chat]", r, ids(res.Hits))
		}
		res, err = e.Search(ctx, Request{Text: "cats", Retrievers: rs, Filter: []byte(`{"term":{"lang":"de"}}`)})
		if err != nil || len(res.Hits) != 0 {
			t.Errorf("%s filtered to nothing: %v, %v", r, ids(res.Hits), err)
		}
	}
	// Deletes reach the dense and late indexes.
	if _, err := e.Delete(ctx, []string{"cat"}); err != nil {
		t.Fatal(err)
	}
	res, err := e.Search(ctx, Request{Text: "kitten", Retrievers: []string{"dense"}, K: 10})
	if err != nil || len(res.Hits) != len(animals)-1 || strings.Contains(strings.Join(ids(res.Hits), ","), "cat,") {
		t.Fatalf("after delete: %v, %v", ids(res.Hits), err)
	}
	// Reopening without options keeps the models, and the indexes come
	// back from their snapshots with the same results.
	before, err := e.Search(ctx, Request{Text: "kitten", Retrievers: e.Retrievers(), K: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openT(t, dir, nil)
	if got := e2.Retrievers(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("reopened: Retrievers = %v, want %v", got, want)
	}
	after, err := e2.Search(ctx, Request{Text: "kitten", Retrievers: e2.Retrievers(), K: 5})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(ids(before.Hits)) != fmt.Sprint(ids(after.Hits)) {
		t.Errorf("reopened: hits %v, before %v", ids(after.Hits), ids(before.Hits))
	}
}

func TestModelErrors(t *testing.T) {
	ctx := context.Background()
	// A model that is not installed: clear error, nothing created.
	dir := filepath.Join(t.TempDir(), "new")
	_, err := Open(dir, &Options{Dense: []string{"no-such-model"}})
	if !errors.Is(err, encoder.ErrNotInstalled) || !errors.Is(err, ErrModel) || !strings.Contains(err.Error(), "no-such-model") {
		t.Fatalf("missing model: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("a failed Open left %s behind (stat: %v)", dir, err)
	}
	needModel(t)
	// A collection whose stored dimension differs from the model's is
	// refused, naming the model.
	dir = t.TempDir()
	sc := tandem.DefaultSchema()
	sc.Models = []tandem.Model{{Name: encoder.DefaultModel, Dense: true, Dim: 768}}
	st, err := storage.Open(dir, &storage.Options{Schema: sc})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	_, err = Open(dir, nil)
	if !errors.Is(err, encoder.ErrDimMismatch) || !strings.Contains(err.Error(), encoder.DefaultModel) {
		t.Fatalf("dimension mismatch: %v", err)
	}
	// Unknown retrievers and bad options are caller errors.
	e := openT(t, t.TempDir(), modelOpts())
	if _, err := e.Index(ctx, animals[:2]); err != nil {
		t.Fatal(err)
	}
	for _, req := range []Request{
		{Text: "x", Retrievers: []string{"dense:other"}},
		{Text: "x", Retrievers: []string{"sparse"}},
		{Text: "x", Retrievers: []string{"bm25", "bm25"}},
		{Text: "x", Retrievers: []string{"bm25", "dense"}, Fusion: "borda"},
		{Text: "x", Retrievers: []string{"late"}, LateScoring: "max"},
		{Text: "x", Retrievers: []string{"dense"}, Depth: map[string]int{"late": 5}},
		{Text: "", Retrievers: []string{"dense"}, Filter: []byte(`{"term":{"lang":"en"}}`)},
	} {
		if _, err := e.Search(ctx, req); !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrUnknownRetriever) {
			t.Errorf("%+v: err %v, want a bad request", req, err)
		}
	}
	// A bad document is rejected before encoding, naming it; nothing of
	// its batch is stored.
	bad := []tandem.Doc{{ID: "ok", Fields: map[string]any{"text": "fine"}}, {ID: "bad", Fields: map[string]any{"text": "\xff"}}}
	_, err = e.Index(ctx, bad)
	var be *DocError
	if !errors.As(err, &be) || be.ID != "bad" || be.Index != 1 {
		t.Fatalf("bad document: %v", err)
	}
	if e.Count() != 2 {
		t.Fatalf("count %d after rejected batch, want 2", e.Count())
	}
}

// TestConcurrentHybrid searches (filtered, all retrievers fused) while
// documents are indexed and deleted: no error, and every hit satisfies the
// filter. Run it with -race.
func TestConcurrentHybrid(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}, BatchSize: 4})
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	const fjson = `{"range":{"year":{"gte":2010}}}`
	fe, err := filter.Parse([]byte(fjson))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(fe, e.Schema()); err != nil {
		t.Fatal(err)
	}
	rounds := 6
	if testing.Short() {
		rounds = 2
	}
	var wg sync.WaitGroup
	errc := make(chan error, 100)
	wg.Add(1)
	go func() { // writer: add, update (year flips across the filter), delete
		defer wg.Done()
		for r := range rounds {
			var docs []tandem.Doc
			for i := range 4 {
				docs = append(docs, tandem.Doc{ID: fmt.Sprintf("w%d", i), Fields: map[string]any{
					"title": "Cats and markets", "text": fmt.Sprintf("round %d: felines and equity prices", r),
					"lang": "en", "year": float64(2000 + 15*((r+i)%2)),
				}})
			}
			if _, err := e.Index(ctx, docs); err != nil {
				errc <- err
				return
			}
			if _, err := e.Delete(ctx, []string{fmt.Sprintf("w%d", r%4), "stock"}); err != nil {
				errc <- err
				return
			}
		}
	}()
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			methods := []string{"rrf", "minmax", "dbsf"}
			for i := range rounds * 4 {
				res, err := e.Search(ctx, Request{Text: "cats prices", Retrievers: e.Retrievers(), Fusion: methods[(g+i)%3], Filter: []byte(fjson), K: 10})
				if err != nil {
					errc <- err
					return
				}
				for _, h := range res.Hits {
					if !filter.Match(fe, e.Schema(), h.Fields) {
						errc <- fmt.Errorf("hit %s (%v) does not satisfy %s", h.ID, h.Fields["year"], fjson)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// TestResidualLateIndex indexes with the residual-code late index: "late"
// and the exhaustive reference "late-exact" rank a small collection alike
// (every document reaches the exact stage), the choice is stored with the
// collection, and a reopened collection searches the same.
func TestResidualLateIndex(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	dir := t.TempDir()
	o := modelOpts()
	o.LateIndex = "Residual"
	e := openT(t, dir, o)
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	search := func(e *Engine, r, q string) []string {
		t.Helper()
		res, err := e.Search(ctx, Request{Text: q, Retrievers: []string{r}, K: 6})
		if err != nil {
			t.Fatal(err)
		}
		return ids(res.Hits)
	}
	for _, q := range []string{"kitten", "heart attack", "puppy"} {
		got, ref := search(e, "late", q), search(e, "late-exact", q)
		if fmt.Sprint(got) != fmt.Sprint(ref) || len(got) != len(animals) {
			t.Errorf("%q: late %v, late-exact %v", q, got, ref)
		}
	}
	if got := search(e, "late", "kitten"); got[0] != "cat" {
		t.Errorf("kitten: %v, want cat first", got)
	}
	s, err := e.Stats()
	if err != nil || len(s.Late) != 1 {
		t.Fatalf("stats %+v, %v", s, err)
	}
	before := search(e, "late", "kitten")
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e2 := openT(t, dir, nil)
	if got := search(e2, "late", "kitten"); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("reopened: %v, before %v", got, before)
	}
	s2, err := e2.Stats()
	if err != nil || len(s2.Late) != 1 || !strings.HasPrefix(s2.Late[0].Description, "Residual") {
		t.Fatalf("reopened stats %+v, %v: want the residual late index kept", s2.Late, err)
	}
	if l := s2.Late[0]; l.ExactStale != 0 || l.ExactReadErrors != 0 || s2.DiskBytes["blobs"] == 0 {
		t.Errorf("reopened stats %+v, disk %v: want the tokens in blob segments, every document scored exactly", l, s2.DiskBytes)
	}
	if _, err := os.Stat(filepath.Join(dir, "derived")); !os.IsNotExist(err) {
		t.Errorf("derived/: %v, want none (the tokens are stored once, in the blob segments)", err)
	}
	// Damaged blob segments cost the exact scores, not the search: each
	// document whose blob fails its checksum is scored from its codes,
	// and the stats count them and name the segment.
	segs, _ := filepath.Glob(filepath.Join(dir, "blobs", "*.blob"))
	if len(segs) == 0 {
		t.Fatal("no blob segment")
	}
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		for i := 16; i < len(b); i++ { // past the header
			b[i] ^= 0x5a
		}
		if err := os.WriteFile(seg, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got := search(e2, "late", "kitten"); len(got) != len(before) {
		t.Errorf("blob segments damaged: %v, before %v", got, before)
	}
	s3, err := e2.Stats()
	if err != nil || s3.Late[0].ExactReadErrors < int64(len(animals)) || !strings.Contains(s3.Late[0].ExactReadError, "checksum") {
		t.Errorf("blob segments damaged: stats %+v, %v: want every document's failed read counted", s3.Late, err)
	}
	// A late index that cannot be built is refused before anything is
	// created.
	for _, bad := range []string{"Residual3", "NoSuchIndex"} {
		o := modelOpts()
		o.LateIndex = bad
		bdir := filepath.Join(t.TempDir(), "c")
		if _, err := Open(bdir, o); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), bad) {
			t.Errorf("LateIndex %q: %v, want a bad request naming it", bad, err)
		}
		if _, err := os.Stat(bdir); !os.IsNotExist(err) {
			t.Errorf("LateIndex %q: the collection directory was created", bad)
		}
	}
}

// TestLateEncodingI8 stores an installed model's token vectors as int8,
// the default: the choice is kept in the schema, the blobs are I8, the
// late search ranks the small collection as the float32 reference
// late-exact does, each late hit is explained to its score bit for bit
// in both retrievers, and an unknown encoding is refused before anything
// is created. An external model's default is f16, and an installed
// model's f16 when asked.
func TestLateEncodingI8(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, dir, modelOpts())
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	m := e.models[e.modelIndex(encoder.DefaultModel)]
	if got := m.spec.LateEncoding; got != "i8" {
		t.Errorf("schema's late encoding %q, want i8", got)
	}
	blob, ok, err := e.st.ReadBlob(1, latecollect.BlobName(m.spec.Name), nil)
	if err != nil || !ok {
		t.Fatalf("blob of document 1: %v %v", ok, err)
	}
	if enc, _, _, err := latecollect.BlobInfo(blob); err != nil || enc != latecollect.I8 {
		t.Errorf("blob encoding %v, %v; want i8", enc, err)
	}
	for _, q := range []string{"kitten", "heart attack", "puppy"} {
		var ranked [2][]string
		for i, r := range []string{"late", "late-exact"} {
			res, err := e.Search(ctx, Request{Text: q, Retrievers: []string{r}, K: len(animals), Highlight: &HighlightRequest{}})
			if err != nil {
				t.Fatal(err)
			}
			ranked[i] = ids(res.Hits)
			for _, h := range res.Hits {
				if len(h.Highlights.Late) != 1 || h.Sources[0].Score != h.Highlights.Late[0].Score {
					t.Fatalf("%q %s %s: source %+v, late highlights %+v: want the explained score equal to the hit's", q, r, h.ID, h.Sources, h.Highlights.Late)
				}
			}
		}
		if fmt.Sprint(ranked[0]) != fmt.Sprint(ranked[1]) {
			t.Errorf("%q: late %v, late-exact %v", q, ranked[0], ranked[1])
		}
		if q == "kitten" && ranked[0][0] != "cat" {
			t.Errorf("kitten: %v, want cat first", ranked[0])
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := openT(t, dir, nil).Schema().Models[0].LateEncoding; got != "i8" {
		t.Errorf("reopened: late encoding %q, want i8", got)
	}
	o := modelOpts()
	o.LateEncoding = "f16"
	if got := openT(t, t.TempDir(), o).Schema().Models[0].LateEncoding; got != "f16" {
		t.Errorf("LateEncoding f16: late encoding %q, want f16", got)
	}
	ext := propSchema()
	ext.Models = []tandem.Model{facetModel}
	if got := openT(t, t.TempDir(), &Options{Schema: ext}).Schema().Models[0].LateEncoding; got != "f16" {
		t.Errorf("external model: late encoding %q, want f16", got)
	}
	o = modelOpts()
	o.LateEncoding = "i4"
	bdir := filepath.Join(t.TempDir(), "c")
	if _, err := Open(bdir, o); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"i4"`) {
		t.Errorf("LateEncoding i4: %v, want a bad request naming it", err)
	}
	if _, err := os.Stat(bdir); !os.IsNotExist(err) {
		t.Errorf("LateEncoding i4: the collection directory was created")
	}
}

// TestEnginesShareModel checks that the engines of a process share one
// load of a model (the process's encoder.Cache counts loads): closing one
// leaves the other encoding and searching, and closing the last releases
// the model. Other thread options load it apart.
func TestEnginesShareModel(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	base := LoadedModels()
	want := func(loads int64, models, encs int) {
		t.Helper()
		got := LoadedModels()
		w := encoder.CacheStats{Loads: base.Loads + loads, Models: base.Models + models, Encoders: base.Encoders + encs}
		if got != w {
			t.Fatalf("loaded models %+v, want %+v", got, w)
		}
	}
	root := t.TempDir()
	// Dense and late from one model: one load for the collection.
	a, err := Open(filepath.Join(root, "a"), modelOpts())
	if err != nil {
		t.Fatal(err)
	}
	want(1, 1, 1)
	b, err := Open(filepath.Join(root, "b"), &Options{Dense: []string{encoder.DefaultModel}})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	want(1, 1, 2)
	for _, e := range []*Engine{a, b} {
		if _, err := e.Index(ctx, animals); err != nil {
			t.Fatal(err)
		}
	}
	// A collection reopened from its stored schema takes the same load.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want(1, 1, 1)
	if a, err = Open(filepath.Join(root, "a"), &Options{MustExist: true}); err != nil {
		t.Fatal(err)
	}
	want(1, 1, 2)
	// Closing one leaves the other working.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	want(1, 1, 1)
	if _, err := b.Index(ctx, []tandem.Doc{{ID: "kitten", Fields: map[string]any{"title": "Kittens", "text": "A kitten is a young cat."}}}); err != nil {
		t.Fatal(err)
	}
	res, err := b.Search(ctx, Request{Text: "puppy", Retrievers: []string{"dense"}, K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) == 0 || res.Hits[0].ID != "dog" {
		t.Fatalf("dense search after the other engine closed: hits %v, want dog first", ids(res.Hits))
	}
	// Other thread options shape other sessions: a load of their own.
	c, err := Open(filepath.Join(root, "c"), &Options{Dense: []string{encoder.DefaultModel}, EncoderThreads: 1, DocumentThreads: 1})
	if err != nil {
		t.Fatal(err)
	}
	want(2, 2, 2)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The last engine's Close releases the model.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	want(2, 0, 0)
}

// TestSharedModelConcurrent indexes into and searches two engines that
// share a model at once, then closes one while the other searches: every
// call succeeds and finds what it should. Run it with -race.
func TestSharedModelConcurrent(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	root := t.TempDir()
	opts := &Options{Dense: []string{encoder.DefaultModel}, DocumentThreads: 1}
	a := openT(t, filepath.Join(root, "a"), opts)
	b := openT(t, filepath.Join(root, "b"), opts)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for _, e := range []*Engine{a, b} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 3 {
				docs := make([]tandem.Doc, len(animals))
				for j, d := range animals {
					docs[j] = tandem.Doc{ID: fmt.Sprintf("%s-%d", d.ID, i), Fields: d.Fields}
				}
				if _, err := e.Index(ctx, docs); err != nil {
					errs <- err
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 10 {
				if _, err := e.Search(ctx, Request{Text: "puppy", Retrievers: []string{"dense"}, K: 3}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	// b searches while a closes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 10 {
			res, err := b.Search(ctx, Request{Text: "puppy", Retrievers: []string{"dense"}, K: 3})
			if err != nil {
				errs <- err
				return
			}
			if len(res.Hits) == 0 || !strings.HasPrefix(res.Hits[0].ID, "dog-") {
				errs <- fmt.Errorf("hits %v, want a dog first", ids(res.Hits))
				return
			}
		}
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if b.Count() != uint64(3*len(animals)) {
		t.Fatalf("b holds %d documents, want %d", b.Count(), 3*len(animals))
	}
}

// TestDefaultLateIndex: a new collection that names no late-interaction
// index gets residual codes and records them, one that asks for FAISS
// keeps FAISS, and a collection whose schema recorded no index (made
// before residual codes were the default) keeps FAISS token keys.
func TestDefaultLateIndex(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	desc := func(dir string, o *Options) string {
		t.Helper()
		e := openT(t, dir, o)
		defer e.Close()
		if _, err := e.Index(ctx, animals[:2]); err != nil {
			t.Fatal(err)
		}
		s, err := e.Stats()
		if err != nil || len(s.Late) != 1 {
			t.Fatalf("stats %+v, %v", s, err)
		}
		return s.Late[0].Description
	}
	dir := t.TempDir()
	if got := desc(dir, modelOpts()); !strings.HasPrefix(got, "Residual") {
		t.Errorf("default: late index %q, want residual codes", got)
	}
	e := openT(t, dir, nil)
	if m := e.Schema().Models[0]; m.LateIndex != "Residual" {
		t.Errorf("default: the schema records late_index %q, want Residual", m.LateIndex)
	}
	e.Close()
	o := modelOpts()
	o.LateIndex = "FAISS"
	if got := desc(t.TempDir(), o); strings.HasPrefix(got, "Residual") {
		t.Errorf("FAISS asked: late index %q", got)
	}
	// An older collection: its stored schema's model has no late_index.
	e = openT(t, t.TempDir(), modelOpts())
	schema := e.Schema()
	e.Close()
	schema.Models[0].LateIndex = ""
	oldDir := t.TempDir()
	st, err := storage.Open(oldDir, &storage.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if got := desc(oldDir, nil); strings.HasPrefix(got, "Residual") {
		t.Errorf("collection recorded without a late index: %q, want FAISS kept", got)
	}
	if got := DefaultLateIndex("", 384); got != "Residual" {
		t.Errorf("DefaultLateIndex(\"\", 384) = %q", got)
	}
	if got := DefaultLateIndex("", 12); got != "FAISS" {
		t.Errorf("DefaultLateIndex(\"\", 12) = %q, want FAISS (residual codes need a multiple of 8)", got)
	}
}
