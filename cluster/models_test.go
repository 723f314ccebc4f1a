package cluster

import (
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestReplicasShareModel checks that a node's shard replicas, one engine
// each, share one load of their model (engine.LoadedModels), and still
// encode and search with it.
func TestReplicasShareModel(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	ctx := testtime.Context(t)
	base := engine.LoadedModels()
	nodes := testCluster(t, 1, engine.Options{NoSync: true})
	spec := CollectionSpec{Name: "shared", Shards: 3, Replicas: 1, Schema: testSchema(), Dense: []string{encoder.DefaultModel}}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	got := engine.LoadedModels()
	if got.Loads != base.Loads+1 || got.Models != base.Models+1 || got.Encoders != base.Encoders+3 {
		t.Fatalf("3 replicas of one model: loaded models %+v, want %d load, %d model, %d encoders more than %+v", got, 1, 1, 3, base)
	}
	docs := []tandem.Doc{
		{ID: "cat", Fields: map[string]any{"title": "Cats", "text": "Domestic cats are small felines that purr and hunt mice."}},
		{ID: "dog", Fields: map[string]any{"title": "Dogs", "text": "Dogs are loyal canines that bark and fetch sticks."}},
		{ID: "rain", Fields: map[string]any{"title": "Weather", "text": "Heavy rain and thunderstorms are expected this weekend."}},
		{ID: "heart", Fields: map[string]any{"title": "Cardiology", "text": "Myocardial infarction is caused by blocked coronary arteries."}},
	}
	r, err := nodes[0].Index(ctx, "shared", docs)
	if err != nil {
		t.Fatal(err)
	}
	res, err := nodes[0].Search(ctx, "shared", engine.Request{Text: "puppy", Retrievers: []string{"dense"}, K: 2}, &SearchOptions{MinPosition: r.Position})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Hits) == 0 || res.Hits[0].ID != "dog" {
		t.Fatalf("dense search over 3 shards: hits %v, want dog first", res.Hits)
	}
	if err := nodes[0].Close(); err != nil {
		t.Fatal(err)
	}
	if got := engine.LoadedModels(); got.Models != base.Models || got.Encoders != base.Encoders {
		t.Fatalf("after the node closed: loaded models %+v, want %+v", got, base)
	}
}
