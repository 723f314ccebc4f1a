package storage

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const truncateKillEnv = "TANDEM_STORAGE_TRUNCATE_KILL"

// TestTruncateLogKillWriter is the process of TestTruncateLogKill: it
// runs only when re-executed by it. It writes batches from the one its
// environment names (writeKillBatches) and meanwhile truncates the whole
// log: it prints "truncating F L" (the floor and the last sequence)
// before one TruncateLog through L, then truncates through LastSeq over
// and over, until it is killed.
func TestTruncateLogKillWriter(t *testing.T) {
	env := os.Getenv(truncateKillEnv)
	if env == "" {
		t.Skip("process of TestTruncateLogKill")
	}
	dir, first, _ := strings.Cut(env, "\x1f")
	k, err := strconv.Atoi(first)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(dir, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := os.OpenFile(filepath.Join(dir, "ledger"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	go writeKillBatches(s, ledger, k)
	ctx := context.Background()
	ls := s.LogStats()
	fmt.Printf("truncating %d %d\n", ls.Floor, ls.Last)
	for through := ls.Last; ; through = s.LastSeq() {
		if _, err := s.TruncateLog(ctx, through); err != nil {
			fmt.Fprintln(os.Stderr, "truncate:", err)
			os.Exit(3)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTruncateLogKill SIGKILLs a process that truncates a long change
// log while it writes batches, at random moments, and after each kill
// reopens the store: invariant L holds (checkLog: Badger holds exactly
// the entries (floor, LastSeq], and Changes(floor) returns them all), the
// floor is where a chunk's commit left it, every acknowledged batch is
// there and the one in flight whole or not at all (checkKillStore), and
// every other document is intact. Before each run the test appends 60,000
// entries, six chunks, for the process to truncate.
func TestTruncateLogKill(t *testing.T) {
	dir := t.TempDir()
	store, ledger := filepath.Join(dir, "store"), filepath.Join(dir, "ledger")
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	// At least kills runs, and more until wantMidway kills landed
	// inside the truncation of the 60,000 entries (it takes about 120 ms
	// on an idle machine), up to maxKills.
	kills, wantMidway, maxKills := 6, 2, 20
	if testing.Short() {
		kills, wantMidway = 3, 1
	}
	next, midway, kill := 0, 0, 0
	fillers := map[string]string{}
	for ; kill < kills || midway < wantMidway && kill < maxKills; kill++ {
		// Closing the store syncs what NoSync did not.
		s, err := Open(store, &Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		for id, text := range putMany(t, s, fmt.Sprint("p", kill, "-"), 60_000, 1_000, 100) {
			fillers[id] = text
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}

		cmd := exec.Command(os.Args[0], "-test.run=^TestTruncateLogKillWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), truncateKillEnv+"="+dir+"\x1f"+strconv.Itoa(next))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var from, through uint64
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if _, err := fmt.Sscanf(sc.Text(), "truncating %d %d", &from, &through); err == nil {
				break
			}
		}
		time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
		cmd.Process.Kill()
		io.Copy(io.Discard, out)
		if err := cmd.Wait(); err != nil && cmd.ProcessState.ExitCode() != -1 {
			t.Fatalf("kill %d: the process failed: %v\n%s", kill, err, stderr.String())
		}
		if through == 0 {
			t.Fatalf("kill %d: the process never began truncating\n%s", kill, stderr.String())
		}

		s, err = Open(store, nil)
		if err != nil {
			t.Fatalf("kill %d: open: %v", kill, err)
		}
		ls := checkLog(t, s)
		switch {
		case ls.Floor < from:
			t.Errorf("kill %d: floor %d, below %d where it was", kill, ls.Floor, from)
		case ls.Floor < through && (ls.Floor-from)%truncateChunk != 0:
			t.Errorf("kill %d: floor %d, not a whole number of %d-entry chunks from %d", kill, ls.Floor, truncateChunk, from)
		case ls.Floor > from && ls.Floor < through:
			midway++
		}
		_, acked, inFlight := checkKillStore(t, s, ledger, kill)
		for id, text := range fillers {
			num, ok, err := s.Lookup(id)
			if err != nil || !ok {
				t.Fatalf("kill %d: document %s: %v %v", kill, id, ok, err)
			}
			d, ok, err := s.Get(num)
			if err != nil || !ok || d.Fields["text"] != text {
				t.Fatalf("kill %d: document %s: %v %v, text %v; want %q", kill, id, ok, err, d.Fields["text"], text)
			}
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		next = max(next, inFlight+1)
		for _, k := range acked {
			next = max(next, k+1)
		}
		t.Logf("kill %d: floor %d (truncating %d through %d), last %d; %d batches acknowledged", kill, ls.Floor, from, through, ls.Last, len(acked))
	}
	t.Logf("%d of %d kills landed inside the truncation of %d chunks", midway, kill, 60_000/truncateChunk)
	if midway == 0 {
		t.Errorf("none of %d kills landed inside a truncation", kill)
	}
}
