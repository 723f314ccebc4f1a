//go:build !cgo

package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/internal/native"
)

// TestNoCgoBM25 checks that a build without cgo (CGO_ENABLED=0) serves a
// BM25-only collection: create, index, filtered search, reopen.
func TestNoCgoBM25(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	e, err := Open(dir, &Options{})
	if err != nil {
		t.Fatal(err)
	}
	docs := []tandem.Doc{
		{ID: "cats", Fields: map[string]any{"title": "Cats", "text": "Cats are small felines kept as pets.", "lang": "en"}},
		{ID: "chats", Fields: map[string]any{"title": "Chats", "text": "Les chats sont de petits félins.", "lang": "fr"}},
		{ID: "markets", Fields: map[string]any{"title": "Markets", "text": "Stock prices fell as investors sold shares of pet food makers.", "lang": "en"}},
	}
	if _, err := e.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if got := e.Retrievers(); len(got) != 1 || got[0] != "bm25" {
		t.Fatalf("Retrievers = %q, want [bm25]", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	e, err = Open(dir, &Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	res, err := e.Search(ctx, Request{Text: "pet cats", Filter: []byte(`{"term":{"lang":"en"}}`), Retrievers: []string{"bm25"}, K: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, h := range res.Hits {
		ids = append(ids, h.ID)
	}
	if strings.Join(ids, ",") != "cats,markets" {
		t.Fatalf("hits %q, want cats then markets (chats is filtered out)", ids)
	}
	if _, err := e.Search(ctx, Request{Text: "cats", Retrievers: []string{"dense:" + encoder.DefaultModel}}); !errors.Is(err, ErrUnknownRetriever) {
		t.Fatalf("dense search of a BM25 collection: err %v, want ErrUnknownRetriever", err)
	}
}

// TestNoCgoVectorModels checks that, without cgo, creating or opening a
// collection with vector retrieval fails with native.ErrNoCgo: an
// external dense model (FAISS), an external late-interaction model with
// FAISS's and with Tandem's residual index, and the default encoder (ONNX
// Runtime) when it is installed.
func TestNoCgoVectorModels(t *testing.T) {
	external := func(m tandem.Model) *Options {
		s := tandem.DefaultSchema()
		m.Name, m.External, m.Similarity = "ext", true, tandem.Cosine
		s.Models = []tandem.Model{m}
		return &Options{Schema: s}
	}
	cases := map[string]*Options{
		"external dense":          external(tandem.Model{Dense: true, Dim: 4}),
		"external late flat":      external(tandem.Model{Late: true, TokenDim: 4}),
		"external late residual":  external(tandem.Model{Late: true, TokenDim: 8, LateIndex: "Residual"}),
		"default encoder (dense)": {Dense: []string{encoder.DefaultModel}},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			if opts.Dense != nil {
				if _, err := encoder.Find(encoder.DefaultModel); err != nil {
					t.Skipf("skipping: %v", err)
				}
			}
			dir := filepath.Join(t.TempDir(), "c")
			e, err := Open(dir, opts)
			if err == nil {
				e.Close()
				t.Fatal("Open succeeded")
			}
			if !errors.Is(err, native.ErrNoCgo) {
				t.Fatalf("err %v, want native.ErrNoCgo", err)
			}
			t.Log(err)
			if opts.Dense != nil {
				// An encoder fails to load before anything is created.
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s exists after the failed Open (err %v)", dir, err)
				}
				return
			}
			// An external model's schema is stored before its index
			// opens; opening the collection again fails the same way.
			if e, err := Open(dir, &Options{MustExist: true}); !errors.Is(err, native.ErrNoCgo) {
				if err == nil {
					e.Close()
				}
				t.Fatalf("reopen: err %v, want native.ErrNoCgo", err)
			}
		})
	}
}
