package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// syncBuffer is a log destination the test reads while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) lines() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// TestQueryCacheMetrics checks the query encodings on /metrics and in a
// collection's stats: two collections of one model share its cache, so a
// text encoded for one is a hit for the other, and the model's series
// appear once.
func TestQueryCacheMetrics(t *testing.T) {
	models, err := filepath.Abs(filepath.Join("..", "encoder", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("TANDEM_MODELS", models)
	a := newAPIServer(t, nil)
	for _, c := range []string{"q1", "q2"} {
		a.must(http.StatusCreated, "PUT", "/v1/collections/"+c, map[string]any{"dense": []string{"tiny-bert"}}, nil)
		a.upsert(c, `{"_id":"a","text":"the cat sat"}`, `{"_id":"b","text":"a dog"}`)
	}
	for _, c := range []string{"q1", "q2", "q1"} {
		a.find(c, map[string]any{"text": "cat", "retrievers": []string{"dense"}})
	}
	_, body := a.do("GET", "/metrics", nil)
	text := string(body)
	for _, want := range []string{
		`tandem_query_cache_hits_total{model="tiny-bert"} 2`,
		`tandem_index_retraining{collection="q1",retriever="dense:tiny-bert"} 0`,
		`tandem_index_retrains_total{collection="q1",retriever="dense:tiny-bert"} 0`,
		`tandem_query_cache_misses_total{model="tiny-bert"} 1`,
		`tandem_query_cache_evictions_total{model="tiny-bert"} 0`,
		`tandem_query_cache_entries{model="tiny-bert"} 1`,
		`tandem_query_cache_capacity_bytes{model="tiny-bert"} 6.7108864e+07`,
		`tandem_query_encoder_runs_total{model="tiny-bert"} 1`,
		`tandem_query_encoder_queries_total{model="tiny-bert"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := strings.Count(text, "tandem_query_cache_bytes{"); n != 1 {
		t.Errorf("%d series of tandem_query_cache_bytes, want 1 for the model", n)
	}
	var ci collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/q2", nil, &ci)
	if q := ci.Stats.QueryEncoding; len(q) != 1 || q[0].Model != "tiny-bert" || q[0].CacheHits != 2 || q[0].CacheBytes <= 0 {
		t.Errorf("stats query_encoding %+v", q)
	}
}

func TestMetricsAndRequestLog(t *testing.T) {
	var logs syncBuffer
	a := newAPIServer(t, &Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	a.must(http.StatusCreated, "PUT", "/v1/collections/m", nil, nil)
	a.upsert("m", `{"_id":"a","text":"fox"}`, `{"_id":"b","text":"dog"}`, `{"_id":"c"}`)
	a.find("m", map[string]any{"text": "fox"})
	a.fails(http.StatusNotFound, "collection_not_found", "GET", "/v1/collections/none", nil)

	_, body := a.do("GET", "/metrics", nil)
	text := string(body)
	for _, want := range []string{
		`tandem_documents{collection="m"} 2`,
		`tandem_documents_ingested_total{collection="m"} 2`,
		`tandem_documents_failed_total{collection="m"} 1`,
		`tandem_search_duration_seconds_count{collection="m",mode="bm25"} 1`,
		`tandem_retriever_duration_seconds_count{collection="m",retriever="bm25"} 1`,
		`tandem_http_requests_total{code="200",route="POST /v1/collections/{name}/search"} 1`,
		`tandem_http_requests_total{code="201",route="PUT /v1/collections/{name}"} 1`,
		`tandem_http_requests_total{code="404",route="GET /v1/collections/{name}"} 1`,
		`tandem_http_request_duration_seconds_count{route="POST /v1/collections/{name}/documents"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	m := regexp.MustCompile(`tandem_index_size_bytes\{collection="m",part="badger"\} (\S+)`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("no index size for m:\n%s", text)
	}
	if n, _ := strconv.ParseFloat(m[1], 64); n <= 0 {
		t.Errorf("badger size %v", m[1])
	}
	// A dropped collection's series go with it.
	a.must(http.StatusNoContent, "DELETE", "/v1/collections/m", nil, nil)
	_, body = a.do("GET", "/metrics", nil)
	if strings.Contains(string(body), `collection="m"`) {
		t.Errorf("metrics still name the dropped collection")
	}

	// One structured line per request.
	var search map[string]any
	deadline := time.Now().Add(testtime.D(5 * time.Second))
	for search == nil && time.Now().Before(deadline) {
		for _, l := range logs.lines() {
			if l["msg"] == "request" && l["route"] == "POST /v1/collections/{name}/search" {
				search = l
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if search == nil {
		t.Fatal("no log line for the search")
	}
	if search["method"] != "POST" || search["status"] != 200.0 || search["collection"] != "m" || search["path"] != "/v1/collections/m/search" ||
		search["bytes"].(float64) <= 0 || search["duration_ms"] == nil || !strings.HasPrefix(search["remote"].(string), "127.0.0.1:") {
		t.Errorf("search log line: %v", search)
	}
	n := 0
	for _, l := range logs.lines() {
		if l["msg"] == "request" {
			n++
		}
	}
	if n < 7 {
		t.Errorf("%d request lines for at least 7 requests", n)
	}
}

// TestDropWhileSearching drops a collection under concurrent searches
// and upserts: each answers 200 or, once the collection is gone, 404.
func TestDropWhileSearching(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/busy", nil, nil)
	a.upsert("busy", corpus(30)...)
	var wg sync.WaitGroup
	started := make(chan struct{}, 8)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				var code int
				var body []byte
				if w == 0 {
					code, body = a.do("POST", "/v1/collections/busy/documents", corpus(3)[i%3], "Content-Type", "application/x-ndjson")
				} else {
					code, body = a.do("POST", "/v1/collections/busy/search", map[string]any{"text": "fox common", "k": 5})
				}
				if i == 2 {
					started <- struct{}{}
				}
				switch code {
				case http.StatusOK:
				case http.StatusNotFound:
					return
				default:
					t.Errorf("worker %d: %d %s", w, code, body)
					return
				}
			}
		}()
	}
	for range 6 {
		<-started
	}
	a.must(http.StatusNoContent, "DELETE", "/v1/collections/busy", nil, nil)
	wg.Wait()
	if _, err := os.Stat(filepath.Join(a.dir, "busy")); !os.IsNotExist(err) {
		t.Fatalf("dropped collection still on disk: %v", err)
	}
}

// TestGracefulShutdown starts an upsert whose body is still coming when
// the server is told to stop: readiness turns 503, the upsert completes
// and is acknowledged, Serve returns, and the documents are in the
// collection when it is opened again.
func TestGracefulShutdown(t *testing.T) {
	dir := t.TempDir()
	s, err := New(&Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	req, _ := http.NewRequest("PUT", base+"/v1/collections/kept", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %v %v", resp, err)
	}

	// The upsert's handler is reading its body once the server asks for
	// it (100 Continue); the body is written after shutdown begins.
	pr, pw := io.Pipe()
	req, _ = http.NewRequest("POST", base+"/v1/collections/kept/documents", pr)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set("Expect", "100-continue")
	reading := make(chan struct{})
	req = req.WithContext(httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{Got100Continue: func() { close(reading) }}))
	client := &http.Client{Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}
	type answer struct {
		code int
		res  upsertResult
		err  error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.code = resp.StatusCode
		a.err = json.NewDecoder(resp.Body).Decode(&a.res)
		answered <- a
	}()
	<-reading
	stop()
	deadline := time.Now().Add(10 * time.Second)
	for s.ready.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "shutting down") {
		t.Fatalf("readyz during shutdown: %d %s", rec.Code, rec.Body)
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	lines := corpus(50)
	for _, l := range lines {
		io.WriteString(pw, l+"\n")
	}
	pw.Close()
	got := <-answered
	if got.err != nil || got.code != http.StatusOK || got.res.Indexed != 50 {
		t.Fatalf("in-flight upsert: %+v", got)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("the server still answers after Serve returned")
	}

	e, err := engine.Open(filepath.Join(dir, "kept"), &engine.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if n := e.Count(); n != 50 {
		t.Fatalf("reopened collection holds %d documents, want 50", n)
	}
	res, err := e.Search(context.Background(), engine.Request{Text: "fox", K: 1})
	if err != nil || len(res.Hits) != 1 || res.Hits[0].ID != "d49" {
		t.Fatalf("search after reopening: %+v %v", res, err)
	}
}

// TestDefaultModelHybrid creates a collection that encodes with the
// default model and runs dense and hybrid searches over HTTP.
func TestDefaultModelHybrid(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	a := newAPIServer(t, &Config{Engine: engine.Options{EncoderThreads: 1}})
	var ci collectionInfo
	a.must(http.StatusCreated, "PUT", "/v1/collections/sem", map[string]any{"dense": []string{encoder.DefaultModel}}, &ci)
	if !slices.Equal(ci.Retrievers, []string{"bm25", "dense:" + encoder.DefaultModel}) {
		t.Fatalf("retrievers %v", ci.Retrievers)
	}
	res := a.upsert("sem",
		`{"_id":"cat","title":"Cats","text":"A small domesticated feline that purrs and chases mice."}`,
		`{"_id":"car","title":"Cars","text":"A motor vehicle with four wheels used for transport on roads."}`,
		`{"_id":"bread","title":"Bread","text":"A staple food baked from flour, water and yeast."}`,
	)
	if res.Indexed != 3 {
		t.Fatalf("upsert: %+v", res)
	}
	d := a.find("sem", map[string]any{"text": "kitten", "mode": "dense", "k": 1})
	if len(d.Hits) != 1 || d.Hits[0].ID != "cat" {
		t.Fatalf("dense 'kitten': %+v", d.Hits)
	}
	h := a.find("sem", map[string]any{"text": "automobile on the road", "mode": "hybrid", "k": 3})
	if h.Fusion == "" || len(h.Hits) == 0 || h.Hits[0].ID != "car" || len(h.Hits[0].Sources) != 2 || h.Hits[0].Score <= 0 {
		t.Fatalf("hybrid: %+v", h)
	}
	a.fails(http.StatusBadRequest, "bad_vectors", "POST", "/v1/collections/sem/search",
		map[string]any{"mode": "dense", "vectors": map[string]any{encoder.DefaultModel: map[string]any{"dense": []float32{1, 2}}}}, encoder.DefaultModel+".dense", "dimension 2")
}
