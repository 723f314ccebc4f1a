package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func runTorture(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "--writer" {
		return runTortureWriterCmd(args[1:], stdout, stderr)
	}
	c := tortureConfig{targetWait: 5 * time.Second}
	fs := newFlagSet("torture", stderr)
	fs.StringVar(&c.dir, "dir", "", "working directory: collection/, ledger, check/ (default: a new temporary directory, removed after a passing run)")
	fs.IntVar(&c.kills, "kills", 0, "number of SIGKILLs (default 100 when --duration is not given either)")
	fs.DurationVar(&c.duration, "duration", 0, "stop after this long (with --kills: whichever comes first)")
	fs.Uint64Var(&c.seed, "seed", 0, "seed of the operations and kill times (default: from the clock; printed, to replay a run's choices)")
	fs.IntVar(&c.ids, "ids", 2000, "size of the pool of document ids (bounds the collection)")
	fs.IntVar(&c.maxBatch, "max-batch", 0, "largest batch of one call (default 300, or 32 with --model)")
	fs.IntVar(&c.closeEvery, "close-every", 15, "the writer closes and reopens the engine once in this many operations, on average")
	fs.StringVar(&c.lateIndex, "late-index", "Residual", `late-interaction index: "Residual" (residual codes) or "FAISS"`)
	fs.StringVar(&c.model, "model", "", "index with this installed model (e.g. bge-small-en-v1.5) on short texts instead of supplied vectors; slower")
	fs.DurationVar(&c.progress, "progress", 10*time.Second, "interval between progress lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem torture: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	if c.kills == 0 && c.duration == 0 {
		c.kills = 100
	}
	switch {
	case c.kills < 0:
		return fmt.Errorf("--kills %d: want a positive count", c.kills)
	case c.duration < 0:
		return fmt.Errorf("--duration %v: want a positive duration", c.duration)
	case c.ids < 1:
		return fmt.Errorf("--ids %d: want a positive count", c.ids)
	case c.maxBatch < 0:
		return fmt.Errorf("--max-batch %d: want a positive count", c.maxBatch)
	case c.closeEvery < 1:
		return fmt.Errorf("--close-every %d: want a positive count", c.closeEvery)
	case c.lateIndex != "" && c.lateIndex != "Residual":
		return fmt.Errorf(`--late-index %q: want "Residual" or ""`, c.lateIndex)
	}
	if c.maxBatch == 0 {
		c.maxBatch = 300
		if c.model != "" {
			c.maxBatch = 32
		}
	}
	if c.seed == 0 {
		c.seed = uint64(time.Now().UnixNano())
	}
	temp := c.dir == ""
	if temp {
		d, err := os.MkdirTemp("", "tandem-torture-")
		if err != nil {
			return err
		}
		c.dir = d
	}
	s, err := torture(context.Background(), c, stderr)
	if s != nil {
		s.print(stdout, c)
	}
	if err != nil {
		return err
	}
	if s.failed() {
		fmt.Fprintf(stderr, "tandem torture: the collection and ledger are kept in %s\n", c.dir)
		return fmt.Errorf("%d lost, %d disagreements; first: %s", s.Lost, s.Disagree, strings.Join(s.Failures[:min(3, len(s.Failures))], "; "))
	}
	if temp {
		os.RemoveAll(c.dir)
	}
	return nil
}

// runTortureWriterCmd is `tandem torture --writer`: the writer process.
func runTortureWriterCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("torture --writer", stderr)
	c := writerFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return runWriter(*c, stdout)
}
