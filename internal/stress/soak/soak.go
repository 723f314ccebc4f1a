package soak

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/synth"
)

// Config configures one soak run. Duration, Sample, Docs and Searchers
// must be set (Run refuses a Config without them, naming the field); the
// other zero fields have the meaning their comments give.
type Config struct {
	Dir       string        // the collection; "" means a new one in a temporary directory, removed afterwards
	Duration  time.Duration // of the load, after prefill
	Sample    time.Duration // between samples of the process
	Warmup    time.Duration // 0 means min(maxWarmup, Duration/5)
	Docs      int           // prefilled documents, and the live count the deleter keeps; at least 100
	Searchers int           // concurrent searchers; at least 1
	Model     bool          // the default ONNX model instead of external vectors
	LateIndex string        // the late-interaction index of the first late model; "" means the engine's default
	Seed      uint64        // of documents, queries and operations
	// Upserts, when positive, ends the load once the writer has upserted
	// that many documents (Duration still bounds it); WriteBatch, when
	// positive, is the documents of each upsert call (else 1 to 16).
	Upserts    uint64
	WriteBatch int
	// Progress receives a line as the prefill starts and ends and one
	// with each sample; nil means none.
	Progress io.Writer
	// AtStop, if set, is called when the load stops, before the
	// collection closes (the command writes its heap profile there); its
	// error ends the run.
	AtStop func() error
}

// validate names the first field of c that Run cannot run with.
func (c *Config) validate() error {
	switch {
	case c.Duration <= 0:
		return fmt.Errorf("soak: Config.Duration is %s, must be positive", c.Duration)
	case c.Sample <= 0:
		return fmt.Errorf("soak: Config.Sample is %s, must be positive", c.Sample)
	case c.Warmup < 0:
		return fmt.Errorf("soak: Config.Warmup is %s, must not be negative", c.Warmup)
	case c.Docs < 100:
		return fmt.Errorf("soak: Config.Docs is %d, must be at least 100", c.Docs)
	case c.Searchers < 1:
		return fmt.Errorf("soak: Config.Searchers is %d, must be at least 1", c.Searchers)
	case c.WriteBatch < 0:
		return fmt.Errorf("soak: Config.WriteBatch is %d, must not be negative", c.WriteBatch)
	}
	return nil
}

// The external models of a soak collection: documents and queries bring
// their vectors, so the load stays on the engine, not on ONNX inference.
const (
	denseModel     = "soak-dense"
	lateModel      = "soak-late"
	lateFAISSModel = "soak-late-faiss"
)

// Run runs the whole soak: open or create the collection, prefill it,
// run the load for c.Duration while sampling, then judge. An error means
// the soak could not run (a bad Config, a collection that is not a soak's,
// a failed prefill); what a run that ran found is in the Report, and its
// Verdict says whether it passed. Cancelling ctx stops the load early and
// the Report says it was interrupted.
func Run(ctx context.Context, c Config) (*Report, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.Warmup == 0 {
		c.Warmup = min(maxWarmup, c.Duration/5)
	}
	progress := c.Progress
	if progress == nil {
		progress = io.Discard
	}
	dir := c.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "tandem-soak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp + "/collection"
	}
	w, err := newWorld(c)
	if err != nil {
		return nil, err
	}
	e, err := engine.Open(dir, &engine.Options{Schema: w.schema(), Dense: w.onnx(), Late: w.onnx(), LateIndex: c.LateIndex})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	defer func() {
		if e != nil {
			e.Close()
		}
	}()
	if err := w.checkCollection(e); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	res := &Report{Config: c, PerMode: map[string]uint64{}, ViolationKinds: map[string]uint64{}}
	fmt.Fprintf(progress, "soak: %s, prefilling %d documents (ids %s..%s live, the next %d deleted)\n", dir, c.Docs, synth.ID(0), synth.ID(c.Docs-1), c.Docs)
	start := time.Now()
	if err := w.prefill(ctx, e); err != nil {
		return nil, fmt.Errorf("prefill: %w", err)
	}
	res.Prefill = time.Since(start)
	fmt.Fprintf(progress, "soak: prefilled in %s; load for %s: %d searchers, 1 writer, 1 deleter; samples every %s, warm-up %s\n",
		res.Prefill.Round(time.Millisecond), c.Duration, c.Searchers, c.Sample, c.Warmup)

	run := c
	run.Dir = dir // the samples measure it on disk
	w.run(ctx, e, run, res, progress)
	if c.AtStop != nil {
		if err := c.AtStop(); err != nil {
			return nil, err
		}
	}

	if err := ctx.Err(); err != nil {
		res.Interrupted = true
	}
	if res.ErrorCount == 0 && !res.Interrupted {
		if err := w.checkFinal(e); err != nil {
			res.Final = err.Error()
		}
	}
	err = e.Close()
	e = nil
	if err != nil {
		res.ErrorCount++
		res.Errors = append(res.Errors, "close: "+err.Error())
	}
	res.Growth = judgeGrowth(res.Samples, c.Warmup+min(time.Second, c.Sample/2), judgesMemory)
	return res, nil
}
