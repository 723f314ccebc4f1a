package engine_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
)

// Example_hybrid embeds Tandem: a collection indexed with the default
// encoder for dense and late-interaction retrieval when it is installed
// (BM25 only otherwise, so the example runs anywhere), then a filtered
// search fusing every retriever, each hit explaining its sources.
func Example_hybrid() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tandem-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	opts := &engine.Options{}
	if _, err := encoder.Find(encoder.DefaultModel); err == nil {
		opts.Dense = []string{encoder.DefaultModel}
		opts.Late = []string{encoder.DefaultModel}
	}
	e, err := engine.Open(dir, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	corpus := `{"_id":"1","title":"Cats","text":"Cats are small felines kept as pets.","lang":"en"}
{"_id":"2","title":"Chats","text":"Les chats sont de petits félins.","lang":"fr"}
{"_id":"3","title":"Markets","text":"Stock prices fell as investors sold shares.","lang":"en"}
`
	if _, err := e.IndexJSONL(ctx, strings.NewReader(corpus), engine.JSONLOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	res, err := e.Search(ctx, engine.Request{
		Text:       "pet cats",
		Filter:     []byte(`{"term":{"lang":"en"}}`),
		Retrievers: e.Retrievers(), // bm25, plus dense:<model> and late:<model>
		K:          1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, h := range res.Hits {
		fmt.Println(h.ID, h.Fields["title"])
		// One source per retriever: its rank, raw score and share of
		// h.Score.
		fmt.Println(len(h.Sources) == len(res.Retrievers), h.Sources[0].Retriever, h.Sources[0].Rank)
	}
	// Output:
	// 1 Cats
	// true bm25 1
}

// Example_externalVectors brings vectors made elsewhere (a GPU, a hosted
// embedding service) for a model Tandem does not run: the collection
// declares the model as external, documents carry their vectors in
// Doc.Vectors, and a search carries its query vector.
func Example_externalVectors() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tandem-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	schema := tandem.DefaultSchema()
	schema.Models = []tandem.Model{{Name: "my-embedder", Dense: true, Dim: 3, Similarity: tandem.Cosine, External: true}}
	e, err := engine.Open(dir, &engine.Options{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	docs := []tandem.Doc{
		{ID: "north", Fields: map[string]any{"text": "the road north"}, Vectors: map[string]tandem.Vectors{"my-embedder": {Dense: []float32{1, 0, 0}}}},
		{ID: "east", Fields: map[string]any{"text": "the road east"}, Vectors: map[string]tandem.Vectors{"my-embedder": {Dense: []float32{0, 1, 0}}}},
	}
	if _, err := e.Index(ctx, docs); err != nil {
		fmt.Println(err)
		return
	}
	res, err := e.Search(ctx, engine.Request{
		Text:       "road",
		Retrievers: []string{"bm25", "dense:my-embedder"},
		Vectors:    map[string]tandem.Vectors{"my-embedder": {Dense: []float32{0.1, 0.9, 0}}},
		K:          1,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res.Hits[0].ID, res.Retrievers)
	// Output:
	// east [bm25 dense:my-embedder]
}

// Example_facets counts facets beside a filtered search: a disjunctive
// facet on the filtered field (the other languages a page could add), a
// keywords facet, and a histogram of a number field, over every document
// the filter matches.
func Example_facets() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "tandem-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	e, err := engine.Open(dir, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer e.Close()

	corpus := `{"_id":"1","text":"Cats purr.","lang":"en","tags":["pets","cats"],"year":2001}
{"_id":"2","text":"Les chats.","lang":"fr","tags":["cats"],"year":2004}
{"_id":"3","text":"Dogs bark.","lang":"en","tags":["pets","dogs"],"year":2012}
{"_id":"4","text":"Die Hunde.","lang":"de","tags":["dogs"],"year":1999}
`
	if _, err := e.IndexJSONL(ctx, strings.NewReader(corpus), engine.JSONLOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	res, err := e.Search(ctx, engine.Request{
		Filter: []byte(`{"and":[{"term":{"lang":"en"}},{"range":{"year":{"gte":2000}}}]}`),
		Facets: []engine.FacetRequest{
			{Field: "lang", Disjunctive: true},
			{Field: "tags", Size: 2},
			{Field: "year", Interval: 10},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range res.Facets {
		fmt.Printf("%s over %d documents:", f.Field, f.Docs)
		for _, v := range f.Values {
			fmt.Printf(" %v=%d", v.Value, v.Count)
		}
		for _, b := range f.Buckets {
			fmt.Printf(" [%v, %v)=%d", b.From, b.To, b.Count)
		}
		if f.OtherValues > 0 {
			fmt.Printf(" (%d more)", f.OtherValues)
		}
		fmt.Println()
	}
	// Output:
	// lang over 3 documents: en=2 fr=1
	// tags over 2 documents: pets=2 cats=1 (1 more)
	// year over 2 documents: [2000, 2010)=1 [2010, 2020)=1
}
