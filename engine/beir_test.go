package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tandemsearch/tandem/evaluate"
)

// beirDir returns ../shared/data/<name> relative to the module root, or
// skips the test.
func beirDir(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join("..", "..", "shared", "data", name)
	if _, err := os.Stat(filepath.Join(path, "corpus.jsonl")); err != nil {
		t.Skipf("skipping: %s not found (needs ../shared beside the repo)", path)
	}
	return path
}

// indexBEIR indexes ../shared/data/<name> into a new collection (BM25
// only) and returns it with the collection's test queries and qrels.
func indexBEIR(t testing.TB, name string, skipBad bool) (*Engine, []evaluate.Query, evaluate.Qrels) {
	t.Helper()
	data := beirDir(t, name)
	e := openT(t, t.TempDir(), &Options{NoSync: true})
	f, err := os.Open(filepath.Join(data, "corpus.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := e.IndexJSONL(context.Background(), f, JSONLOptions{SkipBad: skipBad}); err != nil {
		t.Fatal(err)
	}
	queries, qrels := beirTest(t, data)
	return e, queries, qrels
}

// beirTest loads a BEIR collection's queries and its test qrels.
func beirTest(t testing.TB, data string) ([]evaluate.Query, evaluate.Qrels) {
	t.Helper()
	queries, err := evaluate.LoadQueries(filepath.Join(data, "queries.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	qrels, err := evaluate.LoadQrels(filepath.Join(data, "qrels", "test.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	return queries, qrels
}

func evalBEIR(t testing.TB, name string, skipBad bool) evaluate.Metrics {
	e, queries, qrels := indexBEIR(t, name, skipBad)
	res, err := e.Evaluate(context.Background(), queries, qrels, Request{Retrievers: []string{"bm25"}, K: 100})
	if err != nil {
		t.Fatal(err)
	}
	rep := res.Report
	t.Logf("%s bm25: nDCG@10 %.4f MRR@10 %.4f R@100 %.4f MAP %.4f over %d queries",
		name, rep.Mean.NDCG10, rep.Mean.MRR10, rep.Mean.Recall100, rep.Mean.MAP, rep.Queries)
	return rep.Mean
}

// TestSciFactBM25 is acceptance criterion 1: BM25 over the default BEIR
// schema reaches nDCG@10 ≥ 0.66 on SciFact.
func TestSciFactBM25(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping real-data evaluation in short mode")
	}
	m := evalBEIR(t, "scifact", false)
	if m.NDCG10 < 0.66 {
		t.Errorf("SciFact nDCG@10 = %.4f, want ≥ 0.66", m.NDCG10)
	}
	if m.Recall100 < 0.90 {
		t.Errorf("SciFact Recall@100 = %.4f, want ≥ 0.90", m.Recall100)
	}
}

// TestCranfieldBM25 guards the Cranfield figures (two documents of the
// corpus are empty and skipped).
func TestCranfieldBM25(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping real-data evaluation in short mode")
	}
	m := evalBEIR(t, "cranfield", true)
	if m.NDCG10 < 0.34 {
		t.Errorf("Cranfield nDCG@10 = %.4f, want ≥ 0.34", m.NDCG10)
	}
}

// BenchmarkIndexSciFact measures ingestion of the SciFact corpus.
func BenchmarkIndexSciFact(b *testing.B) {
	ctx := context.Background()
	data := beirDir(b, "scifact")
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		e, err := Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		f, _ := os.Open(filepath.Join(data, "corpus.jsonl"))
		b.StartTimer()
		p, err := e.IndexJSONL(ctx, f, JSONLOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		f.Close()
		e.Close()
		b.ReportMetric(float64(p.Docs)/p.Elapsed.Seconds(), "docs/s")
		b.StartTimer()
	}
}

// BenchmarkSearchSciFact measures BM25 query latency on SciFact (top 100).
func BenchmarkSearchSciFact(b *testing.B) {
	ctx := context.Background()
	data := beirDir(b, "scifact")
	e, err := Open(b.TempDir(), &Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	f, _ := os.Open(filepath.Join(data, "corpus.jsonl"))
	if _, err := e.IndexJSONL(ctx, f, JSONLOptions{}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	queries, err := evaluate.LoadQueries(filepath.Join(data, "queries.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := e.Search(ctx, Request{Text: queries[i%len(queries)].Text, K: 100, IDsOnly: true}); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(i)/b.Elapsed().Seconds(), "queries/s")
}
