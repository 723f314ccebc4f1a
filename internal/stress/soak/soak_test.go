package soak

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
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
	// One sample at the start, one at the end and one per 2 s between,
	// of which a slow sample may make the ticker drop some: at least
	// half of them, over the time the samples themselves say the soak ran.
	elapsed := res.Samples[len(res.Samples)-1].Elapsed
	if want := 2 + int(elapsed/c.Sample)/2; len(res.Samples) < want {
		t.Errorf("%d samples in %v at one per %v, want at least %d", len(res.Samples), elapsed, c.Sample, want)
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

	// A soak ended by its upserts, in batches of 50: it stops before its
	// duration (a few seconds' work against 5 minutes, scaled by the test
	// time scale), and each sample reads the change log.
	c.Duration, c.Sample, c.Upserts, c.WriteBatch = testtime.D(5*time.Minute), time.Second, 2000, 50
	res, err = Run(context.Background(), c)
	if err != nil || res.ErrorCount != 0 || res.ViolationCount != 0 || res.Final != "" {
		t.Fatalf("soak of 2,000 upserts: %v; %v %v %q", err, res.Errors, res.Violations, res.Final)
	}
	last := res.Samples[len(res.Samples)-1]
	if res.Upserts < 2000 || last.Elapsed >= c.Duration || last.LogEntries == 0 || last.LogEntries > logBound {
		t.Errorf("soak of 2,000 upserts: %d upserted, ended after %s of %s, %d log entries at the end", res.Upserts, last.Elapsed, c.Duration, last.LogEntries)
	}
}

// testWriter sends progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
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
		{func(c *Config) { c.WriteBatch = -1 }, "Config.WriteBatch"},
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
