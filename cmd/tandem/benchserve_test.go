package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/server"
)

// TestBenchServe is the short version of make bench-serve: a few seconds of
// searchers in every mode and a writer against a real server, which must
// answer every request.
func TestBenchServe(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	queries := filepath.Join(tmp, "queries.jsonl")
	os.WriteFile(corpus, []byte(`{"_id":"cat","title":"Cats","text":"Domestic cats are small felines that purr."}
{"_id":"stock","title":"Markets","text":"Equity prices fell as investors sold shares."}
{"_id":"heart","title":"Cardiology","text":"Myocardial infarction follows blocked coronary arteries."}
`), 0o644)
	os.WriteFile(queries, []byte(`{"_id":"1","text":"kitten"}
{"_id":"2","text":"heart attack"}
`), 0o644)
	if code, out, errs := tandemRun(t, "index", "--dir", filepath.Join(data, "c"), "--corpus", corpus, "--quiet"); code != 0 {
		t.Fatalf("index: %d %q %q", code, out, errs)
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

	code, out, errs := tandemRun(t, "bench", "serve", "--url", ts.URL, "--collection", "c", "--queries", queries,
		"--corpus", corpus, "--duration", "3s", "--searchers", "3", "--write-batch", "2")
	if code != 0 {
		t.Fatalf("bench serve: %d\n%s\n%s", code, out, errs)
	}
	row := regexp.MustCompile(`(?m)^\| (\w+) \| (\d+) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| (\d+) \|$`)
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		if n == 0 || m[3] != "0" {
			t.Errorf("mode %s: %s requests, %s errors", m[1], m[2], m[3])
		}
		seen[m[1]] = true
	}
	for _, mode := range []string{"bm25", "dense", "late", "hybrid", "upsert"} {
		if !seen[mode] {
			t.Errorf("no row for %s in\n%s", mode, out)
		}
	}

	// A collection the server lacks, and a mode that does not exist, are
	// errors that say so before any load.
	if code, _, errs := tandemRun(t, "bench", "serve", "--url", ts.URL, "--collection", "nope", "--queries", queries, "--duration", "1s"); code == 0 || !strings.Contains(errs, "404") || !strings.Contains(errs, "nope") {
		t.Errorf("unknown collection: code %d, %q", code, errs)
	}
	if code, _, errs := tandemRun(t, "bench", "serve", "--url", ts.URL, "--collection", "c", "--queries", queries, "--modes", "bm25,fuzzy"); code == 0 || !strings.Contains(errs, `unknown mode "fuzzy"`) {
		t.Errorf("unknown mode: code %d, %q", code, errs)
	}
}
