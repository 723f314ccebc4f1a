package encode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem/encoder"
)

// Config is one run of the benchmark. Corpus, Docs, Window and Runs are
// required.
type Config struct {
	Model   string // installed model name or model directory (empty: the default model)
	Corpus  string // BEIR corpus.jsonl; documents are title + " " + text
	Docs    int    // documents to encode, from the start of the corpus
	Threads int    // ONNX Runtime intra-op threads (0: one per core)
	Window  int    // documents per Encode call (the ingest batch)
	Batch   int    // texts per model run (0: the model's default)
	Runs    int    // model runs in flight at once, each with Threads threads
	Tokens  bool   // also produce token vectors, as a collection with late interaction does
}

// Report is what a run measured. Its JSON fields are in the order of their
// names, as scripts/bench/encode.sh has always read them.
type Report struct {
	Batch       int     `json:"batch"`        // texts per model run
	BatchTokens int     `json:"batch_tokens"` // the model's token budget per run
	Docs        int     `json:"docs"`
	DocsPerS    float64 `json:"docs_per_s"`
	Engine      string  `json:"engine"` // "tandem", beside the Python runs of encode.sh
	Model       string  `json:"model"`
	Seconds     float64 `json:"seconds"`
	Threads     int     `json:"threads"`
	Tokens      int     `json:"tokens"` // input tokens the model ran on
	TokensPerS  float64 `json:"tokens_per_s"`
	Window      int     `json:"window"`
}

// Run loads the model, warms it up on one batch, then encodes the
// documents window by window, each window tokenized while the model runs
// on the one before.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Corpus == "" || c.Docs <= 0 || c.Window <= 0 || c.Batch < 0 || c.Runs <= 0 {
		return nil, errors.New("bench encode: Corpus, Docs, Window and Runs are required, and Batch may not be negative")
	}
	texts, err := readBEIRTexts(c.Corpus, c.Docs)
	if err != nil {
		return nil, err
	}
	dir, err := encoder.Find(c.Model)
	if err != nil {
		return nil, err
	}
	enc, err := encoder.Load(dir, &encoder.Options{IntraOpThreads: c.Threads, BatchSize: c.Batch, MaxConcurrentRuns: c.Runs})
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	// Warm up: the first run allocates ONNX Runtime's arena.
	if _, err := enc.Encode(ctx, encoder.Request{Side: encoder.Document, Texts: texts[:min(len(texts), enc.BatchSize())], Tokens: c.Tokens}); err != nil {
		return nil, err
	}
	start := time.Now()
	var windows [][]string
	for i := 0; i < len(texts); i += c.Window {
		windows = append(windows, texts[i:min(i+c.Window, len(texts))])
	}
	type prepared struct {
		p   *encoder.Prepared
		err error
	}
	// The windows are prepared one ahead; done stops the goroutine that
	// prepares them when a run fails, and Run waits for it.
	next := make(chan prepared, 1)
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		defer close(next)
		for _, w := range windows {
			p, err := enc.Prepare(encoder.Request{Side: encoder.Document, Texts: w, Tokens: c.Tokens})
			select {
			case next <- prepared{p, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	})
	ntok := 0
	for pr := range next {
		if pr.err != nil {
			return nil, pr.err
		}
		b, err := enc.Run(ctx, pr.p)
		if err != nil {
			return nil, err
		}
		ntok += b.InputTokens
	}
	el := time.Since(start).Seconds()
	return &Report{Engine: "tandem", Model: enc.Name(), Docs: len(texts), Tokens: ntok, Threads: c.Threads, Batch: enc.BatchSize(), BatchTokens: enc.BatchTokens(),
		Window: c.Window, Seconds: el, DocsPerS: float64(len(texts)) / el, TokensPerS: float64(ntok) / el}, nil
}

// WriteLine writes the report as one line of figures.
func (r *Report) WriteLine(w io.Writer) {
	fmt.Fprintf(w, "tandem %s (batches of %d): %d docs, %d tokens in %.1f s: %.2f docs/s, %.0f tokens/s\n", r.Model, r.Batch, r.Docs, r.Tokens, r.Seconds, r.DocsPerS, r.TokensPerS)
}

// WriteJSON writes the report as one JSON object on a line.
func (r *Report) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r)
}

// readBEIRTexts reads the first n documents of a BEIR corpus as
// title + " " + text, as Tandem's default schema encodes them.
func readBEIRTexts(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var out []string
	for line := 1; sc.Scan() && len(out) < n; line++ {
		var d struct{ Title, Text string }
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, line, err)
		}
		out = append(out, strings.TrimSpace(d.Title+" "+d.Text))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no documents", path)
	}
	return out, nil
}
