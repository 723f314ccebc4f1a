package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
	"github.com/tandemsearch/tandem/latecollect"
)

// runBenchLate builds a collection of synthetic token matrices that the
// documents bring themselves (synth.TokenCorpus, one external late-
// interaction model), then measures what late interaction costs at that
// size: build time, bytes per token, peak memory of each phase, search
// latencies with and without filters, and recall@10 against the exact
// (exhaustive) late-interaction ranking.
func runBenchLate(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench late", stderr)
	dir := fset.String("dir", "", "directory for the collection; must not exist")
	docs := fset.Int("docs", 100_000, "documents to ingest")
	tokens := fset.Int("tokens", 128, "tokens per document")
	dim := fset.Int("dim", 128, "token dimension")
	queryTokens := fset.Int("query-tokens", 32, "tokens per query")
	queries := fset.Int("queries", 200, "queries per measured search configuration")
	recallQueries := fset.Int("recall-queries", 50, "queries (the first of --queries) whose top 10 is compared with the exhaustive one; 0 for none")
	lateIndex := fset.String("late-index", "Residual", `late-interaction index: "Residual" or "Residual<n>" for residual codes, "FAISS" or a FAISS description for FAISS over every token key`)
	batch := fset.Int("batch", 0, "documents per atomic batch (default: the engine's)")
	keep := fset.Bool("keep", false, "keep the collection afterwards")
	quiet := fset.Bool("quiet", false, "no progress output")
	cpuProfile := fset.String("cpuprofile", "", "write a CPU profile of the ingest to this file")
	searchProfile := fset.String("search-cpuprofile", "", "write a CPU profile of the measured searches (not the exhaustive ones) to this file")
	memProfile := fset.String("memprofile", "", "write a heap profile (allocations during the ingest and retraining) to this file")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	if *dir == "" || *docs <= 0 || *tokens <= 0 || *dim <= 0 || *queryTokens <= 0 || *queries <= 0 ||
		*recallQueries < 0 || *recallQueries > *queries || *batch < 0 || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem bench late --dir DIR [--docs N] [--tokens N] [--dim N] [--query-tokens N] [--queries N] [--recall-queries N (at most --queries)] [--late-index Residual] [--batch N] [--keep]")
		return errUsage
	}
	if *tokens > tandem.MaxTokens || *queryTokens > tandem.MaxTokens {
		return fmt.Errorf("--tokens %d, --query-tokens %d: a token matrix has at most %d rows", *tokens, *queryTokens, tandem.MaxTokens)
	}
	// The engine would find a bad description only after creating the
	// collection; say so before.
	if err := latecollect.CheckDescription(*lateIndex, *dim); err != nil {
		return fmt.Errorf("--late-index %q with --dim %d: %w", *lateIndex, *dim, err)
	}
	if _, err := os.Stat(*dir); err == nil {
		return fmt.Errorf("%s exists; the benchmark builds a new collection", *dir)
	}
	corpus := synth.DefaultTokens()
	corpus.Dim, corpus.Tokens, corpus.QueryTokens = *dim, *tokens, *queryTokens
	gen, err := synth.NewTokens(corpus)
	if err != nil {
		return err
	}
	model := corpus.ModelSpec()
	model.LateIndex = *lateIndex
	schema := &tandem.Schema{IDField: "_id", Strict: true, Models: []tandem.Model{model},
		Fields: []tandem.Field{{Name: "cat", Type: tandem.Keyword}, {Name: "group", Type: tandem.Keyword}}}
	if !*keep {
		defer os.RemoveAll(*dir)
	}
	ctx := context.Background()
	e, err := engine.Open(*dir, &engine.Options{Schema: schema, BatchSize: *batch})
	if err != nil {
		return fmt.Errorf("create the collection: %w", err)
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()

	// About 16 MiB of documents are made ahead: a token matrix is far
	// larger than bench ingest's documents, and what waits here counts in
	// the ingest's peak.
	ahead := max(1, (16<<20)/(*tokens**dim*4))
	next, stop := generate(*docs, ahead, gen.Doc)
	defer stop()
	fmt.Fprintf(stderr, "ingesting %d synthetic documents (%d tokens of %d values supplied, late index %q) into %s\n", *docs, *tokens, *dim, *lateIndex, *dir)
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// A progress line at most every 5 s: as batches commit, and while
	// none does (the late index trains, or applies the last batches).
	var (
		mu         sync.Mutex
		lastCommit time.Duration
		committed  int
		lastLine   = time.Now()
	)
	start := time.Now()
	progress := func(p engine.Progress) {
		mu.Lock()
		defer mu.Unlock()
		lastCommit, committed = p.Elapsed, p.Docs
		if *quiet || time.Since(lastLine) < 5*time.Second {
			return
		}
		lastLine = time.Now()
		rate := float64(p.Docs) / p.Elapsed.Seconds()
		eta := time.Duration(float64(*docs-p.Docs)/rate) * time.Second
		fmt.Fprintf(stderr, "%d docs committed, %.0f docs/s, ETA %s, %s\n", p.Docs, rate, eta.Round(time.Second), memoryStatus())
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if !*quiet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-done:
					return
				case <-tick.C:
				}
				mu.Lock()
				if time.Since(lastLine) >= 5*time.Second {
					lastLine = time.Now()
					now := time.Since(start)
					if committed == 0 {
						fmt.Fprintf(stderr, "no batch committed yet (%s elapsed), %s\n", now.Round(time.Second), memoryStatus())
					} else {
						what := "the indexes are applying them"
						if r := e.Retraining(); len(r) > 0 {
							what = "retraining " + strings.Join(r, ", ")
						}
						fmt.Fprintf(stderr, "%d docs committed, none for %s: %s (%s elapsed), %s\n",
							committed, (now - lastCommit).Round(time.Second), what, now.Round(time.Second), memoryStatus())
					}
				}
				mu.Unlock()
			}
		}()
	}
	p, err := e.IndexStream(ctx, next, engine.StreamOptions{Progress: progress})
	if err == nil {
		// IndexStream returns once every derived index has applied every
		// committed batch; the late index may still be retraining in the
		// background, and the build ends when it has swapped its codes in.
		err = e.WaitRetrain(ctx)
	}
	close(done)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	build := max(p.Elapsed, time.Since(start))
	stopProfile()
	if *memProfile != "" {
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	peakIngest := procstat.ReadMemory().Peak
	built, err := lateStats(e, model.Name)
	if err != nil {
		return err
	}
	if built.applied != built.last {
		return fmt.Errorf("ingest returned with the late index at sequence %d of %d", built.applied, built.last)
	}

	closeStart := time.Now()
	if err := e.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	closeTook := time.Since(closeStart)
	disk := procstat.DirBytes(*dir)
	debug.FreeOSMemory()
	procstat.ResetPeak()

	// Each phase's peak is its own: a user opens a collection in a fresh
	// process, not in the one that built it.
	openStart := time.Now()
	if e, err = engine.Open(*dir, nil); err != nil {
		return fmt.Errorf("open from snapshot: %w", err)
	}
	openTook := time.Since(openStart)
	peakOpen := procstat.ReadMemory().Peak
	opened, err := lateStats(e, model.Name)
	if err != nil {
		return err
	}
	debug.FreeOSMemory()
	procstat.ResetPeak()

	type config struct {
		name   string
		filter string
	}
	configs := []config{
		{"late", ""},
		{"late, 1% filter", fmt.Sprintf(`{"term":{"cat":%q}}`, synth.Category(7))},
		{"late, 10% filter", fmt.Sprintf(`{"term":{"group":%q}}`, synth.Group(3))},
	}
	search := func(retriever, filter string, q [][]float32) ([]string, time.Duration, error) {
		req := engine.Request{K: 10, Retrievers: []string{retriever}, Filter: []byte(filter), IDsOnly: true,
			Vectors: map[string]tandem.Vectors{model.Name: {Tokens: q}}}
		start := time.Now()
		res, err := e.Search(ctx, req)
		took := time.Since(start)
		if err != nil {
			return nil, 0, err
		}
		ids := make([]string, len(res.Hits))
		for i, h := range res.Hits {
			ids[i] = h.ID
		}
		return ids, took, nil
	}
	fmt.Fprintf(stderr, "searching: %d queries of %d tokens per configuration\n", *queries, *queryTokens)
	lat := make([][]time.Duration, len(configs))
	hits := make([]int, len(configs))
	// found[c][q] is the top 10 of configuration c for query q, kept for
	// the first recallQueries queries.
	found := make([][][]string, len(configs))
	stopSearchProfile, err := startCPUProfile(*searchProfile)
	if err != nil {
		return err
	}
	defer stopSearchProfile()
	// Configurations alternate query by query, so that the machine's
	// load falls on all alike; the first 10 queries warm up.
	for qi := -10; qi < *queries; qi++ {
		q, _ := gen.Query(qi+10, *docs)
		for ci, c := range configs {
			ids, took, err := search("late", c.filter, q)
			if err != nil {
				return fmt.Errorf("search %s, query %d: %w", c.name, qi+10, err)
			}
			if qi < 0 {
				continue
			}
			lat[ci] = append(lat[ci], took)
			hits[ci] += len(ids)
			if qi < *recallQueries {
				found[ci] = append(found[ci], ids)
			}
		}
	}
	stopSearchProfile()
	peakSearch := procstat.ReadMemory().Peak
	debug.FreeOSMemory()
	procstat.ResetPeak()

	// The exact reference, query after query in the same order; it reads
	// every allowed document's full-precision tokens.
	if *recallQueries > 0 {
		fmt.Fprintf(stderr, "exhaustive: %d queries per configuration\n", *recallQueries)
	}
	recall := make([]float64, len(configs))
	exactLat := make([][]time.Duration, len(configs))
	for qi := range *recallQueries {
		q, _ := gen.Query(qi+10, *docs)
		for ci, c := range configs {
			ids, took, err := search("late-exact", c.filter, q)
			if err != nil {
				return fmt.Errorf("exhaustive search %s, query %d: %w", c.name, qi+10, err)
			}
			exactLat[ci] = append(exactLat[ci], took)
			recall[ci] += overlap(found[ci][qi], ids)
		}
	}
	peakExact := procstat.ReadMemory().Peak
	if err := e.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	e = nil

	tokensIn := int64(p.Docs) * int64(*tokens)
	fmt.Fprintf(stdout, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(stdout, "| documents | %d (%d tokens of %d values each, supplied; %d centres in %d topics; %d-token queries) |\n",
		p.Docs, *tokens, *dim, corpus.Centres, corpus.Topics, *queryTokens)
	fmt.Fprintf(stdout, "| tokens | %d in the late index (%d supplied) |\n", built.Tokens, tokensIn)
	index := built.Description
	if built.Centroids > 0 {
		index += fmt.Sprintf(", %d centroids, drift %.3f", built.Centroids, built.Drift)
	}
	fmt.Fprintf(stdout, "| late index | %s |\n", index)
	fmt.Fprintf(stdout, "| build (ingest until the late index applied everything and finished retraining) | %s, %.0f documents/s, %.0f tokens/s (%d atomic batches; last commit at %s) |\n",
		build.Round(time.Millisecond), float64(p.Docs)/build.Seconds(), float64(tokensIn)/build.Seconds(), p.Batches, lastCommit.Round(time.Millisecond))
	fmt.Fprintf(stdout, "| close (snapshots) | %s |\n", closeTook.Round(time.Millisecond))
	fmt.Fprintf(stdout, "| disk | %s, %.1f bytes/token |\n", size(disk), float64(disk)/float64(max(1, built.Tokens)))
	fmt.Fprintf(stdout, "| late index memory: after build | %s, %.1f bytes/token |\n", size(built.MemoryBytes), built.BytesPerToken)
	fmt.Fprintf(stdout, "| late index memory: opened from snapshot | %s, %.1f bytes/token |\n", size(opened.MemoryBytes), opened.BytesPerToken)
	fmt.Fprintf(stdout, "| peak RSS: ingest | %s |\n", size(peakIngest))
	fmt.Fprintf(stdout, "| peak RSS: open from snapshot | %s |\n", size(peakOpen))
	fmt.Fprintf(stdout, "| peak RSS: searches | %s |\n", size(peakSearch))
	if *recallQueries > 0 {
		fmt.Fprintf(stdout, "| peak RSS: exhaustive searches | %s |\n", size(peakExact))
	}
	fmt.Fprintf(stdout, "| open from snapshot | %s |\n", openTook.Round(time.Millisecond))
	for ci, c := range configs {
		p50, p95 := percentile(lat[ci], 0.50), percentile(lat[ci], 0.95)
		fmt.Fprintf(stdout, "| %s, top 10: p50 / p95 | %.1f / %.1f ms (%.1f hits a query) |\n", c.name, ms(p50), ms(p95), float64(hits[ci])/float64(len(lat[ci])))
	}
	for ci, c := range configs {
		if *recallQueries == 0 {
			break
		}
		fmt.Fprintf(stdout, "| %s, recall@10 against late-exact | %.3f (%d queries; exhaustive p50 %.1f ms) |\n",
			c.name, recall[ci]/float64(*recallQueries), *recallQueries, ms(percentile(exactLat[ci], 0.50)))
	}
	return nil
}

// lateIndexStats are the engine's stats of one late-interaction index,
// with its applied sequence and the collection's last.
type lateIndexStats struct {
	engine.LateStats
	applied, last uint64
}

// lateStats returns the stats of model's late-interaction index.
func lateStats(e *engine.Engine, model string) (lateIndexStats, error) {
	s, err := e.Stats()
	if err != nil {
		return lateIndexStats{}, fmt.Errorf("stats: %w", err)
	}
	for _, l := range s.Late {
		if l.Model == model {
			return lateIndexStats{LateStats: l, applied: s.AppliedSeq["late:"+model], last: s.LastSeq}, nil
		}
	}
	return lateIndexStats{}, fmt.Errorf("stats: no late-interaction index of %s", model)
}

// overlap is the share of want found in got: recall of got against the
// reference want (1 when want is empty).
func overlap(got, want []string) float64 {
	if len(want) == 0 {
		return 1
	}
	in := make(map[string]bool, len(got))
	for _, id := range got {
		in[id] = true
	}
	n := 0
	for _, id := range want {
		if in[id] {
			n++
		}
	}
	return float64(n) / float64(len(want))
}
