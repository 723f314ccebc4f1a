package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchClusterFlags checks the command's usage, and that --data reaches
// the benchmark.
func TestBenchClusterFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"--data", "x", "--batch", "0"}, {"--data", "x", "--queries", "0"}, {"--data", "x", "extra"}} {
		if code, _, errs := tandemRun(t, append([]string{"bench", "cluster"}, args...)...); code == 0 || !strings.Contains(errs, "usage") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
	missing := filepath.Join(t.TempDir(), "nothing")
	if code, _, errs := tandemRun(t, "bench", "cluster", "--data", missing); code == 0 || !strings.Contains(errs, filepath.Join(missing, "corpus.jsonl")) {
		t.Errorf("missing data: code %d, stderr %q", code, errs)
	}
}
