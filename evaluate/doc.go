// Package evaluate reads BEIR queries and relevance judgments (qrels), reads
// and writes TREC run files, and scores a run with the metrics trec_eval
// reports: nDCG@10, MRR@10, Recall@100 and MAP.
//
// The main types are [Qrels] (query id → doc id → graded relevance), [Run]
// (query id → ranked results) and [Report] (per-query and mean [Metrics]).
//
// # Usage
//
//	queries, err := evaluate.LoadQueries("scifact/queries.jsonl")
//	qrels, err := evaluate.LoadQrels("scifact/qrels/test.tsv")
//	run := evaluate.Run{}
//	for _, q := range queries {
//		run[q.ID] = search(q.Text) // []evaluate.Result
//	}
//	report, err := evaluate.Evaluate(qrels, run)
//	json.NewEncoder(os.Stdout).Encode(report.Mean) // {"ndcg@10":…,"mrr@10":…,…}
//
// # Invariants
//
// The metrics follow trec_eval (and so pytrec_eval and BEIR), which the tests
// check against a committed Python cross-check in scripts/crosscheck:
//
//   - A run is ranked by score descending, then by doc id descending (byte
//     order) on ties, whatever the order of the slice. This is trec_eval's
//     order; the rank column of a TREC file is ignored for the same reason.
//   - A judgment with grade ≤ 0 is not relevant and has gain 0.
//   - The mean is taken over every query in the qrels (trec_eval -c): a query
//     the run has no results for scores 0, and so does a query whose
//     judgments are all non-relevant. Queries in the run but not in the qrels
//     are ignored. [Report] counts each case so a caller can see them.
package evaluate
