package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/stress/soak"
)

// soakCommand is registered in main.go's command table.
var soakCommand = command{"run searchers in every mode beside a writer and a deleter for a duration, checking every hit and the process's growth", runSoak}

func runSoak(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("soak", stderr)
	var c soak.Config
	fset.StringVar(&c.Dir, "dir", "", "collection directory, new or made by an earlier soak (default: a new one in a temporary directory, removed afterwards)")
	fset.DurationVar(&c.Duration, "duration", 5*time.Minute, "how long the load runs, after prefill")
	fset.DurationVar(&c.Sample, "sample", 0, "time between samples of RSS, goroutines, open files and heap (default: a tenth of --duration, at most 1m)")
	fset.DurationVar(&c.Warmup, "warmup", 0, "warm-up before growth is judged (default: a fifth of --duration, at most 10m)")
	fset.IntVar(&c.Docs, "docs", 5000, "documents prefilled, and the live count the deleter keeps")
	fset.IntVar(&c.Searchers, "searchers", 4, "concurrent searchers")
	fset.Uint64Var(&c.Upserts, "upserts", 0, "end the load once this many documents were upserted (--duration still bounds it)")
	fset.IntVar(&c.WriteBatch, "write-batch", 0, "documents of each upsert call (default 1 to 16 at random)")
	fset.BoolVar(&c.Model, "model", false, "index with the default ONNX model ("+encoder.DefaultModel+", dense and late) instead of external vectors")
	fset.StringVar(&c.LateIndex, "late-index", "Residual", `late-interaction index of the external "soak-late" model (or of the --model one); a second external model, "soak-late-faiss", always uses FAISS`)
	report := fset.String("report", "", "write the samples, bounds and verdict to this markdown file")
	memProfile := fset.String("memprofile", "", "write a Go heap profile (in use, after a GC) to this file when the load stops, before the collection closes")
	seed := fset.Uint64("seed", 1, "random seed of documents, queries and operations")
	if err := parseFlags(fset, args); err != nil {
		return err
	}
	c.Seed, c.Progress = *seed, stderr
	if *memProfile != "" {
		c.AtStop = func() error {
			runtime.GC() // the profile's in-use figures are as of the last GC
			if err := bench.WriteHeapProfile(*memProfile); err != nil {
				return fmt.Errorf("--memprofile: %w", err)
			}
			return nil
		}
	}
	if c.Sample == 0 {
		c.Sample = min(time.Minute, c.Duration/10)
	}
	if c.Duration <= 0 || c.Sample <= 0 || c.Warmup < 0 || c.Docs < 100 || c.Searchers < 1 || c.WriteBatch < 0 || fset.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: tandem soak [--dir DIR] [--duration 5m] [--sample D] [--warmup D] [--docs N (at least 100)] [--searchers N (at least 1)] [--model] [--late-index Residual] [--report FILE]")
		return errUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := soak.Run(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, res.Markdown())
	if *report != "" {
		if err := os.WriteFile(*report, []byte(res.Markdown()), 0o644); err != nil {
			return fmt.Errorf("--report: %w", err)
		}
	}
	return res.Verdict()
}
