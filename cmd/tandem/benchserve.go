package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tandemsearch/tandem/internal/bench/load"
)

// runBenchServe loads a running `tandem serve` over HTTP: concurrent
// searchers cycle through the search modes with real queries while writers
// upsert documents, for a fixed time; it reports QPS, latency percentiles
// per mode and every error. It measures the server as a client sees it:
// JSON encoding, HTTP and the engine together.
func runBenchServe(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench serve", stderr)
	var c load.Config
	fset.StringVar(&c.URL, "url", "http://127.0.0.1:7700", "base URL of the server")
	fset.StringVar(&c.Collection, "collection", "", "collection to search and write")
	fset.StringVar(&c.QueriesFile, "queries", "", "BEIR queries.jsonl: the query texts, used in turn")
	fset.StringVar(&c.CorpusFile, "corpus", "", "JSONL documents the writers upsert in turn (BEIR corpus lines); empty: no writers")
	fset.DurationVar(&c.Duration, "duration", 2*time.Minute, "how long to load the server")
	fset.IntVar(&c.Searchers, "searchers", 8, "concurrent searchers")
	fset.IntVar(&c.Writers, "writers", 1, "concurrent writers (with --corpus)")
	fset.IntVar(&c.WriteBatch, "write-batch", 8, "documents per upsert request")
	fset.StringVar(&c.Modes, "modes", "bm25,dense,late,hybrid", "search modes each searcher cycles through: bm25, dense, late, hybrid (every retriever fused); those the collection lacks are dropped")
	fset.IntVar(&c.K, "k", 10, "hits per search")
	fset.StringVar(&c.Key, "key", os.Getenv("TANDEM_API_KEY"), "API key sent as a bearer token (default $TANDEM_API_KEY)")
	fset.Float64Var(&c.Zipf, "zipf", 0, "draw each search's query from a Zipfian distribution of this exponent (above 1, e.g. 1.1), so that queries repeat; 0 uses them in turn")
	fset.BoolVar(&c.Quiet, "quiet", false, "no progress output")
	if err := parseOrUsage(fset, args, stderr, "tandem bench serve --collection NAME --queries queries.jsonl [--corpus corpus.jsonl] [--url URL] [--duration 2m] [--searchers 8] [--writers 1]", func() bool {
		return c.Collection == "" || c.QueriesFile == "" || c.Searchers <= 0 || c.Writers < 0 || c.WriteBatch <= 0 || c.Duration <= 0 || fset.NArg() > 0
	}); err != nil {
		return err
	}
	c.Log = stderr
	r, err := load.Run(context.Background(), c)
	if err != nil {
		return err
	}
	r.WriteMarkdown(stdout)
	if n := r.Failed(); n > 0 {
		return fmt.Errorf("bench serve: %d requests failed", n)
	}
	return nil
}
