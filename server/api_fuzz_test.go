package server

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
)

// fuzzRoutes are the requests FuzzAPI sends its body to, by the op byte.
var fuzzRoutes = []struct{ method, path, contentType string }{
	{"POST", "/v1/collections/c/search", "application/json"},
	{"POST", "/v1/collections/c/documents", "application/x-ndjson"},
	{"PUT", "/v1/collections/fz", "application/json"},
	{"POST", "/v1/collections/c/delete", "application/json"},
	{"POST", "/v1/collections/c/documents", "application/json"},
}

// fuzzCollection is the schema of FuzzAPI's collection: metadata fields
// and an external dense and late-interaction model.
const fuzzCollection = `{"schema":{"id_field":"id","fields":[{"name":"text","type":"text"},{"name":"lang","type":"keyword"},{"name":"year","type":"number"}],
"models":[{"name":"ext","dense":true,"dim":3,"late":true,"token_dim":2,"similarity":"cosine","external":true}]}}`

// FuzzAPI sends fuzzed bodies to the routes that read one (search, NDJSON
// and JSON upserts, collection creation, deletes by id) of a server on a
// real engine. No answer is a 5xx, every error has the documented shape
// {"error":{"code","message"}} with a message, and every success is JSON.
func FuzzAPI(f *testing.F) {
	seeds := []struct {
		op   uint8
		body string
	}{
		{0, `{"text":"river","k":3}`},
		{0, `{"text":"river","retrievers":["bm25","dense","late"],"vectors":{"ext":{"dense":[1,0,0],"tokens":[[1,0]]}},"fusion":"rrf","k":2,"offset":1}`},
		{0, `{"mode":"hybrid","text":"x","filter":{"term":{"lang":"en"}},"depth":{"bm25":5},"weight":{"dense":2}}`},
		{0, `{"text":"x","fields":{"text":2},"ids_only":true,"late_scoring":"sum-max"}`},
		{0, `{"text":"x","k":-1}`}, {0, `{"text":"x","filter":{"range":{"year":{"gt":"a"}}}}`}, {0, `{"unknown":1}`},
		{1, `{"id":"n1","text":"new river","lang":"fr","_vectors":{"ext":{"dense":[0,1,0],"tokens":[[0,1],[1,1]]}}}` + "\n" + `{"id":"n2","text":"bad","year":"x"}`},
		{1, `{"id":"n3","text":"a"}`}, {1, "\n\n{\"id\":1}"},
		{4, `[{"id":"n4","text":"b","_vectors":{"ext":{"dense":[1,1,1],"tokens":[[1,0]]}}}]`}, {4, `{"id":"n5","text":"c"}`}, {4, `[1,2]`},
		{2, ``}, {2, `{"schema":{"fields":[{"name":"t","type":"text"}]}}`}, {2, `{"dense":["no-such-model"]}`},
		{2, `{"schema":{"models":[{"name":"m","dense":true,"dim":2,"similarity":"dot","external":true}]}}`},
		{2, `{"schema":{"models":[{"name":"m","late":true,"token_dim":2,"late_index":"Residual","similarity":"dot","external":true}]}}`},
		{2, `{"schema":{"bm25":{"scoring":"bleve","k1":-1}}}`},
		{3, `{"ids":["n1","zz"]}`}, {3, `{"ids":[]}`}, {3, `{"ids":[""]}`},
	}
	for _, s := range seeds {
		f.Add(s.op, []byte(s.body))
	}
	s, err := New(&Config{DataDir: f.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), MaxBody: 1 << 16, MaxLine: 1 << 14})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	h := s.Handler()
	send := func(method, path, ct string, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, bytes.NewReader(body))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := send("PUT", "/v1/collections/c", "application/json", []byte(fuzzCollection)); rec.Code/100 != 2 {
		f.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	docs := `{"id":"a","text":"river stone","lang":"en","year":2001,"_vectors":{"ext":{"dense":[1,0,0],"tokens":[[1,0],[0,1]]}}}
{"id":"b","text":"cloud river","lang":"fr","year":1999,"_vectors":{"ext":{"dense":[0,1,0],"tokens":[[0,1]]}}}
{"id":"c","text":"ocean light","_vectors":{"ext":{"dense":[0,0,1],"tokens":[[1,1]]}}}`
	if rec := send("POST", "/v1/collections/c/documents", "application/x-ndjson", []byte(docs)); rec.Code != http.StatusOK {
		f.Fatalf("upsert: %d %s", rec.Code, rec.Body)
	}

	f.Fuzz(func(t *testing.T, op uint8, body []byte) {
		if len(body) > 1<<14 {
			return
		}
		rt := fuzzRoutes[int(op)%len(fuzzRoutes)]
		rec := send(rt.method, rt.path, rt.contentType, body)
		checkAnswer(t, rt.method+" "+rt.path, body, rec)
		if rt.method == "PUT" && rec.Code/100 == 2 {
			drop := send("DELETE", rt.path, "", nil)
			if drop.Code/100 != 2 {
				t.Fatalf("drop the collection a fuzzed body created: %d %s", drop.Code, drop.Body)
			}
		}
	})
}

// checkAnswer holds one answer to the API's contract for a fuzzed body.
func checkAnswer(t *testing.T, route string, body []byte, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s %q: %d %s", route, body, rec.Code, rec.Body)
	}
	if rec.Code >= 400 {
		var eb errorBody
		dec := json.NewDecoder(rec.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s %q: %d with body %q, not {\"error\":{\"code\",\"message\"}} (%v)", route, body, rec.Code, rec.Body, err)
		}
		return
	}
	if !json.Valid(rec.Body.Bytes()) {
		t.Fatalf("%s %q: %d with a body that is not JSON: %q", route, body, rec.Code, rec.Body)
	}
}
