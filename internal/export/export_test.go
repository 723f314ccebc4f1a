package export

import (
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// readArray reads back a .npy file as this package writes it: it checks
// the version 1.0 preamble, that the header is HeaderSize bytes ending
// with '\n' (the data starting at a 64-byte multiple), and returns the
// header's dictionary without its padding, and the data.
func readArray(t *testing.T, path string) (dict string, data []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < HeaderSize || string(b[:8]) != "\x93NUMPY\x01\x00" {
		t.Fatalf("%s: %d bytes, preamble %q", path, len(b), b[:min(len(b), 8)])
	}
	end := 10 + int(binary.LittleEndian.Uint16(b[8:10]))
	if end != HeaderSize || end%64 != 0 || b[end-1] != '\n' {
		t.Fatalf("%s: header of %d bytes, want %d ending with a newline: %q", path, end, HeaderSize, b[:HeaderSize])
	}
	return strings.TrimRight(string(b[10:end-1]), " "), b[end:]
}

// float32Bytes is vs as '<f4' data.
func float32Bytes(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// int64Bytes is vs as '<i8' data.
func int64Bytes(vs ...int64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

// TestNpyRoundTrip writes a matrix of float32 rows and a vector of int64
// values, and reads back the header that describes them and the values in
// the order written.
func TestNpyRoundTrip(t *testing.T) {
	dir := t.TempDir()

	m, err := createNpy(filepath.Join(dir, "m.npy"), "<f4", 2)
	if err != nil {
		t.Fatal(err)
	}
	rows := [][]float32{{1.5, -2}, {0, float32(math.Inf(1))}, {3.25, 1e-30}}
	for _, r := range rows {
		if err := m.float32s(r); err != nil {
			t.Fatal(err)
		}
	}
	// Several rows in one call count as several rows.
	if err := m.float32s([]float32{7, 8, 9, 10}); err != nil {
		t.Fatal(err)
	}
	if err := m.close(); err != nil {
		t.Fatal(err)
	}
	dict, data := readArray(t, filepath.Join(dir, "m.npy"))
	if want := "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 2), }"; dict != want {
		t.Errorf("matrix header %q, want %q", dict, want)
	}
	if want := float32Bytes(1.5, -2, 0, float32(math.Inf(1)), 3.25, 1e-30, 7, 8, 9, 10); !slices.Equal(data, want) {
		t.Errorf("matrix data %x, want %x", data, want)
	}

	v, err := createNpy(filepath.Join(dir, "v.npy"), "<i8", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []int64{0, 3, math.MaxInt64, -1} {
		if err := v.int64(x); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.close(); err != nil {
		t.Fatal(err)
	}
	dict, data = readArray(t, filepath.Join(dir, "v.npy"))
	if want := "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"; dict != want {
		t.Errorf("vector header %q, want %q", dict, want)
	}
	if want := int64Bytes(0, 3, math.MaxInt64, -1); !slices.Equal(data, want) {
		t.Errorf("vector data %x, want %x", data, want)
	}

	// An empty array is still a complete file.
	z, err := createNpy(filepath.Join(dir, "z.npy"), "<f4", 384)
	if err != nil {
		t.Fatal(err)
	}
	if err := z.close(); err != nil {
		t.Fatal(err)
	}
	if dict, data := readArray(t, filepath.Join(dir, "z.npy")); dict != "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 384), }" || len(data) != 0 {
		t.Errorf("empty array: header %q, %d data bytes", dict, len(data))
	}
}

// TestNpyHeaderFitsAnyShape writes the header of the largest shape an int
// can give: it still fits in HeaderSize bytes.
func TestNpyHeaderFitsAnyShape(t *testing.T) {
	n, err := createNpy(filepath.Join(t.TempDir(), "big.npy"), "<f4", math.MaxInt)
	if err != nil {
		t.Fatal(err)
	}
	n.rows = math.MaxInt
	if err := n.close(); err != nil {
		t.Fatalf("header of shape (MaxInt, MaxInt): %v", err)
	}
	dict, _ := readArray(t, n.f.Name())
	if !strings.Contains(dict, "'shape': (9223372036854775807, 9223372036854775807)") {
		t.Errorf("header %q", dict)
	}
}

// TestDenseAndTokens exports a collection whose documents brought their
// vectors, one of them deleted: the arrays hold the other documents'
// vectors in document order, the id files name them in the same order,
// and the offsets bound each document's token rows. A dimension other
// than the stored one stops the export and leaves no readable array.
func TestDenseAndTokens(t *testing.T) {
	ctx := context.Background()
	schema := tandem.DefaultSchema()
	schema.Models = append(schema.Models, tandem.Model{Name: "ext", External: true, Dense: true, Dim: 2, Late: true, TokenDim: 3, Similarity: tandem.Dot})
	e, err := engine.Open(filepath.Join(t.TempDir(), "coll"), &engine.Options{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	doc := func(id string, dense []float32, tokens ...[]float32) tandem.Doc {
		return tandem.Doc{ID: id, Fields: map[string]any{"text": "text of " + id}, Vectors: map[string]tandem.Vectors{"ext": {Dense: dense, Tokens: tokens}}}
	}
	docs := []tandem.Doc{
		doc("a", []float32{1, 2}, []float32{1, 0, 0}, []float32{0, 1, 0}, []float32{0, 0, 1}),
		doc("b", []float32{3, 4}, []float32{2, 2, 2}),
		doc("c", []float32{-5, 0.5}, []float32{0.5, 0.25, 0.125}),
		doc("d", []float32{6, 7}, []float32{-1, -2, -3}, []float32{4, 5, 6}),
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Delete(ctx, []string{"b"}); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	base := filepath.Join(out, "ext")

	rows, err := Dense(ctx, e, "ext", 2, base)
	if err != nil || rows != 3 {
		t.Fatalf("Dense: %d rows, %v; want 3", rows, err)
	}
	dict, data := readArray(t, base+".npy")
	if want := "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }"; dict != want {
		t.Errorf("dense header %q, want %q", dict, want)
	}
	if want := float32Bytes(1, 2, -5, 0.5, 6, 7); !slices.Equal(data, want) {
		t.Errorf("dense data %x, want %x", data, want)
	}
	if ids, err := os.ReadFile(base + ".ids"); err != nil || string(ids) != "a\nc\nd\n" {
		t.Errorf("dense ids %q, %v; want a, c, d", ids, err)
	}

	n, tokens, err := Tokens(ctx, e, "ext", 3, base)
	if err != nil || n != 3 || tokens != 6 {
		t.Fatalf("Tokens: %d documents, %d tokens, %v; want 3 and 6", n, tokens, err)
	}
	dict, data = readArray(t, base+".tokens.npy")
	if want := "{'descr': '<f4', 'fortran_order': False, 'shape': (6, 3), }"; dict != want {
		t.Errorf("tokens header %q, want %q", dict, want)
	}
	if want := float32Bytes(1, 0, 0, 0, 1, 0, 0, 0, 1, 0.5, 0.25, 0.125, -1, -2, -3, 4, 5, 6); !slices.Equal(data, want) {
		t.Errorf("tokens data %x, want %x", data, want)
	}
	dict, data = readArray(t, base+".offsets.npy")
	if want := "{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }"; dict != want {
		t.Errorf("offsets header %q, want %q", dict, want)
	}
	if want := int64Bytes(0, 3, 4, 6); !slices.Equal(data, want) {
		t.Errorf("offsets %x, want %x", data, want)
	}
	if ids, err := os.ReadFile(base + ".tokens.ids"); err != nil || string(ids) != "a\nc\nd\n" {
		t.Errorf("token ids %q, %v; want a, c, d", ids, err)
	}

	wrong := filepath.Join(out, "wrong")
	if _, err := Dense(ctx, e, "ext", 3, wrong); err == nil || !strings.Contains(err.Error(), "a vector of 2 dimensions, the model has 3") {
		t.Errorf("Dense with dimension 3: %v, want a dimension error", err)
	}
	if _, _, err := Tokens(ctx, e, "ext", 2, wrong); err == nil || !strings.Contains(err.Error(), "tokens of 3 dimensions, the model has 2") {
		t.Errorf("Tokens with dimension 2: %v, want a dimension error", err)
	}
	for _, f := range []string{wrong + ".npy", wrong + ".tokens.npy", wrong + ".offsets.npy"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) < HeaderSize || strings.Trim(string(b[:HeaderSize]), "\x00") != "" {
			t.Errorf("%s after a failed export: %d bytes, header %q; want %d zero bytes", f, len(b), b[:min(len(b), HeaderSize)], HeaderSize)
		}
	}
}
