package soak

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSoak is the short version of make soak: 20 seconds of searchers in
// every mode beside a writer and a deleter on a small collection. Every
// hit must pass the soak's checks, the engine must return no error, and
// storage must agree with the ledger at the end. Growth is logged, not
// asserted: 20 seconds say nothing about a leak.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak runs for 20 seconds")
	}
	c := Config{Dir: filepath.Join(t.TempDir(), "c"), Duration: 20 * time.Second, Sample: 2 * time.Second, Warmup: 4 * time.Second,
		Docs: 400, Searchers: 3, LateIndex: "Residual", Seed: 7, Progress: testWriter{t}}
	res, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.Markdown())
	if res.ErrorCount != 0 || res.ViolationCount != 0 || res.Final != "" || res.Interrupted {
		t.Fatalf("%d errors %v, %d violations %v, final check %q, interrupted %v", res.ErrorCount, res.Errors, res.ViolationCount, res.Violations, res.Final, res.Interrupted)
	}
	if len(res.Samples) < 8 {
		t.Errorf("%d samples in 20 s at one per 2 s", len(res.Samples))
	}
	for _, s := range res.Samples {
		if s.RSS <= 0 || s.HWM < s.RSS || s.Heap <= 0 || s.Goroutines <= 0 || s.Files <= 0 || s.Docs == 0 {
			t.Errorf("sample %+v", s)
		}
	}
	if res.Hits == 0 || res.Upserts == 0 || res.Created == 0 || res.Deletes == 0 {
		t.Errorf("%d hits, %d upserted (%d new or re-created), %d deleted", res.Hits, res.Upserts, res.Created, res.Deletes)
	}
	// Every mode ran: bm25, the dense and both late retrievers alone, and
	// the hybrids.
	if len(res.PerMode) != 12 {
		t.Errorf("modes run: %v", res.PerMode)
	}
	for m, n := range res.PerMode {
		if n == 0 {
			t.Errorf("mode %s never ran", m)
		}
	}

	// The collection it left can be soaked again, with fewer ids: prefill
	// rewrites every id the soak uses and deletes the others, so the
	// checks, and the final count, pass.
	c.Duration, c.Sample, c.Warmup, c.Docs, c.Progress = 3*time.Second, time.Second, time.Second, 150, nil
	res, err = Run(context.Background(), c)
	if err != nil || res.ErrorCount != 0 || res.ViolationCount != 0 || res.Final != "" {
		t.Fatalf("second soak of the same collection: %v; %v %v %q", err, res.Errors, res.Violations, res.Final)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// The ledger flags a hit only when the search certainly began after the
// document was gone, and reads a hit's version against what was
// acknowledged before the search.
func TestSoakLedger(t *testing.T) {
	const id = 3
	upsert := func(l *ledger) uint64 {
		v := l.beginUpsert([]int{id})
		l.ackUpsert([]int{id}, v)
		return v[0]
	}
	del := func(l *ledger) {
		l.beginDelete([]int{id})
		l.ackDelete([]int{id})
	}
	for _, tc := range []struct {
		name  string
		run   func(l *ledger) (began, ver uint64)
		kind  string
		final finalState
	}{
		{"live", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			return l.now(), v
		}, "", finalLive},
		{"deleted before the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			del(l)
			return l.now(), v
		}, "deleted", finalGone},
		{"deleted during the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			del(l)
			return began, v
		}, "", finalGone},
		{"re-created, acknowledged", func(l *ledger) (uint64, uint64) {
			upsert(l)
			del(l)
			v := upsert(l)
			return l.now(), v
		}, "", finalLive},
		{"re-creation begun after the search began, not acknowledged", func(l *ledger) (uint64, uint64) {
			upsert(l)
			del(l)
			began := l.now()
			v := l.beginUpsert([]int{id})
			return began, v[0]
		}, "", -1}, // final is asked only once nothing is in flight
		{"deleted while an upsert was in flight", func(l *ledger) (uint64, uint64) {
			upsert(l)
			v := l.beginUpsert([]int{id})
			l.beginDelete([]int{id})
			l.ackUpsert([]int{id}, v)
			l.ackDelete([]int{id})
			return l.now(), v[0]
		}, "", finalEither},
		{"upsert begun while the delete was in flight", func(l *ledger) (uint64, uint64) {
			upsert(l)
			l.beginDelete([]int{id})
			v := l.beginUpsert([]int{id})
			l.ackDelete([]int{id})
			l.ackUpsert([]int{id}, v)
			return l.now(), v[0]
		}, "", finalEither},
		{"stale version", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			upsert(l)
			return l.now(), v
		}, "stale", finalLive},
		{"older version acknowledged during the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			upsert(l)
			return began, v
		}, "", finalLive},
		{"history beyond the ring", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			for range 5 {
				upsert(l)
			}
			return began, v
		}, "", finalLive},
		{"version never written", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			return l.now(), v + 100
		}, "version", finalLive},
		{"never upserted", func(l *ledger) (uint64, uint64) {
			return l.now(), 0
		}, "", finalGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(10)
			began, ver := tc.run(l)
			if kind, msg := l.checkHit(id, began, ver); kind != tc.kind {
				t.Errorf("check: %q (%s), want %q", kind, msg, tc.kind)
			}
			if f, _ := l.final(id); tc.final >= 0 && f != tc.final {
				t.Errorf("final %d, want %d", f, tc.final)
			}
		})
	}
}

func TestSoakGrowth(t *testing.T) {
	flat := func(n int) []Sample {
		var ss []Sample
		for i := range n {
			ss = append(ss, Sample{Elapsed: time.Duration(i) * time.Minute, RSS: 400 << 20, Goroutines: 40, Files: 30})
		}
		return ss
	}
	if g := judgeGrowth(flat(10), 2*time.Minute, true); len(g) != 0 {
		t.Errorf("flat: %v", g)
	}
	for _, tc := range []struct {
		name string
		edit func(ss []Sample)
		want string
	}{
		{"rss", func(ss []Sample) {
			for i := range ss {
				ss[i].RSS += int64(i) * 40 << 20
			}
		}, "RSS grew"},
		{"rss spike at the end", func(ss []Sample) { ss[len(ss)-1].RSS *= 2 }, ""},
		{"rss within 64 MiB", func(ss []Sample) {
			for i := 3; i < len(ss); i++ {
				ss[i].RSS += 60 << 20
			}
		}, ""},
		{"goroutines", func(ss []Sample) {
			for i := range ss {
				ss[i].Goroutines += 5 * i
			}
		}, "goroutines grew"},
		{"files", func(ss []Sample) {
			for i := range ss {
				ss[i].Files += 5 * i
			}
		}, "open files grew"},
	} {
		ss := flat(10)
		tc.edit(ss)
		g := strings.Join(judgeGrowth(ss, 2*time.Minute, true), "; ")
		if (tc.want == "") != (g == "") || !strings.Contains(g, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, g, tc.want)
		}
	}
	// Under the race detector RSS is not judged; goroutines still are.
	grown := flat(10)
	for i := range grown {
		grown[i].RSS += int64(i) * 40 << 20
	}
	if g := judgeGrowth(grown, 2*time.Minute, false); len(g) != 0 {
		t.Errorf("rss growth with memory not judged: %v", g)
	}
	for i := range grown {
		grown[i].Goroutines += 5 * i
	}
	if g := strings.Join(judgeGrowth(grown, 2*time.Minute, false), "; "); !strings.Contains(g, "goroutines grew") || strings.Contains(g, "RSS") {
		t.Errorf("goroutine growth with memory not judged: %q", g)
	}
	if g := judgeGrowth(flat(3), 5*time.Minute, true); len(g) != 1 || !strings.Contains(g[0], "no growth check") {
		t.Errorf("no sample after warm-up: %v", g)
	}
}

// Run refuses a Config it cannot run, naming the field, before it opens
// or creates anything.
func TestSoakConfigErrors(t *testing.T) {
	ok := Config{Duration: time.Second, Sample: time.Second, Docs: 100, Searchers: 1}
	for _, tc := range []struct {
		edit func(c *Config)
		want string
	}{
		{func(c *Config) { c.Duration = 0 }, "Config.Duration"},
		{func(c *Config) { c.Sample = 0 }, "Config.Sample"},
		{func(c *Config) { c.Warmup = -time.Second }, "Config.Warmup"},
		{func(c *Config) { c.Docs = 99 }, "Config.Docs"},
		{func(c *Config) { c.Searchers = 0 }, "Config.Searchers"},
	} {
		c := ok
		c.Dir = filepath.Join(t.TempDir(), "c")
		tc.edit(&c)
		res, err := Run(context.Background(), c)
		if err == nil || !strings.Contains(err.Error(), tc.want) || res != nil {
			t.Errorf("%s: %v, %v", tc.want, res, err)
		}
		if _, serr := os.Stat(c.Dir); !os.IsNotExist(serr) {
			t.Errorf("%s: the collection directory was made (%v)", tc.want, serr)
		}
	}
}
