package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
	// The tiny models do not state a precision.
	if row := modelRow(t, stdout.String(), "tiny-bert"); !slices.Equal(row[:6], []string{"tiny-bert", "-", "4", "4", "cls", "dot"}) {
		t.Errorf("tiny-bert row %q", row)
	}

	// A model whose tandem.json states its precision shows it.
	dir := filepath.Join(t.TempDir(), "tiny-bert-int8")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.onnx", "tokenizer.json"} {
		data, err := os.ReadFile(filepath.Join("../../encoder/testdata/tiny-bert", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	conf := `{"name": "tiny-bert-int8", "pooling": "cls", "similarity": "dot", "precision": "int8"}`
	if err := os.WriteFile(filepath.Join(dir, "tandem.json"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run([]string{"models", "--dir", filepath.Dir(dir)}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if row := modelRow(t, stdout.String(), "tiny-bert-int8"); !slices.Equal(row, []string{"tiny-bert-int8", "int8", "4", "4", "cls", "dot", dir}) {
		t.Errorf("tiny-bert-int8 row %q", row)
	}
}

// modelRow returns the fields of the `tandem models` row of model name,
// after checking the header.
func modelRow(t *testing.T, out, name string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if h := strings.Join(strings.Fields(lines[0]), " "); h != "NAME PRECISION DIM TOKEN DIM POOLING SIMILARITY PATH" {
		t.Fatalf("models header %q", lines[0])
	}
	for _, line := range lines[1:] {
		if f := strings.Fields(line); f[0] == name {
			return f
		}
	}
	t.Fatalf("models output has no row for %s:\n%s", name, out)
	return nil
}
