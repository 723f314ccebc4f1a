package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/bench/late"
)

// runBenchLate builds a collection of synthetic token matrices that the
// documents bring themselves (synth.TokenCorpus, one external late-
// interaction model), then measures what late interaction costs at that
// size: build time, bytes per token, peak memory of each phase, search
// latencies with and without filters, and recall@10 against the exact
// (exhaustive) late-interaction ranking.
func runBenchLate(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench late", stderr)
	var c late.Config
	fset.StringVar(&c.Dir, "dir", "", "directory for the collection; must not exist (but see --search-only)")
	fset.IntVar(&c.Docs, "docs", 100_000, "documents to ingest")
	fset.IntVar(&c.Tokens, "tokens", 128, "tokens per document")
	fset.IntVar(&c.Dim, "dim", 128, "token dimension")
	fset.IntVar(&c.QueryTokens, "query-tokens", 32, "tokens per query")
	fset.IntVar(&c.Queries, "queries", 200, "queries per measured search configuration")
	fset.IntVar(&c.RecallQueries, "recall-queries", 50, "queries (the first of --queries) whose top 10 is compared with the exhaustive one; 0 for none")
	fset.StringVar(&c.LateIndex, "late-index", "Residual", `late-interaction index: "Residual" or "Residual<n>" for residual codes, "FAISS" or a FAISS description for FAISS over every token key`)
	fset.IntVar(&c.Batch, "batch", 0, "documents per atomic batch (default: the engine's)")
	fset.BoolVar(&c.Keep, "keep", false, "keep the collection afterwards")
	fset.BoolVar(&c.SearchOnly, "search-only", false, "open the collection in --dir, which --keep kept with the same --docs, --tokens, --dim and --query-tokens, and only search it (to compare two binaries on copies of one collection)")
	fset.BoolVar(&c.Quiet, "quiet", false, "no progress output")
	fset.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the ingest to this file")
	fset.StringVar(&c.SearchCPUProfile, "search-cpuprofile", "", "write a CPU profile of the measured searches (not the exhaustive ones) to this file")
	fset.StringVar(&c.MemProfile, "memprofile", "", "write a heap profile (allocations during the ingest and retraining) to this file")
	if err := parseOrUsage(fset, args, stderr, "tandem bench late --dir DIR [--docs N] [--tokens N] [--dim N] [--query-tokens N] [--queries N] [--recall-queries N (at most --queries)] [--late-index Residual] [--batch N] [--keep | --search-only]", func() bool {
		return c.Dir == "" || c.Docs <= 0 || c.Tokens <= 0 || c.Dim <= 0 || c.QueryTokens <= 0 || c.Queries <= 0 ||
			c.RecallQueries < 0 || c.RecallQueries > c.Queries || c.Batch < 0 || fset.NArg() > 0
	}); err != nil {
		return err
	}
	if c.Tokens > tandem.MaxTokens || c.QueryTokens > tandem.MaxTokens {
		return fmt.Errorf("--tokens %d, --query-tokens %d: a token matrix has at most %d rows", c.Tokens, c.QueryTokens, tandem.MaxTokens)
	}
	if err := late.CheckIndex(c.LateIndex, c.Dim); err != nil {
		return fmt.Errorf("--late-index %q with --dim %d: %w", c.LateIndex, c.Dim, err)
	}
	c.Log = stderr
	r, err := late.Run(context.Background(), c)
	if err != nil {
		return err
	}
	r.WriteMarkdown(stdout)
	return nil
}
