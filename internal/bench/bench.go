package bench

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/procstat"
)

// Generate produces documents doc(0)..doc(n-1) in order, at most ahead of
// them made in advance by one goroutine per core (at most 4). stop ends
// the goroutines early.
func Generate(n, ahead int, doc func(int) tandem.Doc) (next func() (tandem.Doc, error), stop func()) {
	workers := max(1, min(4, runtime.NumCPU()))
	ahead = max(ahead, workers)
	done := make(chan struct{})
	chans := make([]chan tandem.Doc, workers)
	var wg sync.WaitGroup
	for w := range workers {
		chans[w] = make(chan tandem.Doc, ahead/workers)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(chans[w])
			for i := w; i < n; i += workers {
				select {
				case chans[w] <- doc(i):
				case <-done:
					return
				}
			}
		}()
	}
	i := 0
	next = func() (tandem.Doc, error) {
		if i >= n {
			return tandem.Doc{}, io.EOF
		}
		d, ok := <-chans[i%workers]
		if !ok {
			return tandem.Doc{}, errors.New("bench: generator stopped")
		}
		i++
		return d, nil
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			for _, c := range chans {
				for range c {
				}
			}
			wg.Wait()
		})
	}
	return next, stop
}

// MemoryStatus describes the process's memory for a progress line.
func MemoryStatus() string {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := procstat.ReadMemory()
	return fmt.Sprintf("RSS %s anonymous (Go heap %s) + %s mapped files, peak %s", Size(m.Anon), Size(int64(ms.HeapInuse)), Size(m.File), Size(m.Peak))
}

func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func WriteHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	return f.Close()
}

// StartCPUProfile starts a CPU profile written to path, if path is set.
// The returned stop ends it and closes the file; later calls do nothing.
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

func Size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// CheckNew refuses a collection directory that exists: a benchmark builds
// a new collection, and removes it afterwards unless asked to keep it.
func CheckNew(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return fmt.Errorf("%s exists; the benchmark builds a new collection", dir)
	}
	return nil
}

// Searches is what one search configuration measured: latency
// percentiles and the hits a query found on average.
type Searches struct {
	Name     string
	P50, P95 time.Duration
	Hits     float64
}

// Measure summarises one configuration's latencies and total hits.
func Measure(name string, lat []time.Duration, hits int) Searches {
	return Searches{Name: name, P50: Percentile(lat, 0.50), P95: Percentile(lat, 0.95), Hits: float64(hits) / float64(len(lat))}
}

// Row is the configuration's line of a Markdown results table.
func (s Searches) Row() string {
	return fmt.Sprintf("| %s, top 10: p50 / p95 | %.1f / %.1f ms (%.1f hits a query) |", s.Name, Ms(s.P50), Ms(s.P95), s.Hits)
}

// Output is what the benchmarks that build a collection share in their
// Config: where the run says what it is doing, and the profiles it writes.
type Output struct {
	// Log receives what the run is doing (nil: nothing); Quiet leaves out
	// the progress lines of the build.
	Log   io.Writer
	Quiet bool

	// Profiles written when set: CPU of the build, CPU of the measured
	// searches, and the heap's allocations during the build.
	CPUProfile, SearchCPUProfile, MemProfile string
}

// Logger returns Log, or io.Discard when Log is nil.
func (o Output) Logger() io.Writer {
	if o.Log == nil {
		return io.Discard
	}
	return o.Log
}

// NextPhase starts a phase of a run whose peak RSS is its own: the Go
// runtime returns the memory it holds free, and the process's peak is
// reset (procstat.ResetPeak).
func NextPhase() {
	debug.FreeOSMemory()
	procstat.ResetPeak()
}

// Recall is the share of want found in got: recall of got against the
// reference want (1 when want is empty).
func Recall(got, want []string) float64 {
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
