package evaluate

import (
	"os"
	"testing"
)

// BenchmarkEvaluate scores the two committed fixture runs; reports queries/op.
func BenchmarkEvaluate(b *testing.B) {
	qrels, err := LoadQrels("testdata/qrels.tsv")
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Open("testdata/run_a.trec")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	run, err := ReadTREC(f)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Evaluate(qrels, run); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(qrels)), "queries/op")
}
