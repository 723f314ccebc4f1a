package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/tandemsearch/tandem/internal/stress/torture"
)

// runTorture is tandem torture: the crash torture harness
// (internal/stress/torture), or with --writer first, one of its writer
// processes.
func runTorture(args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "--writer" {
		return runTortureWriter(args[1:], stdout, stderr)
	}
	c := torture.Config{Progress: stderr, WriterCommand: tortureWriterCommand}
	fs := newFlagSet("torture", stderr)
	fs.StringVar(&c.Dir, "dir", "", "working directory: collection/, ledger, check/ (default: a new temporary directory, removed after a passing run)")
	fs.IntVar(&c.Kills, "kills", 0, "number of SIGKILLs (default 100 when --duration is not given either)")
	fs.DurationVar(&c.Duration, "duration", 0, "stop after this long (with --kills: whichever comes first)")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of the operations and kill times (default: from the clock; printed, to replay a run's choices)")
	fs.IntVar(&c.IDs, "ids", torture.DefaultIDs, "size of the pool of document ids (bounds the collection)")
	fs.IntVar(&c.MaxBatch, "max-batch", 0, "largest batch of one call (default 300, or 32 with --model)")
	fs.IntVar(&c.CloseEvery, "close-every", torture.DefaultCloseEvery, "the writer closes and reopens the engine once in this many operations, on average")
	fs.StringVar(&c.LateIndex, "late-index", "Residual", `late-interaction index: "Residual" (residual codes) or "FAISS" (token keys)`)
	fs.StringVar(&c.Model, "model", "", "index with this installed model (e.g. bge-small-en-v1.5) on short texts instead of supplied vectors; slower")
	fs.DurationVar(&c.ProgressEvery, "progress", torture.DefaultProgressEvery, "interval between progress lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tandem torture: unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	switch {
	case c.Kills < 0:
		return fmt.Errorf("--kills %d: want a positive count", c.Kills)
	case c.Duration < 0:
		return fmt.Errorf("--duration %v: want a positive duration", c.Duration)
	case c.IDs < 1:
		return fmt.Errorf("--ids %d: want a positive count", c.IDs)
	case c.MaxBatch < 0:
		return fmt.Errorf("--max-batch %d: want a positive count", c.MaxBatch)
	case c.CloseEvery < 1:
		return fmt.Errorf("--close-every %d: want a positive count", c.CloseEvery)
	case c.LateIndex != "" && c.LateIndex != "Residual" && c.LateIndex != "FAISS":
		return fmt.Errorf(`--late-index %q: want "Residual" or "FAISS"`, c.LateIndex)
	}
	temp := c.Dir == ""
	if temp {
		d, err := os.MkdirTemp("", "tandem-torture-")
		if err != nil {
			return err
		}
		c.Dir = d
	}
	s, err := torture.Run(context.Background(), c)
	if s != nil {
		s.Print(stdout)
	}
	if err != nil {
		return err
	}
	if s.Failed() {
		fmt.Fprintf(stderr, "tandem torture: the collection and ledger are kept in %s\n", c.Dir)
		return fmt.Errorf("%d lost, %d disagreements; first: %s", s.Lost, s.Disagree, strings.Join(s.Failures[:min(3, len(s.Failures))], "; "))
	}
	if temp {
		os.RemoveAll(c.Dir)
	}
	return nil
}

// tortureWriterCommand starts a writer process of the harness: this
// binary, as tandem torture --writer.
func tortureWriterCommand(args []string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.Command(exe, append([]string{"torture", "--writer"}, args...)...), nil
}

// runTortureWriter is tandem torture --writer: the writer process, which
// the harness starts and SIGKILLs.
func runTortureWriter(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("torture --writer", stderr)
	c := torture.WriterFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return torture.RunWriter(*c, stdout)
}
