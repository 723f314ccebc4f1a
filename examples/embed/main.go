// Command embed is a Go program that uses Tandem as a library: it indexes
// a few documents with a metadata field into a new collection, with BM25
// and dense retrieval by the default encoder model, then runs a hybrid
// search under a filter on that field and prints each hit with its
// per-retriever explanation.
//
// It needs the native libraries and the default model installed where Go
// and the program find them (scripts/install.sh, see the README's "Use
// Tandem from Go"). It exits non-zero on any error, or if the expected
// document is not the top hit.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "embed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "tandem-embed")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// A new collection: two text fields searched by BM25, a keyword field
	// to filter on, and the default model for dense retrieval.
	schema := &tandem.Schema{Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "topic", Type: tandem.Keyword},
	}}
	e, err := engine.Open(dir, &engine.Options{Schema: schema, Dense: []string{encoder.DefaultModel}})
	if err != nil {
		return err
	}
	defer e.Close()

	docs := []tandem.Doc{
		{ID: "old-cat", Fields: map[string]any{"topic": "pets", "title": "Caring for an older cat",
			"text": "Senior cats need regular vet visits, a softer diet and a warm place to sleep."}},
		{ID: "dog-walks", Fields: map[string]any{"topic": "pets", "title": "Walking your dog",
			"text": "Dogs need daily walks and a lead that fits."}},
		{ID: "cat-loans", Fields: map[string]any{"topic": "finance", "title": "Cat Financial results",
			"text": "Cat Financial reported higher income from loans on its older machines."}},
		{ID: "markets", Fields: map[string]any{"topic": "finance", "title": "Markets",
			"text": "Stock prices fell as investors sold shares."}},
	}
	if _, err := e.Index(ctx, docs); err != nil {
		return err
	}

	res, err := e.Search(ctx, engine.Request{
		Text:       "caring for an elderly cat",
		Filter:     []byte(`{"term":{"topic":"pets"}}`),
		Retrievers: e.Retrievers(), // bm25 and dense:<model>
		K:          3,
	})
	if err != nil {
		return err
	}
	fmt.Printf("retrievers %v, fusion %s\n", res.Retrievers, res.Fusion)
	for i, h := range res.Hits {
		fmt.Printf("%d. %-10s %.4f  %s\n", i+1, h.ID, h.Score, h.Fields["title"])
		for _, s := range h.Sources {
			fmt.Printf("     %-28s rank %d  score %.4f  contribution %.4f\n", s.Retriever, s.Rank, s.Score, s.Contribution)
		}
	}
	if len(res.Hits) == 0 || res.Hits[0].ID != "old-cat" {
		return fmt.Errorf("top hit is not old-cat: %+v", res.Hits)
	}
	return nil
}
