package evaluate

import (
	"math"
	"slices"
)

// Cut-offs of the reported metrics.
const (
	ndcgDepth   = 10
	mrrDepth    = 10
	recallDepth = 100
)

// Metrics holds the scores of one query, or their mean over queries.
type Metrics struct {
	// NDCG10 is trec_eval's ndcg_cut_10: gain is the grade (0 when ≤ 0),
	// discount log2(rank+1), normalised by the ideal ordering of the qrels.
	NDCG10 float64 `json:"ndcg@10"`
	// MRR10 is 1/rank of the first relevant doc in the top 10, else 0.
	MRR10 float64 `json:"mrr@10"`
	// Recall100 is the share of the relevant docs found in the top 100.
	Recall100 float64 `json:"recall@100"`
	// MAP is trec_eval's map: the sum of precision at each relevant doc
	// retrieved (at any depth), divided by the number of relevant docs.
	MAP float64 `json:"map"`
}

// Report is the outcome of [Evaluate].
type Report struct {
	// Mean averages PerQuery over every query in the qrels.
	Mean Metrics `json:"mean"`
	// PerQuery has one entry per query in the qrels.
	PerQuery map[string]Metrics `json:"per_query"`
	// Queries is the number of queries in the qrels, the divisor of Mean.
	Queries int `json:"queries"`
	// NoResults counts qrels queries with no results in the run (scored 0).
	NoResults int `json:"no_results"`
	// NoRelevant counts qrels queries with no judgment > 0 (scored 0).
	NoRelevant int `json:"no_relevant"`
	// Unjudged counts run queries absent from the qrels (ignored).
	Unjudged int `json:"unjudged"`
}

// Evaluate scores run against qrels. It fails only if the run has a doc
// twice for one query or a NaN score, which trec_eval would reject or could
// not order.
func Evaluate(qrels Qrels, run Run) (Report, error) {
	rep := Report{PerQuery: make(map[string]Metrics, len(qrels)), Queries: len(qrels)}
	for qid, results := range run {
		if err := checkResults(qid, results); err != nil {
			return Report{}, err
		}
		if _, ok := qrels[qid]; !ok {
			rep.Unjudged++
		}
	}
	for qid, judged := range qrels {
		results := run[qid]
		if len(results) == 0 {
			rep.NoResults++
		}
		m, numRel := score(judged, results)
		if numRel == 0 {
			rep.NoRelevant++
		}
		rep.PerQuery[qid] = m
	}
	// Sum in query-id order so the mean does not depend on map order.
	qids := make([]string, 0, len(qrels))
	for q := range qrels {
		qids = append(qids, q)
	}
	slices.Sort(qids)
	for _, q := range qids {
		m := rep.PerQuery[q]
		rep.Mean.NDCG10 += m.NDCG10
		rep.Mean.MRR10 += m.MRR10
		rep.Mean.Recall100 += m.Recall100
		rep.Mean.MAP += m.MAP
	}
	if n := float64(len(qrels)); n > 0 {
		rep.Mean.NDCG10 /= n
		rep.Mean.MRR10 /= n
		rep.Mean.Recall100 /= n
		rep.Mean.MAP /= n
	}
	return rep, nil
}

// score computes the metrics of one query and returns its number of
// relevant docs.
func score(judged map[string]int, results []Result) (Metrics, int) {
	var gains []float64 // of the relevant docs, for the ideal DCG
	for _, g := range judged {
		if g > 0 {
			gains = append(gains, float64(g))
		}
	}
	numRel := len(gains)
	if numRel == 0 {
		return Metrics{}, 0
	}
	slices.SortFunc(gains, func(a, b float64) int { return -cmpFloat(a, b) })
	var ideal float64
	for i, g := range gains[:min(len(gains), ndcgDepth)] {
		ideal += g / math.Log2(float64(i+2))
	}

	var m Metrics
	var dcg, precSum float64
	relSoFar, relIn100 := 0, 0
	for i, r := range rank(results) {
		g := judged[r.DocID]
		if g <= 0 {
			continue
		}
		relSoFar++
		precSum += float64(relSoFar) / float64(i+1)
		if i < ndcgDepth {
			dcg += float64(g) / math.Log2(float64(i+2))
		}
		if i < mrrDepth && m.MRR10 == 0 {
			m.MRR10 = 1 / float64(i+1)
		}
		if i < recallDepth {
			relIn100++
		}
	}
	m.NDCG10 = dcg / ideal
	m.Recall100 = float64(relIn100) / float64(numRel)
	m.MAP = precSum / float64(numRel)
	return m, numRel
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
