package server

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/tandemsearch/tandem"
)

// The API tests talk to a real server (httptest, a real engine in
// t.TempDir()) through specClient, whose transport checks every request
// and every response against openapi.json: a request the spec calls
// invalid must be refused with a 4xx, and every response must be one the
// spec documents for its operation and status. TestMain then checks that
// the tests exercised every operation of the spec.

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error

	covered = struct {
		sync.Mutex
		ops map[string]bool // "METHOD /path" of the spec
	}{ops: map[string]bool{}}
)

func loadSpec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		for _, ct := range []string{"application/x-ndjson", "text/html", "text/css", "text/javascript"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.PlainBodyDecoder)
		}
		loader := openapi3.NewLoader()
		if specDoc, specErr = loader.LoadFromData(openAPISpec); specErr != nil {
			return
		}
		if specErr = specDoc.Validate(context.Background()); specErr != nil {
			return
		}
		// Routes are matched by path alone, whatever port a test
		// server has.
		routed := *specDoc
		routed.Servers = nil
		specRouter, specErr = legacy.NewRouter(&routed)
	})
	if specErr != nil {
		t.Fatalf("openapi.json: %v", specErr)
	}
	return specDoc, specRouter
}

// specTransport validates each exchange against the spec.
type specTransport struct {
	t    testing.TB
	base http.RoundTripper
}

func (st *specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t := st.t
	_, router := loadSpec(t)
	var body []byte
	if req.Body != nil {
		var err error
		if body, err = io.ReadAll(req.Body); err != nil {
			return nil, err
		}
		req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	vreq := req.Clone(req.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	route, params, routeErr := router.FindRoute(vreq)
	var reqErr error
	var input *openapi3filter.RequestValidationInput
	if routeErr == nil {
		input = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		reqErr = openapi3filter.ValidateRequest(req.Context(), input)
		covered.Lock()
		covered.ops[route.Method+" "+route.Path] = true
		covered.Unlock()
	}
	resp, err := st.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	respBody, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(respBody))
	if routeErr != nil {
		// Not a route of the spec: the server must refuse it as JSON.
		var eb errorBody
		if (resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed) || json.Unmarshal(respBody, &eb) != nil || eb.Error.Code == "" {
			t.Errorf("%s %s is no route of the spec (%v), but the server answered %d %s", req.Method, req.URL.Path, routeErr, resp.StatusCode, respBody)
		}
		return resp, nil
	}
	if reqErr != nil && (resp.StatusCode < 400 || resp.StatusCode >= 500) {
		t.Errorf("%s %s: the spec refuses the request (%v), but the server answered %d", req.Method, req.URL, reqErr, resp.StatusCode)
	}
	if err := openapi3filter.ValidateResponse(req.Context(), &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}); err != nil {
		t.Errorf("%s %s: response %d does not match the spec: %v\nbody: %.500s", req.Method, req.URL, resp.StatusCode, err, respBody)
	}
	return resp, nil
}

// TestMain checks, after a run of every test, that the API tests called
// every operation of the spec.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && !testing.Short() {
		var missing []string
		if specDoc != nil {
			for path, item := range specDoc.Paths.Map() {
				for method := range item.Operations() {
					if !covered.ops[method+" "+path] {
						missing = append(missing, method+" "+path)
					}
				}
			}
		}
		sort.Strings(missing)
		if specDoc == nil || len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the API tests did not call these operations of openapi.json: %v\n", missing)
			code = 1
		}
	}
	os.Exit(code)
}

// apiServer is a Server behind httptest, with a client that validates
// every exchange against the spec.
type apiServer struct {
	t   *testing.T
	s   *Server
	ts  *httptest.Server
	c   *http.Client
	dir string
	key string // sent as a bearer key when set
}

// newAPIServer starts a server on a new data directory; cfg may be nil.
func newAPIServer(t *testing.T, cfg *Config) *apiServer {
	t.Helper()
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.DataDir == "" {
		c.DataDir = t.TempDir()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c.Engine.NoSync = true // tests: no fsync per batch
	s, err := New(&c)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	loadSpec(t)
	return &apiServer{t: t, s: s, ts: ts, dir: c.DataDir, c: &http.Client{Transport: &specTransport{t: t, base: http.DefaultTransport}}}
}

// ndjsonBody is an NDJSON request body.
type ndjsonBody string

func ndjson(lines ...string) ndjsonBody { return ndjsonBody(strings.Join(lines, "\n") + "\n") }

// do sends a request; body is sent as is when it is a string or []byte
// (as NDJSON when it is an ndjsonBody), else as JSON. It returns the
// status and the body.
func (a *apiServer) do(method, path string, body any, header ...string) (int, []byte) {
	a.t.Helper()
	var r io.Reader
	ct := ""
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case ndjsonBody:
		r, ct = strings.NewReader(string(b)), "application/x-ndjson"
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			a.t.Fatal(err)
		}
		r, ct = bytes.NewReader(data), "application/json"
	}
	req, err := http.NewRequest(method, a.ts.URL+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if a.key != "" {
		req.Header.Set("Authorization", "Bearer "+a.key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := a.c.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	return resp.StatusCode, data
}

// must sends a request that must answer want, decoding the JSON answer
// into out (if not nil).
func (a *apiServer) must(want int, method, path string, body any, out any, header ...string) {
	a.t.Helper()
	code, data := a.do(method, path, body, header...)
	if code != want {
		a.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, data)
		}
	}
}

// fails sends a request that must fail with status; the error message
// must contain every one of parts. It returns the error.
func (a *apiServer) fails(status int, code, method, path string, body any, parts ...string) errorBody {
	a.t.Helper()
	got, data := a.do(method, path, body)
	var eb errorBody
	if err := json.Unmarshal(data, &eb); err != nil {
		a.t.Fatalf("%s %s: status %d, body is not an error: %s", method, path, got, data)
	}
	if got != status || (code != "" && eb.Error.Code != code) {
		a.t.Fatalf("%s %s: status %d code %q, want %d %q: %s", method, path, got, eb.Error.Code, status, code, data)
	}
	for _, p := range parts {
		if !strings.Contains(eb.Error.Message, p) {
			a.t.Errorf("%s %s: error %q does not name %q", method, path, eb.Error.Message, p)
		}
	}
	return eb
}

// upsert posts NDJSON lines.
func (a *apiServer) upsert(coll string, lines ...string) upsertResult {
	a.t.Helper()
	var res upsertResult
	a.must(http.StatusOK, "POST", "/v1/collections/"+coll+"/documents", ndjson(lines...), &res)
	return res
}

func (a *apiServer) search(coll string, req map[string]any) searchResponse {
	a.t.Helper()
	var res searchResponse
	a.must(http.StatusOK, "POST", "/v1/collections/"+coll+"/search", req, &res)
	return res
}

// externalSchema declares an external model "ext" of 4 dimensions, whose
// vectors documents and queries bring, so that no ONNX model is needed.
func externalSchema() map[string]any {
	return map[string]any{"schema": map[string]any{
		"id_field": "_id",
		"fields": []map[string]any{
			{"name": "title", "type": "text"}, {"name": "text", "type": "text"},
			{"name": "lang", "type": "keyword"}, {"name": "year", "type": "number"},
		},
		"models": []map[string]any{{"name": "ext", "dense": true, "dim": 4, "similarity": "cosine", "external": true}},
	}}
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestSpecTransportCatchesMismatch shows the spec client failing a test
// for an answer the spec does not allow and for a refused request that
// was served anyway.
func TestSpecTransportCatchesMismatch(t *testing.T) {
	loadSpec(t)
	wrong := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/collections":
			writeJSON(w, http.StatusOK, map[string]any{"collections": "none"})
		case "/v1/collections/c/search":
			writeJSON(w, http.StatusOK, searchResponse{Hits: []tandem.Hit{}, Retrievers: []string{"bm25"}, K: 10})
		default:
			w.WriteHeader(http.StatusTeapot)
		}
	}))
	defer wrong.Close()
	rec := &recorder{TB: t}
	c := &http.Client{Transport: &specTransport{t: rec, base: http.DefaultTransport}}
	for _, req := range []struct{ method, path, body string }{
		{"GET", "/v1/collections", ""},                      // body of the wrong shape
		{"POST", "/v1/collections/c/search", `{"text": 1}`}, // refused request answered 200
		{"GET", "/healthz", ""},                             // undocumented status
		{"GET", "/no/such/route", ""},                       // not a JSON 404
	} {
		r, _ := http.NewRequest(req.method, wrong.URL+req.path, strings.NewReader(req.body))
		r.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if len(rec.errs) != 4 {
		t.Fatalf("the spec client reported %d problems, want 4: %q", len(rec.errs), rec.errs)
	}
}
