package load

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/server"
)

// TestBenchServe is the short version of make bench-serve: searchers in
// every mode and a writer against a real server, which must answer every
// request. Each load ends once every mode has had a few requests answered
// (Config.MinPerMode), however long that takes on the machine, within a
// minute scaled by the test time scale.
func TestBenchServe(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	queries := filepath.Join(tmp, "queries.jsonl")
	docs := `{"_id":"cat","title":"Cats","text":"Domestic cats are small felines that purr."}
{"_id":"stock","title":"Markets","text":"Equity prices fell as investors sold shares."}
{"_id":"heart","title":"Cardiology","text":"Myocardial infarction follows blocked coronary arteries."}
`
	os.WriteFile(corpus, []byte(docs), 0o644)
	os.WriteFile(queries, []byte(`{"_id":"1","text":"kitten"}
{"_id":"2","text":"heart attack"}
`), 0o644)
	// The collection `tandem index` makes by default: BEIR fields, the
	// default model for dense and late retrieval.
	e, err := engine.Open(filepath.Join(data, "c"), &engine.Options{Schema: tandem.DefaultSchema(),
		Dense: []string{encoder.DefaultModel}, Late: []string{encoder.DefaultModel}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.IndexJSONL(context.Background(), strings.NewReader(docs), engine.JSONLOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := server.New(&server.Config{DataDir: data, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	defer func() {
		ts.Close()
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()

	c := Config{URL: ts.URL, Collection: "c", QueriesFile: queries, CorpusFile: corpus, Duration: testtime.D(time.Minute), MinPerMode: 5,
		Searchers: 3, Writers: 1, WriteBatch: 2, Modes: "bm25,dense,late,hybrid", K: 10, Quiet: true}
	r, err := Run(context.Background(), c)
	if err != nil {
		t.Fatalf("bench serve: %v", err)
	}
	var b strings.Builder
	r.WriteMarkdown(&b)
	out := b.String()
	if r.Failed() != 0 {
		t.Errorf("%d requests failed:\n%s", r.Failed(), out)
	}
	row := regexp.MustCompile(`(?m)^\| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| (\d+) \|$`)
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		if n < c.MinPerMode || m[3] != "0" {
			t.Errorf("mode %s: %s requests, %s errors; want at least %d, none failed", m[1], m[2], m[3], c.MinPerMode)
		}
		seen[m[1]] = true
	}
	for _, mode := range []string{"bm25", "dense", "late", "hybrid", "upsert"} {
		if !seen[mode] {
			t.Errorf("no row for %s in\n%s", mode, out)
		}
	}
	if r.Queries == nil || r.Queries.Runs == 0 || !strings.Contains(out, "query encodings: cache hit rate") || !strings.Contains(out, "\nsearches: ") {
		t.Errorf("no query encodings or searches/s in\n%s", out)
	}
	if r.Elapsed >= c.Duration {
		t.Errorf("the load ran its whole %v: want it ended once every mode had %d requests\n%s", c.Duration, c.MinPerMode, out)
	}

	// Queries drawn from a Zipfian distribution repeat: the server's cache
	// of query encodings answers some, and the report says how many (10
	// searches or more of 2 queries: some repeat).
	zipf := c
	zipf.CorpusFile, zipf.Modes, zipf.Zipf = "", "dense,late", 1.2
	zr, err := Run(context.Background(), zipf)
	if err != nil {
		t.Fatalf("bench serve --zipf: %v", err)
	}
	b.Reset()
	zr.WriteMarkdown(&b)
	if zr.Failed() != 0 || zr.Queries == nil || zr.Queries.CacheHits == 0 || !strings.Contains(b.String(), "Zipfian draw, exponent 1.2") {
		t.Errorf("bench serve --zipf 1.2 over 2 queries: no cache hits reported:\n%s", b.String())
	}
	t.Logf("\n%s", b.String())
	bad := zipf
	bad.Zipf = 0.5
	if _, err := Run(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "--zipf 0.5") {
		t.Errorf("--zipf 0.5: %v", err)
	}

	// A collection the server lacks, and a mode that does not exist, are
	// errors that say so before any load.
	nope := c
	nope.Collection, nope.CorpusFile, nope.Duration = "nope", "", time.Second
	if _, err := Run(context.Background(), nope); err == nil || !strings.Contains(err.Error(), "404") || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown collection: %v", err)
	}
	fuzzy := c
	fuzzy.Modes = "bm25,fuzzy"
	if _, err := Run(context.Background(), fuzzy); err == nil || !strings.Contains(err.Error(), `unknown mode "fuzzy"`) {
		t.Errorf("unknown mode: %v", err)
	}
}
