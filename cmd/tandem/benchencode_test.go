package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchEncodeFlags checks the command's usage, and that --corpus
// reaches the benchmark.
func TestBenchEncodeFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"--corpus", "c.jsonl", "--docs", "0"}, {"--corpus", "c.jsonl", "--window", "0"}, {"--corpus", "c.jsonl", "--runs", "0"}} {
		if code, _, errs := tandemRun(t, append([]string{"bench", "encode"}, args...)...); code == 0 || !strings.Contains(errs, "usage") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
	missing := filepath.Join(t.TempDir(), "none.jsonl")
	if code, _, errs := tandemRun(t, "bench", "encode", "--corpus", missing); code == 0 || !strings.Contains(errs, missing) {
		t.Errorf("missing corpus: code %d, stderr %q", code, errs)
	}
}
