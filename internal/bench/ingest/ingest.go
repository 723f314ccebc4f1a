package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
)

// Config is one run of the benchmark. Dir, Docs and Queries are required.
type Config struct {
	Dir     string // directory for the collection; must not exist
	Docs    int    // documents to ingest
	Batch   int    // documents per atomic batch (0: the engine's)
	Queries int    // queries per measured search configuration
	Keep    bool   // keep the collection afterwards

	bench.Output // the progress lines and the profiles
}

// Report is what a run measured.
type Report struct {
	Corpus  synth.Corpus // the generator's parameters
	Docs    int          // documents ingested
	Batches int          // atomic batches they were committed in
	Ingest  time.Duration
	Close   time.Duration // closing after the ingest, which writes the snapshots
	Disk    int64         // the collection's bytes on disk after the close

	// Peak RSS of each phase, each measured in its own: the ingest, an
	// open from the snapshots, an open that rebuilds the dense index
	// from Badger followed by the searches.
	PeakIngest, PeakOpen, PeakRebuild int64

	OpenSnapshot, OpenRebuild time.Duration
	Searches                  []bench.Searches // bm25 and dense, without and with a 1% filter
}

// Run builds the collection, reopens it twice and searches it.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Dir == "" || c.Docs <= 0 || c.Queries <= 0 {
		return nil, errors.New("bench ingest: Dir, Docs and Queries are required")
	}
	if err := bench.CheckNew(c.Dir); err != nil {
		return nil, err
	}
	log := c.Logger()
	if !c.Keep {
		defer os.RemoveAll(c.Dir)
	}
	corpus := synth.Default()
	gen, err := synth.New(corpus)
	if err != nil {
		return nil, err
	}
	schema := &tandem.Schema{IDField: "_id", Strict: true, Models: []tandem.Model{corpus.ModelSpec()},
		Fields: []tandem.Field{{Name: "text", Type: tandem.Text}, {Name: "cat", Type: tandem.Keyword}, {Name: "year", Type: tandem.Number}}}
	e, err := engine.Open(c.Dir, &engine.Options{Schema: schema, BatchSize: c.Batch})
	if err != nil {
		return nil, err
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()

	// Documents are generated ahead by one goroutine per core, in order.
	next, stop := bench.Generate(c.Docs, 4096, gen.Doc)
	defer stop()
	var last time.Time
	fmt.Fprintf(log, "ingesting %d synthetic documents (%d-d vectors supplied) into %s\n", c.Docs, corpus.Dim, c.Dir)
	stopProfile, err := bench.StartCPUProfile(c.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopProfile()
	p, err := e.IndexStream(ctx, next, engine.StreamOptions{Progress: func(p engine.Progress) {
		if c.Quiet || time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		rate := float64(p.Docs) / p.Elapsed.Seconds()
		eta := time.Duration(float64(c.Docs-p.Docs)/rate) * time.Second
		fmt.Fprintf(log, "%d docs, %.0f docs/s, ETA %s, %s\n", p.Docs, rate, eta.Round(time.Second), bench.MemoryStatus())
	}})
	if err != nil {
		return nil, err
	}
	r := &Report{Corpus: corpus, Docs: p.Docs, Batches: p.Batches, Ingest: p.Elapsed}
	stopProfile()
	// Each phase's peak is its own: a user opens a collection in a fresh
	// process, not in the one that built it.
	r.PeakIngest = procstat.ReadMemory().Peak
	procstat.ResetPeak()
	if c.MemProfile != "" {
		if err := bench.WriteHeapProfile(c.MemProfile); err != nil {
			return nil, err
		}
	}
	closeStart := time.Now()
	if err := e.Close(); err != nil {
		return nil, err
	}
	r.Close = time.Since(closeStart)
	r.Disk = procstat.DirBytes(c.Dir)
	bench.NextPhase()

	openStart := time.Now()
	if e, err = engine.Open(c.Dir, nil); err != nil {
		return nil, err
	}
	r.OpenSnapshot = time.Since(openStart)
	if err := e.Close(); err != nil {
		return nil, err
	}
	r.PeakOpen = procstat.ReadMemory().Peak
	bench.NextPhase()
	// Without the dense snapshot, Open rebuilds the index from Badger.
	snaps, _ := filepath.Glob(filepath.Join(c.Dir, "snapshots", "*"))
	for _, s := range snaps {
		os.Remove(s)
	}
	openStart = time.Now()
	if e, err = engine.Open(c.Dir, nil); err != nil {
		return nil, err
	}
	r.OpenRebuild = time.Since(openStart)
	peakRebuild := procstat.ReadMemory().Peak

	fmt.Fprintf(log, "searching: %d queries per configuration\n", c.Queries)
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
	stopSearchProfile, err := bench.StartCPUProfile(c.SearchCPUProfile)
	if err != nil {
		return nil, err
	}
	defer stopSearchProfile()
	// Configurations alternate query by query, so that the machine's
	// load falls on all alike; the first 10 queries warm up.
	for qi := -10; qi < c.Queries; qi++ {
		text, vec := gen.Query(qi + 10)
		for ci, cf := range configs {
			req := engine.Request{Text: text, K: 10, Retrievers: cf.rets, Filter: []byte(cf.filter)}
			if cf.rets[0] == "dense" {
				req.Vectors = map[string]tandem.Vectors{corpus.Model: {Dense: vec}}
			}
			start := time.Now()
			res, err := e.Search(ctx, req)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cf.name, err)
			}
			if qi >= 0 {
				lat[ci] = append(lat[ci], time.Since(start))
				hits[ci] += len(res.Hits)
			}
		}
	}
	err = e.Close()
	e = nil
	if err != nil {
		return nil, err
	}
	r.PeakRebuild = max(peakRebuild, procstat.ReadMemory().Peak)
	for ci, cf := range configs {
		r.Searches = append(r.Searches, bench.Measure(cf.name, lat[ci], hits[ci]))
	}
	return r, nil
}

// WriteMarkdown writes the report as a Markdown table.
func (r *Report) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(w, "| documents | %d (%d to %d words, %d-d vectors supplied, %d categories) |\n", r.Docs, r.Corpus.MinWords, r.Corpus.MaxWords, r.Corpus.Dim, r.Corpus.Categories)
	fmt.Fprintf(w, "| ingest | %s, %.0f documents/s (%d atomic batches) |\n", r.Ingest.Round(time.Second), float64(r.Docs)/r.Ingest.Seconds(), r.Batches)
	fmt.Fprintf(w, "| close (snapshots) | %s |\n", r.Close.Round(time.Millisecond))
	fmt.Fprintf(w, "| disk | %s, %.0f bytes/document |\n", bench.Size(r.Disk), float64(r.Disk)/float64(r.Docs))
	fmt.Fprintf(w, "| peak RSS: ingest | %s |\n", bench.Size(r.PeakIngest))
	fmt.Fprintf(w, "| peak RSS: open from snapshot | %s |\n", bench.Size(r.PeakOpen))
	fmt.Fprintf(w, "| peak RSS: open with dense rebuild, then searches | %s |\n", bench.Size(r.PeakRebuild))
	fmt.Fprintf(w, "| open from snapshot | %s |\n", r.OpenSnapshot.Round(time.Millisecond))
	fmt.Fprintf(w, "| open with dense rebuild | %s |\n", r.OpenRebuild.Round(time.Millisecond))
	for _, s := range r.Searches {
		fmt.Fprintln(w, s.Row())
	}
}
