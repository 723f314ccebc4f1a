package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// skipWithoutFAISS skips a test that needs FAISS (the late-interaction
// index trains its centroids with it) in a build without it.
func skipWithoutFAISS(t *testing.T) {
	t.Helper()
	x, err := faiss.New(8, "Flat", faiss.InnerProduct)
	if errors.Is(err, faiss.ErrNoCgo) {
		t.Skip("skipping: FAISS is not available without cgo (build with CGO_ENABLED=1 after scripts/setup.sh)")
	}
	if err != nil {
		t.Skipf("skipping: FAISS unavailable: %v (run scripts/setup.sh)", err)
	}
	x.Close()
}

// TestBenchLateCommand runs the command on a few small documents: the
// flags reach the benchmark and its table reaches stdout.
func TestBenchLateCommand(t *testing.T) {
	skipWithoutFAISS(t)
	code, out, errs := tandemRun(t, "bench", "late", "--dir", filepath.Join(t.TempDir(), "bench"), "--docs", "300", "--tokens", "8", "--dim", "16",
		"--query-tokens", "4", "--queries", "3", "--recall-queries", "2", "--quiet")
	if code != 0 || !strings.Contains(out, "| documents | 300 (8 tokens of 16 values each") || !strings.Contains(out, "(2 queries; exhaustive p50") ||
		!strings.Contains(errs, "searching: 3 queries of 4 tokens") {
		t.Errorf("code %d, stdout %q, stderr %q", code, out, errs)
	}
}

// TestBenchLateFlags checks that bad flags are refused before anything is
// built.
func TestBenchLateFlags(t *testing.T) {
	skipWithoutFAISS(t)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "bench")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--late-index", "Residual3"}, "--late-index"},
		{[]string{"--late-index", "Residual", "--dim", "60"}, "divisible by 8"},
		{[]string{"--late-index", "NotAnIndex"}, "--late-index"},
		{[]string{"--queries", "10", "--recall-queries", "20"}, "usage"},
		{[]string{"--tokens", "5000"}, "at most 4096"},
		{[]string{"--docs", "0"}, "usage"},
	} {
		code, _, errs := tandemRun(t, append([]string{"bench", "late", "--dir", dir, "--quiet"}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("%v: code %d, stderr %q, want it to mention %q", tc.args, code, errs, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%v: the collection directory was created", tc.args)
		}
	}
	if code, _, errs := tandemRun(t, "bench", "late", "--dir", tmp, "--docs", "10"); code == 0 || !strings.Contains(errs, "exists") {
		t.Errorf("existing directory: code %d, stderr %q", code, errs)
	}
}
