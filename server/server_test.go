package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
)

func ids(hits []hitJSON) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.ID
	}
	return out
}

// hitJSON and searchJSON read a search answer as a client does.
type hitJSON struct {
	ID      string         `json:"id"`
	Score   float64        `json:"score"`
	Fields  map[string]any `json:"fields"`
	Sources []struct {
		Retriever    string  `json:"retriever"`
		Rank         int     `json:"rank"`
		Score        float64 `json:"score"`
		Contribution float64 `json:"contribution"`
	} `json:"sources"`
}

type searchJSON struct {
	Hits       []hitJSON `json:"hits"`
	Retrievers []string  `json:"retrievers"`
	Fusion     string    `json:"fusion"`
	TookMS     float64   `json:"took_ms"`
	K          int       `json:"k"`
	Offset     int       `json:"offset"`
}

func (a *apiServer) find(coll string, req map[string]any) searchJSON {
	a.t.Helper()
	var res searchJSON
	a.must(http.StatusOK, "POST", "/v1/collections/"+coll+"/search", req, &res)
	return res
}

// corpus is n documents d00.. with "fox" i+1 times and "common" once,
// alternating lang en/fr, year 2000+i.
func corpus(n int) []string {
	var lines []string
	for i := range n {
		lang := "en"
		if i%2 == 1 {
			lang = "fr"
		}
		d, _ := json.Marshal(map[string]any{"_id": fmt.Sprintf("d%02d", i), "title": fmt.Sprintf("doc %d", i),
			"text": strings.Repeat("fox ", i+1) + "common", "lang": lang, "year": 2000 + i})
		lines = append(lines, string(d))
	}
	return lines
}

func TestSpecCoversEveryRoute(t *testing.T) {
	doc, _ := loadSpec(t)
	a := newAPIServer(t, nil)
	inSpec := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inSpec[method+" "+path] = true
		}
	}
	served := map[string]bool{}
	for _, p := range a.s.patterns {
		p = strings.NewReplacer("{id...}", "{id}", "/{$}", "/").Replace(p)
		if strings.HasSuffix(p, "/ui/") {
			p += "{file}"
		}
		served[p] = true
		if !inSpec[p] {
			t.Errorf("route %s is not in openapi.json", p)
		}
	}
	for op := range inSpec {
		if !served[op] {
			t.Errorf("openapi.json has %s, which the server does not serve", op)
		}
	}
	// The served spec is the committed file.
	code, body := a.do("GET", "/openapi.json", nil)
	if code != http.StatusOK || !bytes.Equal(body, openAPISpec) {
		t.Fatalf("GET /openapi.json: %d, %d bytes; want the %d bytes of openapi.json", code, len(body), len(openAPISpec))
	}
}

func TestHealthAndPage(t *testing.T) {
	a := newAPIServer(t, nil)
	var st map[string]string
	a.must(http.StatusOK, "GET", "/healthz", nil, &st)
	if st["status"] != "ok" {
		t.Errorf("healthz: %v", st)
	}
	a.must(http.StatusOK, "GET", "/readyz", nil, &st)
	if st["status"] != "ready" {
		t.Errorf("readyz: %v", st)
	}
	code, page := a.do("GET", "/", nil)
	index, _ := fs.ReadFile(uiFiles, "ui/index.html")
	if code != http.StatusOK || !bytes.Equal(page, index) {
		t.Errorf("GET /: %d, want the embedded index.html", code)
	}
	// Every other file of the page is served under /ui/.
	fs.WalkDir(uiFiles, "ui", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || path == "ui/index.html" {
			return err
		}
		want, _ := fs.ReadFile(uiFiles, path)
		if code, got := a.do("GET", "/"+path, nil); code != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("GET /%s: %d, %d bytes; want %d bytes", path, code, len(got), len(want))
		}
		return nil
	})
	if code, _ := a.do("GET", "/ui/no-such-file.js", nil); code != http.StatusNotFound {
		t.Errorf("GET /ui/no-such-file.js: %d, want 404", code)
	}
	// Routes that do not exist answer JSON errors.
	a.fails(http.StatusNotFound, "not_found", "GET", "/v2/nothing", nil, "/v2/nothing")
	eb := a.fails(http.StatusMethodNotAllowed, "method_not_allowed", "POST", "/v1/collections", nil, "POST")
	_ = eb
}

func TestCollections(t *testing.T) {
	a := newAPIServer(t, nil)
	var list struct {
		Collections []collectionSummary `json:"collections"`
	}
	a.must(http.StatusOK, "GET", "/v1/collections", nil, &list)
	if len(list.Collections) != 0 {
		t.Fatalf("new server lists %v", list.Collections)
	}
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/books", nil, &ci)
	if ci.Name != "books" || ci.Docs != 0 || !slices.Equal(ci.Retrievers, []string{"bm25"}) || ci.Schema.IDField != "_id" || len(ci.Schema.Fields) != 2 {
		t.Fatalf("created: %+v", ci)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "books", "badger")); err != nil {
		t.Fatalf("no collection on disk: %v", err)
	}
	a.fails(http.StatusConflict, "collection_exists", "PUT", "/v1/collections/books", nil, "books")
	a.upsert("books", corpus(3)...)
	a.must(http.StatusOK, "GET", "/v1/collections", nil, &list)
	if len(list.Collections) != 1 || list.Collections[0].Name != "books" || list.Collections[0].Docs != 3 {
		t.Fatalf("list: %+v", list.Collections)
	}
	a.must(http.StatusOK, "GET", "/v1/collections/books", nil, &ci)
	if ci.Docs != 3 || ci.Stats.Docs != 3 || ci.Stats.DiskBytes["badger"] <= 0 {
		t.Fatalf("info: docs %d, stats %+v", ci.Docs, ci.Stats)
	}
	if f, ok := ci.Schema.Field("lang"); !ok || f.Type != "keyword" {
		t.Errorf("inferred field lang: %+v %v", f, ok)
	}
	if want := (searchLimits{MaxK: DefaultMaxK, MaxQuery: DefaultMaxQuery, MaxFilterClauses: filter.DefaultMaxClauses, MaxFilterDepth: filter.DefaultMaxDepth, MaxFacets: engine.MaxFacets}); ci.Limits != want {
		t.Errorf("limits %+v, want the defaults %+v", ci.Limits, want)
	}
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/nope", nil, `"nope"`)
	a.fails(http.StatusBadRequest, "invalid_name", "GET", "/v1/collections/bad.name", nil, `"bad.name"`)
	a.fails(http.StatusBadRequest, "invalid_name", "PUT", "/v1/collections/"+strings.Repeat("x", 65), nil, "64")

	// Drop while idle: the directory goes, the name is free again.
	a.must(http.StatusNoContent, "DELETE", "/v1/collections/books", nil, nil)
	if _, err := os.Stat(filepath.Join(a.dir, "books")); !os.IsNotExist(err) {
		t.Fatalf("dropped collection still on disk: %v", err)
	}
	if entries, _ := os.ReadDir(a.dir); len(entries) != 0 {
		t.Fatalf("data directory after drop: %v", entries)
	}
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/books", nil, "books")
	a.fails(http.StatusNotFound, "collection_not_found", "DELETE", "/v1/collections/books", nil, "books")
	a.fails(http.StatusNotFound, "collection_not_found", "POST", "/v1/collections/books/search", map[string]any{"text": "fox"}, "books")
	a.must(http.StatusCreated, "PUT", "/v1/collections/books", nil, &ci)
	if ci.Docs != 0 {
		t.Fatalf("re-created collection has %d documents", ci.Docs)
	}
}

// TestCollectionLimits: a collection's description states the server's
// search limits as configured (the page keeps its requests within them),
// and a search over each is refused.
func TestCollectionLimits(t *testing.T) {
	a := newAPIServer(t, &Config{MaxK: 30, MaxQuery: 40, Engine: engine.Options{FilterLimits: filter.Limits{MaxClauses: 3, MaxDepth: 2}}})
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/books", nil, &ci)
	want := searchLimits{MaxK: 30, MaxQuery: 40, MaxFilterClauses: 3, MaxFilterDepth: 2, MaxFacets: engine.MaxFacets}
	if ci.Limits != want {
		t.Errorf("created: limits %+v, want %+v", ci.Limits, want)
	}
	a.upsert("books", corpus(3)...)
	ci = collectionInfo{}
	if a.must(http.StatusOK, "GET", "/v1/collections/books", nil, &ci); ci.Limits != want {
		t.Errorf("described: limits %+v, want %+v", ci.Limits, want)
	}
	a.fails(http.StatusBadRequest, "k_too_large", "POST", "/v1/collections/books/search", map[string]any{"text": "fox", "k": 20, "offset": 11}, "30", "--max-k")
	a.fails(http.StatusBadRequest, "query_too_long", "POST", "/v1/collections/books/search", map[string]any{"text": strings.Repeat("é", 21)}, "42 bytes", "--max-query")
	a.fails(http.StatusBadRequest, "filter_too_large", "POST", "/v1/collections/books/search", map[string]any{"text": "fox", "filter": map[string]any{"terms": map[string]any{"lang": []string{"a", "b", "c", "d"}}}}, "3 clauses")
	a.fails(http.StatusBadRequest, "filter_too_large", "POST", "/v1/collections/books/search", map[string]any{"text": "fox", "filter": map[string]any{"not": map[string]any{"not": map[string]any{"exists": "lang"}}}}, "2 levels")
	a.must(http.StatusOK, "POST", "/v1/collections/books/search", map[string]any{"text": strings.Repeat("é", 20), "k": 20, "offset": 10, "filter": map[string]any{"not": map[string]any{"terms": map[string]any{"lang": []string{"a", "b", "c"}}}}}, nil)
}

func TestCollectionsReopen(t *testing.T) {
	dir := t.TempDir()
	a := newAPIServer(t, &Config{DataDir: dir})
	a.must(http.StatusCreated, "PUT", "/v1/collections/kept", nil, nil)
	a.upsert("kept", corpus(4)...)
	a.ts.Close()
	if err := a.s.Close(); err != nil {
		t.Fatal(err)
	}
	// Not a collection, and a bad name: both are ignored.
	os.MkdirAll(filepath.Join(dir, "not-a-collection"), 0o755)
	os.MkdirAll(filepath.Join(dir, ".hidden", "badger"), 0o755)
	b := newAPIServer(t, &Config{DataDir: dir})
	var list struct {
		Collections []collectionSummary `json:"collections"`
	}
	b.must(http.StatusOK, "GET", "/v1/collections", nil, &list)
	if len(list.Collections) != 1 || list.Collections[0].Name != "kept" || list.Collections[0].Docs != 4 {
		t.Fatalf("after restart: %+v", list.Collections)
	}
}

func TestCreateErrors(t *testing.T) {
	a := newAPIServer(t, nil)
	a.fails(http.StatusBadRequest, "bad_schema", "PUT", "/v1/collections/c",
		map[string]any{"schema": map[string]any{"fields": []map[string]any{{"name": "year", "type": "integer"}}}}, `"year"`, `"integer"`)
	a.fails(http.StatusBadRequest, "bad_schema", "PUT", "/v1/collections/c",
		map[string]any{"schema": map[string]any{"models": []map[string]any{{"name": "ext", "dense": true, "dim": 4, "external": true}}}}, `"ext"`, "similarity")
	// An analyzer Bleve does not know is refused at creation, not with
	// every document afterwards.
	a.fails(http.StatusBadRequest, "bad_schema", "PUT", "/v1/collections/c",
		map[string]any{"schema": map[string]any{"fields": []map[string]any{{"name": "title", "type": "text", "analyzer": "klingon"}}}},
		`schema field "title": unknown analyzer "klingon" (known: en, keyword, standard)`)
	a.fails(http.StatusBadRequest, "invalid_json", "PUT", "/v1/collections/c", map[string]any{"schemaa": map[string]any{}}, `"schemaa"`)
	a.fails(http.StatusBadRequest, "invalid_json", "PUT", "/v1/collections/c", `{"schema":`, "invalid JSON")
	a.fails(http.StatusBadRequest, "invalid_json", "PUT", "/v1/collections/c", map[string]any{"dense": "one"}, `"dense"`)
	a.fails(http.StatusBadRequest, "bad_model", "PUT", "/v1/collections/c", map[string]any{"dense": []string{"no-such-model"}}, `"no-such-model"`)
	// A token encoding that is none is refused with no late model asked
	// for too (it was ignored: the API fuzzer's find).
	a.fails(http.StatusBadRequest, "bad_request", "PUT", "/v1/collections/c", map[string]any{"late_encoding": "__not_in_enum__"}, "late_encoding", `"__not_in_enum__"`)
	if entries, _ := os.ReadDir(a.dir); len(entries) != 0 {
		t.Fatalf("failed creates left %v", entries)
	}
}

func TestUpsertPerLineErrors(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	res := a.upsert("docs",
		`{"_id":"a","title":"Alpha","text":"the quick brown fox","lang":"en","year":2020}`,
		``,
		`not json`,
		`{"_id":"b","text":"lazy dog sleeps","lang":"fr","year":2021}`,
		`{"text":"no id here"}`,
		`{"_id":"c","text":"fox again","lang":["en","fr"]}`,
		`{"_id":"d","title":"Delta"}`,
	)
	if res.Indexed != 3 || res.Failed != 3 || len(res.Errors) != 3 {
		t.Fatalf("upsert: %+v", res)
	}
	want := []struct {
		line  int
		id    string
		names string
	}{{3, "", "malformed JSON"}, {5, "", `"_id"`}, {6, "c", `"lang"`}}
	for i, w := range want {
		e := res.Errors[i]
		if e.Line != w.line || e.ID != w.id || !strings.Contains(e.Error, w.names) {
			t.Errorf("error %d: %+v, want line %d id %q naming %s", i, e, w.line, w.id, w.names)
		}
	}
	for _, id := range []string{"a", "b", "d"} {
		var doc documentBody
		a.must(http.StatusOK, "GET", "/v1/collections/docs/documents/"+id, nil, &doc)
		if doc.ID != id || len(doc.Fields) == 0 {
			t.Errorf("GET %s: %+v", id, doc)
		}
	}
	a.fails(http.StatusNotFound, "document_not_found", "GET", "/v1/collections/docs/documents/c", nil, `"c"`)

	// A JSON array: each element is a document of its own.
	var ar upsertResult
	a.must(http.StatusOK, "POST", "/v1/collections/docs/documents",
		`[{"_id":"e","text":"echo"}, {"_id":"f","lang":"en"}, {"_id":"g","text":"golf","year":"soon"}]`, &ar, "Content-Type", "application/json")
	if ar.Indexed != 1 || ar.Failed != 2 || ar.Errors[0].Line != 2 || ar.Errors[0].ID != "f" || !strings.Contains(ar.Errors[0].Error, "no text") ||
		ar.Errors[1].Line != 3 || !strings.Contains(ar.Errors[1].Error, `"year"`) {
		t.Fatalf("array upsert: %+v", ar)
	}
	// One object, and an array without a Content-Type.
	a.must(http.StatusOK, "POST", "/v1/collections/docs/documents", "{\n  \"_id\": \"h\",\n  \"text\": \"hotel\"\n}", &ar, "Content-Type", "application/json")
	if ar.Indexed != 1 || ar.Failed != 0 {
		t.Fatalf("one object: %+v", ar)
	}
	// Without a Content-Type (outside the spec client: the spec asks
	// for one), a body starting with '[' is an array.
	resp, err := a.ts.Client().Post(a.ts.URL+"/v1/collections/docs/documents", "", strings.NewReader(`[{"_id":"i","text":"india"}]`))
	if err != nil {
		t.Fatal(err)
	}
	ar = upsertResult{}
	json.NewDecoder(resp.Body).Decode(&ar)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || ar.Indexed != 1 {
		t.Fatalf("array without Content-Type: %d %+v", resp.StatusCode, ar)
	}
	// Replacing a document by id.
	a.upsert("docs", `{"_id":"a","title":"Alpha two","text":"replaced"}`)
	var doc documentBody
	a.must(http.StatusOK, "GET", "/v1/collections/docs/documents/a", nil, &doc)
	if doc.Fields["title"] != "Alpha two" || doc.Fields["lang"] != nil {
		t.Errorf("replaced document: %+v", doc)
	}
	var ci collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/docs", nil, &ci)
	if ci.Docs != 6 { // a b d e h i
		t.Errorf("collection holds %d documents, want 6", ci.Docs)
	}

	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/docs/documents", "\n\n", "no documents")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/documents", `[{"_id":"x"`, "invalid JSON")
	a.fails(http.StatusBadRequest, "bad_parameter", "POST", "/v1/collections/docs/documents?wait=1", ndjson(`{"_id":"x","text":"x"}`), "wait")
	a.fails(http.StatusNotFound, "collection_not_found", "POST", "/v1/collections/nope/documents", ndjson(`{"_id":"x","text":"x"}`), `"nope"`)
	code, body := a.do("POST", "/v1/collections/docs/documents", `<doc/>`, "Content-Type", "application/xml")
	if code != http.StatusUnsupportedMediaType || !strings.Contains(string(body), "application/xml") {
		t.Errorf("XML upsert: %d %s", code, body)
	}
}

func TestDocuments(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(5)...)
	a.upsert("docs", `{"_id":"x/y","text":"an id with a slash"}`)
	var doc documentBody
	a.must(http.StatusOK, "GET", "/v1/collections/docs/documents/d01", nil, &doc)
	if doc.ID != "d01" || doc.Fields["lang"] != "fr" || doc.Fields["year"] != 2001.0 || doc.Fields["title"] != "doc 1" {
		t.Fatalf("GET d01: %+v", doc)
	}
	a.fails(http.StatusNotFound, "document_not_found", "GET", "/v1/collections/docs/documents/zz", nil, `"zz"`)
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/nope/documents/d01", nil, `"nope"`)
	// An id with a slash, escaped (outside the spec client: the spec's
	// router matches one path segment per parameter).
	resp, err := a.ts.Client().Get(a.ts.URL + "/v1/collections/docs/documents/x%2Fy")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || doc.ID != "x/y" {
		t.Fatalf("GET x%%2Fy: %d %+v", resp.StatusCode, doc)
	}

	var del deletedBody
	a.must(http.StatusOK, "DELETE", "/v1/collections/docs/documents/d00", nil, &del)
	if del.Deleted != 1 {
		t.Fatalf("delete d00: %+v", del)
	}
	a.must(http.StatusOK, "DELETE", "/v1/collections/docs/documents/d00", nil, &del)
	if del.Deleted != 0 {
		t.Fatalf("delete d00 again: %+v", del)
	}
	a.fails(http.StatusNotFound, "document_not_found", "GET", "/v1/collections/docs/documents/d00", nil, "d00")
	a.must(http.StatusOK, "POST", "/v1/collections/docs/delete", map[string]any{"ids": []string{"d01", "d02", "nope"}}, &del)
	if del.Deleted != 2 {
		t.Fatalf("delete d01 d02 nope: %+v", del)
	}
	a.fails(http.StatusBadRequest, "", "POST", "/v1/collections/docs/delete", map[string]any{"ids": []string{}}, "ids")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/delete", map[string]any{"id": "d03"}, `"id"`)
	a.fails(http.StatusNotFound, "collection_not_found", "POST", "/v1/collections/nope/delete", map[string]any{"ids": []string{"a"}}, `"nope"`)
	a.fails(http.StatusNotFound, "collection_not_found", "DELETE", "/v1/collections/nope/documents/a", nil, `"nope"`)
	var ci collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/docs", nil, &ci)
	if ci.Docs != 3 { // d03 d04 x/y
		t.Fatalf("after deletes: %d documents, want 3", ci.Docs)
	}
	// Deleted documents are no longer found.
	res := a.find("docs", map[string]any{"text": "fox", "k": 10})
	if got := ids(res.Hits); !slices.Equal(got, []string{"d04", "d03"}) {
		t.Fatalf("search after deletes: %v", got)
	}
}

func TestSearch(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(25)...)
	a.upsert("docs", `{"_id":"zebra","title":"unique","text":"a zebra crossing","lang":"en","year":1999}`)

	// One hit: its score and its one source.
	one := a.find("docs", map[string]any{"text": "zebra"})
	if len(one.Hits) != 1 || one.Hits[0].ID != "zebra" || one.Hits[0].Score <= 0 || len(one.Hits[0].Sources) != 1 ||
		one.Hits[0].Sources[0].Retriever != "bm25" || one.Hits[0].Sources[0].Rank != 1 || one.Hits[0].Sources[0].Contribution != one.Hits[0].Score {
		t.Fatalf("single hit: %+v", one)
	}
	if one.Hits[0].Fields["title"] != "unique" || one.K != 10 || one.Offset != 0 || !slices.Equal(one.Retrievers, []string{"bm25"}) || one.Fusion != "" {
		t.Fatalf("single hit answer: %+v", one)
	}

	// Paging: three pages are the full ranking cut in three.
	all := a.find("docs", map[string]any{"text": "common", "k": 25})
	if len(all.Hits) != 25 {
		t.Fatalf("k=25: %d hits", len(all.Hits))
	}
	var paged []string
	for off := 0; off < 30; off += 10 {
		p := a.find("docs", map[string]any{"text": "common", "k": 10, "offset": off})
		if p.Offset != off || p.K != 10 {
			t.Errorf("page at %d: k %d offset %d", off, p.K, p.Offset)
		}
		paged = append(paged, ids(p.Hits)...)
	}
	if !slices.Equal(paged, ids(all.Hits)) {
		t.Fatalf("pages %v\nwant    %v", paged, ids(all.Hits))
	}
	// The ranking: more "fox" scores higher.
	fox := a.find("docs", map[string]any{"text": "fox", "k": 3})
	if got := ids(fox.Hits); !slices.Equal(got, []string{"d24", "d23", "d22"}) {
		t.Errorf("fox: %v", got)
	}

	// The query-string form answers as the body form.
	var g searchJSON
	a.must(http.StatusOK, "GET", "/v1/collections/docs/search?q=fox&k=3&offset=1", nil, &g)
	p := a.find("docs", map[string]any{"text": "fox", "k": 3, "offset": 1})
	if !slices.Equal(ids(g.Hits), ids(p.Hits)) || len(g.Hits) != 3 {
		t.Errorf("GET search %v, POST %v", ids(g.Hits), ids(p.Hits))
	}
	var gf searchJSON
	a.must(http.StatusOK, "GET", `/v1/collections/docs/search?q=fox&mode=hybrid&ids_only=true&filter=`+
		`%7B%22term%22%3A%7B%22lang%22%3A%22fr%22%7D%7D`, nil, &gf)
	if len(gf.Hits) != 10 || gf.Hits[0].ID != "d23" || gf.Hits[0].Fields != nil {
		t.Errorf("GET search with a filter, ids only: %+v", gf.Hits)
	}
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=fox&k=ten", nil, "k")

	// A filter: every hit matches it.
	f := a.find("docs", map[string]any{"text": "fox", "k": 25, "filter": map[string]any{"and": []any{
		map[string]any{"term": map[string]any{"lang": "en"}},
		map[string]any{"range": map[string]any{"year": map[string]any{"gte": 2010}}},
	}}})
	if len(f.Hits) != 8 {
		t.Errorf("filtered: %d hits, want 8 (en, year >= 2010)", len(f.Hits))
	}
	for _, h := range f.Hits {
		if h.Fields["lang"] != "en" || h.Fields["year"].(float64) < 2010 {
			t.Errorf("hit %s does not match the filter: %v", h.ID, h.Fields)
		}
	}
	// ids_only, field boosts, an explicit fusion.
	ido := a.find("docs", map[string]any{"text": "fox", "ids_only": true, "k": 2, "fields": map[string]float64{"text": 2}, "fusion": "rrf"})
	if len(ido.Hits) != 2 || ido.Hits[0].Fields != nil {
		t.Errorf("ids_only: %+v", ido.Hits)
	}
	// A filter alone ranks its documents.
	fo := a.find("docs", map[string]any{"filter": map[string]any{"term": map[string]any{"lang": "en"}}, "k": 50})
	if len(fo.Hits) != 14 {
		t.Errorf("filter alone: %d hits, want 14", len(fo.Hits))
	}

	// Errors name what is wrong.
	a.fails(http.StatusBadRequest, "invalid_filter", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "filter": map[string]any{"and": []any{
		map[string]any{"term": map[string]any{"lang": "en"}},
		map[string]any{"range": map[string]any{"nope": map[string]any{"gte": 1}}},
	}}}, "and[1].range.nope")
	a.fails(http.StatusBadRequest, "invalid_filter", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "filter": map[string]any{"term": map[string]any{"year": "recent"}}}, "term.year")
	a.fails(http.StatusBadRequest, "unknown_retriever", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "retrievers": []string{"dense"}}, `"dense"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", `{"text": "fox",`, "invalid JSON")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", `{"text": "fox"}}`, "trailing data")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "fields": map[string]any{"nope": 1}}, `field "nope"`, "unknown field")
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", map[string]any{"txt": "fox"}, `"txt"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "k": "ten"}, `"k"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", "", "empty")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "offset": -1}, "offset=-1")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "late_scoring": "max-max"}, "max-max")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "mode": "bm25", "retrievers": []string{"bm25"}}, "mode or retrievers")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "weight": map[string]float64{"dense": 2}}, `"dense"`)
	a.fails(http.StatusNotFound, "collection_not_found", "POST", "/v1/collections/nope/search", map[string]any{"text": "fox"}, `"nope"`)
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/nope/search?q=fox", nil, `"nope"`)
}

func TestExternalVectors(t *testing.T) {
	a := newAPIServer(t, nil)
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/vec", externalSchema(), &ci)
	if !slices.Equal(ci.Retrievers, []string{"bm25", "dense:ext"}) || len(ci.Schema.Models) != 1 || !ci.Schema.Models[0].External {
		t.Fatalf("created: %+v", ci)
	}
	res := a.upsert("vec",
		`{"_id":"n","text":"north fox","lang":"en","_vectors":{"ext":{"dense":[1,0,0,0]}}}`,
		`{"_id":"e","text":"east dog","lang":"en","_vectors":{"ext":{"dense":[0,1,0,0]}}}`,
		`{"_id":"s","text":"south fox","lang":"fr","_vectors":{"ext":{"dense":[0,0,1,0]}}}`,
		`{"_id":"bad","text":"three values","_vectors":{"ext":{"dense":[1,2,3]}}}`,
		`{"_id":"none","text":"no vectors"}`,
		`{"_id":"other","text":"unknown model","_vectors":{"other":{"dense":[1,0,0,0]}}}`,
		`{"_id":"w","text":"west","_vectors":{"ext":{"dense":[0.1,0,0,0.9]}}}`,
	)
	if res.Indexed != 4 || res.Failed != 3 {
		t.Fatalf("upsert: %+v", res)
	}
	for i, want := range []struct {
		line  int
		parts []string
	}{{4, []string{"_vectors.ext.dense", "dimension 3, want 4"}}, {5, []string{"ext", "missing dense"}}, {6, []string{`"other"`}}} {
		e := res.Errors[i]
		if e.Line != want.line {
			t.Errorf("error %d: line %d, want %d", i, e.Line, want.line)
		}
		for _, p := range want.parts {
			if !strings.Contains(e.Error, p) {
				t.Errorf("line %d: %q does not name %q", e.Line, e.Error, p)
			}
		}
	}

	d := a.find("vec", map[string]any{"retrievers": []string{"dense"}, "vectors": map[string]any{"ext": map[string]any{"dense": []float32{0.9, 0.1, 0, 0}}}, "k": 2})
	if got := ids(d.Hits); !slices.Equal(got, []string{"n", "e"}) || !slices.Equal(d.Retrievers, []string{"dense:ext"}) {
		t.Fatalf("dense: %v %v", got, d.Retrievers)
	}
	// Hybrid: two sources per hit, whose contributions add up to its score.
	h := a.find("vec", map[string]any{"text": "fox", "mode": "hybrid", "vectors": map[string]any{"ext": map[string]any{"dense": []float32{0, 0, 1, 0}}}, "weight": map[string]float64{"dense": 2}})
	if !slices.Equal(h.Retrievers, []string{"bm25", "dense:ext"}) || h.Fusion != "minmax" || len(h.Hits) == 0 || h.Hits[0].ID != "s" {
		t.Fatalf("hybrid: %+v", h)
	}
	for _, hit := range h.Hits {
		if len(hit.Sources) != 2 || hit.Sources[0].Retriever != "bm25" || hit.Sources[1].Retriever != "dense:ext" {
			t.Fatalf("hit %s sources: %+v", hit.ID, hit.Sources)
		}
		if sum := hit.Sources[0].Contribution + hit.Sources[1].Contribution; math.Abs(sum-hit.Score) > 1e-9 {
			t.Errorf("hit %s: contributions add to %v, score %v", hit.ID, sum, hit.Score)
		}
	}
	// A wrong dimension names the model and the part.
	a.fails(http.StatusBadRequest, "bad_vectors", "POST", "/v1/collections/vec/search",
		map[string]any{"retrievers": []string{"dense"}, "vectors": map[string]any{"ext": map[string]any{"dense": []float32{1, 0, 0}}}}, "ext.dense", "dimension 3, want 4")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/vec/search",
		map[string]any{"text": "fox", "retrievers": []string{"dense"}}, "ext", "external model")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/vec/search",
		map[string]any{"text": "fox", "vectors": map[string]any{"nope": map[string]any{"dense": []float32{1}}}}, `"nope"`)
	a.fails(http.StatusBadRequest, "bad_vectors", "POST", "/v1/collections/vec/search",
		map[string]any{"retrievers": []string{"dense"}, "vectors": map[string]any{"ext": map[string]any{"tokens": [][]float32{{1, 0, 0, 0}}}}}, "ext.tokens")
}

func TestLimits(t *testing.T) {
	a := newAPIServer(t, &Config{MaxBody: 4096, MaxLine: 512, MaxK: 50, MaxQuery: 64})
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	big := strings.Join(corpus(60), "\n") // > 4096 bytes of good lines
	if len(big) <= 4096 {
		t.Fatalf("test body of %d bytes", len(big))
	}
	a.fails(http.StatusRequestEntityTooLarge, "body_too_large", "POST", "/v1/collections/docs/documents", ndjson(big), "4096", "--max-body")
	long := fmt.Sprintf(`{"_id":"long","text":%q}`, strings.Repeat("word ", 120))
	lines := append(corpus(2), long)
	a.fails(http.StatusRequestEntityTooLarge, "line_too_large", "POST", "/v1/collections/docs/documents", ndjson(lines...), "line 3", "512", "--max-line", "nothing was stored")
	var ar upsertResult
	code, _ := a.do("POST", "/v1/collections/docs/documents", "["+corpus(1)[0]+","+long+"]", "Content-Type", "application/json")
	if code != http.StatusRequestEntityTooLarge {
		t.Errorf("array with a long element: %d, want 413", code)
	}
	var ci collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/docs", nil, &ci)
	if ci.Docs != 0 {
		t.Fatalf("refused bodies stored %d documents", ci.Docs)
	}
	ar = a.upsert("docs", corpus(20)...)
	if ar.Indexed != 20 {
		t.Fatalf("upsert under the limits: %+v", ar)
	}
	a.fails(http.StatusBadRequest, "k_too_large", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "k": 40, "offset": 20}, "k=40 offset=20", "50", "--max-k")
	a.fails(http.StatusBadRequest, "k_too_large", "GET", "/v1/collections/docs/search?q=fox&k=51", nil, "--max-k")
	a.find("docs", map[string]any{"text": "fox", "k": 40, "offset": 10}) // at the limit
	a.fails(http.StatusBadRequest, "query_too_long", "POST", "/v1/collections/docs/search", map[string]any{"text": strings.Repeat("fox ", 17)}, "68 bytes", "64", "--max-query")
	a.fails(http.StatusRequestEntityTooLarge, "body_too_large", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "filter": map[string]any{"terms": map[string]any{"lang": slices.Repeat([]string{"en"}, 1000)}}}, "--max-body")
	a.fails(http.StatusRequestEntityTooLarge, "body_too_large", "PUT", "/v1/collections/other", map[string]any{"dense": slices.Repeat([]string{"model"}, 1000)}, "--max-body")

	// A request past --timeout answers 504, naming the limit.
	b := newAPIServer(t, &Config{Timeout: time.Nanosecond})
	b.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	b.fails(http.StatusGatewayTimeout, "timeout", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox"}, "1ns", "--timeout")
	b.fails(http.StatusGatewayTimeout, "timeout", "POST", "/v1/collections/docs/documents", ndjson(corpus(1)...), "--timeout")
}

func TestAuth(t *testing.T) {
	a := newAPIServer(t, &Config{AdminKeys: []string{"admin-secret"}, ReadKeys: []string{"read-secret"}})
	// Never authenticated.
	a.must(http.StatusOK, "GET", "/healthz", nil, nil)
	a.must(http.StatusOK, "GET", "/readyz", nil, nil)
	a.must(http.StatusOK, "GET", "/", nil, nil)

	// No key, an unknown key, another scheme.
	code, _ := a.do("GET", "/v1/collections", nil)
	if code != http.StatusUnauthorized {
		t.Fatalf("no key: %d", code)
	}
	a.fails(http.StatusUnauthorized, "unauthorized", "GET", "/v1/collections", nil, "API key is required")
	a.fails(http.StatusUnauthorized, "unauthorized", "GET", "/metrics", nil, "API key")
	a.fails(http.StatusUnauthorized, "unauthorized", "GET", "/openapi.json", nil, "API key")
	a.fails(http.StatusUnauthorized, "unauthorized", "PUT", "/v1/collections/c", nil, "API key")
	a.key = "wrong"
	a.fails(http.StatusUnauthorized, "unauthorized", "GET", "/v1/collections", nil, "unknown API key")
	a.key = ""
	code, body := a.do("GET", "/v1/collections", nil, "Authorization", "Basic YWRtaW4tc2VjcmV0")
	if code != http.StatusUnauthorized || !strings.Contains(string(body), "Bearer") {
		t.Errorf("basic auth: %d %s", code, body)
	}

	// The admin key does everything.
	a.key = "admin-secret"
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", nil, nil)
	a.upsert("c", corpus(3)...)
	a.must(http.StatusOK, "GET", "/metrics", nil, nil)

	// A read key reads and searches, and nothing else.
	a.key = "read-secret"
	a.must(http.StatusOK, "GET", "/v1/collections", nil, nil)
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, nil)
	a.must(http.StatusOK, "GET", "/v1/collections/c/documents/d01", nil, nil)
	a.must(http.StatusOK, "POST", "/v1/collections/c/search", map[string]any{"text": "fox"}, nil)
	a.must(http.StatusOK, "GET", "/v1/collections/c/search?q=fox", nil, nil)
	a.must(http.StatusOK, "GET", "/metrics", nil, nil)
	a.must(http.StatusOK, "GET", "/openapi.json", nil, nil)
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"PUT", "/v1/collections/d", nil},
		{"DELETE", "/v1/collections/c", nil},
		{"POST", "/v1/collections/c/documents", ndjson(corpus(1)...)},
		{"DELETE", "/v1/collections/c/documents/d01", nil},
		{"POST", "/v1/collections/c/delete", map[string]any{"ids": []string{"d01"}}},
		{"GET", "/v1/collections/c/backup", nil},
		{"POST", "/v1/collections/d/restore", []byte("TNDMBAK1")},
	} {
		a.fails(http.StatusForbidden, "forbidden", c.method, c.path, c.body, "admin key")
	}
	// X-API-Key is the same as a bearer key.
	a.key = ""
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, nil, "X-API-Key", "read-secret")
	a.fails(http.StatusUnauthorized, "unauthorized", "GET", "/v1/collections/c", nil, "API key")
	var ci collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, &ci, "X-API-Key", "admin-secret")
	if ci.Docs != 3 {
		t.Fatalf("refused writes changed the collection: %d documents", ci.Docs)
	}
}

func TestCheckName(t *testing.T) {
	for _, name := range []string{"a", "scifact", "A-b_9", strings.Repeat("x", 64)} {
		if err := checkName(name); err != nil {
			t.Errorf("%q: %v", name, err)
		}
	}
	for _, name := range []string{"", ".", "..", "../x", "a/b", `a\b`, ".hidden", "-x", "_x", "a b", "a.b", "é", strings.Repeat("x", 65), trashPrefix + "x", restorePrefix + "x"} {
		if err := checkName(name); err == nil {
			t.Errorf("%q: accepted", name)
		}
	}
}

func TestExposure(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:7700": true, "[::1]:7700": true, "localhost:80": true, "127.1.2.3:0": true,
		":7700": false, "0.0.0.0:7700": false, "[::]:7700": false, "192.168.1.2:7700": false, "example.com:80": false, "nonsense": false} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v", addr, got)
		}
	}
	err := CheckExposure("0.0.0.0:7700", &Config{})
	if err == nil || !strings.Contains(err.Error(), "--api-key") || !strings.Contains(err.Error(), "0.0.0.0:7700") {
		t.Errorf("open server on every interface: %v", err)
	}
	if err := CheckExposure("0.0.0.0:7700", &Config{ReadKeys: []string{"k"}}); err != nil {
		t.Errorf("with a key: %v", err)
	}
	if err := CheckExposure("127.0.0.1:7700", &Config{}); err != nil {
		t.Errorf("loopback: %v", err)
	}
	if _, err := New(&Config{DataDir: t.TempDir(), AdminKeys: []string{" "}}); err == nil {
		t.Error("an empty key was accepted")
	}
}

func TestExternalLateInteraction(t *testing.T) {
	a := newAPIServer(t, nil)
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/late", map[string]any{"schema": map[string]any{
		"models": []map[string]any{{"name": "tok", "late": true, "token_dim": 4, "similarity": "dot", "external": true}},
	}}, &ci)
	if !slices.Equal(ci.Retrievers, []string{"bm25", "late:tok"}) {
		t.Fatalf("retrievers %v", ci.Retrievers)
	}
	res := a.upsert("late",
		`{"_id":"x","text":"first","_vectors":{"tok":{"tokens":[[1,0,0,0],[0,1,0,0]]}}}`,
		`{"_id":"y","text":"second","_vectors":{"tok":{"tokens":[[0,0,1,0]]}}}`,
		`{"_id":"z","text":"third","_vectors":{"tok":{"tokens":[[0,0,0,1],[0,0,0.5,0]]}}}`,
		`{"_id":"bad","text":"fourth","_vectors":{"tok":{"tokens":[[1,0,0,0],[1,0]]}}}`,
	)
	if res.Indexed != 3 || res.Failed != 1 || !strings.Contains(res.Errors[0].Error, "tok.tokens[1]") {
		t.Fatalf("upsert: %+v", res)
	}
	q := map[string]any{"tok": map[string]any{"tokens": [][]float32{{0, 0, 1, 0}, {0, 0, 0, 1}}}}
	l := a.find("late", map[string]any{"retrievers": []string{"late"}, "vectors": q, "k": 3})
	// Sum of each query token's best dot product: z 1.5, y 1, x 0.
	if got := ids(l.Hits); !slices.Equal(got[:2], []string{"z", "y"}) || !slices.Equal(l.Retrievers, []string{"late:tok"}) {
		t.Fatalf("late: %v %v", got, l.Retrievers)
	}
	s := a.find("late", map[string]any{"retrievers": []string{"late:tok"}, "vectors": q, "k": 1, "late_scoring": "sum-max"})
	if len(s.Hits) != 1 || s.Hits[0].ID != "z" || math.Abs(s.Hits[0].Score-1.5) > 1e-6 {
		t.Fatalf("sum-max: %+v", s.Hits)
	}
	a.fails(http.StatusBadRequest, "bad_vectors", "POST", "/v1/collections/late/search",
		map[string]any{"retrievers": []string{"late"}, "vectors": map[string]any{"tok": map[string]any{"tokens": [][]float32{{1, 0, 0}}}}}, "tok.tokens[0]", "dimension 3, want 4")
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/late/search",
		map[string]any{"retrievers": []string{"late"}, "vectors": q, "depth": map[string]int{"dense": 5}}, `"dense"`)
	_, metrics := a.do("GET", "/metrics", nil)
	for _, want := range []string{`tandem_index_retraining{collection="late",retriever="late:tok"} 0`, `tandem_index_retrains_total{collection="late",retriever="late:tok"} 0`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grepLines(string(metrics), "retrain"))
		}
	}
}

// TestExtraRoutes: Config.Routes are served behind the same keys as the
// API, and Config.Collectors appear on /metrics (tandem serve --cluster
// adds the cluster's status and refusal counts this way).
func TestExtraRoutes(t *testing.T) {
	extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "tandem_test_extra_total", Help: "A collector given in Config."})
	extra.Add(3)
	s, err := New(&Config{DataDir: t.TempDir(), AdminKeys: []string{"admin-secret"}, ReadKeys: []string{"read-secret"},
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		Collectors: []prometheus.Collector{extra},
		Routes: []Route{{Pattern: "GET /_extra/status", Admin: true, Handler: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "extra ok")
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer func() {
		ts.Close()
		s.Close()
	}()
	get := func(path, key string) (int, string) {
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for key, want := range map[string]int{"": 401, "wrong": 401, "read-secret": 403, "admin-secret": 200} {
		if code, body := get("/_extra/status", key); code != want || (want == 200 && body != "extra ok") {
			t.Errorf("extra route with key %q: %d %q, want %d", key, code, body, want)
		}
	}
	if code, body := get("/metrics", "read-secret"); code != 200 || !strings.Contains(body, "tandem_test_extra_total 3") {
		t.Errorf("/metrics: %d, without the extra collector", code)
	}
	if _, err := New(&Config{DataDir: t.TempDir(), Collectors: []prometheus.Collector{extra, extra}}); err == nil {
		t.Error("a collector given twice was registered")
	}
}

// TestBackupEndpoint downloads a collection's backup with the admin key,
// restores it with engine.Restore and finds the same documents and
// rankings; an unknown collection is 404.
func TestBackupEndpoint(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/c", nil, nil)
	a.upsert("c", corpus(20)...)
	code, body := a.do("GET", "/v1/collections/c/backup", nil)
	if code != http.StatusOK || len(body) < 100 {
		t.Fatalf("backup: %d, %d bytes", code, len(body))
	}
	path := filepath.Join(t.TempDir(), "c.tandembackup")
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "restored")
	if _, err := engine.Restore(path, dir); err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open(dir, &engine.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	want := a.search("c", map[string]any{"text": "fox", "k": 20})
	got, err := e.Search(context.Background(), engine.Request{Text: "fox", K: 20, Retrievers: e.Retrievers()})
	if err != nil {
		t.Fatal(err)
	}
	if e.Count() != 20 || len(got.Hits) != len(want.Hits) {
		t.Fatalf("restored: %d documents, %d hits for fox; want 20 and %d", e.Count(), len(got.Hits), len(want.Hits))
	}
	for i, h := range got.Hits {
		if h.ID != want.Hits[i].ID {
			t.Fatalf("hit %d: %s, want %s", i, h.ID, want.Hits[i].ID)
		}
	}
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/nope/backup", nil, "nope")
}
