package soak

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/malloc"
	"github.com/tandemsearch/tandem/internal/procstat"
)

// The soak's bounds on growth after warm-up (the first fifth of the run, at
// most maxWarmup: long enough for the Go heap, Badger's memtables and
// caches and the derived indexes to reach their working sizes). The end of a
// run is the smallest of its last three samples: a leak raises every later
// sample, while one GC cycle or one Badger flush raises only the sample it
// lands in.
const (
	// rssGrowth and rssSlack bound the resident set at the end to
	// the warm-up's peak plus 25% or 64 MiB, whichever is larger. A flat
	// process still moves that much: the Go heap may reach twice its live
	// size before a collection (GOGC=100); Badger keeps up to three 16 MiB
	// memtables (storage.DefaultMemTableSize: one taking writes, two
	// flushing), and a flush builds its table in buffers up to twice a
	// memtable's size; and Badger's block cache fills as compactions
	// write new tables.
	rssGrowth = 0.25
	rssSlack  = 64 << 20
	// goroutineSlack bounds goroutines at the end to the warm-up's
	// peak plus this many. Each sample records the floor of readings four
	// times a second, which leaves out most of what in-flight searches and
	// writes start; what remains varies by a few (Badger's compactions,
	// a search that spans the interval), while a leak grows without bound.
	goroutineSlack = 16
	// fileSlack bounds open files the same way (their floor too):
	// Badger opens a table file per flush and closes those a compaction
	// merges, and Bleve opens and merges segment files, so the count
	// moves with the data, not with time.
	fileSlack = 16
	// maxWarmup caps the warm-up, otherwise a fifth of the run.
	maxWarmup = 10 * time.Minute
)

// judgesMemory says whether the RSS bound applies: not under the race
// detector, whose own memory is no measure of Tandem's. ThreadSanitizer
// keeps shadow and metadata for every heap address and sync object a run
// touches, and its allocator for goroutine histories, none of which goes
// back to the OS (Go's documentation: memory may grow 5-10x), while the
// Go and C heaps stay where a run without it has them. A race run also
// does much less work in its time, so its minutes are all warm-up: it
// checks correctness, goroutines and open files, and the memory bound is
// the job of the long run without it. docs/soak.md has the runs, with and
// without the race detector, that this rests on.
const judgesMemory = !raceEnabled

// Sample is one look at the process.
type Sample struct {
	Elapsed         time.Duration
	RSS, HWM, Heap  int64 // the resident set, its peak (VmHWM) and the Go heap in use (HeapInuse), in bytes
	Anon, File      int64 // RSS's anonymous and file-backed parts (RssAnon, RssFile)
	GoSys           int64 // what the Go runtime holds from the OS (Sys - HeapReleased)
	CInUse, CHeld   int64 // the C heap (FAISS, ONNX Runtime): malloc's bytes in use, and held from the OS
	Disk            int64 // the collection's bytes on disk (allocated blocks: Badger's logs are sparse)
	Goroutines      int
	Files           int
	Docs            uint64
	Searches        uint64 // cumulative
	Writes, Deletes uint64 // documents upserted and deleted, cumulative
	Errors          uint64
	Violations      uint64
	LogEntries      uint64 // entries the change log holds (storage.LogStats)
}

// Report is what a soak saw.
type Report struct {
	Config   Config // as run, its Warmup filled in
	Samples  []Sample
	Prefill  time.Duration
	Searches uint64
	Hits     uint64
	PerMode  map[string]uint64
	Upserts  uint64 // documents
	Created  uint64 // of which ids not live when picked (new or re-created)
	Deletes  uint64 // documents
	// Errors are the engine's errors; Violations the hits that broke a
	// check (first few of each kept, all counted).
	Errors, Violations         []string
	ErrorCount, ViolationCount uint64
	ViolationKinds             map[string]uint64
	Growth                     []string // bounds exceeded after warm-up
	Interrupted                bool
	Final                      string // the end-of-run check of storage against the ledger
}

// Verdict is nil when the soak passed, else an error that gives every
// reason it failed: an interruption, engine errors, violating hits (with
// the first of each), the bounds exceeded and the end-of-run check.
func (r *Report) Verdict() error {
	var why []string
	if r.Interrupted {
		why = append(why, "interrupted")
	}
	if r.ErrorCount > 0 {
		why = append(why, fmt.Sprintf("%d engine errors (first: %s)", r.ErrorCount, r.Errors[0]))
	}
	if r.ViolationCount > 0 {
		why = append(why, fmt.Sprintf("%d violating hits (first: %s)", r.ViolationCount, r.Violations[0]))
	}
	why = append(why, r.Growth...)
	if r.Final != "" {
		why = append(why, r.Final)
	}
	if len(why) > 0 {
		return fmt.Errorf("soak failed: %s", strings.Join(why, "; "))
	}
	return nil
}

// takeSample looks at the process.
func takeSample(e *engine.Engine, elapsed time.Duration, k *counters) Sample {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := Sample{Elapsed: elapsed, Heap: int64(ms.HeapInuse), Goroutines: runtime.NumGoroutine(), Docs: e.Count(),
		Searches: k.searches.Load(), Writes: k.upserts.Load(), Deletes: k.deletes.Load(),
		Errors: k.errors.Load(), Violations: k.violations.Load()}
	s.LogEntries = e.Shard().Store().LogStats().Entries
	m := procstat.ReadMemory()
	s.RSS, s.HWM, s.Anon, s.File = m.RSS, m.Peak, m.Anon, m.File
	s.GoSys = int64(ms.Sys - ms.HeapReleased)
	s.Files = procstat.OpenFiles()
	if u, h, ok := malloc.Stats(); ok {
		s.CInUse, s.CHeld = int64(u), int64(h)
	}
	return s
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// progressLine is the line printed with each sample.
func progressLine(samples []Sample, total time.Duration) string {
	s := samples[len(samples)-1]
	var searchRate, writeRate float64
	if len(samples) > 1 {
		p := samples[len(samples)-2]
		if dt := (s.Elapsed - p.Elapsed).Seconds(); dt > 0 {
			searchRate = float64(s.Searches-p.Searches) / dt
			writeRate = float64(s.Writes+s.Deletes-p.Writes-p.Deletes) / dt
		}
	}
	eta := max(0, total-s.Elapsed)
	return fmt.Sprintf("soak: %s of %s (ETA %s): %.1f searches/s, %.1f writes/s, %d searches, %d upserted, %d deleted, %d errors, %d violations | RSS %.0f MiB (%.0f anonymous, %.0f files; peak %.0f), Go heap %.0f MiB of %.0f held, C heap %.0f MiB of %.0f held, %d goroutines, %d open files, disk %.0f MiB, %d docs",
		s.Elapsed.Round(time.Second), total, eta.Round(time.Second), searchRate, writeRate, s.Searches, s.Writes, s.Deletes, s.Errors, s.Violations,
		mib(s.RSS), mib(s.Anon), mib(s.File), mib(s.HWM), mib(s.Heap), mib(s.GoSys), mib(s.CInUse), mib(s.CHeld), s.Goroutines, s.Files, mib(s.Disk), s.Docs)
}

// judgeGrowth applies the bounds: the end of the run (the smallest of its
// last three samples after warm-up) against the warm-up's peak (its
// samples up to warmup, the first taken as the load starts). The caller
// adds to warmup the delay a sample due at its end may take. RSS is
// judged only when memory is (judgesMemory).
func judgeGrowth(samples []Sample, warmup time.Duration, memory bool) []string {
	var base, tail []Sample
	for _, s := range samples {
		if s.Elapsed <= warmup {
			base = append(base, s)
		} else {
			tail = append(tail, s)
		}
	}
	if len(base) == 0 || len(tail) == 0 {
		return []string{fmt.Sprintf("no growth check: %d samples in the warm-up of %s and %d after it (lengthen --duration or shorten --sample)", len(base), warmup, len(tail))}
	}
	tail = tail[max(0, len(tail)-3):]
	peak := func(ss []Sample, f func(Sample) int64) int64 {
		m := f(ss[0])
		for _, s := range ss[1:] {
			m = max(m, f(s))
		}
		return m
	}
	low := func(ss []Sample, f func(Sample) int64) int64 {
		m := f(ss[0])
		for _, s := range ss[1:] {
			m = min(m, f(s))
		}
		return m
	}
	var out []string
	rss := func(s Sample) int64 { return s.RSS }
	baseRSS, endRSS := peak(base, rss), low(tail, rss)
	if limit := baseRSS + max(int64(float64(baseRSS)*rssGrowth), rssSlack); memory && endRSS > limit {
		out = append(out, fmt.Sprintf("RSS grew from %.0f MiB (warm-up peak) to %.0f MiB, above the bound of %.0f MiB", mib(baseRSS), mib(endRSS), mib(limit)))
	}
	gor := func(s Sample) int64 { return int64(s.Goroutines) }
	if b, e := peak(base, gor), low(tail, gor); e > b+goroutineSlack {
		out = append(out, fmt.Sprintf("goroutines grew from %d (warm-up peak) to %d, more than %d more", b, e, goroutineSlack))
	}
	files := func(s Sample) int64 { return int64(s.Files) }
	if b, e := peak(base, files), low(tail, files); e > b+fileSlack {
		out = append(out, fmt.Sprintf("open files grew from %d (warm-up peak) to %d, more than %d more", b, e, fileSlack))
	}
	for _, s := range samples {
		if s.LogEntries > logBound {
			out = append(out, fmt.Sprintf("the change log held %d entries at %s, above the bound of %d", s.LogEntries, s.Elapsed.Round(time.Second), logBound))
			break
		}
	}
	return out
}

// logBound bounds the change log's entries at any time, whatever the
// number of writes: the log is kept from the lowest sequence every derived
// index has saved, and the index that saves least often (dense, every
// dense.DefaultSnapshotEvery sequences) holds it back at most that far
// plus the engine's truncation step; twice that leaves room for the
// writes applied while a snapshot is written.
const logBound = 2 * (dense.DefaultSnapshotEvery + engine.DefaultTruncateEvery)

// Markdown is the run's report: the samples, the totals and the verdict.
func (r *Report) Markdown() string {
	c := r.Config
	var b strings.Builder
	models := "external dense (64-d) and late-interaction (16 tokens of 32 values; " + strconv.Quote(c.LateIndex) + " and FAISS) models"
	if c.Model {
		models = encoder.DefaultModel + " (dense and late, " + strconv.Quote(c.LateIndex) + ")"
	}
	race := ""
	if raceEnabled {
		race = ", race detector on"
	}
	fmt.Fprintf(&b, "## Tandem soak: %s, %d searchers, 1 writer, 1 deleter, %d documents kept live, %s%s\n\n", c.Duration, c.Searchers, c.Docs, models, race)
	fmt.Fprintf(&b, "Prefill %s; warm-up %s (the bounds compare the end of the run with the warm-up's peak).\n\n", r.Prefill.Round(time.Millisecond), c.Warmup)
	b.WriteString("| elapsed | RSS MiB | anonymous | files | peak RSS | Go heap in use | Go held | C heap in use | C held | goroutines (floor) | open files (floor) | disk MiB | documents | searches | upserted | deleted | errors | violations | log entries |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range r.Samples {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %d | %.0f | %d | %d | %d | %d | %d | %d | %d |\n", s.Elapsed.Round(time.Second),
			mib(s.RSS), mib(s.Anon), mib(s.File), mib(s.HWM), mib(s.Heap), mib(s.GoSys), mib(s.CInUse), mib(s.CHeld),
			s.Goroutines, s.Files, mib(s.Disk), s.Docs, s.Searches, s.Writes, s.Deletes, s.Errors, s.Violations, s.LogEntries)
	}
	secs := c.Duration.Seconds()
	if n := len(r.Samples); n > 0 {
		secs = r.Samples[n-1].Elapsed.Seconds()
	}
	fmt.Fprintf(&b, "\n%d searches (%.1f/s), %d hits checked; %d documents upserted (%d of them new or re-created ids), %d deleted (%.1f writes/s).\n\n",
		r.Searches, float64(r.Searches)/secs, r.Hits, r.Upserts, r.Created, r.Deletes, float64(r.Upserts+r.Deletes)/secs)
	if n := len(r.Samples); n > 0 {
		last, top := r.Samples[n-1], uint64(0)
		for _, s := range r.Samples {
			top = max(top, s.LogEntries)
		}
		fmt.Fprintf(&b, "Change log: %d entries at the end for %d live documents (%.1f a document), at most %d at any sample.\n\n",
			last.LogEntries, last.Docs, float64(last.LogEntries)/float64(max(last.Docs, 1)), top)
	}
	modes := make([]string, 0, len(r.PerMode))
	for m := range r.PerMode {
		modes = append(modes, m)
	}
	slices.Sort(modes)
	b.WriteString("Searches by mode: ")
	for i, m := range modes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", m, r.PerMode[m])
	}
	b.WriteString(".\n\n")
	if judgesMemory {
		fmt.Fprintf(&b, "Bounds after warm-up: RSS at most the warm-up's peak + max(%.0f%%, %d MiB); goroutines + %d; open files + %d. At every sample: at most %d change-log entries.\n\n",
			rssGrowth*100, rssSlack>>20, goroutineSlack, fileSlack, logBound)
	} else {
		fmt.Fprintf(&b, "Bounds after warm-up: goroutines + %d; open files + %d; at every sample, at most %d change-log entries. Memory is reported, not judged: the race detector's own memory grows with every address and sync object the run touches (the long soak without it bounds RSS).\n\n",
			goroutineSlack, fileSlack, logBound)
	}
	fmt.Fprintf(&b, "Errors: %d. Violating hits: %d %v.\n", r.ErrorCount, r.ViolationCount, r.ViolationKinds)
	for _, s := range r.Errors {
		fmt.Fprintf(&b, "- error: %s\n", s)
	}
	for _, s := range r.Violations {
		fmt.Fprintf(&b, "- violation: %s\n", s)
	}
	if err := r.Verdict(); err != nil {
		fmt.Fprintf(&b, "\n**FAIL**: %v\n", err)
	} else {
		bounded := "RSS, goroutines, open files and the change log"
		if !judgesMemory {
			bounded = "goroutines, open files and the change log"
		}
		fmt.Fprintf(&b, "\n**PASS**: no error, every hit matched its filter and none was deleted before its search began, storage agreed with the ledger at the end, and %s stayed within their bounds.\n", bounded)
	}
	return b.String()
}
