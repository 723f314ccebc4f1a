package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/procstat"
)

// counters are the load's running totals, shared by its goroutines.
type counters struct {
	searches, hits, upserts, created, deletes atomic.Uint64
	errors, violations                        atomic.Uint64
	mu                                        struct {
		sync.Mutex
		perMode        map[string]uint64
		errors         []string
		violations     []string
		violationKinds map[string]uint64
	}
}

const keepFirst = 10 // errors and violations kept verbatim

func (k *counters) fail(err error) {
	k.errors.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.mu.errors) < keepFirst {
		k.mu.errors = append(k.mu.errors, err.Error())
	}
}

func (k *counters) violation(kind, msg string) {
	k.violations.Add(1)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.mu.violationKinds[kind]++
	if len(k.mu.violations) < keepFirst {
		k.mu.violations = append(k.mu.violations, kind+": "+msg)
	}
}

// run runs the load until c.Duration has passed, ctx is done or the engine
// fails, sampling the process as it goes.
func (w *world) run(ctx context.Context, e *engine.Engine, c Config, res *Report, progress io.Writer) {
	var k counters
	k.mu.perMode, k.mu.violationKinds = map[string]uint64{}, map[string]uint64{}
	// Workers stop between operations when stop closes; their own calls
	// run to completion, so the end of the run is never an error.
	stop := make(chan struct{})
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }) }
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	work := func(f func(rng *rand.Rand) error, stream uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(c.Seed, stream))
			if err := f(rng); err != nil {
				k.fail(err)
				halt()
			}
		}()
	}
	bg := context.Background()
	reached := make(chan struct{})    // closed when Config.Upserts are upserted
	work(func(rng *rand.Rand) error { // the writer
		for !stopped() {
			n := 1 + rng.IntN(16)
			if c.WriteBatch > 0 {
				n = c.WriteBatch
			}
			ids := w.ledger.pickUpserts(rng, n)
			if err := w.upsert(bg, e, ids.all); err != nil {
				return err
			}
			k.created.Add(uint64(ids.created))
			if up := k.upserts.Add(uint64(len(ids.all))); c.Upserts > 0 && up >= c.Upserts {
				close(reached)
				return nil
			}
		}
		return nil
	}, 1)
	work(func(rng *rand.Rand) error { // the deleter keeps about Docs live
		for !stopped() {
			ids := w.ledger.pickDeletes(rng, 1+rng.IntN(8), c.Docs)
			if len(ids) == 0 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err := w.delete(bg, e, ids); err != nil {
				return err
			}
			k.deletes.Add(uint64(len(ids)))
		}
		return nil
	}, 2)
	for s := range c.Searchers {
		work(func(rng *rand.Rand) error {
			for i := s; !stopped(); i += c.Searchers {
				if err := w.search(e, i, rng, &k); err != nil {
					return err
				}
			}
			return nil
		}, 100+uint64(s))
	}

	// Goroutines and open files are each sample's floor: the least of
	// readings every probeEvery since the previous sample, so that the
	// goroutines and files of operations in flight at one instant do not
	// count; a leak raises the floor.
	const probeEvery = 250 * time.Millisecond
	floorG, floorF := -1, -1
	probe := func() {
		g, f := runtime.NumGoroutine(), procstat.OpenFiles()
		if floorG < 0 || g < floorG {
			floorG = g
		}
		if floorF < 0 || f < floorF {
			floorF = f
		}
	}
	start := time.Now()
	sample := func() {
		probe()
		s := takeSample(e, time.Since(start), &k)
		s.Goroutines, s.Files = floorG, floorF
		s.Disk = procstat.DirBytes(c.Dir)
		floorG, floorF = -1, -1
		res.Samples = append(res.Samples, s)
		fmt.Fprintln(progress, progressLine(res.Samples, c.Duration))
	}
	sample()
	probes := time.NewTicker(probeEvery)
	defer probes.Stop()
	tick := time.NewTicker(c.Sample)
	deadline := time.NewTimer(c.Duration)
	failed := make(chan struct{})
	go func() { wg.Wait(); close(failed) }() // every worker returned: the load failed or stopped
loop:
	for {
		select {
		case <-probes.C:
			probe()
		case <-tick.C:
			if c.Duration-time.Since(start) > c.Sample/4 { // else the deadline's sample is this one
				sample()
			}
		case <-deadline.C:
			sample()
			break loop
		case <-reached:
			sample()
			break loop
		case <-ctx.Done():
			sample()
			break loop
		case <-failed:
			sample()
			break loop
		}
	}
	tick.Stop()
	deadline.Stop()
	halt()
	<-failed

	res.Searches, res.Hits = k.searches.Load(), k.hits.Load()
	res.Upserts, res.Created, res.Deletes = k.upserts.Load(), k.created.Load(), k.deletes.Load()
	res.ErrorCount, res.ViolationCount = k.errors.Load(), k.violations.Load()
	k.mu.Lock()
	res.PerMode, res.Errors, res.Violations, res.ViolationKinds = k.mu.perMode, k.mu.errors, k.mu.violations, k.mu.violationKinds
	k.mu.Unlock()
}
