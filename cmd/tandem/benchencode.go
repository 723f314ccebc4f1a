package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tandemsearch/tandem/encoder"
)

// runBenchEncode measures document encoding the way ingest runs it: the
// texts in windows, each window tokenized while the model runs on the one
// before. It prints one line of figures (and, with --json, one JSON
// object) that scripts/bench/encode.sh sets beside onnxruntime in Python
// on the same texts, model file and threads.
func runBenchEncode(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench encode", stderr)
	model := fs.String("model", encoder.DefaultModel, "installed model name or model directory")
	corpus := fs.String("corpus", "", "BEIR corpus.jsonl; documents are title + \" \" + text")
	docs := fs.Int("docs", 512, "documents to encode, from the start of the corpus")
	threads := fs.Int("threads", 0, "ONNX Runtime intra-op threads (0: one per core)")
	window := fs.Int("window", 256, "documents per Encode call (the ingest batch)")
	batch := fs.Int("batch", 0, "texts per model run (0: the model's default, 1 for int8 and 32 for float32)")
	runs := fs.Int("runs", 1, "model runs in flight at once, each with --threads threads")
	tokens := fs.Bool("tokens", true, "also produce token vectors, as a collection with late interaction does")
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *corpus == "" || *docs <= 0 || *window <= 0 || *batch < 0 || *runs <= 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem bench encode --corpus corpus.jsonl [--model NAME] [--docs N] [--threads N]")
		return errUsage
	}
	texts, err := readBEIRTexts(*corpus, *docs)
	if err != nil {
		return err
	}
	dir, err := encoder.Find(*model)
	if err != nil {
		return err
	}
	enc, err := encoder.Load(dir, &encoder.Options{IntraOpThreads: *threads, BatchSize: *batch, MaxConcurrentRuns: *runs})
	if err != nil {
		return err
	}
	defer enc.Close()
	ctx := context.Background()
	// Warm up: the first run allocates ONNX Runtime's arena.
	if _, err := enc.Encode(ctx, encoder.Request{Side: encoder.Document, Texts: texts[:min(len(texts), enc.BatchSize())], Tokens: *tokens}); err != nil {
		return err
	}
	start := time.Now()
	var windows [][]string
	for i := 0; i < len(texts); i += *window {
		windows = append(windows, texts[i:min(i+*window, len(texts))])
	}
	type prepared struct {
		p   *encoder.Prepared
		err error
	}
	next := make(chan prepared, 1)
	go func() {
		defer close(next)
		for _, w := range windows {
			p, err := enc.Prepare(encoder.Request{Side: encoder.Document, Texts: w, Tokens: *tokens})
			next <- prepared{p, err}
			if err != nil {
				return
			}
		}
	}()
	ntok := 0
	for pr := range next {
		if pr.err != nil {
			return pr.err
		}
		b, err := enc.Run(ctx, pr.p)
		if err != nil {
			return err
		}
		ntok += b.InputTokens
	}
	el := time.Since(start).Seconds()
	res := map[string]any{"engine": "tandem", "model": enc.Name(), "docs": len(texts), "tokens": ntok, "threads": *threads,
		"batch": enc.BatchSize(), "batch_tokens": enc.BatchTokens(), "window": *window, "seconds": el, "docs_per_s": float64(len(texts)) / el, "tokens_per_s": float64(ntok) / el}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(res)
	}
	fmt.Fprintf(stdout, "tandem %s (batches of %d): %d docs, %d tokens in %.1f s: %.2f docs/s, %.0f tokens/s\n", enc.Name(), enc.BatchSize(), len(texts), ntok, el, res["docs_per_s"], res["tokens_per_s"])
	return nil
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
