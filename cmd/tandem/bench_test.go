package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/internal/synth"
)

// TestBenchIngestCommand runs the command on a few documents, keeps the
// collection and searches it again with --search-only: the flags reach
// the benchmark and its tables reach stdout.
func TestBenchIngestCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	code, out, errs := tandemRun(t, "bench", "ingest", "--dir", dir, "--docs", "300", "--queries", "3", "--recall-queries", "2", "--batch", "100", "--keep", "--quiet")
	for _, want := range []string{"| documents | 300 ", "(3 atomic batches)", " bytes/document (badger ", "| ingest | ", "| open with the dense index rebuilt from Badger, then the searches | ",
		"| dense, 1% filter | ", "| dense p50: 1% filter ÷ unfiltered |", "3 queries per configuration, alternating, after 10 unmeasured; recall over the first 2 "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q: code %d, stdout %q, stderr %q", want, code, out, errs)
		}
	}
	if !strings.Contains(errs, "ingesting 300 synthetic documents") {
		t.Errorf("stderr %q", errs)
	}
	code, out, errs = tandemRun(t, "bench", "ingest", "--dir", dir, "--search-only", "--queries", "4", "--recall-queries", "4")
	for _, want := range []string{"| documents | 300 (an existing collection, searched only) |", "| open from snapshot, then the searches | ", "| dense | ", "recall over the first 4 "} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("--search-only: stdout lacks %q: code %d, stdout %q, stderr %q", want, code, out, errs)
		}
	}
	if code, _, errs := tandemRun(t, "bench", "ingest", "--dir", dir, "--search-only", "--docs", "300"); code == 0 || !strings.Contains(errs, "--docs does not apply with --search-only") {
		t.Errorf("--search-only --docs: code %d, stderr %q", code, errs)
	}
}

// TestBenchIngestFlags checks that bad flags and an existing directory are
// refused before anything is built.
func TestBenchIngestFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	for _, args := range [][]string{{"--docs", "0"}, {"--queries", "0"}, {"--queries", "5", "--recall-queries", "6"}, {"--recall-queries", "-1"}, {"extra"}} {
		if code, _, errs := tandemRun(t, append([]string{"bench", "ingest", "--dir", dir}, args...)...); code == 0 || !strings.Contains(errs, "usage") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := tandemRun(t, "bench", "ingest", "--dir", t.TempDir(), "--docs", "10"); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("existing directory: code %d, stderr %q", code, errs)
	}
	if code, _, errs := tandemRun(t, "bench", "ingest", "--dir", dir, "--search-only"); code == 0 || !strings.Contains(errs, "holds no collection") {
		t.Errorf("--search-only without a collection: code %d, stderr %q", code, errs)
	}
}

// TestBenchText writes a realistic-text collection in BEIR layout from
// SciFact's statistics, and benchmarks an ingest of the same text: the
// documents bench text writes are the ones bench ingest --text-from
// indexes, and its queries are SciFact's.
func TestBenchText(t *testing.T) {
	scifact := filepath.Join("..", "..", "..", "shared", "data", "scifact")
	if _, err := os.Stat(filepath.Join(scifact, "corpus.jsonl")); err != nil {
		t.Skipf("SciFact is not in ../shared/data (%v): skipping", err)
	}
	out := filepath.Join(t.TempDir(), "realtext")
	code, stdout, errs := tandemRun(t, "bench", "text", "--text-from", scifact, "--docs", "300", "--out", out)
	if code != 0 || !strings.Contains(stdout, "wrote 300 documents and 1109 queries") || !strings.Contains(errs, "scifact: 5183 documents") {
		t.Fatalf("bench text: code %d, stdout %q, stderr %q", code, stdout, errs)
	}
	corpus, err := os.ReadFile(filepath.Join(out, "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(corpus)), "\n")
	var first struct{ ID, Text string }
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || len(lines) != 300 {
		t.Fatalf("%d lines, first %q: %v", len(lines), lines[0], err)
	}
	c := synth.Default()
	c.TextFrom = scifact
	g, err := synth.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := g.Doc(0).Fields["text"]; first.Text != want {
		t.Errorf("document 0 of bench text differs from the one bench ingest indexes")
	}
	if code, _, errs := tandemRun(t, "bench", "text", "--text-from", scifact, "--out", out); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("an existing --out: code %d, stderr %q", code, errs)
	}
	code, stdout, errs = tandemRun(t, "bench", "ingest", "--dir", filepath.Join(t.TempDir(), "b"), "--docs", "300", "--queries", "3", "--recall-queries", "0", "--text-from", scifact, "--quiet")
	if code != 0 || !strings.Contains(stdout, "| documents | 300 (text drawn from scifact: 5183 documents") {
		t.Errorf("bench ingest --text-from: code %d, stdout %q, stderr %q", code, stdout, errs)
	}
}
