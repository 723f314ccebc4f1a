package fusion_test

import (
	"fmt"

	"github.com/tandemsearch/tandem/fusion"
)

func ExampleFuse() {
	m, err := fusion.ParseMethod("wrrf")
	if err != nil {
		panic(err)
	}
	hits, err := fusion.Fuse([]fusion.List{
		{Name: "bm25", Items: []fusion.Item{{Doc: 7, Score: 12.1}, {Doc: 3, Score: 9.5}}},
		{Name: "dense", Weight: 2, Items: []fusion.Item{{Doc: 3, Score: 0.82}, {Doc: 9, Score: 0.80}}},
	}, fusion.Options{Method: m, K: 1})
	if err != nil {
		panic(err)
	}
	for _, h := range hits {
		fmt.Printf("doc %d score %.4f:", h.Doc, h.Score)
		for i, s := range h.Sources {
			fmt.Printf(" [list %d rank %d +%.4f]", i, s.Rank, s.Contribution)
		}
		fmt.Println()
	}
	// Output:
	// doc 3 score 1.3333: [list 0 rank 2 +0.3333] [list 1 rank 1 +1.0000]
	// doc 9 score 0.6667: [list 0 rank 0 +0.0000] [list 1 rank 2 +0.6667]
	// doc 7 score 0.5000: [list 0 rank 1 +0.5000] [list 1 rank 0 +0.0000]
}
