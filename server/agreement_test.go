package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/engine"
)

// Where the spec and the server disagreed, they now agree (each case also
// passes the spec client's checks).
func TestSpecAgreement(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(12)...)

	// A GET search with neither q nor filter ranks every document.
	var res searchJSON
	a.must(http.StatusOK, "GET", "/v1/collections/docs/search?k=20", nil, &res)
	if len(res.Hits) != 12 {
		t.Errorf("GET search with no q and no filter: %d hits, want all 12", len(res.Hits))
	}
	if res = a.find("docs", map[string]any{"text": " ", "k": 5}); len(res.Hits) != 5 {
		t.Errorf("POST search with blank text: %d hits, want 5", len(res.Hits))
	}

	// No documents (an empty array, a blank NDJSON body) is refused, as the
	// spec's minItems and pattern say.
	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/docs/documents", []any{}, "no documents")
	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/docs/documents", ndjsonBody(" \n\t\r\n"), "no documents")
	// A line of other Unicode space is no blank line to JSON: it is
	// reported, and the body is answered.
	var ur upsertResult
	a.must(http.StatusOK, "POST", "/v1/collections/docs/documents", ndjsonBody("\v\n"), &ur)
	if ur.Failed != 1 || ur.Errors[0].Line != 1 {
		t.Errorf("a line of \\v: %+v, want its line reported", ur)
	}

	// A model's name is not empty, nor has '/', '\' or ':'.
	for _, name := range []string{"", "a/b", `a\b`, "a:b"} {
		a.fails(http.StatusBadRequest, "bad_schema", "PUT", "/v1/collections/m", map[string]any{"schema": map[string]any{
			"models": []map[string]any{{"name": name, "dense": true, "dim": 4, "similarity": "cosine", "external": true}},
		}}, "invalid name")
	}

	// 405 lists exactly the spec's methods for the path. The spec's
	// router takes .../documents for .../documents/{id} with an empty id,
	// so these go outside the spec client.
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/collections/docs/documents", "POST"},
		{"GET", "/v1/collections/docs/documents", "POST"},
		{"DELETE", "/v1/collections/docs/documents", "POST"},
		{"POST", "/v1/collections/docs/documents/d01", "DELETE, GET"},
		{"PATCH", "/v1/collections/docs", "DELETE, GET, PUT"},
		{"POST", "/v1/collections/docs/search/", ""},
		{"POST", "/v1/collections", "GET"},
	} {
		req, _ := http.NewRequest(tc.method, a.ts.URL+tc.path, nil)
		resp, err := a.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb errorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		want := http.StatusMethodNotAllowed
		if tc.allow == "" {
			want = http.StatusNotFound
		}
		if resp.StatusCode != want || resp.Header.Get("Allow") != tc.allow || eb.Error.Code == "" {
			t.Errorf("%s %s: %d, Allow %q, %+v; want %d, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), eb, want, tc.allow)
		}
	}
}

// A body that has not arrived within --timeout is answered 408 naming the
// flag, and the server serves on.
func TestSlowBody(t *testing.T) {
	s, err := New(&Config{DataDir: t.TempDir(), Timeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Engine: engine.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/v1/collections/slow"},
		{"POST", "/v1/collections/slow/search"},
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// Half the body, then nothing.
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":", tc.method, tc.path)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		var eb errorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		conn.Close()
		if resp.StatusCode != http.StatusRequestTimeout || eb.Error.Code != "request_timeout" || !strings.Contains(eb.Error.Message, "--timeout") || !strings.Contains(eb.Error.Message, "500ms") {
			t.Errorf("%s %s with a slow body: %d %+v; want 408 naming --timeout", tc.method, tc.path, resp.StatusCode, eb)
		}
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after slow bodies: %v %v", resp, err)
	}
	resp.Body.Close()
}

// Issue 27's second fuzz run: where the server took what the spec refuses
// (wait=, null, a fusion in another case, empty GET parameters), it now
// refuses it, naming the parameter or the field; and what the spec now
// states (the filter language, number ranges, the schema's rules, mode
// and retrievers not together) the server refuses, while the spec-valid
// forms are served. Every exchange passes the spec client's checks.
func TestSpecAgreementFuzzFindings(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(6)...)
	raw := func(s string) json.RawMessage { return json.RawMessage(s) }
	const search = "/v1/collections/docs/search"

	// wait: true or false; present but empty is no default.
	for _, q := range []string{"?wait=", "?wait=no", "?wait=true&wait=1", "?wait=true&wait=false"} {
		a.fails(http.StatusBadRequest, "bad_parameter", "POST", "/v1/collections/docs/documents"+q, ndjson(`{"_id":"w1","text":"x"}`), "wait=")
	}
	a.must(http.StatusOK, "POST", "/v1/collections/docs/documents?wait=true", ndjson(`{"_id":"w1","text":"x"}`), nil)

	// null is no value of a request's members, nor a body that must be an
	// object: refused, naming the member.
	for _, tc := range []struct{ method, path, body, field string }{
		{"POST", search, `{"text":"fox","ids_only":null}`, `"ids_only"`},
		{"POST", search, `{"text":null}`, `"text"`},
		{"POST", search, `{"text":"fox","filter":null}`, `"filter"`},
		{"POST", search, `{"text":"fox","depth":{"bm25":null}}`, `"depth.bm25"`},
		{"POST", search, `{"text":"fox","retrievers":["bm25",null]}`, `"retrievers[1]"`},
		{"POST", search, `{"text":"fox","vectors":{"m":{"dense":[1,null]}}}`, `"vectors.m.dense[1]"`},
		{"PUT", "/v1/collections/n1", `null`, "want an object, got null"},
		{"PUT", "/v1/collections/n1", `{"schema":null}`, `"schema"`},
		{"PUT", "/v1/collections/n1", `{"dense":null}`, `"dense"`},
		{"PUT", "/v1/collections/n1", `{"schema":{"fields":[{"name":"a","type":"keyword","boost":null}]}}`, `"schema.fields[0].boost"`},
		{"POST", "/v1/collections/docs/delete", `{"ids":null}`, `"ids"`},
		{"POST", "/v1/collections/docs/delete", `null`, "want an object, got null"},
	} {
		a.fails(http.StatusBadRequest, "invalid_json", tc.method, tc.path, raw(tc.body), tc.field)
	}
	if _, err := os.Stat(filepath.Join(a.dir, "n1")); !os.IsNotExist(err) {
		t.Errorf("a refused create left n1: %v", err)
	}
	// In a document, null is a value: the field has none (as in a JSONL
	// corpus), and _vectors null is no vectors.
	if res := a.upsert("docs", `{"_id":"n1","text":"null fields","lang":null,"_vectors":null}`); res.Indexed != 1 || res.Failed != 0 {
		t.Errorf("a document with null fields: %+v, want it indexed", res)
	}

	// mode and retrievers together (the spec's not), a fusion spelled
	// otherwise than the enum, empty or non-boolean GET parameters.
	// Given together, empty as they may be (the 10-minute run's one
	// failure: {"mode": "", "retrievers": []} was served).
	a.fails(http.StatusBadRequest, "bad_request", "POST", search, map[string]any{"text": "fox", "mode": "bm25", "retrievers": []string{"bm25"}}, "mode or retrievers")
	a.fails(http.StatusBadRequest, "bad_request", "POST", search, map[string]any{"mode": "", "retrievers": []string{}}, "mode or retrievers")
	a.fails(http.StatusBadRequest, "bad_request", "GET", search+"?q=fox&mode=&retrievers=", nil, "mode or retrievers")
	a.must(http.StatusOK, "POST", search, map[string]any{"text": "fox", "mode": ""}, nil)
	a.must(http.StatusOK, "POST", search, map[string]any{"text": "fox", "retrievers": []string{}}, nil)
	for _, f := range []string{"RRF", "MinMax", "x"} {
		a.fails(http.StatusBadRequest, "bad_request", "POST", search, map[string]any{"text": "fox", "fusion": f}, "fusion "+strconv.Quote(f), "rrf, wrrf, minmax")
		a.fails(http.StatusBadRequest, "bad_request", "GET", search+"?q=fox&fusion="+f, nil, "fusion "+strconv.Quote(f))
	}
	for _, q := range []string{"k=", "offset=", "ids_only=", "ids_only=1", "ids_only=TRUE", "filter=", "filter=null", "filter=%20"} {
		name, _, _ := strings.Cut(q, "=")
		a.fails(http.StatusBadRequest, "bad_parameter", "GET", search+"?q=fox&"+q, nil, "parameter "+name)
	}
	for _, q := range []string{"fusion=", "late_scoring=", "fusion=rrf&mode=bm25", "ids_only=false&k=2&offset=1"} {
		a.must(http.StatusOK, "GET", search+"?q=fox&"+q, nil, nil)
	}
	a.must(http.StatusOK, "POST", search, map[string]any{"text": "fox", "fusion": "", "late_scoring": ""}, nil)

	// The filter language, as the spec's Filter states it: one operator
	// per object, each with its operand's shape.
	for _, f := range []string{
		`{}`, `{"term":{"lang":"en"},"exists":"lang"}`, `{"nope":{"lang":"en"}}`, `{"term":{}}`, `{"term":{"lang":"en","year":1}}`,
		`{"term":{"":"en"}}`, `{"term":{"lang":["en"]}}`, `{"terms":{"lang":[]}}`, `{"terms":{"lang":"en"}}`,
		`{"range":{"year":{}}}`, `{"range":{"year":{"gt":1,"gte":2}}}`, `{"range":{"year":{"lt":1,"lte":2}}}`, `{"range":{"year":{"gt":true}}}`,
		`{"range":{"year":{"above":1}}}`, `{"prefix":{"lang":1}}`, `{"exists":""}`, `{"exists":{"field":""}}`, `{"exists":{"name":"lang"}}`,
		`{"and":{}}`, `{"or":[{}]}`, `{"not":[]}`, `"lang"`, `[]`, `1`,
	} {
		a.fails(http.StatusBadRequest, "invalid_filter", "POST", search, raw(`{"text":"fox","filter":`+f+`}`), "filter")
		a.fails(http.StatusBadRequest, "invalid_filter", "GET", search+"?q=fox&filter="+url.QueryEscape(f), nil, "filter")
	}
	for _, f := range []string{
		`{"term":{"lang":"en"}}`, `{"terms":{"lang":["en","fr"]}}`, `{"range":{"year":{"gte":2001,"lt":2004}}}`, `{"prefix":{"lang":"e"}}`,
		`{"exists":"lang"}`, `{"exists":{"field":"lang"}}`, `{"and":[]}`, `{"or":[{"term":{"lang":"en"}},{"not":{"exists":"year"}}]}`,
	} {
		a.must(http.StatusOK, "POST", search, raw(`{"text":"fox","filter":`+f+`}`), nil)
		a.must(http.StatusOK, "GET", search+"?q=fox&filter="+url.QueryEscape(f), nil, nil)
	}

	// Numbers beyond the server's types: the spec's ranges.
	for _, tc := range []struct{ body, field string }{
		{`{"text":"fox","k":9223372036854775808}`, `"k"`},
		{`{"text":"fox","offset":1e19}`, `"offset"`},
		{`{"text":"fox","depth":{"bm25":9223372036854775808}}`, `"depth"`},
	} {
		a.fails(http.StatusBadRequest, "invalid_json", "POST", search, raw(tc.body), tc.field)
	}
	a.fails(http.StatusBadRequest, "bad_parameter", "GET", search+"?q=fox&k=9223372036854775808", nil, "parameter k")
	a.fails(http.StatusBadRequest, "k_too_large", "GET", search+"?q=fox&k=9223372036854775807", nil, "--max-k")

	// The schema's rules, in the spec: reserved names, an analyzer only on
	// text, a model dense or late with its dimensions, an external one with
	// its similarity, dimensions up to 65535, sizes within int64.
	ext := func(m map[string]any) map[string]any {
		out := map[string]any{"name": "ext", "external": true, "similarity": "cosine"}
		for k, v := range m {
			out[k] = v
		}
		return map[string]any{"schema": map[string]any{"models": []map[string]any{out}}}
	}
	for _, tc := range []struct {
		body any
		want string
	}{
		{map[string]any{"schema": map[string]any{"fields": []map[string]any{{"name": "_x", "type": "keyword"}}}}, "reserved"},
		{map[string]any{"schema": map[string]any{"fields": []map[string]any{{"name": "n", "type": "number", "analyzer": "en"}}}}, "analyzer on a number field"},
		{ext(map[string]any{"dim": 4}), "neither dense nor late"},
		{ext(map[string]any{"dense": true}), "missing dimension"},
		{ext(map[string]any{"dense": true, "dim": 0}), "missing dimension"},
		{ext(map[string]any{"late": true, "token_dim": 0}), "missing dimension"},
		{ext(map[string]any{"dense": true, "dim": 65536}), "out of range"},
		{ext(map[string]any{"dense": true, "dim": 4, "similarity": ""}), "needs a similarity"},
		{raw(`{"schema":{"max_text_bytes":9223372036854775808}}`), "max_text_bytes"},
	} {
		if code, data := a.do("PUT", "/v1/collections/n3", tc.body); code != http.StatusBadRequest || !strings.Contains(string(data), tc.want) {
			t.Errorf("PUT %v: %d %s; want 400 naming %q", tc.body, code, data, tc.want)
		}
	}
	a.must(http.StatusCreated, "PUT", "/v1/collections/n3", ext(map[string]any{"dense": true, "dim": 65535, "late": true, "token_dim": 2}), nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/n4", map[string]any{"schema": map[string]any{"fields": []map[string]any{
		{"name": "t", "type": "text", "analyzer": "en"}, {"name": "kw", "type": "keyword", "boost": 2}}}}, nil)
	// Query vectors within float32's range only.
	a.fails(http.StatusBadRequest, "invalid_json", "POST", "/v1/collections/n3/search", raw(`{"mode":"dense","vectors":{"ext":{"dense":[1e39]}}}`), `"vectors"`)
}
