package storage

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
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/testtime"
)

const blobKillEnv = "TANDEM_STORAGE_BLOB_KILL"

// killBatch is batch k of the kill test's writer: puts (version k) and
// deletes of documents d0-d29, the same on every run.
func killBatch(k int) (ops []killOp) {
	r := rand.New(rand.NewPCG(uint64(k), 7))
	for range 1 + r.IntN(6) {
		ops = append(ops, killOp{id: r.IntN(30), del: r.IntN(5) == 0})
	}
	return ops
}

type killOp struct {
	id  int
	del bool
}

// TestBlobKillWriter is the writer process of TestBlobKill: it runs only
// when re-executed by it. It prints "open" once the store is open, then
// writes batches from the one its environment names, with GC compacting
// all the while, logging "begin k" before batch k and "ack k" once Write
// returned, until it is killed.
func TestBlobKillWriter(t *testing.T) {
	env := os.Getenv(blobKillEnv)
	if env == "" {
		t.Skip("writer process of TestBlobKill")
	}
	dir, first, _ := strings.Cut(env, "\x1f")
	k, err := strconv.Atoi(first)
	if err != nil {
		t.Fatal(err)
	}
	segmentSize = 300 << 10
	s, err := Open(filepath.Join(dir, "store"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ledger, err := os.OpenFile(filepath.Join(dir, "ledger"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("open")
	go func() {
		for {
			if err := s.GC(); err != nil {
				fmt.Fprintln(os.Stderr, "GC:", err)
				os.Exit(3)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	writeKillBatches(s, ledger, k)
}

// writeKillBatches writes killBatch(k), killBatch(k+1), ... to s, logging
// "begin k" to ledger before batch k and "ack k" once Write returned,
// until the process is killed; a failed write exits with status 3.
func writeKillBatches(s *Store, ledger *os.File, k int) {
	for ; ; k++ {
		var b Batch
		for _, op := range killBatch(k) {
			if op.del {
				b.Delete(fmt.Sprint("d", op.id))
			} else {
				b.Put(doc(fmt.Sprint("d", op.id), "t"), map[string][]byte{"tok/m": blobOf(op.id, k, bigBlob), "vec/m": blobOf(op.id, k, smallBlob)})
			}
		}
		fmt.Fprintf(ledger, "begin %d\n", k)
		if _, err := s.Write(context.Background(), &b); err != nil {
			fmt.Fprintln(os.Stderr, "write:", err)
			os.Exit(3)
		}
		fmt.Fprintf(ledger, "ack %d\n", k)
	}
}

// TestBlobKill SIGKILLs a writer of large blobs, with GC compacting
// segments under it, at random moments (100 to 500 ms after the writer
// says it has opened the store, however long it took to start), and after
// each kill reopens the store: every acknowledged batch is there, the one
// in flight is there whole or not at all, every blob reads back byte for
// byte, and the live bytes the store counts are those of the live blobs.
func TestBlobKill(t *testing.T) {
	dir := t.TempDir()
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	next := 0
	kills := 8
	if testing.Short() {
		kills = 4
	}
	for kill := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBlobKillWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), blobKillEnv+"="+dir+"\x1f"+strconv.Itoa(next))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		opened, read := make(chan struct{}), make(chan struct{})
		var out strings.Builder // the writer's stdout, once read is closed
		go func() {
			defer close(read)
			seen := false
			for sc := bufio.NewScanner(stdout); sc.Scan(); {
				if !seen && sc.Text() == "open" {
					seen = true
					close(opened)
				}
				out.WriteString(sc.Text() + "\n")
			}
		}()
		select {
		case <-opened:
			time.Sleep(time.Duration(100+r.IntN(400)) * time.Millisecond)
		case <-read: // it ended by itself: a failure, said below
		case <-time.After(testtime.D(time.Minute)):
		}
		cmd.Process.Kill()
		<-read
		err = cmd.Wait()
		select {
		case <-opened:
		default:
			t.Fatalf("kill %d: the writer did not open the store (within %v): %v\n%s%s", kill, testtime.D(time.Minute), err, out.String(), stderr.String())
		}
		if err != nil && cmd.ProcessState.ExitCode() != -1 {
			t.Fatalf("kill %d: the writer failed: %v\n%s%s", kill, err, out.String(), stderr.String())
		}
		s, err := Open(filepath.Join(dir, "store"), nil)
		if err != nil {
			t.Fatalf("kill %d: open: %v", kill, err)
		}
		got, acked, inFlight := checkKillStore(t, s, filepath.Join(dir, "ledger"), kill)
		live := int64(0)
		for _, v := range got {
			if v >= 0 {
				live += bigBlob
			}
		}
		if st := s.BlobStats(); st.Live != live {
			t.Errorf("kill %d: BlobStats %+v, want %d live bytes", kill, st, live)
		}
		files := segmentFiles(t, filepath.Join(dir, "store"))
		s.Close()
		next = max(next, inFlight+1)
		for _, k := range acked {
			next = max(next, k+1)
		}
		t.Logf("kill %d: %d batches acknowledged, %d in flight; segments %v", kill, len(acked), inFlight, files)
	}
	if next < 2*kills {
		t.Errorf("only %d batches in %d kills", next, kills)
	}
}

// checkKillStore fails unless s, after kill number kill, holds the documents d0-d29 as the
// batches the ledger at path acknowledges left them, with or without the
// batch in flight; if with, it records that batch as acknowledged, since
// later batches build on it. It returns what s holds, the batches
// acknowledged and the one in flight (-1 if none).
func checkKillStore(t *testing.T, s *Store, path string, kill int) (got map[int]int, acked []int, inFlight int) {
	t.Helper()
	acked, inFlight = readKillLedger(t, path)
	without := killModel(acked, -1)
	with := killModel(acked, inFlight)
	got = readKillStore(t, s)
	switch {
	case sameModel(got, without):
	case sameModel(got, with):
		appendLedger(t, path, fmt.Sprintf("ack %d\n", inFlight))
	default:
		t.Fatalf("kill %d: the store holds %v; want %v (acknowledged) or %v (with batch %d in flight)", kill, got, without, with, inFlight)
	}
	return got, acked, inFlight
}

func appendLedger(t *testing.T, path, line string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
}

// readKillLedger returns the acknowledged batches in order, and the one
// begun and not acknowledged (-1 if none).
func readKillLedger(t *testing.T, path string) (acked []int, inFlight int) {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, -1
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	inFlight = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		word, num, ok := strings.Cut(sc.Text(), " ")
		k, err := strconv.Atoi(num)
		if !ok || err != nil {
			continue // a line torn by the kill
		}
		switch word {
		case "begin":
			inFlight = k
		case "ack":
			acked = append(acked, k)
			inFlight = -1
		}
	}
	return acked, inFlight
}

// killModel is each document's version after the batches acked and then
// extra (if not -1); -1 for deleted.
func killModel(acked []int, extra int) map[int]int {
	m := map[int]int{}
	for i := range 30 {
		m[i] = -1
	}
	if extra >= 0 {
		acked = append(acked[:len(acked):len(acked)], extra)
	}
	for _, k := range acked {
		for _, op := range killBatch(k) {
			if op.del {
				m[op.id] = -1
			} else {
				m[op.id] = k
			}
		}
	}
	return m
}

func readKillStore(t *testing.T, s *Store) map[int]int {
	t.Helper()
	m := map[int]int{}
	var buf []byte
	for i := range 30 {
		m[i] = -1
		num, ok, err := s.Lookup(fmt.Sprint("d", i))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			continue
		}
		buf, ok, err = s.ReadBlob(num, "tok/m", buf[:0])
		v, whole := checkBlob(buf, i, bigBlob)
		if err != nil || !ok || !whole {
			t.Errorf("d%d: %v %v, whole %v", i, ok, err, whole)
			continue
		}
		small, ok, err := s.Blob(num, "vec/m")
		if sv, whole := checkBlob(small, i, smallBlob); err != nil || !ok || !whole || sv != v {
			t.Errorf("d%d: small blob version %d, large %d, %v %v", i, sv, v, ok, err)
		}
		m[i] = v
	}
	return m
}

func sameModel(a, b map[int]int) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return len(a) == len(b)
}
