package main

import (
	"path/filepath"
	"strings"
	"testing"
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
