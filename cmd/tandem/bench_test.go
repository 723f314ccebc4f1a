package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchIngestCommand runs the command on a few documents: the flags
// reach the benchmark and its table reaches stdout.
func TestBenchIngestCommand(t *testing.T) {
	code, out, errs := tandemRun(t, "bench", "ingest", "--dir", filepath.Join(t.TempDir(), "bench"), "--docs", "300", "--queries", "2", "--batch", "100", "--quiet")
	if code != 0 || !strings.Contains(out, "| documents | 300 ") || !strings.Contains(out, "(3 atomic batches)") || !strings.Contains(errs, "ingesting 300 synthetic documents") {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestBenchIngestFlags checks that bad flags and an existing directory are
// refused before anything is built.
func TestBenchIngestFlags(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	for _, args := range [][]string{{"--docs", "0"}, {"--queries", "0"}, {"extra"}} {
		if code, _, errs := tandemRun(t, append([]string{"bench", "ingest", "--dir", dir}, args...)...); code == 0 || !strings.Contains(errs, "usage") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
	if code, _, errs := tandemRun(t, "bench", "ingest", "--dir", t.TempDir(), "--docs", "10"); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("existing directory: code %d, stderr %q", code, errs)
	}
}
