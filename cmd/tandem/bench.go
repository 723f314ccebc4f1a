package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
)

func benchCommands() map[string]command {
	return map[string]command{
		"bench": {"benchmark ingest and search at scale (ingest), late interaction on synthetic token matrices (late), document encoding (encode), a running server under load (serve), or a 3-node cluster against one engine (cluster)", runBench},
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
		}
	}
	fmt.Fprintln(stderr, "usage: tandem bench ingest --dir DIR [--docs N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench late --dir DIR [--docs N] [--tokens N] [--dim N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench encode --corpus corpus.jsonl [--model NAME] [--docs N] [flags]")
	fmt.Fprintln(stderr, "       tandem bench serve --collection NAME --queries queries.jsonl [--corpus corpus.jsonl] [--url URL] [flags]")
	fmt.Fprintln(stderr, "       tandem bench cluster --data BEIR_DIR [--docs N] [--batch 64] [--queries 300] [--late]")
	return errUsage
}

// runBenchIngest builds a synthetic collection whose documents bring their
// vectors (package synth), then measures what a user of that size meets:
// ingest rate, disk, peak memory, open times and search latencies.
func runBenchIngest(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench ingest", stderr)
	dir := fset.String("dir", "", "directory for the collection; must not exist")
	docs := fset.Int("docs", 1_000_000, "documents to ingest")
	batch := fset.Int("batch", 0, "documents per atomic batch (default: the engine's)")
	queries := fset.Int("queries", 200, "queries per measured search configuration")
	keep := fset.Bool("keep", false, "keep the collection afterwards")
	quiet := fset.Bool("quiet", false, "no progress output")
	cpuProfile := fset.String("cpuprofile", "", "write a CPU profile of the ingest to this file")
	searchProfile := fset.String("search-cpuprofile", "", "write a CPU profile of the searches to this file")
	memProfile := fset.String("memprofile", "", "write a heap profile (allocations during the ingest) to this file")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if *dir == "" || *docs <= 0 || *queries <= 0 || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem bench ingest --dir DIR [--docs N] [--batch N] [--queries N] [--keep]")
		return errUsage
	}
	if _, err := os.Stat(*dir); err == nil {
		return fmt.Errorf("%s exists; the benchmark builds a new collection", *dir)
	}
	if !*keep {
		defer os.RemoveAll(*dir)
	}
	corpus := synth.Default()
	gen, err := synth.New(corpus)
	if err != nil {
		return err
	}
	schema := &tandem.Schema{IDField: "_id", Strict: true, Models: []tandem.Model{corpus.ModelSpec()},
		Fields: []tandem.Field{{Name: "text", Type: tandem.Text}, {Name: "cat", Type: tandem.Keyword}, {Name: "year", Type: tandem.Number}}}
	ctx := context.Background()
	e, err := engine.Open(*dir, &engine.Options{Schema: schema, BatchSize: *batch})
	if err != nil {
		return err
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()

	// Documents are generated ahead by one goroutine per core, in order.
	next, stop := generate(*docs, 4096, gen.Doc)
	defer stop()
	var last time.Time
	fmt.Fprintf(stderr, "ingesting %d synthetic documents (%d-d vectors supplied) into %s\n", *docs, corpus.Dim, *dir)
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	p, err := e.IndexStream(ctx, next, engine.StreamOptions{Progress: func(p engine.Progress) {
		if *quiet || time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		rate := float64(p.Docs) / p.Elapsed.Seconds()
		eta := time.Duration(float64(*docs-p.Docs)/rate) * time.Second
		fmt.Fprintf(stderr, "%d docs, %.0f docs/s, ETA %s, %s\n", p.Docs, rate, eta.Round(time.Second), memoryStatus())
	}})
	if err != nil {
		return err
	}
	ingest := p.Elapsed
	stopProfile()
	// Each phase's peak is its own: a user opens a collection in a fresh
	// process, not in the one that built it.
	peakIngest := procstat.ReadMemory().Peak
	procstat.ResetPeak()
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	closeStart := time.Now()
	if err := e.Close(); err != nil {
		return err
	}
	closeTook := time.Since(closeStart)
	disk := procstat.DirBytes(*dir)
	debug.FreeOSMemory()
	procstat.ResetPeak()

	openStart := time.Now()
	if e, err = engine.Open(*dir, nil); err != nil {
		return err
	}
	openSnap := time.Since(openStart)
	if err := e.Close(); err != nil {
		return err
	}
	peakOpen := procstat.ReadMemory().Peak
	debug.FreeOSMemory()
	procstat.ResetPeak()
	// Without the dense snapshot, Open rebuilds the index from Badger.
	snaps, _ := filepath.Glob(filepath.Join(*dir, "snapshots", "*"))
	for _, s := range snaps {
		os.Remove(s)
	}
	openStart = time.Now()
	if e, err = engine.Open(*dir, nil); err != nil {
		return err
	}
	openRebuild := time.Since(openStart)
	peakRebuild := procstat.ReadMemory().Peak

	fmt.Fprintf(stderr, "searching: %d queries per configuration\n", *queries)
	type config struct {
		name   string
		rets   []string
		filter string
	}
	filter := fmt.Sprintf(`{"term":{"cat":%q}}`, synth.Category(7))
	configs := []config{
		{"bm25", []string{"bm25"}, ""},
		{"bm25, 1% filter", []string{"bm25"}, filter},
		{"dense", []string{"dense"}, ""},
		{"dense, 1% filter", []string{"dense"}, filter},
	}
	lat := make([][]time.Duration, len(configs))
	hits := make([]int, len(configs))
	stopSearchProfile, err := startCPUProfile(*searchProfile)
	if err != nil {
		return err
	}
	defer stopSearchProfile()
	// Configurations alternate query by query, so that the machine's
	// load falls on all alike; the first 10 queries warm up.
	for qi := -10; qi < *queries; qi++ {
		text, vec := gen.Query(qi + 10)
		for ci, c := range configs {
			req := engine.Request{Text: text, K: 10, Retrievers: c.rets, Filter: []byte(c.filter)}
			if c.rets[0] == "dense" {
				req.Vectors = map[string]tandem.Vectors{corpus.Model: {Dense: vec}}
			}
			start := time.Now()
			res, err := e.Search(ctx, req)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			if qi >= 0 {
				lat[ci] = append(lat[ci], time.Since(start))
				hits[ci] += len(res.Hits)
			}
		}
	}
	if err := e.Close(); err != nil {
		return err
	}

	fmt.Fprintf(stdout, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(stdout, "| documents | %d (%d to %d words, %d-d vectors supplied, %d categories) |\n", p.Docs, corpus.MinWords, corpus.MaxWords, corpus.Dim, corpus.Categories)
	fmt.Fprintf(stdout, "| ingest | %s, %.0f documents/s (%d atomic batches) |\n", ingest.Round(time.Second), float64(p.Docs)/ingest.Seconds(), p.Batches)
	fmt.Fprintf(stdout, "| close (snapshots) | %s |\n", closeTook.Round(time.Millisecond))
	fmt.Fprintf(stdout, "| disk | %s, %.0f bytes/document |\n", size(disk), float64(disk)/float64(p.Docs))
	fmt.Fprintf(stdout, "| peak RSS: ingest | %s |\n", size(peakIngest))
	fmt.Fprintf(stdout, "| peak RSS: open from snapshot | %s |\n", size(peakOpen))
	fmt.Fprintf(stdout, "| peak RSS: open with dense rebuild, then searches | %s |\n", size(max(peakRebuild, procstat.ReadMemory().Peak)))
	fmt.Fprintf(stdout, "| open from snapshot | %s |\n", openSnap.Round(time.Millisecond))
	fmt.Fprintf(stdout, "| open with dense rebuild | %s |\n", openRebuild.Round(time.Millisecond))
	for ci, c := range configs {
		p50, p95 := percentile(lat[ci], 0.50), percentile(lat[ci], 0.95)
		fmt.Fprintf(stdout, "| %s, top 10: p50 / p95 | %.1f / %.1f ms (%.1f hits a query) |\n", c.name, ms(p50), ms(p95), float64(hits[ci])/float64(len(lat[ci])))
	}
	return nil
}

// The helpers the benchmarks share live in internal/bench; the other
// commands (index, eval, stats, soak, torture) call them by these names.
var (
	generate         = bench.Generate
	memoryStatus     = bench.MemoryStatus
	percentile       = bench.Percentile
	ms               = bench.Ms
	size             = bench.Size
	startCPUProfile  = bench.StartCPUProfile
	writeHeapProfile = bench.WriteHeapProfile
)
