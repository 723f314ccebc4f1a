package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/tandemsearch/tandem/internal/bench/ingest"
)

func benchCommands() map[string]command {
	return map[string]command{
		"bench": {"benchmark ingest and search at scale (ingest), late interaction on synthetic token matrices (late), document encoding (encode), a running server under load (serve), a 3-node cluster against one engine (cluster), or write the realistic text bench ingest --text-from indexes as a BEIR collection for peers (text)", runBench},
	}
}

func runBench(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "ingest":
			return runBenchIngest(args[1:], stdout, stderr)
		case "encode":
			return runBenchEncode(args[1:], stdout, stderr)
		case "late":
			return runBenchLate(args[1:], stdout, stderr)
		case "serve":
			return runBenchServe(args[1:], stdout, stderr)
		case "cluster":
			return runBenchCluster(args[1:], stdout, stderr)
		case "text":
			return runBenchText(args[1:], stdout, stderr)
		}
	}
	fmt.Fprintln(stderr, "usage: tandem bench ingest --dir DIR [--docs N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench late --dir DIR [--docs N] [--tokens N] [--dim N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench encode --corpus corpus.jsonl [--model NAME] [--docs N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench serve --collection NAME --queries queries.jsonl [--corpus corpus.jsonl] [--url URL] [flags]")
	fmt.Fprintln(stderr, "       tandem bench cluster --data BEIR_DIR [--docs N] [--batch 64] [--queries 300] [--late]")
	fmt.Fprintln(stderr, "       tandem bench text --text-from BEIR_DIR --out DIR [--docs N]")
	return errUsage
}

// runBenchIngest builds a synthetic collection whose documents bring their
// vectors (package synth), then measures what a user of that size meets:
// ingest rate, disk, peak memory of each phase (per document), open times,
// search latencies and dense recall; or, with --search-only, opens one an
// earlier run kept and only searches it.
func runBenchIngest(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench ingest", stderr)
	var c ingest.Config
	fset.StringVar(&c.Dir, "dir", "", "directory for the collection; must not exist")
	fset.IntVar(&c.Docs, "docs", 1_000_000, "documents to ingest")
	fset.IntVar(&c.Batch, "batch", 0, "documents per atomic batch (default: the engine's)")
	fset.IntVar(&c.Queries, "queries", 200, "queries per measured search configuration")
	fset.IntVar(&c.RecallQueries, "recall-queries", 20, "queries (the first of --queries) whose dense top 10 is compared with the exact one; 0 for none")
	fset.BoolVar(&c.Keep, "keep", false, "keep the collection afterwards")
	fset.StringVar(&c.TextFrom, "text-from", "", "a BEIR collection directory (corpus.jsonl, queries.jsonl) whose term statistics the documents' text follows, and whose queries are searched, instead of Zipfian words; with --search-only, the one the collection was built with")
	fset.Float64Var(&c.LoadRate, "load-rate", ingest.DefaultLoadRate, "searches a second run beside the ingest, whose latency is reported outside and during each dense retraining; 0 for none")
	fset.StringVar(&c.StallDumps, "stall-dumps", "", "a directory for every goroutine's stack, written when a search of the load has waited 2 s (at most 3, a minute apart)")
	fset.BoolVar(&c.SearchOnly, "search-only", false, "open the collection in --dir, which --keep kept, and only search it (to compare two binaries on copies of one collection)")
	fset.BoolVar(&c.Quiet, "quiet", false, "no progress output")
	fset.StringVar(&c.CPUProfile, "cpuprofile", "", "write a CPU profile of the ingest to this file")
	fset.StringVar(&c.SearchCPUProfile, "search-cpuprofile", "", "write a CPU profile of the searches to this file")
	fset.StringVar(&c.MemProfile, "memprofile", "", "write a heap profile (allocations during the ingest) to this file")
	if err := parseOrUsage(fset, args, stderr, "tandem bench ingest --dir DIR [--docs N] [--batch N] [--queries N] [--recall-queries N (at most --queries)] [--keep | --search-only]", func() bool {
		return c.Dir == "" || c.Docs <= 0 || c.LoadRate < 0 || c.Queries <= 0 || c.RecallQueries < 0 || c.RecallQueries > c.Queries || fset.NArg() > 0
	}); err != nil {
		return err
	}
	if c.SearchOnly {
		var conflict error
		fset.Visit(func(f *flag.Flag) {
			if strings.Contains(" docs batch keep cpuprofile memprofile load-rate stall-dumps ", " "+f.Name+" ") {
				conflict = fmt.Errorf("--%s does not apply with --search-only, which searches the collection in --dir as it is", f.Name)
			}
		})
		c.Docs, c.LoadRate = 0, 0
		if conflict != nil {
			return conflict
		}
	}
	c.Log = stderr
	r, err := ingest.Run(context.Background(), c)
	if err != nil {
		return err
	}
	r.WriteMarkdown(stdout)
	return nil
}
