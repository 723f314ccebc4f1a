package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/engine"
)

// The command refuses bad flags, and a collection that is not a soak's,
// naming what it lacks.
func TestSoakCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{"soak", "--docs", "10"},
		{"soak", "--duration", "0s"},
		{"soak", "--searchers", "0"},
		{"soak", "extra"},
	} {
		if code, _, errs := tandemRun(t, args...); code == 0 || !strings.Contains(errs, "usage: tandem soak") {
			t.Errorf("%v: code %d, %q", args, code, errs)
		}
	}
	dir := filepath.Join(t.TempDir(), "beir")
	e, err := engine.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := tandemRun(t, "soak", "--dir", dir, "--duration", "1s"); code == 0 || !strings.Contains(errs, "not a soak collection") || !strings.Contains(errs, dir) {
		t.Errorf("BEIR collection: code %d, %q", code, errs)
	}
}
