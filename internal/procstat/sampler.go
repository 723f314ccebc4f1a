package procstat

import (
	"runtime/metrics"
	"sync"
	"time"
)

// Peaks are the largest memory figures of a span of time, in bytes.
type Peaks struct {
	// RSS is the peak of the resident set: the kernel's (VmHWM, which
	// Sampler.Reset resets), or the largest sampled, whichever is larger.
	RSS int64
	// Anon and File are the largest resident anonymous and file-backed
	// memory sampled. They are sampled, so a peak shorter than the
	// interval may be missed, and they need not have been reached at the
	// same time: Anon+File may exceed RSS.
	Anon, File int64
	// GoHeap is the Go heap in use (runtime.MemStats.HeapInuse) when Anon
	// was sampled at its largest: the rest of Anon is C's (FAISS, ONNX
	// Runtime) and the Go runtime's own.
	GoHeap int64
	// Samples counts the readings the peaks come from.
	Samples int
}

// Sampler reads the process's memory (one read of /proc/self/status) at a
// fixed interval in a goroutine of its own, and keeps the peaks since it
// started or was last Reset. It is safe for concurrent use; Stop ends the
// goroutine. Where ReadMemory has no Anon and File (not Linux), only RSS
// is reported, cumulative.
type Sampler struct {
	mu struct {
		sync.Mutex
		peaks Peaks
	}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// StartSampler starts a sampler reading every interval (at least 10 ms).
func StartSampler(interval time.Duration) *Sampler {
	s := &Sampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		tick := time.NewTicker(max(interval, 10*time.Millisecond))
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.sample()
			}
		}
	}()
	return s
}

// sample reads the memory once and raises the peaks. It reads under the
// lock, so that no reading from before a Reset lands after it.
func (s *Sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := ReadMemory()
	p := &s.mu.peaks
	p.Samples++
	p.RSS = max(p.RSS, m.Peak, m.RSS)
	p.File = max(p.File, m.File)
	if m.Anon > p.Anon || p.Samples == 1 {
		p.Anon = m.Anon
		p.GoHeap = goHeapInuse()
	}
}

// Peaks reads the memory once more and returns the peaks since the
// sampler started or was last Reset.
func (s *Sampler) Peaks() Peaks {
	s.sample()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.peaks
}

// Reset starts new peaks at the current figures: the kernel's peak too
// (ResetPeak).
func (s *Sampler) Reset() {
	s.mu.Lock()
	ResetPeak()
	s.mu.peaks = Peaks{}
	s.mu.Unlock()
	s.sample()
}

// Stop ends the sampler's goroutine; later calls do nothing.
func (s *Sampler) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
}

// heapMetrics are the runtime/metrics whose sum is MemStats.HeapInuse.
var heapMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

// goHeapInuse is the Go heap in use, read without stopping the world (as
// runtime.ReadMemStats would).
func goHeapInuse() int64 {
	samples := make([]metrics.Sample, len(heapMetrics))
	for i, name := range heapMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var n int64
	for _, m := range samples {
		if m.Value.Kind() == metrics.KindUint64 {
			n += int64(m.Value.Uint64())
		}
	}
	return n
}
