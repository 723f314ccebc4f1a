package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/internal/export"
)

// TestExport writes the stored dense vectors of a collection whose lines
// brought them, then reads the .npy file back: its header describes the
// array, its rows are the vectors given (a deleted document left out),
// and the ids file lists the documents in the same order.
func TestExport(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "coll")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"_id":"d1","text":"north","_vectors":{"ext":{"dense":[1,0,0.25],"tokens":[[1,0],[0.5,0.5]]}}}
{"_id":"d2","text":"east","_vectors":{"ext":{"dense":[0,1,-2],"tokens":[[0,1]]}}}
{"_id":"d3","text":"up","_vectors":{"ext":{"dense":[0.5,0.5,0],"tokens":[[0,1],[1,0],[0.25,0.75]]}}}
`), 0o644)
	if code, _, errs := tandemRun(t, "index", "--dir", dir, "--corpus", corpus, "--external", "ext:dense=3,tokens=2,similarity=dot"); code != 0 {
		t.Fatalf("index: %d %s", code, errs)
	}
	if code, _, errs := tandemRun(t, "delete", "--dir", dir, "d2"); code != 0 {
		t.Fatalf("delete: %d %s", code, errs)
	}
	out := filepath.Join(tmp, "out")
	if code, stdout, errs := tandemRun(t, "export", "--dir", dir, "--out", out); code != 0 || !strings.Contains(stdout, "ext: 2 vectors of 3 dimensions") || !strings.Contains(stdout, "ext: 2 documents, 5 tokens of 2 dimensions") {
		t.Fatalf("export: %d %q %s", code, stdout, errs)
	}
	ids, err := os.ReadFile(filepath.Join(out, "ext.ids"))
	if err != nil {
		t.Fatal(err)
	}
	if string(ids) != "d1\nd3\n" {
		t.Errorf("ids %q, want d1 and d3", ids)
	}
	b, err := os.ReadFile(filepath.Join(out, "ext.npy"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != export.HeaderSize+2*3*4 || string(b[:8]) != "\x93NUMPY\x01\x00" || b[export.HeaderSize-1] != '\n' {
		t.Fatalf("npy file of %d bytes, header %q", len(b), b[:min(len(b), export.HeaderSize)])
	}
	hlen := int(binary.LittleEndian.Uint16(b[8:]))
	if 10+hlen != export.HeaderSize || !strings.Contains(string(b[10:export.HeaderSize]), "'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }") {
		t.Errorf("npy header %q (length %d)", b[10:export.HeaderSize], hlen)
	}
	want := []float32{1, 0, 0.25, 0.5, 0.5, 0}
	for i, w := range want {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[export.HeaderSize+4*i:])); got != w {
			t.Errorf("value %d = %v, want %v", i, got, w)
		}
	}
	// Token matrices: rows one after the other, offsets per document.
	tok := readNpy(t, filepath.Join(out, "ext.tokens.npy"), "'descr': '<f4', 'fortran_order': False, 'shape': (5, 2), }")
	for i, w := range []float32{1, 0, 0.5, 0.5, 0, 1, 1, 0, 0.25, 0.75} {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(tok[4*i:])); got != w {
			t.Errorf("token value %d = %v, want %v", i, got, w)
		}
	}
	off := readNpy(t, filepath.Join(out, "ext.offsets.npy"), "'descr': '<i8', 'fortran_order': False, 'shape': (3,), }")
	for i, w := range []int64{0, 2, 5} {
		if got := int64(binary.LittleEndian.Uint64(off[8*i:])); got != w {
			t.Errorf("offset %d = %d, want %d", i, got, w)
		}
	}
	if ids, _ := os.ReadFile(filepath.Join(out, "ext.tokens.ids")); string(ids) != "d1\nd3\n" {
		t.Errorf("token ids %q, want d1 and d3", ids)
	}
	if code, _, errs := tandemRun(t, "export", "--dir", dir); code == 0 || !strings.Contains(errs, "usage") {
		t.Errorf("export without --out: %d %s", code, errs)
	}
}

// readNpy checks a .npy file's header against the dictionary export
// writes and returns its data.
func readNpy(t *testing.T, path, dict string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < export.HeaderSize || string(b[:8]) != "\x93NUMPY\x01\x00" || int(binary.LittleEndian.Uint16(b[8:]))+10 != export.HeaderSize ||
		!strings.Contains(string(b[10:export.HeaderSize]), dict) || b[export.HeaderSize-1] != '\n' {
		t.Fatalf("%s: header %q, want %q", path, b[:min(len(b), export.HeaderSize)], dict)
	}
	return b[export.HeaderSize:]
}
