package server

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	rtmetrics "runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// The regressions of issue 27's findings, each answered with a 4xx that
// names the field, parameter or limit.

// An overflowing k + offset is a 400 naming both, in every mode and in
// the query-string form, where it once passed the limit checks.
func TestKOffsetOverflow(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(3)...)
	for _, mode := range []string{"bm25", "hybrid"} {
		for _, ko := range [][2]int{{math.MaxInt, 1}, {1, math.MaxInt}, {math.MaxInt, math.MaxInt}} {
			a.fails(http.StatusBadRequest, "k_too_large", "POST", "/v1/collections/docs/search",
				map[string]any{"text": "fox", "mode": mode, "k": ko[0], "offset": ko[1]},
				fmt.Sprintf("k=%d offset=%d", ko[0], ko[1]), "--max-k")
		}
	}
	a.fails(http.StatusBadRequest, "k_too_large", "GET", fmt.Sprintf("/v1/collections/docs/search?q=fox&k=%d&offset=1", math.MaxInt), nil, "k=", "offset=1", "--max-k")
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=fox&offset=99999999999999999999", nil, "offset", "out of range")
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", "/v1/collections/docs/search?q=fox&k=-1", nil, "k=", "0 or more")
}

// Text to search in a collection without a text field is a 400 naming
// the text; a filter alone still searches it.
func TestNoTextFieldIsBadRequest(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/kw", map[string]any{"schema": map[string]any{
		"fields": []map[string]any{{"name": "lang", "type": "keyword"}, {"name": "year", "type": "number"}},
	}}, nil)
	a.upsert("kw", `{"_id":"a","lang":"en","year":1}`, `{"_id":"b","lang":"fr","year":2}`)
	a.fails(http.StatusBadRequest, "bad_request", "POST", "/v1/collections/kw/search", map[string]any{"text": "hello"}, "text: ", "no text field")
	a.fails(http.StatusBadRequest, "bad_request", "GET", "/v1/collections/kw/search?q=hello", nil, "text: ", "no text field")
	res := a.find("kw", map[string]any{"filter": map[string]any{"term": map[string]any{"lang": "fr"}}})
	if got := ids(res.Hits); len(got) != 1 || got[0] != "b" {
		t.Errorf("filter alone: %v", got)
	}
}

// A document route with an empty id (a path ending in /documents/) is a
// 400 naming the id, where DELETE answered 500; nothing is deleted.
func TestEmptyDocumentID(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(2)...)
	for _, method := range []string{"GET", "DELETE"} {
		a.fails(http.StatusBadRequest, "bad_parameter", method, "/v1/collections/docs/documents/", nil, "id: empty document id")
	}
	var ci collectionInfo
	if a.must(http.StatusOK, "GET", "/v1/collections/docs", nil, &ci); ci.Docs != 2 {
		t.Errorf("%d documents after the refused delete, want 2", ci.Docs)
	}
}

// A filter over a limit is a 400 naming the limit and its flag: the
// defaults, and the engine options' when the server sets them, as
// --max-filter-clauses and --max-filter-depth do.
func TestFilterLimitsAnswer400(t *testing.T) {
	or := func(n int) map[string]any {
		l := make([]any, n)
		for i := range l {
			l[i] = map[string]any{"range": map[string]any{"year": map[string]any{"gte": i}}}
		}
		return map[string]any{"or": l}
	}
	deep := func(n int) any {
		var f any = map[string]any{"exists": "lang"}
		for range n - 1 {
			f = map[string]any{"not": f}
		}
		return f
	}
	for _, tc := range []struct {
		limits                  filter.Limits
		clauses, depth          int // the largest within the limits
		clauseError, depthWhere string
	}{
		{filter.Limits{}, 1024, 32, "or[1024].range: over the limit of 1024 clauses", strings.TrimSuffix(strings.Repeat("not.", 32), ".")},
		{filter.Limits{MaxClauses: 5, MaxDepth: 3}, 5, 3, "or[5].range: over the limit of 5 clauses", "not.not.not"},
	} {
		a := newAPIServer(t, &Config{Engine: engine.Options{FilterLimits: tc.limits}})
		a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
		a.upsert("docs", corpus(4)...)
		a.find("docs", map[string]any{"filter": or(tc.clauses)})
		a.find("docs", map[string]any{"filter": deep(tc.depth)})
		a.fails(http.StatusBadRequest, "filter_too_large", "POST", "/v1/collections/docs/search", map[string]any{"filter": or(tc.clauses + 1)},
			tc.clauseError, "(--max-filter-clauses)")
		a.fails(http.StatusBadRequest, "filter_too_large", "POST", "/v1/collections/docs/search", map[string]any{"text": "fox", "filter": deep(tc.depth + 1)},
			tc.depthWhere, fmt.Sprintf("nested deeper than the limit of %d levels (--max-filter-depth)", tc.depth))
		q, _ := json.Marshal(or(tc.clauses + 1))
		a.fails(http.StatusBadRequest, "filter_too_large", "GET", "/v1/collections/docs/search?filter="+string(q), nil, "--max-filter-clauses")
		// The body is read as a stream: what follows the clause over the
		// limit is never scanned, malformed as it is here.
		cut, _ := json.Marshal(map[string]any{"filter": or(tc.clauses + 1)})
		a.fails(http.StatusBadRequest, "filter_too_large", "POST", "/v1/collections/docs/search", string(cut[:len(cut)-5])+"\x00 not JSON", "--max-filter-clauses")
	}
	// A filter within the limits comes out of the stream whole, whatever
	// the spaces around it.
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(6)...)
	var res searchJSON
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", "{ \"k\" : 5 , \"filter\"\n :\t {\"term\": {\"lang\": \"fr\"}} , \"text\": \"fox\" }", &res, "Content-Type", "application/json")
	if got := ids(res.Hits); len(got) != 3 || got[0] != "d05" {
		t.Errorf("filter between spaces: %v, want the 3 French documents, d05 first", got)
	}
	a.must(http.StatusOK, "POST", "/v1/collections/docs/search", `{"filter": {"term": {"lang": "fr"}}, "filter": {"term": {"lang": "en"}}, "k": 10}`, &res, "Content-Type", "application/json")
	if len(res.Hits) != 3 {
		t.Errorf("the last of two filters: %d hits, want the 3 English documents", len(res.Hits))
	}
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", `{"Text": "fox"}`, `unknown field "Text"`)
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/docs/search", `["fox"]`, "want an object")
}

// With ReleaseAfterTimeout a 504 makes the server return memory to the
// OS: a forced collection follows each, at most one a second.
func TestReleaseAfterTimeout(t *testing.T) {
	forced := func() uint64 {
		s := []rtmetrics.Sample{{Name: "/gc/cycles/forced:gc-cycles"}}
		rtmetrics.Read(s)
		return s[0].Value.Uint64()
	}
	a := newAPIServer(t, &Config{Timeout: time.Nanosecond, ReleaseAfterTimeout: true})
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	before := forced()
	a.fails(http.StatusGatewayTimeout, "timeout", "GET", "/v1/collections/docs/search?q=x", nil, "--timeout")
	for deadline := time.Now().Add(testtime.D(5 * time.Second)); forced() == before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no forced collection within %v of a 504", testtime.D(5*time.Second))
		}
	}
}
