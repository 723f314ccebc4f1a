package torture

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
)

// writerEnv carries a writer's arguments to TestWriterProcess.
const writerEnv = "TANDEM_TORTURE_WRITER"

// TestWriterProcess is the writer process of TestTorture: it runs only
// when re-executed by it, with the writer's arguments in the environment,
// and writes until it is killed.
func TestWriterProcess(t *testing.T) {
	args := os.Getenv(writerEnv)
	if args == "" {
		t.Skip("writer process of TestTorture")
	}
	fs := flag.NewFlagSet("torture --writer", flag.ContinueOnError)
	c := WriterFlags(fs)
	if err := fs.Parse(strings.Split(args, "\x1f")); err != nil {
		os.Exit(3)
	}
	if err := RunWriter(*c, os.Stdout); err != nil {
		os.Exit(3)
	}
}

// testWriterCommand starts a writer process by re-executing the test
// binary to run TestWriterProcess.
func testWriterCommand(args []string) (*exec.Cmd, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), writerEnv+"="+strings.Join(args, "\x1f"))
	return cmd, nil
}

// TestTorture is the short version of make torture: 30 SIGKILLs of a
// writer upserting and deleting documents that bring dense and token
// vectors (residual late index), each followed by a reopen and a full
// check against the ledger. It must lose nothing, find no disagreement
// among Badger, Bleve, FAISS and the token index, and land kills in at
// least three distinct phases.
func TestTorture(t *testing.T) {
	if testing.Short() {
		t.Skip("crash torture in short mode")
	}
	c := Config{Dir: t.TempDir(), Kills: 30, Seed: uint64(time.Now().UnixNano()), IDs: 300, MaxBatch: 120, CloseEvery: 10,
		LateIndex: "Residual", ProgressEvery: time.Hour, TargetWait: testtime.D(3 * time.Second), WriterCommand: testWriterCommand}
	t.Logf("seed %d (tandem torture --seed %d --kills 30 --ids 300 --max-batch 120 --close-every 10 replays its choices)", c.Seed, c.Seed)
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	s.Print(&summary)
	t.Log("\n" + summary.String())
	if s.Stopped != nil {
		t.Fatalf("stopped: %v", s.Stopped)
	}
	if s.Lost != 0 || s.Disagree != 0 {
		t.Errorf("%d lost, %d disagreements", s.Lost, s.Disagree)
	}
	if s.Kills != c.Kills {
		t.Errorf("%d kills, want %d", s.Kills, c.Kills)
	}
	if s.acknowledged() < c.Kills {
		t.Errorf("only %d operations acknowledged in %d kills: the kills came too early to test anything", s.acknowledged(), s.Kills)
	}
	if len(s.Phases) < 3 {
		t.Errorf("kills landed in %d distinct phases (%s), want at least 3", len(s.Phases), distribution(s.Phases, s.Kills))
	}
	if s.InFlight == 0 {
		t.Errorf("no kill landed with an operation in flight: %s", distribution(s.Raw, s.Kills))
	}
	// The writer closes every 10 operations, and each Close truncates
	// the change log through what every index saved.
	if s.Truncated == 0 {
		t.Errorf("no check found the change log truncated (floor %d at the last)", s.LogFloor)
	}
	if !strings.Contains(summary.String(), fmt.Sprintf("kills:              %d", c.Kills)) {
		t.Errorf("summary lacks the kill count:\n%s", summary.String())
	}
}

// Run refuses a Config without a directory or a way to start writers, or
// with a negative count, naming the fields, and stops before the next
// kill once its context is done.
func TestRunConfig(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want []string
	}{
		{Config{}, []string{"Config.Dir is required", "Config.WriterCommand is required"}},
		{Config{Dir: t.TempDir(), WriterCommand: testWriterCommand, Kills: -1, IDs: -3}, []string{"Config.IDs is negative", "Config.Kills is negative"}},
	} {
		r, err := Run(context.Background(), tc.c)
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %v, want %q", tc.c, err, w)
			}
		}
		if r != nil {
			t.Errorf("%+v: a report from a refused config", tc.c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	r, err := Run(ctx, Config{Dir: dir, WriterCommand: testWriterCommand})
	if !errors.Is(err, context.Canceled) || r == nil || r.Kills != 0 {
		t.Fatalf("cancelled run: %v, %+v", err, r)
	}
	if r.Config.Kills != DefaultKills || r.Config.IDs != DefaultIDs || r.Config.MaxBatch != DefaultMaxBatch || r.Seed == 0 || r.Seed != r.Config.Seed {
		t.Errorf("defaults not filled: %+v", r.Config)
	}
}
