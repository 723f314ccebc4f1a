package ingest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/synth"
)

// DefaultLoadRate is the rate of the search load beside the ingest, in
// searches a second: enough for a p99 of each retraining of a 10M run
// (a few minutes each), little enough not to slow the ingest on 2 cores.
const DefaultLoadRate = 20

// maxInFlight bounds the load's searches waiting at once; a search that
// would exceed it is counted in Load.Dropped instead of started.
const maxInFlight = 64

// Load is what the search load beside the ingest measured: searches
// started at a fixed rate (open loop: each one's latency counts from the
// time it was due), cycling through dense, dense with the 1% filter and
// BM25, each classified by whether a dense retraining ran at any time
// between its start and its end.
type Load struct {
	Rate    float64 // searches a second
	Errors  int     // searches that failed
	Dropped int     // searches not started: maxInFlight were waiting
	// FirstError is the first failure's message.
	FirstError string
	// Outside summarises the searches that met no retraining.
	Outside LoadWindow
	// Retrainings are the dense retrainings seen, in order, each with the
	// searches that overlapped it.
	Retrainings []LoadWindow
	// StallDumps are the goroutine dumps written (Config.StallDumps).
	StallDumps []string
}

// LoadWindow is the load's searches during one period.
type LoadWindow struct {
	Start, End time.Duration // since the ingest started
	Searches   int
	P50, P99   time.Duration
	Max        time.Duration
}

// A stall dump is written when a search of the load has waited this long
// (at most maxStallDumps, stallDumpGap apart), to show what it waits for.
const (
	stallAfter    = 2 * time.Second
	maxStallDumps = 3
	stallDumpGap  = time.Minute
)

// loadSample is one search of the load.
type loadSample struct {
	start, end time.Duration // since the ingest started
	took       time.Duration
}

// searchLoad runs the load against e until stop is closed, watching e's
// dense retrainings every 20 ms, and returns what it measured.
type searchLoad struct {
	e     *engine.Engine
	model string
	gen   *synth.Generator
	rate  float64
	t0    time.Time

	mu      sync.Mutex
	samples []loadSample
	errors  int
	first   string
	dropped int
	windows [][2]time.Duration // dense retrainings: start, end (0 while running)

	// Stall dumps (Config.StallDumps): the searches in flight by their
	// due time, and the dumps written.
	dumpDir  string
	inFlight map[int]time.Time
	dumps    []string
	lastDump time.Time
}

func startSearchLoad(ctx context.Context, e *engine.Engine, model string, gen *synth.Generator, rate float64, dumpDir string) (stop func() *Load) {
	l := &searchLoad{e: e, model: model, gen: gen, rate: rate, t0: time.Now(), dumpDir: dumpDir, inFlight: map[int]time.Time{}}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.watch(ctx) }()
	go func() { defer wg.Done(); l.drive(ctx) }()
	return func() *Load {
		cancel()
		wg.Wait()
		return l.report()
	}
}

// watch records the periods during which a dense index retrains.
func (l *searchLoad) watch(ctx context.Context) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	running := false
	for {
		now := time.Since(l.t0)
		dense := false
		for _, name := range l.e.Retraining() {
			dense = dense || strings.HasPrefix(name, "dense:")
		}
		l.mu.Lock()
		switch {
		case dense && !running:
			l.windows = append(l.windows, [2]time.Duration{now, 0})
		case !dense && running:
			l.windows[len(l.windows)-1][1] = now
		}
		l.mu.Unlock()
		running = dense
		l.dumpIfStalled()
		select {
		case <-ctx.Done():
			if running {
				l.mu.Lock()
				l.windows[len(l.windows)-1][1] = time.Since(l.t0)
				l.mu.Unlock()
			}
			return
		case <-tick.C:
		}
	}
}

// dumpIfStalled writes every goroutine's stack to a file in dumpDir when a
// search has waited stallAfter, so that what it waits for (a lock, I/O,
// the collector) can be read. The file is written without l.mu, which the
// searches need to finish.
func (l *searchLoad) dumpIfStalled() {
	l.mu.Lock()
	if l.dumpDir == "" || len(l.dumps) >= maxStallDumps || (!l.lastDump.IsZero() && time.Since(l.lastDump) < stallDumpGap) {
		l.mu.Unlock()
		return
	}
	var oldest time.Time
	for _, due := range l.inFlight {
		if oldest.IsZero() || due.Before(oldest) {
			oldest = due
		}
	}
	if oldest.IsZero() || time.Since(oldest) < stallAfter {
		l.mu.Unlock()
		return
	}
	l.lastDump = time.Now()
	name := filepath.Join(l.dumpDir, fmt.Sprintf("stall-%d.txt", len(l.dumps)+1))
	inFlight := len(l.inFlight)
	l.mu.Unlock()

	f, err := os.Create(name)
	if err == nil {
		fmt.Fprintf(f, "at %s since the ingest started, a search due at %s has waited %s; %d in flight\n\n",
			round(time.Since(l.t0)), round(oldest.Sub(l.t0)), round(time.Since(oldest)), inFlight)
		err = pprof.Lookup("goroutine").WriteTo(f, 2)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		name = fmt.Sprintf("%s: %v", name, err)
	}
	l.mu.Lock()
	l.dumps = append(l.dumps, name)
	l.mu.Unlock()
}

// drive starts the searches at the load's rate.
func (l *searchLoad) drive(ctx context.Context) {
	filter := []byte(fmt.Sprintf(`{"term":{"cat":%q}}`, synth.Category(FilterCategory)))
	every := time.Duration(float64(time.Second) / l.rate)
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	due := time.Now()
	for i := 0; ; i++ {
		due = due.Add(every)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(due)):
		}
		select {
		case sem <- struct{}{}:
		default:
			l.mu.Lock()
			l.dropped++
			l.mu.Unlock()
			continue
		}
		text, vec := l.gen.Query(1_000_000 + i)
		req := engine.Request{Text: text, K: 10, Retrievers: []string{"dense"}}
		switch i % 3 {
		case 1:
			req.Filter = filter
		case 2:
			req.Retrievers = []string{"bm25"}
		}
		if req.Retrievers[0] == "dense" {
			req.Vectors = map[string]tandem.Vectors{l.model: {Dense: vec}}
		}
		l.mu.Lock()
		l.inFlight[i] = due
		l.mu.Unlock()
		wg.Add(1)
		go func(i int, due time.Time) {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := l.e.Search(ctx, req)
			end := time.Now()
			l.mu.Lock()
			defer l.mu.Unlock()
			delete(l.inFlight, i)
			if ctx.Err() != nil {
				return // stopped: not a search failure
			}
			if err != nil {
				if l.errors == 0 {
					l.first = err.Error()
				}
				l.errors++
				return
			}
			l.samples = append(l.samples, loadSample{start: due.Sub(l.t0), end: end.Sub(l.t0), took: end.Sub(due)})
		}(i, due)
	}
}

func (l *searchLoad) report() *Load {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := &Load{Rate: l.rate, Errors: l.errors, FirstError: l.first, Dropped: l.dropped, StallDumps: l.dumps}
	var outside []time.Duration
	during := make([][]time.Duration, len(l.windows))
	for _, s := range l.samples {
		met := false
		for wi, w := range l.windows {
			if s.start <= w[1] && s.end >= w[0] {
				during[wi] = append(during[wi], s.took)
				met = true
			}
		}
		if !met {
			outside = append(outside, s.took)
		}
	}
	out.Outside = window(0, 0, outside)
	for wi, w := range l.windows {
		out.Retrainings = append(out.Retrainings, window(w[0], w[1], during[wi]))
	}
	return out
}

func window(start, end time.Duration, lat []time.Duration) LoadWindow {
	w := LoadWindow{Start: start, End: end, Searches: len(lat)}
	if len(lat) > 0 {
		w.P50, w.P99, w.Max = bench.Percentile(lat, 0.50), bench.Percentile(lat, 0.99), bench.Percentile(lat, 1)
	}
	return w
}
