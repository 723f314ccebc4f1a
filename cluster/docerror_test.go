package cluster

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// A cluster collection's schema is strict (CreateCollection), so every
// document the store could refuse is refused before any shard applies
// it: Prepare checks it against the schema, and the DocError names its
// position in the caller's input, not in a shard's entry. With SkipBad
// only that document is skipped.
func TestRefusedDocumentNamesItsInputPosition(t *testing.T) {
	nodes := testCluster(t, 1, engine.Options{})
	ctx := testtime.Context(t)
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text}}} // not strict
	schema.Fill()
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 2, Replicas: 1, Schema: schema}); err != nil {
		t.Fatal(err)
	}
	// Two ids on shard 0, then two on shard 1: the bad document is the
	// 3rd of the input and the 1st of shard 1's entry.
	var on [2][]string
	for i := 0; len(on[0]) < 2 || len(on[1]) < 2; i++ {
		id := fmt.Sprintf("d%d", i)
		if s := ShardOf(id, 2); len(on[s]) < 2 {
			on[s] = append(on[s], id)
		}
	}
	docs := []tandem.Doc{
		{ID: on[0][0], Fields: map[string]any{"text": "a"}},
		{ID: on[0][1], Fields: map[string]any{"text": "b"}},
		{ID: on[1][0], Fields: map[string]any{"text": "c", "n": 1.0}}, // n: not in the schema
		{ID: on[1][1], Fields: map[string]any{"text": "d"}},
	}
	stream := func() func() (tandem.Doc, error) {
		i := 0
		return func() (tandem.Doc, error) {
			if i == len(docs) {
				return tandem.Doc{}, io.EOF
			}
			i++
			return docs[i-1], nil
		}
	}
	coll, err := Catalog{Node: nodes[0]}.Open("c")
	if err != nil {
		t.Fatal(err)
	}
	_, err = coll.IndexStream(ctx, stream(), engine.StreamOptions{})
	var de *engine.DocError
	if !errors.As(err, &de) || de.Index != 2 || de.ID != on[1][0] || !errors.Is(err, tandem.ErrUnknownField) {
		t.Fatalf("IndexStream: %v, want a DocError at input position 2, id %s, for an unknown field", err, on[1][0])
	}
	var skipped []*engine.DocError
	p, err := coll.IndexStream(ctx, stream(), engine.StreamOptions{SkipBad: true, OnSkip: func(err error) {
		var de *engine.DocError
		if errors.As(err, &de) {
			skipped = append(skipped, de)
		}
	}})
	if err != nil || p.Docs != 3 || p.Skipped != 1 || len(skipped) != 1 || skipped[0].Index != 2 || skipped[0].ID != on[1][0] {
		t.Fatalf("IndexStream with SkipBad: %+v, %v, skipped %v; want 3 written and input position 2 skipped", p, err, skipped)
	}
	if got := coll.Count(); got != 3 {
		t.Errorf("%d documents stored, want 3", got)
	}
}
