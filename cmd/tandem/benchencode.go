package main

import (
	"context"
	"io"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/internal/bench/encode"
)

// runBenchEncode measures document encoding the way ingest runs it: the
// texts in windows, each window tokenized while the model runs on the one
// before. It prints one line of figures (and, with --json, one JSON
// object) that scripts/bench/encode.sh sets beside onnxruntime in Python
// on the same texts, model file and threads.
func runBenchEncode(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("bench encode", stderr)
	var c encode.Config
	fs.StringVar(&c.Model, "model", encoder.DefaultModel, "installed model name or model directory")
	fs.StringVar(&c.Corpus, "corpus", "", "BEIR corpus.jsonl; documents are title + \" \" + text")
	fs.IntVar(&c.Docs, "docs", 512, "documents to encode, from the start of the corpus")
	fs.IntVar(&c.Threads, "threads", 0, "ONNX Runtime intra-op threads (0: one per core)")
	fs.IntVar(&c.Window, "window", 256, "documents per Encode call (the ingest batch)")
	fs.IntVar(&c.Batch, "batch", 0, "texts per model run (0: the model's default, 1 for int8 and 32 for float32)")
	fs.IntVar(&c.Runs, "runs", 1, "model runs in flight at once, each with --threads threads")
	fs.BoolVar(&c.Tokens, "tokens", true, "also produce token vectors, as a collection with late interaction does")
	asJSON := fs.Bool("json", false, "print the figures as JSON")
	if err := parseOrUsage(fs, args, stderr, "tandem bench encode --corpus corpus.jsonl [--model NAME] [--docs N] [--threads N]", func() bool {
		return c.Corpus == "" || c.Docs <= 0 || c.Window <= 0 || c.Batch < 0 || c.Runs <= 0 || fs.NArg() > 0
	}); err != nil {
		return err
	}
	r, err := encode.Run(context.Background(), c)
	if err != nil {
		return err
	}
	if *asJSON {
		return r.WriteJSON(stdout)
	}
	r.WriteLine(stdout)
	return nil
}
