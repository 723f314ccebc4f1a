package torture

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const tortureWriterEnv = "TANDEM_TORTURE_WRITER"

// TestTortureWriter is the writer process of TestTorture: it runs only when
// re-executed by it, with the writer's flags in the environment, and
// writes until it is killed.
func TestTortureWriter(t *testing.T) {
	args := os.Getenv(tortureWriterEnv)
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
	old := tortureWriterCmd
	tortureWriterCmd = func(args []string) (*exec.Cmd, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTortureWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), tortureWriterEnv+"="+strings.Join(args, "\x1f"))
		return cmd, nil
	}
	defer func() { tortureWriterCmd = old }()

	c := Config{Dir: t.TempDir(), Kills: 30, Seed: uint64(time.Now().UnixNano()), IDs: 300, MaxBatch: 120, CloseEvery: 10,
		LateIndex: "Residual", Progress: time.Hour, TargetWait: 3 * time.Second}
	t.Logf("seed %d (tandem torture --seed %d --kills 30 --ids 300 --max-batch 120 --close-every 10 replays its choices)", c.Seed, c.Seed)
	var progress bytes.Buffer
	s, err := Run(context.Background(), c, &progress)
	if err != nil {
		t.Fatal(err)
	}
	var summary bytes.Buffer
	s.Print(&summary, c)
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
	if !strings.Contains(summary.String(), fmt.Sprintf("kills:              %d", c.Kills)) {
		t.Errorf("summary lacks the kill count:\n%s", summary.String())
	}
}
