package engine

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

func openT(t testing.TB, dir string, opts *Options) *Engine {
	t.Helper()
	e, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func ids(hits []tandem.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

func TestIndexSearchDeleteReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, dir, nil)
	corpus := `{"_id":"1","title":"Whales","text":"The blue whale is the largest animal.","year":2001}
{"_id":"2","title":"Sharks","text":"Sharks are fish with cartilage skeletons.","year":2010}
{"_id":"3","title":"Whale song","text":"Humpback whales sing long songs.","year":2020}
`
	p, err := e.IndexJSONL(ctx, strings.NewReader(corpus), JSONLOptions{})
	if err != nil || p.Docs != 3 {
		t.Fatalf("IndexJSONL = %+v, %v", p, err)
	}
	res, err := e.Search(ctx, Request{Text: "whales"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ids(res.Hits), ","); got != "1,3" && got != "3,1" {
		t.Fatalf("whales: hits %s, want 1 and 3", got)
	}
	if res.Hits[0].Fields["title"] == nil || res.Hits[0].Score <= 0 {
		t.Errorf("hit lacks fields or score: %+v", res.Hits[0])
	}
	res, err = e.Search(ctx, Request{Text: "whales", Filter: []byte(`{"range":{"year":{"gte":2015}}}`)})
	if err != nil || strings.Join(ids(res.Hits), ",") != "3" {
		t.Fatalf("filtered: %v, %v", ids(res.Hits), err)
	}
	// Upsert keeps one copy; delete removes it from BM25.
	if _, err := e.Index(ctx, []tandem.Doc{{ID: "3", Fields: map[string]any{"title": "Dolphins", "text": "Dolphins whistle.", "year": 2020.0}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Delete(ctx, []string{"1"}); err != nil {
		t.Fatal(err)
	}
	res, _ = e.Search(ctx, Request{Text: "whales dolphins"})
	if got := strings.Join(ids(res.Hits), ","); got != "3" {
		t.Errorf("after upsert and delete: %s, want 3", got)
	}
	e.Close()
	if _, err := e.Search(ctx, Request{Text: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("search after close: %v", err)
	}
	e = openT(t, dir, nil)
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Docs != 2 || st.BleveDocs != 2 || st.AppliedSeq["bm25"] != st.LastSeq {
		t.Errorf("stats after reopen: %+v", st)
	}
}

// TestCatchUpAfterLostIndex removes the Bleve index: Open rebuilds it from
// the change log.
func TestCatchUpAfterLostIndex(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, dir, nil)
	var docs []tandem.Doc
	for i := range 50 {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint(i), Fields: map[string]any{"text": fmt.Sprintf("doc number %d alpha", i)}})
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	e.Delete(ctx, []string{"7"})
	e.Close()
	if err := os.RemoveAll(filepath.Join(dir, "bleve")); err != nil {
		t.Fatal(err)
	}
	e = openT(t, dir, nil)
	res, err := e.Search(ctx, Request{Text: "alpha", K: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) != 49 {
		t.Errorf("after rebuild: %d hits, want 49", len(res.Hits))
	}
	for _, h := range res.Hits {
		if h.ID == "7" {
			t.Error("deleted doc 7 came back")
		}
	}
}

// TestCorruptIndexIsRebuilt damages the Bleve index's metadata: Open
// discards the derived index and rebuilds it from the change log.
func TestCorruptIndexIsRebuilt(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e := openT(t, dir, &Options{NoSync: true})
	if _, err := e.Index(ctx, []tandem.Doc{{ID: "a", Fields: map[string]any{"text": "alpha"}}, {ID: "b", Fields: map[string]any{"text": "alpha beta"}}}); err != nil {
		t.Fatal(err)
	}
	e.Close()
	if err := os.WriteFile(filepath.Join(dir, "bleve", "index_meta.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	e = openT(t, dir, &Options{NoSync: true})
	res, err := e.Search(ctx, Request{Text: "alpha"})
	if err != nil || len(res.Hits) != 2 {
		t.Fatalf("after rebuild: %v, %v", res, err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	strict := tandem.DefaultSchema()
	strict.Strict = true
	strict.Fields = append(strict.Fields, tandem.Field{Name: "year", Type: tandem.Number})
	strict.MaxTextBytes = 1000
	good := `{"_id":"g1","title":"ok","text":"fine text","year":1}` + "\n" + `{"_id":"g2","text":"more text"}` + "\n"
	tests := []struct {
		name, line string
		want       []string // substrings of the error
		is         error
	}{
		{"malformed JSON", `{"_id":"x","text":"unterminated}`, []string{"line 3", "malformed JSON"}, nil},
		{"wrong type", `{"_id":"x","text":"a","year":"1999"}`, []string{"line 3", `field "year"`, "want a number"}, tandem.ErrWrongType},
		{"unknown field", `{"_id":"x","text":"a","author":"me"}`, []string{"line 3", `field "author"`, "unknown field"}, tandem.ErrUnknownField},
		{"huge text", `{"_id":"x","text":"` + strings.Repeat("word ", 300) + `"}`, []string{"line 3", `field "text"`, "text too large"}, tandem.ErrTextTooLarge},
		{"empty text", `{"_id":"x","title":"","text":""}`, []string{"line 3", "no text"}, tandem.ErrEmptyText},
		{"invalid UTF-8", "{\"_id\":\"x\",\"text\":\"caf\xe9\"}", []string{"line 3", "invalid UTF-8"}, tandem.ErrInvalidUTF8},
		{"missing id", `{"text":"a"}`, []string{"line 3", `field "_id"`, "missing id"}, tandem.ErrMissingID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := openT(t, t.TempDir(), &Options{Schema: strict, BatchSize: 2, NoSync: true})
			in := good + tc.line + "\n" + `{"_id":"after","text":"after"}` + "\n"
			p, err := e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			var le *DocError
			if !errors.As(err, &le) || le.Line != 3 {
				t.Errorf("error %v is not a DocError for line 3", err)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			// The batch before the bad line is stored and searchable.
			if p.Docs != 2 || e.Count() != 2 {
				t.Errorf("stored %d (count %d), want the 2 good documents", p.Docs, e.Count())
			}
			if res, err := e.Search(ctx, Request{Text: "text"}); err != nil || len(res.Hits) != 2 {
				t.Errorf("search after bad line: %v, %v", res, err)
			}
			// With SkipBad the bad line is counted and the rest indexed.
			var skipped []error
			p, err = e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{SkipBad: true, OnSkip: func(err error) { skipped = append(skipped, err) }})
			if err != nil || p.Skipped != 1 || len(skipped) != 1 || e.Count() != 3 {
				t.Errorf("SkipBad: %+v, %v, skipped %v, count %d", p, err, skipped, e.Count())
			}
		})
	}
}

func TestPaging(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	var docs []tandem.Doc
	for i := range 20 {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("p", i), Fields: map[string]any{"text": strings.Repeat("apple ", 1+i%7) + "pear"}})
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	all, err := e.Search(ctx, Request{Text: "apple", K: 20})
	if err != nil || len(all.Hits) != 20 {
		t.Fatalf("all: %v, %v", all, err)
	}
	for _, off := range []int{0, 5, 18, 25} {
		page, err := e.Search(ctx, Request{Text: "apple", K: 5, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		want := all.Hits[min(off, 20):min(off+5, 20)]
		if strings.Join(ids(page.Hits), ",") != strings.Join(ids(want), ",") {
			t.Errorf("offset %d: %v, want %v", off, ids(page.Hits), ids(want))
		}
	}
}

// TestBatchTooLargeIsSplit indexes a batch larger than one Badger
// transaction allows (about 15% of Options.MemTableSize, here 2 MiB, of
// values kept in the LSM tree, those under 4 KiB): it is committed in
// parts.
func TestBatchTooLargeIsSplit(t *testing.T) {
	ctx := context.Background()
	const n = 800
	e := openT(t, t.TempDir(), &Options{NoSync: true, BatchSize: n, MemTableSize: 2 << 20})
	var docs []tandem.Doc
	for i := range n {
		// Mostly spaces: large for Badger, two tokens for Bleve.
		docs = append(docs, tandem.Doc{ID: fmt.Sprint(i), Fields: map[string]any{"text": "whale" + strings.Repeat(" ", 3500) + fmt.Sprint("w", i)}})
	}
	res, err := e.Index(ctx, docs)
	if err != nil {
		t.Fatal(err)
	}
	if res.Put != n || res.Batches < 8 {
		t.Errorf("result %+v: want %d documents (2.8 MB) in at least 8 batches", res, n)
	}
	hits, err := e.Search(ctx, Request{Text: "whale", K: n + 10, IDsOnly: true})
	if err != nil || len(hits.Hits) != n {
		t.Errorf("search: %d hits, %v", len(hits.Hits), err)
	}
	// With a bad document in a split batch, the good ones before its part
	// stay; the error names it.
	docs[n-11].Fields["text"] = 7.0
	for i := range docs {
		docs[i].ID = fmt.Sprint("again", i)
	}
	res, err = e.Index(ctx, docs)
	var be *DocError
	if !errors.As(err, &be) || be.Index != n-11 || be.ID != fmt.Sprint("again", n-11) {
		t.Fatalf("err = %v, want a DocError for document %d", err, n-11)
	}
	if int(e.Count()) != n+res.Put || res.Put > n-11 {
		t.Errorf("count %d after %d more were put", e.Count(), res.Put)
	}
}

func TestJSONLSplitBatchWithBadLine(t *testing.T) {
	ctx := context.Background()
	var sb strings.Builder
	for i := range 14 {
		if i == 11 {
			fmt.Fprintf(&sb, `{"_id":"%d","text":7}`+"\n", i)
			continue
		}
		fmt.Fprintf(&sb, `{"_id":"%d","text":"whale%sw%d"}`+"\n", i, strings.Repeat(" ", 900_000), i)
	}
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	p, err := e.IndexJSONL(ctx, strings.NewReader(sb.String()), JSONLOptions{SkipBad: true})
	if err != nil || p.Docs != 13 || p.Skipped != 1 || e.Count() != 13 {
		t.Fatalf("SkipBad over a split batch: %+v, %v, count %d", p, err, e.Count())
	}
	e2 := openT(t, t.TempDir(), &Options{NoSync: true})
	_, err = e2.IndexJSONL(ctx, strings.NewReader(sb.String()), JSONLOptions{})
	var le *DocError
	if !errors.As(err, &le) || le.Line != 12 {
		t.Fatalf("err = %v, want line 12", err)
	}
}

func TestLineTooLong(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	in := `{"_id":"a","text":"short"}` + "\n" + `{"_id":"b","text":"` + strings.Repeat("x", 500) + `"}` + "\n" + `{"_id":"c","text":"short too"}`
	_, err := e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{MaxLineBytes: 100})
	var le *DocError
	if !errors.As(err, &le) || le.Line != 2 || !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("err = %v, want line 2 too long", err)
	}
	p, err := e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{MaxLineBytes: 100, SkipBad: true})
	if err != nil || p.Docs != 2 || p.Skipped != 1 || p.Lines != 3 {
		t.Errorf("SkipBad: %+v, %v", p, err)
	}
}

func TestBadFilterAndRequest(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	if _, err := e.Index(ctx, []tandem.Doc{{ID: "1", Fields: map[string]any{"text": "hello", "year": 2000.0}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ filter, want string }{
		{`{"and":[{"term":{"year":2000}},{"range":{"yeer":{"gt":1}}}]}`, `and[1].range.yeer: unknown field "yeer"`},
		{`{"term":{"year":"2000"}}`, `term.year: "year" is a number field`},
		{`{"term":`, "malformed JSON"},
	} {
		_, err := e.Search(ctx, Request{Text: "hello", Filter: []byte(tc.filter)})
		if !errors.Is(err, filter.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("filter %s: err = %v, want %q", tc.filter, err, tc.want)
		}
	}
	for _, req := range []Request{{Text: "x", K: -1}, {Text: "x", Offset: -2}, {Text: "x", K: maxK + 1},
		{Text: "caf\xe9"}, {Text: strings.Repeat("word ", MaxQueryBytes)}} {
		if _, err := e.Search(ctx, req); !errors.Is(err, ErrBadRequest) {
			t.Errorf("Search(%+v): err = %v, want ErrBadRequest", req, err)
		}
	}
	// k + offset is checked without adding: no overflow passes.
	for _, req := range []Request{{K: math.MaxInt, Offset: 1}, {K: 1, Offset: math.MaxInt}, {K: math.MaxInt, Offset: math.MaxInt}, {K: math.MaxInt}} {
		_, err := e.Search(ctx, req)
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), fmt.Sprintf("k=%d offset=%d", req.K, req.Offset)) || !strings.Contains(err.Error(), "k+offset") {
			t.Errorf("Search(k=%d, offset=%d): err = %v, want ErrBadRequest naming k and offset", req.K, req.Offset, err)
		}
	}
	// No text and no filter: bm25 ranks every document, as the match-all
	// filter does.
	if res, err := e.Search(ctx, Request{}); err != nil || len(res.Hits) != 1 {
		t.Errorf("Search with no text and no filter: %+v, %v; want the one document", res, err)
	}
	if _, err := e.Delete(ctx, []string{"1", ""}); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "id 2 of the 2") {
		t.Errorf("Delete of an empty id: %v, want ErrBadRequest naming it", err)
	}
	if e.Count() != 1 {
		t.Errorf("a refused delete deleted: %d documents left", e.Count())
	}
	if _, err := e.Search(ctx, Request{Text: "x", Retrievers: []string{"dense:minilm"}}); !errors.Is(err, ErrUnknownRetriever) {
		t.Errorf("unknown retriever: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Search(cctx, Request{Text: "hello"}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Search: %v", err)
	}
	if _, err := e.Index(cctx, []tandem.Doc{{ID: "2", Fields: map[string]any{"text": "x"}}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Index: %v", err)
	}
}

// A filter over the engine's FilterLimits (filter.DefaultLimits unless
// Options say) is refused naming the limit, in Search, FilterBitmap and a
// shard's Fetch alike.
func TestFilterLimits(t *testing.T) {
	ctx := context.Background()
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "kw", Type: tandem.Keyword}, {Name: "n", Type: tandem.Number}}}
	or := func(n int) []byte {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"range":{"n":{"gte":%d}}}`, i)
		}
		return []byte(`{"or":[` + strings.Join(parts, ",") + `]}`)
	}
	deep := func(n int) []byte {
		return []byte(strings.Repeat(`{"not":`, n-1) + `{"exists":"kw"}` + strings.Repeat("}", n-1))
	}
	for _, tc := range []struct {
		opts         filter.Limits
		ok, over     []byte
		limit, where string
	}{
		{filter.Limits{}, or(1024), or(1025), filter.LimitClauses, "or[1024].range"},
		{filter.Limits{}, deep(32), deep(33), filter.LimitDepth, strings.TrimSuffix(strings.Repeat("not.", 32), ".")},
		{filter.Limits{MaxClauses: 3}, or(3), or(4), filter.LimitClauses, "or[3].range"},
		{filter.Limits{MaxDepth: 2}, deep(2), deep(3), filter.LimitDepth, "not.not"},
	} {
		e := openT(t, t.TempDir(), &Options{Schema: schema, NoSync: true, FilterLimits: tc.opts})
		if _, err := e.Index(ctx, []tandem.Doc{{ID: "1", Fields: map[string]any{"kw": "a", "n": 5.0}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Search(ctx, Request{Filter: tc.ok}); err != nil {
			t.Errorf("%+v: a filter at the limit: %v", tc.opts, err)
		}
		for name, run := range map[string]func() error{
			"Search":       func() error { _, err := e.Search(ctx, Request{Filter: tc.over}); return err },
			"FilterBitmap": func() error { _, err := e.FilterBitmap(ctx, tc.over); return err },
			"Fetch":        func() error { _, err := e.Shard().Fetch(ctx, Request{Filter: tc.over}, []string{"1"}); return err },
		} {
			err := run()
			var fe *filter.Error
			if !errors.As(err, &fe) || fe.Limit != tc.limit || fe.Path != tc.where {
				t.Errorf("%+v: %s over the %s limit: %v; want a *filter.Error at %s", tc.opts, name, tc.limit, err, tc.where)
			}
		}
	}
	if _, err := Open(t.TempDir(), &Options{FilterLimits: filter.Limits{MaxClauses: -1}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("negative FilterLimits: %v", err)
	}
}

// Text to search in a collection without a text field is a bad request
// naming the text; a filter alone, or nothing, still ranks its documents.
func TestNoTextField(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{Schema: &tandem.Schema{Fields: []tandem.Field{{Name: "kw", Type: tandem.Keyword}}}, NoSync: true})
	if _, err := e.Index(ctx, []tandem.Doc{{ID: "1", Fields: map[string]any{"kw": "a"}}, {ID: "2", Fields: map[string]any{"kw": "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Search(ctx, Request{Text: "a"}); !errors.Is(err, ErrBadRequest) || !strings.HasPrefix(strings.TrimPrefix(err.Error(), "engine: bad request: "), "text: ") || !strings.Contains(err.Error(), "no text field") {
		t.Errorf("text search without a text field: %v, want ErrBadRequest naming text", err)
	}
	if res, err := e.Search(ctx, Request{Filter: []byte(`{"term":{"kw":"b"}}`)}); err != nil || len(res.Hits) != 1 || res.Hits[0].ID != "2" {
		t.Errorf("filter alone: %+v, %v", res, err)
	}
	if res, err := e.Search(ctx, Request{}); err != nil || len(res.Hits) != 2 {
		t.Errorf("no text, no filter: %+v, %v", res, err)
	}
}

// TestConcurrentSearchWhileIndexing runs searches during writes; under
// -race it also checks the locking. A document whose delete was
// acknowledged before a search started is never returned by it.
func TestConcurrentSearchWhileIndexing(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{BatchSize: 20, NoSync: true})
	var wg sync.WaitGroup
	var ackedDeletes atomic.Int64 // gone0 .. gone(n-1) are acknowledged deleted
	stop := make(chan struct{})
	errc := make(chan error, 4)
	searches := atomic.Int64{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				deleted := ackedDeletes.Load()
				res, err := e.Search(ctx, Request{Text: "common", K: 100})
				if err != nil {
					errc <- err
					return
				}
				searches.Add(1)
				for _, h := range res.Hits {
					var n int64
					if _, err := fmt.Sscanf(h.ID, "gone%d", &n); err == nil && n < deleted {
						errc <- fmt.Errorf("%s returned after its delete was acknowledged", h.ID)
						return
					}
				}
			}
		}()
	}
	for i := range 30 {
		docs := []tandem.Doc{
			{ID: fmt.Sprint("keep", i), Fields: map[string]any{"text": "common words here"}},
			{ID: fmt.Sprint("gone", i), Fields: map[string]any{"text": "common words gone"}},
		}
		if _, err := e.Index(ctx, docs); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Delete(ctx, []string{fmt.Sprint("gone", i)}); err != nil {
			t.Fatal(err)
		}
		ackedDeletes.Store(int64(i + 1))
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if e.Count() != 30 {
		t.Errorf("count %d, want 30", e.Count())
	}
	if searches.Load() == 0 {
		t.Error("no search ran during indexing")
	}
}

// TestWriteBlobs shows a retriever attaching vectors in the same batch.
func TestWriteBlobs(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	var b storage.Batch
	b.Put(tandem.Doc{ID: "a", Fields: map[string]any{"text": "x"}}, map[string][]byte{"vec/m": {1, 2, 3, 4}})
	if _, err := e.Shard().Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	num, _, _ := e.Shard().Store().Lookup("a")
	if v, ok, _ := e.Shard().Store().Blob(num, "vec/m"); !ok || len(v) != 4 {
		t.Errorf("blob = %v, %v", v, ok)
	}
}

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tandem-example")
	defer os.RemoveAll(dir)
	e, err := Open(dir, nil) // a BEIR-style collection: _id, title, text
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()
	_, err = e.IndexJSONL(ctx, strings.NewReader(`{"_id":"a","title":"Go","text":"Go is a programming language.","year":2009}
{"_id":"b","title":"Rust","text":"Rust is a systems programming language.","year":2015}
`), JSONLOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	res, err := e.Search(ctx, Request{Text: "programming language", Filter: []byte(`{"range":{"year":{"gte":2010}}}`), K: 5})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range res.Hits {
		fmt.Println(h.ID, h.Fields["title"])
	}
	// Output: b Rust
}

// liveSet is a minimal in-memory derived index: the set of live document
// numbers. Being in memory, it replays the whole log on every attach.
type liveSet struct {
	applied uint64
	live    map[uint64]string
}

func (l *liveSet) Name() string       { return "liveset" }
func (l *liveSet) AppliedSeq() uint64 { return l.applied }
func (l *liveSet) Close() error       { return nil }
func (l *liveSet) Apply(_ context.Context, changes []storage.Change) error {
	for _, c := range changes {
		if c.Seq <= l.applied {
			continue
		}
		if c.Op == storage.OpPut && c.Doc != nil {
			l.live[c.DocNum] = c.ID
		} else {
			delete(l.live, c.DocNum)
		}
		l.applied = c.Seq
	}
	return nil
}

func TestAttachDerivedIndex(t *testing.T) {
	ctx := context.Background()
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	e.Index(ctx, []tandem.Doc{{ID: "a", Fields: map[string]any{"text": "x"}}, {ID: "b", Fields: map[string]any{"text": "y"}}})
	e.Delete(ctx, []string{"a"})
	l := &liveSet{live: map[uint64]string{}}
	if err := e.Attach(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := e.Attach(ctx, &liveSet{live: map[uint64]string{}}); !errors.Is(err, ErrBadRequest) {
		t.Errorf("second attach with the same name: %v", err)
	}
	e.Index(ctx, []tandem.Doc{{ID: "c", Fields: map[string]any{"text": "z"}}, {ID: "b", Fields: map[string]any{"text": "y2"}}})
	want := map[uint64]string{}
	e.Shard().Store().ScanDocs(ctx, func(num uint64, d tandem.Doc) error { want[num] = d.ID; return nil })
	if fmt.Sprint(l.live) != fmt.Sprint(want) || l.applied != e.Shard().Store().LastSeq() {
		t.Errorf("derived %v at %d, storage %v at %d", l.live, l.applied, want, e.Shard().Store().LastSeq())
	}
	if st, _ := e.Stats(); st.AppliedSeq["liveset"] != st.LastSeq {
		t.Errorf("stats: %+v", st.AppliedSeq)
	}
}

// TestMustExist: Open with MustExist fails on a directory without a
// collection, with ErrNoCollection, and creates nothing; it opens an
// existing collection.
func TestMustExist(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "missing")
	if _, err := Open(dir, &Options{MustExist: true}); !errors.Is(err, ErrNoCollection) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a missing collection: %v, want ErrNoCollection", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Open with MustExist created %s (%v)", dir, err)
	}
	e, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	e, err = Open(dir, &Options{MustExist: true})
	if err != nil {
		t.Fatalf("Open of an existing collection with MustExist: %v", err)
	}
	e.Close()
}
