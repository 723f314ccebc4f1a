package engine

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/sparse"
	"github.com/tandemsearch/tandem/storage"
)

const (
	crashDirEnv  = "TANDEM_CRASH_HELPER_DIR"
	crashSeedEnv = "TANDEM_CRASH_HELPER_SEED"
	crashIDs     = 300 // the pool of external ids the writer upserts and deletes
)

func crashSchema() *tandem.Schema {
	return &tandem.Schema{Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "key", Type: tandem.Keyword},
	}}
}

// TestCrashHelper is the writer process of TestCrash. It only runs when
// re-executed by TestCrash: it upserts and deletes random batches forever,
// printing "begin <op> <ids>" before each call and "ack" once the call has
// returned, until it is killed.
func TestCrashHelper(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashSeedEnv), 10, 64)
	r := rand.New(rand.NewPCG(seed, 99))
	ctx := context.Background()
	e, err := Open(dir, &Options{Schema: crashSchema()})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(3)
	}
	fmt.Println("open")
	out := bufio.NewWriter(os.Stdout)
	for v := 0; ; v++ {
		n := 1 + r.IntN(40)
		seen := map[string]bool{}
		var list []string
		for range n {
			id := fmt.Sprintf("k%03d", r.IntN(crashIDs))
			if !seen[id] {
				seen[id] = true
				list = append(list, id)
			}
		}
		if r.IntN(4) == 0 {
			fmt.Fprintf(out, "begin del %s\n", strings.Join(list, " "))
			out.Flush()
			if _, err := e.Delete(ctx, list); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		} else {
			docs := make([]tandem.Doc, len(list))
			for i, id := range list {
				docs[i] = tandem.Doc{ID: id, Fields: map[string]any{
					"text": fmt.Sprintf("common payload version v%d of %s %s", v, id, strings.Repeat("filler ", r.IntN(50))),
					"key":  id,
				}}
			}
			fmt.Fprintf(out, "begin put %s\n", strings.Join(list, " "))
			out.Flush()
			if _, err := e.Index(ctx, docs); err != nil {
				fmt.Println("error", err)
				os.Exit(3)
			}
		}
		fmt.Fprintln(out, "ack")
		out.Flush()
	}
}

// TestCrash SIGKILLs an indexing process at random moments, then reopens
// the collection and checks that every acknowledged document is in Badger
// and in Bleve, that the counts match, that there are no duplicates, and
// that deleted documents never come back.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping crash test in short mode")
	}
	rounds := 24
	behindRounds = 0
	dir := t.TempDir()
	// state is what the acknowledged operations imply: true present,
	// false absent; ids never touched are absent.
	state := map[string]bool{}
	r := rand.New(rand.NewPCG(7, 7))
	totalAcks := 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashSeedEnv+"="+strconv.Itoa(round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 1024)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		// Usually wait for the helper to open, so the kill lands in the
		// write loop; every fourth round kill it early instead, possibly
		// during Open's catch-up of Bleve.
		if round%4 == 3 {
			time.Sleep(time.Duration(r.IntN(150)) * time.Millisecond)
		} else {
			for l := range lines {
				if l == "open" {
					break
				}
				if strings.HasPrefix(l, "error") {
					t.Fatalf("round %d: helper: %s", round, l)
				}
			}
			time.Sleep(time.Duration(20+r.IntN(400)) * time.Millisecond)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var pending []string // ids of the operation in flight at the kill
		acks := 0
		var pendingOp string
		for l := range lines {
			switch {
			case strings.HasPrefix(l, "begin "):
				f := strings.Fields(l)
				pendingOp, pending = f[1], f[2:]
			case l == "ack":
				for _, id := range pending {
					state[id] = pendingOp == "put"
				}
				pending = nil
				acks++
			case strings.HasPrefix(l, "error"):
				t.Fatalf("round %d: helper: %s", round, l)
			}
		}
		cmd.Wait()
		totalAcks += acks
		uncertain := map[string]bool{}
		for _, id := range pending {
			uncertain[id] = true
		}
		checkCrashState(t, round, dir, state, uncertain)
	}
	t.Logf("%d rounds, %d acknowledged operations; bleve was behind the log at %d restarts", rounds, totalAcks, behindRounds)
	if totalAcks < rounds {
		t.Errorf("only %d acknowledged operations in %d rounds: the kills came too early to test anything", totalAcks, rounds)
	}
}

// behindRounds counts restarts at which Bleve had not applied every
// committed change, i.e. where catch-up was exercised.
var behindRounds int

func checkCrashState(t *testing.T, round int, dir string, state, uncertain map[string]bool) {
	t.Helper()
	ctx := context.Background()
	// Before the engine catches up, see how far Bleve fell behind.
	if st, err := storage.Open(dir, nil); err == nil {
		if sp, err := sparse.Open(filepath.Join(dir, "bleve")); err == nil {
			if sp.AppliedSeq() < st.LastSeq() {
				behindRounds++
			}
			sp.Close()
		}
		st.Close()
	}
	e, err := Open(dir, &Options{Schema: crashSchema()})
	if err != nil {
		t.Fatalf("round %d: reopen: %v", round, err)
	}
	defer e.Close()
	st := e.Shard().Store()
	// Badger: ids unique, each acknowledged state holds.
	inBadger := map[string]uint64{}
	if err := st.ScanDocs(ctx, func(num uint64, d tandem.Doc) error {
		if _, dup := inBadger[d.ID]; dup {
			t.Errorf("round %d: id %s stored twice", round, d.ID)
		}
		inBadger[d.ID] = num
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, present := range state {
		if uncertain[id] {
			continue
		}
		if _, ok := inBadger[id]; ok != present {
			t.Errorf("round %d: %s in Badger = %v, acknowledged state %v", round, id, ok, present)
		}
	}
	// The uncertain operation either committed or not; learn which.
	for id := range uncertain {
		_, state[id] = inBadger[id]
	}
	for id := range inBadger {
		if !state[id] {
			t.Errorf("round %d: %s is in Badger but was never acknowledged as present", round, id)
		}
	}
	// Bleve: the same documents, once each.
	stats, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Docs != uint64(len(inBadger)) || stats.BleveDocs != stats.Docs {
		t.Errorf("round %d: counts: badger scan %d, store count %d, bleve %d", round, len(inBadger), stats.Docs, stats.BleveDocs)
	}
	bm, err := e.FilterBitmap(ctx, []byte(`{"exists":"key"}`))
	if err != nil {
		t.Fatal(err)
	}
	if bm.GetCardinality() != uint64(len(inBadger)) {
		t.Errorf("round %d: bleve has %d documents, badger %d", round, bm.GetCardinality(), len(inBadger))
	}
	for id, num := range inBadger {
		if !bm.Contains(num) {
			t.Errorf("round %d: %s (docnum %d) is missing from bleve", round, id, num)
		}
	}
	res, err := e.Search(ctx, Request{Text: "common payload", K: crashIDs * 2})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, h := range res.Hits {
		if seen[h.ID] {
			t.Errorf("round %d: %s returned twice", round, h.ID)
		}
		seen[h.ID] = true
		if !state[h.ID] {
			t.Errorf("round %d: deleted %s returned by search", round, h.ID)
		}
	}
	if len(seen) != len(inBadger) {
		t.Errorf("round %d: search found %d documents, badger has %d", round, len(seen), len(inBadger))
	}
}
