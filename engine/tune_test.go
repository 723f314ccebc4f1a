package engine

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/tandemsearch/tandem/evaluate"
)

func TestWeightVectors(t *testing.T) {
	got := weightVectors([]float64{1, 2}, 3)
	// 2³ assignments, of which (2,2,2) is a multiple of (1,1,1).
	if len(got) != 7 {
		t.Fatalf("%d vectors, want 7: %v", len(got), got)
	}
	// (0.5,1) over two: (0.5,0.5) repeats (1,1).
	if got := weightVectors([]float64{0.5, 1}, 2); len(got) != 3 {
		t.Fatalf("%d vectors, want 3: %v", len(got), got)
	}
}

// TestTuneMatchesSearch checks that the offline fusion Tune scores is the
// fusion Search runs: every configuration's report equals Evaluate's with
// the configuration's request.
func TestTuneMatchesSearch(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	e := openT(t, t.TempDir(), modelOpts())
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	// Judgments the retrievers disagree on, so configurations differ.
	queries := []evaluate.Query{
		{ID: "q1", Text: "kitten"}, {ID: "q2", Text: "small pets"},
		{ID: "q3", Text: "animals that hunt"}, {ID: "q4", Text: "prices of weather insurance"},
		{ID: "q5", Text: "storm damage to arteries"}, {ID: "q6", Text: "unjudged query"},
	}
	qrels := evaluate.Qrels{
		"q1": {"chat": 2, "cat": 1}, "q2": {"dog": 2, "chat": 1, "cat": 0},
		"q3": {"dog": 1, "heart": 1}, "q4": {"rain": 2, "stock": 1},
		"q5": {"heart": 2, "rain": 1},
	}
	rets := e.Retrievers()
	var progress [][2]int
	tr := TuneRequest{Retrievers: rets, Weights: []float64{1, 2}, Depths: []int{4, 6}, K: 4,
		Progress: func(done, total int) { progress = append(progress, [2]int{done, total}) }}
	results, err := e.Tune(ctx, queries, qrels, tr)
	if err != nil {
		t.Fatal(err)
	}
	// Five judged queries (q6 is not judged): progress after each but the
	// first, ending at 5 of 5.
	if len(progress) != 5 || progress[4] != [2]int{5, 5} {
		t.Errorf("progress calls %v", progress)
	}
	// 3 unweighted methods × 2 depths + 5 weighted × 2 depths × 7 vectors.
	if want := 3*2 + 5*2*7; len(results) != want {
		t.Fatalf("%d configurations, want %d", len(results), want)
	}
	for i := 1; i < len(results); i++ {
		if results[i].Value > results[i-1].Value {
			t.Fatalf("results not best first at %d: %v > %v", i, results[i].Value, results[i-1].Value)
		}
	}
	for i, r := range results {
		if r.Value != r.Report.Mean.NDCG10 {
			t.Fatalf("%s: Value %v, nDCG@10 %v", r, r.Value, r.Report.Mean.NDCG10)
		}
		if i%5 != 0 && i != len(results)-1 {
			continue // a spread of configurations, best and worst included
		}
		res, err := e.Evaluate(ctx, queries, qrels, r.Request(Request{}, rets, tr.K))
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range res.Report.PerQuery {
			got := r.Report.PerQuery[q]
			if math.Abs(got.NDCG10-want.NDCG10) > 1e-12 || math.Abs(got.MAP-want.MAP) > 1e-12 {
				t.Errorf("%s, query %s: tuned nDCG@10 %v MAP %v, searched %v %v", r, q, got.NDCG10, got.MAP, want.NDCG10, want.MAP)
			}
		}
	}
	if results[0].Value == results[len(results)-1].Value {
		t.Errorf("every configuration scores %v: the queries do not tell them apart", results[0].Value)
	}
	t.Logf("best %s: nDCG@10 %.4f; worst %s: %.4f", results[0], results[0].Value, results[len(results)-1], results[len(results)-1].Value)

	for name, bad := range map[string]TuneRequest{
		"one retriever": {Retrievers: rets[:1]},
		"metric":        {Retrievers: rets, Metric: "p@5"},
		"method":        {Retrievers: rets, Methods: []string{"borda"}},
		"weight":        {Retrievers: rets, Weights: []float64{0}},
		"depth below k": {Retrievers: rets, Depths: []int{5}, K: 10},
		"retriever":     {Retrievers: []string{"bm25", "dense:nope"}},
	} {
		if _, err := e.Tune(ctx, queries, qrels, bad); err == nil {
			t.Errorf("%s: no error", name)
		} else if name != "retriever" && !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v does not wrap ErrBadRequest", name, err)
		}
	}
}
