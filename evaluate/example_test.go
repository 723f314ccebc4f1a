package evaluate_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/tandemsearch/tandem/evaluate"
)

func ExampleEvaluate() {
	qrels, err := evaluate.ReadQrels(strings.NewReader(
		"query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq2\td9\t1\n"))
	if err != nil {
		panic(err)
	}
	run := evaluate.Run{
		// Ranked by score, not slice order: d1, then d2 — the ideal
		// order. q2 has no results and scores 0 on every metric.
		"q1": {{DocID: "d2", Score: 0.5}, {DocID: "d1", Score: 0.9}},
	}
	rep, err := evaluate.Evaluate(qrels, run)
	if err != nil {
		panic(err)
	}
	fmt.Println("queries:", rep.Queries, "without results:", rep.NoResults)
	json.NewEncoder(os.Stdout).Encode(rep.Mean) // the keys tandem eval prints
	// Output:
	// queries: 2 without results: 1
	// {"ndcg@10":0.5,"mrr@10":0.5,"recall@100":0.5,"map":0.5}
}
