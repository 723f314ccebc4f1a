package evaluate

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// close reports whether a and b agree to 1e-9.
func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9 }

func metricsNear(a, b Metrics) bool {
	return near(a.NDCG10, b.NDCG10) && near(a.MRR10, b.MRR10) &&
		near(a.Recall100, b.Recall100) && near(a.MAP, b.MAP)
}

// TestHandComputed pins each metric to values worked out by hand.
func TestHandComputed(t *testing.T) {
	log3, log4, log5 := math.Log2(3), math.Log2(4), math.Log2(5)
	tests := []struct {
		name   string
		judged map[string]int
		run    []Result
		want   Metrics
	}{
		{
			name:   "perfect single",
			judged: map[string]int{"a": 1},
			run:    []Result{{"a", 1}},
			want:   Metrics{1, 1, 1, 1},
		},
		{
			// Ranked: x(3) a(2) b(1); gains 0,2,1; ideal a,b = 2 + 1/log3.
			name:   "graded with a miss first",
			judged: map[string]int{"a": 2, "b": 1, "c": 0},
			run:    []Result{{"b", 1}, {"a", 2}, {"x", 3}},
			want: Metrics{
				NDCG10:    (2/log3 + 1/log4) / (2 + 1/log3),
				MRR10:     0.5,
				Recall100: 1,
				MAP:       (1.0/2 + 2.0/3) / 2,
			},
		},
		{
			// Equal scores: trec_eval puts the larger doc id first, so
			// z(0) ranks above a(1); negative grades count as 0.
			name:   "ties by doc id descending, negative grade",
			judged: map[string]int{"a": 1, "z": -1},
			run:    []Result{{"a", 5}, {"z", 5}},
			want:   Metrics{NDCG10: 1 / log3, MRR10: 0.5, Recall100: 1, MAP: 0.5},
		},
		{
			// Two relevant, one retrieved at rank 4 of 4.
			name:   "half recall",
			judged: map[string]int{"a": 3, "b": 3},
			run:    []Result{{"p", 4}, {"q", 3}, {"r", 2}, {"a", 1}},
			want: Metrics{
				NDCG10:    (3 / log5) / (3 + 3/log3),
				MRR10:     0.25,
				Recall100: 0.5,
				MAP:       0.25 / 2,
			},
		},
		{
			name:   "no results",
			judged: map[string]int{"a": 1},
			want:   Metrics{},
		},
		{
			name:   "no relevant judgments",
			judged: map[string]int{"a": 0},
			run:    []Result{{"a", 1}},
			want:   Metrics{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := score(tt.judged, tt.run)
			if !metricsNear(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestCutoffs puts the first relevant doc at rank 11 and another at rank 101.
func TestCutoffs(t *testing.T) {
	judged := map[string]int{"r11": 1, "r101": 1}
	var run []Result
	for i := 1; i <= 101; i++ {
		id := "n"
		switch i {
		case 11:
			id = "r11"
		case 101:
			id = "r101"
		}
		if id == "n" {
			id = "n" + string(rune('A'+i/26)) + string(rune('a'+i%26))
		}
		run = append(run, Result{id, float64(1000 - i)})
	}
	got, _ := score(judged, run)
	want := Metrics{NDCG10: 0, MRR10: 0, Recall100: 0.5, MAP: (1.0/11 + 2.0/101) / 2}
	if !metricsNear(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestEvaluateMeanAndCounts(t *testing.T) {
	qrels := Qrels{
		"q1": {"a": 1},
		"q2": {"b": 1},         // no results: 0
		"q3": {"c": 0},         // nothing relevant: 0
		"q4": {"d": 1, "e": 1}, // half
	}
	run := Run{
		"q1": {{"a", 1}},
		"q3": {{"c", 1}},
		"q4": {{"d", 1}},
		"q9": {{"z", 1}}, // not judged: ignored
	}
	rep, err := Evaluate(qrels, run)
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{
		NDCG10:    (1 + 1/(1+1/math.Log2(3))) / 4,
		MRR10:     2.0 / 4,
		Recall100: 1.5 / 4,
		MAP:       1.5 / 4,
	}
	if !metricsNear(rep.Mean, want) {
		t.Errorf("mean %+v, want %+v", rep.Mean, want)
	}
	if rep.Queries != 4 || rep.NoResults != 1 || rep.NoRelevant != 1 || rep.Unjudged != 1 {
		t.Errorf("counts %+v", rep)
	}
	if len(rep.PerQuery) != 4 {
		t.Errorf("per-query has %d entries, want 4", len(rep.PerQuery))
	}
}

func TestEvaluateRejects(t *testing.T) {
	for name, run := range map[string]Run{
		"duplicate": {"q": {{"a", 1}, {"a", 2}}},
		"nan":       {"q": {{"a", math.NaN()}}},
	} {
		if _, err := Evaluate(Qrels{"q": {"a": 1}}, run); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestMetricsJSONKeys(t *testing.T) {
	b, err := json.Marshal(Metrics{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"ndcg@10":1,"mrr@10":2,"recall@100":3,"map":4}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

// TestCrossCheck compares with pytrec_eval's numbers, written by
// scripts/crosscheck/eval_expected.py into testdata/expected.json.
func TestCrossCheck(t *testing.T) {
	qrels, err := LoadQrels("testdata/qrels.tsv")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/expected.json")
	if err != nil {
		t.Fatal(err)
	}
	var expected map[string]struct {
		Mean     Metrics            `json:"mean"`
		PerQuery map[string]Metrics `json:"per_query"`
	}
	if err := json.Unmarshal(raw, &expected); err != nil {
		t.Fatal(err)
	}
	if len(expected) < 2 {
		t.Fatalf("expected.json has %d runs, want at least 2", len(expected))
	}
	for name, exp := range expected {
		t.Run(name, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			run, err := ReadTREC(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Evaluate(qrels, run)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.PerQuery) != len(exp.PerQuery) {
				t.Errorf("%d queries, want %d", len(rep.PerQuery), len(exp.PerQuery))
			}
			for q, want := range exp.PerQuery {
				if got := rep.PerQuery[q]; !metricsNear(got, want) {
					t.Errorf("query %s: got %+v, want %+v", q, got, want)
				}
			}
			if !metricsNear(rep.Mean, exp.Mean) {
				t.Errorf("mean: got %+v, want %+v", rep.Mean, exp.Mean)
			}
		})
	}
}

// TestSciFact reads the shared BEIR SciFact files when they are present.
func TestSciFact(t *testing.T) {
	dir := filepath.Join("..", "..", "shared", "data", "scifact")
	if _, err := os.Stat(dir); err != nil {
		t.Skipf("SciFact not found at %s (shared test data is not in the repository): %v", dir, err)
	}
	queries, err := LoadQueries(filepath.Join(dir, "queries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	qrels, err := LoadQrels(filepath.Join(dir, "qrels", "test.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	// BEIR SciFact: 1109 queries, 300 test queries.
	if len(queries) != 1109 || len(qrels) != 300 {
		t.Errorf("got %d queries and %d qrels queries, want 1109 and 300", len(queries), len(qrels))
	}
	// The qrels as a run are a perfect run.
	run := Run{}
	for q, judged := range qrels {
		for d, g := range judged {
			run[q] = append(run[q], Result{d, float64(g)})
		}
	}
	rep, err := Evaluate(qrels, run)
	if err != nil {
		t.Fatal(err)
	}
	if !metricsNear(rep.Mean, Metrics{1, 1, 1, 1}) {
		t.Errorf("perfect run scored %+v", rep.Mean)
	}
}
