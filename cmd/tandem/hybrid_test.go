package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
)

func TestHybridCommands(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "coll")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"_id":"cat","title":"Cats","text":"Domestic cats are small felines that purr.","lang":"en"}
{"_id":"chat","title":"Chats","text":"Les chats sont de petits félins.","lang":"fr"}
{"_id":"stock","title":"Markets","text":"Equity prices fell as investors sold shares.","lang":"en"}
{"_id":"heart","title":"Cardiology","text":"Myocardial infarction follows blocked coronary arteries.","lang":"en"}
`), 0o644)
	code, out, errs := tandemRun(t, "index", "--dir", dir, "--corpus", corpus)
	if code != 0 || !strings.Contains(errs, "late:"+encoder.DefaultModel) {
		t.Fatalf("index: %d %q %q", code, out, errs)
	}
	code, out, errs = tandemRun(t, "search", "--dir", dir, "--mode", "hybrid", "--fusion", "minmax", "--filter", `{"term":{"lang":"en"}}`, "-k", "2", "--json", "kitten")
	if code != 0 {
		t.Fatalf("search: %d %s", code, errs)
	}
	var res struct {
		Hits []struct {
			ID      string
			Fields  map[string]any
			Sources []struct {
				Retriever    string
				Rank         int
				Contribution float64
			}
		}
		Retrievers []string
		Fusion     string
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("search --json %q: %v", out, err)
	}
	if res.Fusion != "minmax" || len(res.Retrievers) != 3 || len(res.Hits) != 2 || res.Hits[0].ID != "cat" {
		t.Fatalf("search --json: %+v", res)
	}
	for _, h := range res.Hits {
		if h.Fields["lang"] != "en" || len(h.Sources) != 3 {
			t.Errorf("hit %+v: want lang en and 3 sources", h)
		}
	}
	code, out, errs = tandemRun(t, "search", "--dir", dir, "--mode", "hybrid", "kitten")
	if code != 0 || !strings.Contains(out, "fused with "+engine.DefaultFusion) || !strings.Contains(out, "contribution") || !strings.Contains(out, "dense:"+encoder.DefaultModel) {
		t.Fatalf("search: %d %q %q", code, out, errs)
	}
	if code, _, errs := tandemRun(t, "search", "--dir", dir, "--mode", "sparse", "x"); code != 1 || !strings.Contains(errs, "unknown retriever") {
		t.Errorf("bad mode: %d %q", code, errs)
	}

	queries := filepath.Join(tmp, "queries.jsonl")
	qrels := filepath.Join(tmp, "qrels.tsv")
	runs := filepath.Join(tmp, "runs")
	os.WriteFile(queries, []byte(`{"_id":"q1","text":"kitten"}`+"\n"+`{"_id":"q2","text":"heart attack"}`+"\n"), 0o644)
	os.WriteFile(qrels, []byte("query-id\tcorpus-id\tscore\nq1\tcat\t1\nq2\theart\t1\n"), 0o644)
	code, out, errs = tandemRun(t, "eval", "--dir", dir, "--queries", queries, "--qrels", qrels, "--mode", "bm25,dense,late,hybrid", "--fusion", "rrf,dbsf", "--runs", runs)
	if code != 0 {
		t.Fatalf("eval: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 || !strings.Contains(lines[0], "nDCG@10") || !strings.Contains(lines[0], "p50 ms") {
		t.Fatalf("eval table:\n%s", out)
	}
	for _, l := range lines[2:] { // dense, late and both fusions find both
		if f := strings.Fields(l); f[1] != "1.0000" {
			t.Errorf("eval row %q: want nDCG@10 1.0000", l)
		}
	}
	if _, err := os.Stat(filepath.Join(runs, "bm25.trec")); err != nil { // empty: no word in common
		t.Error(err)
	}
	for _, f := range []string{"dense.trec", "late.trec", "hybrid_rrf.trec", "hybrid_dbsf.trec"} {
		if b, err := os.ReadFile(filepath.Join(runs, f)); err != nil || !strings.Contains(string(b), "q1 Q0 cat 1 ") {
			t.Errorf("run file %s: %v %q", f, err, b)
		}
	}
	// tune: q1 to tune on, q2 held out; the holdout must not overlap.
	train := filepath.Join(tmp, "train.tsv")
	os.WriteFile(train, []byte("query-id\tcorpus-id\tscore\nq1\tcat\t1\n"), 0o644)
	test := filepath.Join(tmp, "test.tsv")
	os.WriteFile(test, []byte("query-id\tcorpus-id\tscore\nq2\theart\t1\n"), 0o644)
	code, out, errs = tandemRun(t, "tune", "--dir", dir, "--queries", queries, "--qrels", train, "--holdout", test, "--fusion", "rrf,minmax", "--weights", "1,2", "--depths", "100", "--top", "3")
	if code != 0 {
		t.Fatalf("tune: %d %s", code, errs)
	}
	if lines := strings.Split(out, "\n"); len(lines) < 4 || !strings.Contains(lines[0], "configuration") || !strings.Contains(lines[1], "1.0000") ||
		!strings.Contains(out, "scored on "+test+" (1 queries") || !strings.Contains(out, "nDCG@10 1.0000") {
		t.Errorf("tune output:\n%s", out)
	}
	if code, _, errs := tandemRun(t, "tune", "--dir", dir, "--queries", queries, "--qrels", qrels, "--holdout", test); code != 1 || !strings.Contains(errs, "must not overlap") {
		t.Errorf("overlapping holdout: %d %q", code, errs)
	}
	code, out, _ = tandemRun(t, "stats", "--dir", dir)
	if code != 0 || !strings.Contains(out, "documents   4") || !strings.Contains(out, "tokens") || !strings.Contains(out, "model       "+encoder.DefaultModel) {
		t.Errorf("stats: %d %s", code, out)
	}
}
