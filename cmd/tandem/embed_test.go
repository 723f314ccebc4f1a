package main

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/internal/native"
)

func skipWithoutORT(t *testing.T) {
	t.Helper()
	if lib := native.ONNXRuntimeLibrary(); lib == "" {
		t.Skip("skipping: ONNX Runtime not installed (run scripts/setup.sh)")
	} else if _, err := os.Stat(lib); err != nil {
		t.Skipf("skipping: %s not found (run scripts/setup.sh)", lib)
	}
}

func TestEmbedCommand(t *testing.T) {
	skipWithoutORT(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"embed", "--model", "../../encoder/testdata/tiny-bert", "the cat", "sat"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want 2:\n%s", len(lines), stdout.String())
	}
	var out embedOutput
	if err := json.Unmarshal([]byte(lines[0]), &out); err != nil {
		t.Fatal(err)
	}
	// tiny-bert: CLS pooling of (E[2] + P[0]) = [-1 2 5 -2]; see
	// scripts/models/make_tiny.py.
	if out.Model != "tiny-bert" || out.Dim != 4 || !slices.Equal(out.Vector, []float32{-1, 2, 5, -2}) || out.Text != "the cat" {
		t.Fatalf("embed output %+v", out)
	}

	stdout.Reset()
	if code := run([]string{"embed", "--model", "../../encoder/testdata/tiny-colbert", "--query", "--tokens", "cat"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	out = embedOutput{}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	if out.Side != "query" || out.Dim != 128 || out.Vector != nil || len(out.Tokens) != 8 || out.Tokens[1].ID != 5 {
		t.Fatalf("colbert query output: side %s dim %d tokens %d", out.Side, out.Dim, len(out.Tokens))
	}

	stderr.Reset()
	if code := run([]string{"embed", "--model", "no/such/dir", "x"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no configuration file") {
		t.Fatalf("missing model: exit %d, stderr %q", code, stderr.String())
	}
}

func TestModelsCommand(t *testing.T) {
	skipWithoutORT(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"models", "--dir", "../../encoder/testdata"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"tiny-bert", "tiny-colbert", "tiny-t5", "128", "none", "mean"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("models output lacks %q:\n%s", want, stdout.String())
		}
	}
}
