package encode

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

// TestBenchEncode encodes a few documents with the default model, in
// windows smaller than the corpus: every document and its tokens are
// counted, and both forms of the report carry the figures, the JSON one
// with its fields in the order scripts/bench/encode.sh has always had.
func TestBenchEncode(t *testing.T) {
	if _, err := encoder.Find(""); err != nil {
		t.Skipf("default model not installed: %v", err)
	}
	corpus := filepath.Join(t.TempDir(), "corpus.jsonl")
	var b strings.Builder
	for i := range 12 {
		fmt.Fprintf(&b, `{"_id":"d%d","title":"Note %d","text":"Cats purr, markets fall and hearts pump blood, time %d."}`+"\n", i, i, i)
	}
	os.WriteFile(corpus, []byte(b.String()), 0o644)
	r, err := Run(context.Background(), Config{Corpus: corpus, Docs: 10, Window: 4, Runs: 1, Threads: 1, Tokens: true})
	if err != nil {
		t.Fatalf("bench encode: %v", err)
	}
	if r.Engine != "tandem" || r.Model == "" || r.Docs != 10 || r.Tokens < 10*10 || r.DocsPerS <= 0 || r.TokensPerS <= 0 || r.Window != 4 || r.Batch <= 0 {
		t.Errorf("report %+v", r)
	}
	var line, js strings.Builder
	r.WriteLine(&line)
	if !regexp.MustCompile(`^tandem \S+ \(batches of \d+\): 10 docs, \d+ tokens in [\d.]+ s: [\d.]+ docs/s, \d+ tokens/s\n$`).MatchString(line.String()) {
		t.Errorf("line %q", line.String())
	}
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`"(\w+)":`).FindAllStringSubmatch(js.String(), -1)
	var names []string
	for _, k := range keys {
		names = append(names, k[1])
	}
	if got := strings.Join(names, ","); got != "batch,batch_tokens,docs,docs_per_s,engine,model,seconds,threads,tokens,tokens_per_s,window" {
		t.Errorf("JSON fields %s in %s", got, js.String())
	}
	if _, err := Run(context.Background(), Config{Corpus: filepath.Join(t.TempDir(), "none.jsonl"), Docs: 1, Window: 1, Runs: 1}); err == nil || !strings.Contains(err.Error(), "none.jsonl") {
		t.Errorf("missing corpus: %v", err)
	}
}
