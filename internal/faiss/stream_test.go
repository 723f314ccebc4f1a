//go:build cgo

package faiss

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"testing"
)

// failingWriter fails after n bytes.
type failingWriter struct{ n int }

var errWriter = errors.New("writer failed")

func (w *failingWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		put := w.n
		w.n = 0
		return put, errWriter
	}
	w.n -= len(p)
	return len(p), nil
}

// TestStream holds WriteTo to Marshal's bytes and Read to Unmarshal's
// index, for the descriptions dense and late use; Read leaves what
// follows the index in its reader, and a short input or a failing
// writer is an error that wraps the cause.
func TestStream(t *testing.T) {
	c := newCollection(29)
	for _, desc := range []string{"Flat", "IVF16,SQ8", "IVF16,Flat", "HNSW16"} {
		t.Run(desc, func(t *testing.T) {
			x := newIndex(t, c, desc)
			want, err := x.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			n, err := x.WriteTo(&buf)
			if err != nil || n != int64(len(want)) || !bytes.Equal(buf.Bytes(), want) {
				t.Fatalf("WriteTo: %d bytes, err %v, equal to Marshal's %d: %v", n, err, len(want), bytes.Equal(buf.Bytes(), want))
			}
			buf.WriteString("trailer")
			y, n, err := Read(&buf, x.Description(), InnerProduct)
			if err != nil || n != int64(len(want)) {
				t.Fatalf("Read: %d bytes of %d, err %v", n, len(want), err)
			}
			defer y.Close()
			if rest, _ := io.ReadAll(&buf); string(rest) != "trailer" {
				t.Fatalf("Read left %q, want the trailer", rest)
			}
			if y.Len() != x.Len() || y.D() != x.D() || y.IsIVF() != x.IsIVF() {
				t.Fatalf("read %d vectors of %d dims (IVF %v), wrote %d of %d (IVF %v)", y.Len(), y.D(), y.IsIVF(), x.Len(), x.D(), x.IsIVF())
			}
			a, _ := x.Search(context.Background(), c.queries, testK, SearchOptions{})
			b, _ := y.Search(context.Background(), c.queries, testK, SearchOptions{})
			for q := range a {
				if !slices.Equal(a[q].IDs, b[q].IDs) || !slices.Equal(a[q].Scores, b[q].Scores) {
					t.Fatalf("query %d: read copy answers %v %v, original %v %v", q, b[q].IDs, b[q].Scores, a[q].IDs, a[q].Scores)
				}
			}
			if again, err := y.Marshal(); err != nil || !bytes.Equal(again, want) {
				t.Fatalf("the read index serialises differently (err %v)", err)
			}

			if _, _, err := Read(bytes.NewReader(want[:len(want)/2]), desc, InnerProduct); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("Read of half the bytes: %v, want io.ErrUnexpectedEOF", err)
			}
			if _, _, err := Read(bytes.NewReader(want), desc, L2); err == nil {
				t.Fatal("reading an inner-product index as L2 succeeded")
			}
			if _, err := x.WriteTo(&failingWriter{n: len(want) / 2}); !errors.Is(err, errWriter) {
				t.Fatalf("WriteTo a failing writer: %v, want its error", err)
			}
		})
	}
	x := newIndex(t, c, "Flat")
	x.Close()
	if _, err := x.WriteTo(io.Discard); !errors.Is(err, ErrClosed) {
		t.Fatalf("WriteTo after Close: %v, want ErrClosed", err)
	}
}
