package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/procstat"
	"github.com/tandemsearch/tandem/internal/synth"
)

// SampleInterval is how often a run reads the process's memory to keep
// each phase's peaks of anonymous and mapped-file memory: one read of
// /proc/self/status, cheap enough not to show in the figures.
const SampleInterval = 100 * time.Millisecond

// Config is one run of the benchmark. Dir, Docs and Queries are required;
// RecallQueries may be 0 (no recall) and at most Queries.
type Config struct {
	Dir           string // directory for the collection; must not exist (but see SearchOnly)
	Docs          int    // documents to ingest
	Batch         int    // documents per atomic batch (0: the engine's)
	Queries       int    // queries per measured search configuration
	RecallQueries int    // the first queries whose dense top 10 is compared with the exact one
	Keep          bool   // keep the collection afterwards
	// TextFrom, when set, is a BEIR collection directory whose term
	// statistics the documents' text and the queries follow
	// (synth.TextModel) instead of Zipfian words; with SearchOnly, the
	// one the collection was built with.
	TextFrom string
	// LoadRate is the rate, in searches a second, of a search load run
	// beside the ingest (Report.Load); 0 runs none.
	LoadRate float64
	// StallDumps, when set, is a directory into which the load writes
	// every goroutine's stack when one of its searches has waited 2 s (at
	// most 3 dumps, a minute apart).
	StallDumps string

	// SearchOnly opens the collection in Dir, which an earlier run kept,
	// and only searches it (the phase "open from snapshot, then the
	// searches"), so that two binaries can be compared on copies of one
	// collection. Docs, Batch, Keep, CPUProfile and MemProfile must then
	// be zero: the documents are the collection's, and it is kept.
	SearchOnly bool

	// The progress lines and the profiles; the search profile covers the
	// searches after the open from the snapshot.
	bench.Output
}

// Report is what a run measured.
type Report struct {
	Corpus     synth.Corpus // the generator's parameters
	TextModel  string       // the real collection the text follows (Corpus.TextFrom), described
	Docs       int          // documents ingested, or the collection's (SearchOnly)
	Batches    int          // atomic batches they were committed in
	SearchOnly bool         // the run only opened and searched (Config.SearchOnly)

	// Disk is the collection's bytes on disk after the close that follows
	// the ingest, DiskParts the same by top-level entry of the directory
	// (badger, bleve, snapshots...). Not measured with SearchOnly.
	Disk      int64
	DiskParts []DiskPart

	// Phases in the order the run went through them: the ingest, the
	// close that writes the snapshots, the open from the snapshots then
	// the searches, the open with the dense index rebuilt from Badger
	// then the same searches, and the close that snapshots the rebuilt
	// index; with SearchOnly, only the open and its searches.
	Phases []Phase

	Queries       int           // queries measured per search configuration
	RecallQueries int           // the first of them, whose recall was measured
	Exact         time.Duration // computing their exact top 10 by brute force
	// RetrainWait is the time the ingest's end waited for the dense
	// retraining it left running (included in the ingest phase's time,
	// so that the collection closes with the index the ingest grew to).
	RetrainWait time.Duration
	// Load is what the search load beside the ingest measured (nil
	// without Config.LoadRate).
	Load *Load
}

// DiskPart is the disk space one entry of the collection directory takes.
type DiskPart struct {
	Name  string
	Bytes int64
}

// Phase is one phase of a run, with its own memory peaks (the Go runtime
// returns its free memory and the peaks are reset between phases, since
// a user opens a collection in a fresh process, not in the one that built
// it).
type Phase struct {
	Name string
	// Took is the phase's work before any searches: the ingest, the close
	// or the open.
	Took time.Duration
	// Memory is the phase's peaks, the searches included.
	Memory procstat.Peaks
	// Searches are the measured search configurations, in the order of
	// Configs; none for the ingest and the closes.
	Searches []Search
	// Dense is the dense index as the open found it (opens only).
	Dense dense.Stats
}

// Search is what one search configuration measured in a phase.
type Search struct {
	bench.Searches
	// Recall is the mean recall@10 against the exact top 10, over the
	// first Report.RecallQueries queries; -1 where not measured (BM25, or
	// RecallQueries 0).
	Recall float64
}

// The names of the phases, as the tables print them.
const (
	PhaseIngest       = "ingest"
	PhaseClose        = "close (writes the snapshots)"
	PhaseOpen         = "open from snapshot, then the searches"
	PhaseOpenNoSnap   = "open (no dense snapshot: rebuilt from Badger), then the searches"
	PhaseRebuild      = "open with the dense index rebuilt from Badger, then the searches"
	PhaseCloseRebuilt = "close (writes the rebuilt dense index's snapshot)"
)

// snapshotDir is where the engine keeps the derived indexes' snapshots
// (package engine, "Layout of a collection directory").
const snapshotDir = "snapshots"

// Run builds the collection, reopens it twice and searches it (or, with
// SearchOnly, opens the existing one and searches it), then computes the
// exact dense top 10 of the first RecallQueries queries.
func Run(ctx context.Context, c Config) (*Report, error) {
	if c.Dir == "" || c.Queries <= 0 || c.RecallQueries < 0 || c.RecallQueries > c.Queries {
		return nil, fmt.Errorf("bench ingest: Dir and Queries are required, and RecallQueries (%d) must be 0 to Queries (%d)", c.RecallQueries, c.Queries)
	}
	if c.SearchOnly && (c.Docs != 0 || c.Batch != 0 || c.Keep || c.CPUProfile != "" || c.MemProfile != "" || c.LoadRate != 0 || c.StallDumps != "") {
		return nil, errors.New("bench ingest: with SearchOnly, Docs, Batch, Keep, CPUProfile, MemProfile, LoadRate and StallDumps do not apply")
	}
	if c.LoadRate < 0 {
		return nil, fmt.Errorf("bench ingest: LoadRate %v is negative", c.LoadRate)
	}
	if !c.SearchOnly && c.Docs <= 0 {
		return nil, errors.New("bench ingest: Docs is required")
	}
	corpus := synth.Default()
	corpus.TextFrom = c.TextFrom
	gen, err := synth.New(corpus)
	if err != nil {
		return nil, err
	}
	r := &run{c: c, log: c.Logger(), gen: gen, rep: &Report{Corpus: corpus, SearchOnly: c.SearchOnly, Queries: c.Queries, RecallQueries: c.RecallQueries}}
	if m := gen.TextModel(); m != nil {
		r.rep.TextModel = m.Stats()
	}
	if c.SearchOnly {
		if _, err := os.Stat(filepath.Join(c.Dir, "badger")); err != nil {
			return nil, fmt.Errorf("bench ingest: search only: %s holds no collection (keep one with Keep): %w", c.Dir, err)
		}
	} else if err := bench.CheckNew(c.Dir); err != nil {
		return nil, err
	}
	r.mem = procstat.StartSampler(SampleInterval)
	defer r.mem.Stop()
	if c.SearchOnly {
		err = r.openAndSearch(ctx, PhaseOpen, c.SearchCPUProfile, false)
	} else {
		if !c.Keep {
			defer os.RemoveAll(c.Dir)
		}
		err = r.full(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err := r.recall(); err != nil {
		return nil, err
	}
	return r.rep, nil
}

// run is the state of one Run.
type run struct {
	c   Config
	log io.Writer
	gen *synth.Generator
	mem *procstat.Sampler
	rep *Report
	// found[p][ci] holds, for phase p of rep.Phases and configuration ci,
	// the ids of the top 10 of each of the first RecallQueries queries.
	found map[int][][][]string
}

// nextPhase starts a phase whose peaks are its own: the Go runtime returns
// the memory it holds free, and the kernel's and the sampler's peaks
// restart from the current figures.
func (r *run) nextPhase() {
	bench.NextPhase()
	r.mem.Reset()
}

// endPhase records a phase that took took, with the peaks since the last
// nextPhase, and returns its index in rep.Phases.
func (r *run) endPhase(name string, took time.Duration, searches []Search) int {
	r.rep.Phases = append(r.rep.Phases, Phase{Name: name, Took: took, Memory: r.mem.Peaks(), Searches: searches})
	return len(r.rep.Phases) - 1
}

// full builds the collection and goes through every phase.
func (r *run) full(ctx context.Context) error {
	c, corpus := r.c, r.rep.Corpus
	schema := &tandem.Schema{IDField: "_id", Strict: true, Models: []tandem.Model{corpus.ModelSpec()},
		Fields: []tandem.Field{{Name: "text", Type: tandem.Text}, {Name: "cat", Type: tandem.Keyword}, {Name: "year", Type: tandem.Number}}}
	r.nextPhase()
	e, err := engine.Open(c.Dir, &engine.Options{Schema: schema, BatchSize: c.Batch})
	if err != nil {
		return err
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()

	// Documents are generated ahead by one goroutine per core, in order.
	next, stop := bench.Generate(c.Docs, 4096, r.gen.Doc)
	defer stop()
	var last time.Time
	fmt.Fprintf(r.log, "ingesting %d synthetic documents (%d-d vectors supplied) into %s\n", c.Docs, corpus.Dim, c.Dir)
	stopProfile, err := bench.StartCPUProfile(c.CPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	stopLoad := func() *Load { return nil }
	if c.LoadRate > 0 {
		stopLoad = startSearchLoad(ctx, e, corpus.Model, r.gen, c.LoadRate, c.StallDumps)
	}
	defer func() { stopLoad() }()
	p, err := e.IndexStream(ctx, next, engine.StreamOptions{Progress: func(p engine.Progress) {
		if c.Quiet || time.Since(last) < 5*time.Second {
			return
		}
		last = time.Now()
		rate := float64(p.Docs) / p.Elapsed.Seconds()
		eta := time.Duration(float64(c.Docs-p.Docs)/rate) * time.Second
		var retraining string
		if names := e.Retraining(); len(names) > 0 {
			retraining = ", retraining " + strings.Join(names, ", ")
		}
		fmt.Fprintf(r.log, "%d docs, %.0f docs/s, ETA %s, %s%s\n", p.Docs, rate, eta.Round(time.Second), bench.MemoryStatus(), retraining)
	}})
	if err != nil {
		return err
	}
	// A retraining the ingest left running finishes before the close,
	// which would cancel it (the next open would start it again).
	waitStart := time.Now()
	if names := e.Retraining(); len(names) > 0 {
		fmt.Fprintf(r.log, "waiting for the retraining of %s\n", strings.Join(names, ", "))
	}
	if err := e.WaitRetrain(ctx); err != nil {
		return err
	}
	r.rep.RetrainWait = time.Since(waitStart)
	r.rep.Load = stopLoad()
	stopLoad = func() *Load { return nil }
	stopProfile()
	stop()
	r.rep.Docs, r.rep.Batches = p.Docs, p.Batches
	r.endPhase(PhaseIngest, p.Elapsed+r.rep.RetrainWait, nil)
	if c.MemProfile != "" {
		if err := bench.WriteHeapProfile(c.MemProfile); err != nil {
			return err
		}
	}

	r.nextPhase()
	start := time.Now()
	err = e.Close()
	e = nil
	if err != nil {
		return err
	}
	r.endPhase(PhaseClose, time.Since(start), nil)
	r.rep.Disk, r.rep.DiskParts = diskUse(c.Dir)

	if err := r.openAndSearch(ctx, PhaseOpen, c.SearchCPUProfile, false); err != nil {
		return err
	}
	// Without the dense snapshot, Open rebuilds the index from Badger.
	snaps, _ := filepath.Glob(filepath.Join(c.Dir, snapshotDir, "*"))
	for _, s := range snaps {
		if err := os.Remove(s); err != nil {
			return err
		}
	}
	return r.openAndSearch(ctx, PhaseRebuild, "", true)
}

// openAndSearch opens the collection, checks that it is the synthetic one
// of rep.Docs documents (or, with SearchOnly, takes its count), runs the
// searches and closes it. It records the open and its searches as one
// phase, and a close that snapshots a rebuilt dense index as another.
func (r *run) openAndSearch(ctx context.Context, name, profile string, rebuild bool) error {
	r.nextPhase()
	start := time.Now()
	e, err := engine.Open(r.c.Dir, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	took := time.Since(start)
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	st, err := r.checkCollection(e)
	if err != nil {
		return err
	}
	switch {
	case rebuild && st.SnapshotSeq != 0:
		return fmt.Errorf("%s: the dense index was loaded from a snapshot (sequence %d) after the snapshots were removed", name, st.SnapshotSeq)
	case !rebuild && st.SnapshotSeq == 0:
		name = PhaseOpenNoSnap
	}
	m := r.mem.Peaks()
	fmt.Fprintf(r.log, "%s: opened in %s (peak RSS %s, anonymous %s, mapped files %s so far); %d queries per configuration\n",
		name, took.Round(time.Millisecond), bench.Size(m.RSS), bench.Size(m.Anon), bench.Size(m.File), r.c.Queries)
	searches, found, err := r.search(ctx, e, profile)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	p := r.endPhase(name, took, searches)
	r.rep.Phases[p].Dense = st
	if r.found == nil {
		r.found = map[int][][][]string{}
	}
	r.found[p] = found
	// A close that writes nothing is no phase of its own; the close of a
	// rebuilt index writes its snapshot.
	r.nextPhase()
	start = time.Now()
	err = e.Close()
	e = nil
	if err != nil {
		return fmt.Errorf("%s: close: %w", name, err)
	}
	if rebuild {
		r.endPhase(PhaseCloseRebuilt, time.Since(start), nil)
	}
	return nil
}

// checkCollection checks that e holds the documents of the synthetic
// corpus, 0 to rep.Docs-1 (with SearchOnly, sets rep.Docs to its count),
// and returns its dense index's stats.
func (r *run) checkCollection(e *engine.Engine) (dense.Stats, error) {
	s, err := e.Stats()
	if err != nil {
		return dense.Stats{}, err
	}
	corpus := r.rep.Corpus
	i := slices.IndexFunc(s.Dense, func(d dense.Stats) bool { return d.Model == corpus.Model })
	if i < 0 {
		return dense.Stats{}, fmt.Errorf("%s: no dense index of %s: not a collection of tandem bench ingest", r.c.Dir, corpus.Model)
	}
	if r.rep.Docs == 0 {
		r.rep.Docs = int(s.Docs)
	}
	if s.Docs != uint64(r.rep.Docs) || s.Dense[i].Vectors != r.rep.Docs {
		return dense.Stats{}, fmt.Errorf("%s: %d documents and %d vectors, want %d of each", r.c.Dir, s.Docs, s.Dense[i].Vectors, r.rep.Docs)
	}
	// Recall compares the hits with the generator's vectors, so the
	// collection must be the generator's: a collection built with another
	// --text-from (whose text draws from the random stream the vectors
	// follow) has other vectors under the same ids.
	for _, n := range []int{0, r.rep.Docs - 1} {
		d, ok, err := e.Get(context.Background(), synth.ID(n))
		if err != nil {
			return dense.Stats{}, fmt.Errorf("%s: document %s: %w", r.c.Dir, synth.ID(n), err)
		}
		if want := r.gen.DocText(n); !ok || d.Fields["text"] != want {
			return dense.Stats{}, fmt.Errorf("%s: document %s is not the generator's (text %.40q, want %.40q): build and search with the same --text-from", r.c.Dir, synth.ID(n), d.Fields["text"], want)
		}
	}
	return s.Dense[i], nil
}

// diskUse is the disk space dir takes, in all and by top-level entry.
func diskUse(dir string) (int64, []DiskPart) {
	entries, _ := os.ReadDir(dir)
	var total int64
	var parts []DiskPart
	for _, en := range entries {
		n := procstat.DirBytes(filepath.Join(dir, en.Name()))
		total += n
		parts = append(parts, DiskPart{en.Name(), n})
	}
	return total, parts
}
