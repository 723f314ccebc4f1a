package cluster

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// TestNodeWithoutReplica writes and searches through a node that holds no
// replica of the collection (as a node that has just joined, or been
// drained): it checks documents and encodes queries with its coordinator
// engine, and reads the shards from the nodes that hold them.
func TestNodeWithoutReplica(t *testing.T) {
	nodes := testCluster(t, 3, engine.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 2, Replicas: 1, Schema: testSchema()}); err != nil {
		t.Fatal(err)
	}
	bare := nodes[2]
	c, err := bare.collection("c")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.replicas) != 0 {
		t.Fatalf("%s holds %d replicas, want none", bare.ID(), len(c.replicas))
	}
	var docs []tandem.Doc
	for i := range 40 {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"text": fmt.Sprintf("note %d about wings and flow %d", i, i%7)}})
	}
	wr, err := bare.Index(ctx, "c", docs)
	if err != nil {
		t.Fatal(err)
	}
	if wr.Put != 40 {
		t.Fatalf("put %d, want 40", wr.Put)
	}
	if _, err := bare.Delete(ctx, "c", []string{"d3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Index(ctx, "c", []tandem.Doc{{ID: "bad", Fields: map[string]any{"nope": 1}}}); err == nil {
		t.Error("a document with an undeclared field was accepted through the node without a replica")
	}
	req := engine.Request{Text: "wings flow 3", K: 50}
	got, err := bare.Search(ctx, "c", req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := nodes[0].Search(ctx, "c", req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Hits) != 39 {
		t.Errorf("%d hits through %s, want the 39 live documents", len(got.Hits), bare.ID())
	}
	if d := sameRanking(got.Hits, want.Hits); d != "" {
		t.Errorf("through %s against n0: %s", bare.ID(), d)
	}
	col, err := Catalog{Node: bare}.Open("c")
	if err != nil {
		t.Fatal(err)
	}
	if n := col.Count(); n != 39 {
		t.Errorf("count through %s: %d, want 39", bare.ID(), n)
	}
	if len(col.Retrievers()) == 0 {
		t.Error("no retrievers through the node without a replica")
	}
}
