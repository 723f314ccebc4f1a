package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/encoder"
)

// TestBenchCluster is the short version of make bench-cluster: a few
// documents written to one engine and to a 3-node cluster, in batches,
// then searched on both in every mode; every row of the tables is
// reported with a figure.
func TestBenchCluster(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	data := t.TempDir()
	var corpus, queries strings.Builder
	topics := []string{"cats purr and sleep", "stock prices fell", "the heart pumps blood", "rain falls in spring"}
	for i := range 24 {
		fmt.Fprintf(&corpus, `{"_id":"d%d","title":"Note %d","text":"Document %d: %s."}`+"\n", i, i, i, topics[i%len(topics)])
	}
	for i, q := range []string{"kitten", "market crash", "cardiology"} {
		fmt.Fprintf(&queries, `{"_id":"q%d","text":%q}`+"\n", i, q)
	}
	os.WriteFile(filepath.Join(data, "corpus.jsonl"), []byte(corpus.String()), 0o644)
	os.WriteFile(filepath.Join(data, "queries.jsonl"), []byte(queries.String()), 0o644)

	r, err := Run(context.Background(), Config{Data: data, Docs: 20, Batch: 8, Queries: 10, Model: encoder.DefaultModel})
	if err != nil {
		t.Fatalf("bench cluster: %v", err)
	}
	if r.Docs != 20 || r.Queries != 3 || len(r.Searches) != 3 {
		t.Errorf("%d documents, %d queries, %d search modes; want 20, 3 (all there are) and 3", r.Docs, r.Queries, len(r.Searches))
	}
	var b strings.Builder
	r.WriteMarkdown(&b)
	out := b.String()
	t.Logf("\n%s", out)
	for _, want := range []string{
		"20 documents in batches of 8, alternating; 3 nodes in one process on loopback, 3 shards x 3 replicas; retrievers bm25 + dense:" + encoder.DefaultModel + "\n",
		"| search, 3 queries | one node p50 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	writes := regexp.MustCompile(`(?m)^\| (batch p50|batch p95) \| [0-9.]+ ms \| [0-9.]+ ms \| [0-9.]+x \|$|^\| documents/s \| [0-9]+ \| [0-9]+ \| [0-9.]+x \|$`).FindAllString(out, -1)
	if len(writes) != 3 {
		t.Errorf("want 3 write rows with figures, got %d", len(writes))
	}
	searches := regexp.MustCompile(`(?m)^\| (bm25|dense|hybrid \(bm25\+dense\)) \|( [0-9.]+ ms \|){4} [0-9.]+x \|$`).FindAllString(out, -1)
	if len(searches) != 3 {
		t.Errorf("want 3 search rows with figures, got %d", len(searches))
	}
}
