package late

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
	"github.com/tandemsearch/tandem/latecollect"
)

// Config is one run of the benchmark. Every number but Batch and
// RecallQueries is required; RecallQueries may be 0 (no recall) and at
// most Queries.
type Config struct {
	Dir           string // directory for the collection; must not exist (but see SearchOnly)
	Docs          int    // documents to ingest
	Tokens        int    // tokens per document, at most tandem.MaxTokens
	Dim           int    // token dimension
	QueryTokens   int    // tokens per query, at most tandem.MaxTokens
	Queries       int    // queries per measured search configuration
	RecallQueries int    // the first queries whose top 10 is compared with late-exact's
	LateIndex     string // the model's late-interaction index description (tandem.Model.LateIndex)
	Batch         int    // documents per atomic batch (0: the engine's)
	Keep          bool   // keep the collection afterwards

	// SearchOnly opens the collection in Dir, which an earlier run with
	// Keep built with the same Docs, Tokens, Dim and QueryTokens, and
	// only searches it: two binaries compared on copies of one
	// collection. Batch, Keep and CPUProfile do not apply.
	SearchOnly bool

	// The progress lines and the profiles; the search profile leaves out
	// the exhaustive searches.
	bench.Output
}

// Report is what a run measured.
type Report struct {
	Corpus synth.TokenCorpus // the generator's parameters
	Docs   int               // documents ingested, or the collection's (SearchOnly)
	// SearchOnly: the run only opened and searched (Config.SearchOnly);
	// the build's figures are zero.
	SearchOnly bool
	Batches    int // atomic batches they were committed in

	// Build lasts from the start of the ingest until the late index has
	// applied every batch and finished retraining; LastCommit is when the
	// last batch committed.
	Build, LastCommit time.Duration
	Close             time.Duration // closing after the build, which writes the snapshots
	Disk              int64         // the collection's bytes on disk after the close
	Open              time.Duration // opening from the snapshots

	// The late index's stats after the build and after the open.
	Built, Opened engine.LateStats

	// Peak RSS of each phase, each measured in its own: the build, the
	// open, the measured searches, the exhaustive searches (with recall
	// only).
	PeakIngest, PeakOpen, PeakSearch, PeakExact int64

	Searches []bench.Searches // late, with no filter, a 1% filter and a 10% filter
	Recall   []Recall         // one per configuration of Searches, when RecallQueries > 0
}

// Recall is one configuration's recall@10 against the exhaustive
// late-interaction ranking (late-exact), and the exhaustive search's p50.
type Recall struct {
	Name     string
	Recall   float64
	Queries  int
	ExactP50 time.Duration
}

// Run builds the collection, reopens it from its snapshots, searches it,
// and compares the first queries' results with the exhaustive ones.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Dir == "" || c.Docs <= 0 || c.Tokens <= 0 || c.Dim <= 0 || c.QueryTokens <= 0 || c.Queries <= 0 || c.Batch < 0 {
		return nil, errors.New("bench late: Dir, Docs, Tokens, Dim, QueryTokens and Queries are required, and Batch may not be negative")
	}
	if c.RecallQueries < 0 || c.RecallQueries > c.Queries {
		return nil, fmt.Errorf("bench late: RecallQueries %d: want 0 to Queries (%d)", c.RecallQueries, c.Queries)
	}
	if c.Tokens > tandem.MaxTokens || c.QueryTokens > tandem.MaxTokens {
		return nil, fmt.Errorf("bench late: Tokens %d, QueryTokens %d: a token matrix has at most %d rows", c.Tokens, c.QueryTokens, tandem.MaxTokens)
	}
	if err := CheckIndex(c.LateIndex, c.Dim); err != nil {
		return nil, fmt.Errorf("bench late: LateIndex %q with Dim %d: %w", c.LateIndex, c.Dim, err)
	}
	if c.SearchOnly && (c.Batch != 0 || c.Keep || c.CPUProfile != "" || c.MemProfile != "") {
		return nil, errors.New("bench late: with SearchOnly, Batch, Keep, CPUProfile and MemProfile do not apply")
	}
	if c.SearchOnly {
		if _, err := os.Stat(filepath.Join(c.Dir, "badger")); err != nil {
			return nil, fmt.Errorf("bench late: search only: %s holds no collection (keep one with Keep): %w", c.Dir, err)
		}
	} else if err := bench.CheckNew(c.Dir); err != nil {
		return nil, err
	}
	corpus := synth.DefaultTokens()
	corpus.Dim, corpus.Tokens, corpus.QueryTokens = c.Dim, c.Tokens, c.QueryTokens
	gen, err := synth.NewTokens(corpus)
	if err != nil {
		return nil, err
	}
	model := corpus.ModelSpec()
	model.LateIndex = c.LateIndex
	r := &Report{Corpus: corpus, SearchOnly: c.SearchOnly}
	if !c.SearchOnly {
		if !c.Keep {
			defer os.RemoveAll(c.Dir)
		}
		if err := build(ctx, c, gen, model, r); err != nil {
			return nil, err
		}
	}
	if err := measure(ctx, c, gen, model, r); err != nil {
		return nil, err
	}
	return r, nil
}

// build ingests the collection, waits for the late index to finish
// retraining, and closes it, filling in the build's figures of r.
func build(ctx context.Context, c Config, gen *synth.TokenGenerator, model tandem.Model, r *Report) error {
	log := c.Logger()
	schema := &tandem.Schema{IDField: "_id", Strict: true, Models: []tandem.Model{model},
		Fields: []tandem.Field{{Name: "cat", Type: tandem.Keyword}, {Name: "group", Type: tandem.Keyword}}}
	e, err := engine.Open(c.Dir, &engine.Options{Schema: schema, BatchSize: c.Batch})
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
	ahead := max(1, (16<<20)/(c.Tokens*c.Dim*4))
	next, stop := bench.Generate(c.Docs, ahead, gen.Doc)
	defer stop()
	fmt.Fprintf(log, "ingesting %d synthetic documents (%d tokens of %d values supplied, late index %q) into %s\n", c.Docs, c.Tokens, c.Dim, c.LateIndex, c.Dir)
	stopProfile, err := bench.StartCPUProfile(c.CPUProfile)
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
		if c.Quiet || time.Since(lastLine) < 5*time.Second {
			return
		}
		lastLine = time.Now()
		rate := float64(p.Docs) / p.Elapsed.Seconds()
		eta := time.Duration(float64(c.Docs-p.Docs)/rate) * time.Second
		fmt.Fprintf(log, "%d docs committed, %.0f docs/s, ETA %s, %s\n", p.Docs, rate, eta.Round(time.Second), bench.MemoryStatus())
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	if !c.Quiet {
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
						fmt.Fprintf(log, "no batch committed yet (%s elapsed), %s\n", now.Round(time.Second), bench.MemoryStatus())
					} else {
						what := "the indexes are applying them"
						if r := e.Retraining(); len(r) > 0 {
							what = "retraining " + strings.Join(r, ", ")
						}
						fmt.Fprintf(log, "%d docs committed, none for %s: %s (%s elapsed), %s\n",
							committed, (now - lastCommit).Round(time.Second), what, now.Round(time.Second), bench.MemoryStatus())
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
	r.Docs, r.Batches, r.Build, r.LastCommit = p.Docs, p.Batches, max(p.Elapsed, time.Since(start)), lastCommit
	stopProfile()
	if c.MemProfile != "" {
		if err := bench.WriteHeapProfile(c.MemProfile); err != nil {
			return err
		}
	}
	r.PeakIngest = procstat.ReadMemory().Peak
	built, err := lateStats(e, model.Name)
	if err != nil {
		return err
	}
	if built.applied != built.last {
		return fmt.Errorf("ingest returned with the late index at sequence %d of %d", built.applied, built.last)
	}
	r.Built = built.LateStats

	closeStart := time.Now()
	if err := e.Close(); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	e = nil
	r.Close = time.Since(closeStart)
	r.Disk = procstat.DirBytes(c.Dir)
	bench.NextPhase()
	return nil
}

// measure opens the collection from its snapshots, searches it and
// compares the first queries' results with the exhaustive ones.
func measure(ctx context.Context, c Config, gen *synth.TokenGenerator, model tandem.Model, r *Report) error {
	log := c.Logger()
	// Each phase's peak is its own: a user opens a collection in a fresh
	// process, not in the one that built it.
	openStart := time.Now()
	e, err := engine.Open(c.Dir, nil)
	if err != nil {
		return fmt.Errorf("open from snapshot: %w", err)
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	r.Open = time.Since(openStart)
	r.PeakOpen = procstat.ReadMemory().Peak
	opened, err := lateStats(e, model.Name)
	if err != nil {
		return err
	}
	if c.SearchOnly {
		// The queries are drawn for the collection's size.
		if opened.Docs != c.Docs {
			return fmt.Errorf("bench late: search only: %s holds %d documents, not Docs (%d)", c.Dir, opened.Docs, c.Docs)
		}
		r.Docs, r.Built = opened.Docs, opened.LateStats
	}
	r.Opened = opened.LateStats
	bench.NextPhase()

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
	fmt.Fprintf(log, "searching: %d queries of %d tokens per configuration\n", c.Queries, c.QueryTokens)
	lat := make([][]time.Duration, len(configs))
	hits := make([]int, len(configs))
	// found[c][q] is the top 10 of configuration c for query q, kept for
	// the first RecallQueries queries.
	found := make([][][]string, len(configs))
	stopSearchProfile, err := bench.StartCPUProfile(c.SearchCPUProfile)
	if err != nil {
		return err
	}
	defer stopSearchProfile()
	// Configurations alternate query by query, so that the machine's
	// load falls on all alike; the first 10 queries warm up.
	for qi := -10; qi < c.Queries; qi++ {
		q, _ := gen.Query(qi+10, c.Docs)
		for ci, cf := range configs {
			ids, took, err := search("late", cf.filter, q)
			if err != nil {
				return fmt.Errorf("search %s, query %d: %w", cf.name, qi+10, err)
			}
			if qi < 0 {
				continue
			}
			lat[ci] = append(lat[ci], took)
			hits[ci] += len(ids)
			if qi < c.RecallQueries {
				found[ci] = append(found[ci], ids)
			}
		}
	}
	stopSearchProfile()
	r.PeakSearch = procstat.ReadMemory().Peak
	bench.NextPhase()
	for ci, cf := range configs {
		r.Searches = append(r.Searches, bench.Measure(cf.name, lat[ci], hits[ci]))
	}

	// The exact reference, query after query in the same order; it reads
	// every allowed document's full-precision tokens.
	if c.RecallQueries > 0 {
		fmt.Fprintf(log, "exhaustive: %d queries per configuration\n", c.RecallQueries)
	}
	recall := make([]float64, len(configs))
	exactLat := make([][]time.Duration, len(configs))
	for qi := range c.RecallQueries {
		q, _ := gen.Query(qi+10, c.Docs)
		for ci, cf := range configs {
			ids, took, err := search("late-exact", cf.filter, q)
			if err != nil {
				return fmt.Errorf("exhaustive search %s, query %d: %w", cf.name, qi+10, err)
			}
			exactLat[ci] = append(exactLat[ci], took)
			recall[ci] += bench.Recall(found[ci][qi], ids)
		}
	}
	r.PeakExact = procstat.ReadMemory().Peak
	for ci, cf := range configs {
		if c.RecallQueries == 0 {
			break
		}
		r.Recall = append(r.Recall, Recall{Name: cf.name, Recall: recall[ci] / float64(c.RecallQueries), Queries: c.RecallQueries,
			ExactP50: bench.Percentile(exactLat[ci], 0.50)})
	}
	err = e.Close()
	e = nil
	if err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

// CheckIndex reports whether description is a late-interaction index
// that dim-dimensional tokens can have. The engine would find a bad one
// only after creating the collection; Run says so before.
func CheckIndex(description string, dim int) error {
	return latecollect.CheckDescription(description, dim)
}

// WriteMarkdown writes the report as a Markdown table.
func (r *Report) WriteMarkdown(w io.Writer) {
	tokensIn := int64(r.Docs) * int64(r.Corpus.Tokens)
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| documents | %d (%d tokens of %d values each, supplied; %d centres in %d topics; %d-token queries) |\n",
		r.Docs, r.Corpus.Tokens, r.Corpus.Dim, r.Corpus.Centres, r.Corpus.Topics, r.Corpus.QueryTokens)
	fmt.Fprintf(w, "| tokens | %d in the late index (%d supplied) |\n", r.Built.Tokens, tokensIn)
	index := r.Built.Description
	if r.Built.Centroids > 0 {
		index += fmt.Sprintf(", %d centroids, drift %.3f", r.Built.Centroids, r.Built.Drift)
	}
	fmt.Fprintf(w, "| late index | %s |\n", index)
	if r.SearchOnly {
		fmt.Fprintf(w, "| build | none: an existing collection, searched only |\n")
	} else {
		r.writeBuild(w, tokensIn)
	}
	fmt.Fprintf(w, "| late index memory: opened from snapshot | %s, %.1f bytes/token |\n", bench.Size(r.Opened.MemoryBytes), r.Opened.BytesPerToken)
	fmt.Fprintf(w, "| peak RSS: open from snapshot | %s |\n", bench.Size(r.PeakOpen))
	fmt.Fprintf(w, "| peak RSS: searches | %s |\n", bench.Size(r.PeakSearch))
	if len(r.Recall) > 0 {
		fmt.Fprintf(w, "| peak RSS: exhaustive searches | %s |\n", bench.Size(r.PeakExact))
	}
	fmt.Fprintf(w, "| open from snapshot | %s |\n", r.Open.Round(time.Millisecond))
	for _, s := range r.Searches {
		fmt.Fprintln(w, s.Row())
	}
	for _, x := range r.Recall {
		fmt.Fprintf(w, "| %s, recall@10 against late-exact | %.3f (%d queries; exhaustive p50 %.1f ms) |\n",
			x.Name, x.Recall, x.Queries, bench.Ms(x.ExactP50))
	}
}

// writeBuild writes the build's rows.
func (r *Report) writeBuild(w io.Writer, tokensIn int64) {
	fmt.Fprintf(w, "| build (ingest until the late index applied everything and finished retraining) | %s, %.0f documents/s, %.0f tokens/s (%d atomic batches; last commit at %s) |\n",
		r.Build.Round(time.Millisecond), float64(r.Docs)/r.Build.Seconds(), float64(tokensIn)/r.Build.Seconds(), r.Batches, r.LastCommit.Round(time.Millisecond))
	fmt.Fprintf(w, "| close (snapshots) | %s |\n", r.Close.Round(time.Millisecond))
	fmt.Fprintf(w, "| disk | %s, %.1f bytes/token |\n", bench.Size(r.Disk), float64(r.Disk)/float64(max(1, r.Built.Tokens)))
	fmt.Fprintf(w, "| late index memory: after build | %s, %.1f bytes/token |\n", bench.Size(r.Built.MemoryBytes), r.Built.BytesPerToken)
	fmt.Fprintf(w, "| peak RSS: ingest | %s |\n", bench.Size(r.PeakIngest))
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
