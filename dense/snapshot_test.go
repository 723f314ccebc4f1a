package dense

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/storage"
)

// storedDocNums is the set of documents with a vector blob in storage.
func storedDocNums(t testing.TB, st *storage.Store) *roaring64.Bitmap {
	t.Helper()
	b := roaring64.New()
	err := st.ScanBlobs(context.Background(), BlobName(testModel), func(num uint64, _ []byte) error {
		b.Add(num)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// churn writes puts of new documents, updates and deletes, one batch per
// call, choosing ids in [0, span).
func churn(t testing.TB, st *storage.Store, s *synth, rng *rand.Rand, ops, span int) {
	t.Helper()
	var b storage.Batch
	for range ops {
		id := fmt.Sprintf("c%d", rng.IntN(span))
		if rng.IntN(5) == 0 {
			b.Delete(id)
			continue
		}
		b.Put(tandem.Doc{ID: id, Fields: map[string]any{"text": "x"}},
			map[string][]byte{BlobName(testModel): EncodeVector(s.next())})
	}
	if _, err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
}

// checkAgrees fails unless x indexes exactly the documents with vectors in
// st, and each of a sample is its own stored vector's best hit.
func checkAgrees(t testing.TB, st *storage.Store, x *Index) {
	t.Helper()
	ctx := context.Background()
	want := storedDocNums(t, st)
	got := x.DocNums()
	if !got.Equals(want) {
		extra := roaring64.AndNot(got, want)
		missing := roaring64.AndNot(want, got)
		t.Fatalf("index holds %d docnums, storage %d: %d deleted ones still indexed (%v), %d missing (%v)",
			got.GetCardinality(), want.GetCardinality(), extra.GetCardinality(), head(extra), missing.GetCardinality(), head(missing))
	}
	if x.Len() != int(want.GetCardinality()) || x.mu.fx.Len() != int64(want.GetCardinality()) {
		t.Fatalf("Len %d, FAISS holds %d, want %d", x.Len(), x.mu.fx.Len(), want.GetCardinality())
	}
	it := want.Iterator()
	for i := 0; it.HasNext() && i < 2000; i++ {
		num := it.Next()
		if i%97 != 0 {
			continue
		}
		b, _, err := st.Blob(num, BlobName(testModel))
		if err != nil {
			t.Fatal(err)
		}
		v, err := DecodeVector(b, x.Dim())
		if err != nil {
			t.Fatal(err)
		}
		hits, err := x.Search(ctx, v, 1, roaring64.BitmapOf(num))
		if err != nil {
			t.Fatal(err)
		}
		if len(hits) != 1 || hits[0].DocNum != num || hits[0].Score < 0.999 {
			t.Fatalf("doc %d: its stored vector finds %+v, want itself with score 1 (stale vector?)", num, hits)
		}
	}
}

func head(b *roaring64.Bitmap) []uint64 {
	a := b.ToArray()
	return a[:min(len(a), 5)]
}

// TestSnapshotCatchUp: an index opened from a snapshot and caught up with
// later puts, updates and deletes equals the index that applied them live,
// and agrees with storage; a damaged or mismatched snapshot is rebuilt.
func TestSnapshotCatchUp(t *testing.T) {
	for _, desc := range []string{"", "Flat"} {
		t.Run(desc, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t, t.TempDir())
			s := newSynth(64, 10, 4)
			rng := rand.New(rand.NewPCG(1, 2))
			for range 12 {
				churn(t, st, s, rng, 500, 5000)
			}
			opts := &Options{Model: testModel, Dim: 64, Description: desc, ExactBelow: 1000}
			x1, err := Open(ctx, st, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := x1.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			snapSeq := x1.Stats().SnapshotSeq
			if snapSeq != st.LastSeq() {
				t.Fatalf("snapshot seq %d, want %d", snapSeq, st.LastSeq())
			}
			for range 4 {
				churn(t, st, s, rng, 300, 5000)
				catchUp(t, st, x1)
			}
			checkAgrees(t, st, x1)
			qs := s.many(10)
			var live [][]Hit
			for _, q := range qs {
				h, err := x1.Search(ctx, q, 10, nil)
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, h)
			}
			desc1 := x1.Stats().Description
			x1.Close()

			x2, err := Open(ctx, st, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer x2.Close()
			if got := x2.Stats(); got.SnapshotSeq != snapSeq || got.Description != desc1 || got.AppliedSeq != st.LastSeq() {
				t.Fatalf("reopened: %+v, want snapshot seq %d, %s, applied %d", got, snapSeq, desc1, st.LastSeq())
			}
			checkAgrees(t, st, x2)
			for i, q := range qs {
				h, err := x2.Search(ctx, q, 10, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := sameRanking(h, live[i], 0); err != nil {
					t.Errorf("query %d: snapshot+catch-up differs from live index: %v", i, err)
				}
			}

			// A damaged snapshot, or one built for another description,
			// is ignored: the index is rebuilt from storage.
			for name, o := range map[string]*Options{
				"damaged":     opts,
				"missing":     opts,
				"description": {Model: testModel, Dim: 64, Description: "IVF8,Flat"},
			} {
				var src Store = st
				switch name {
				case "damaged":
					src = damaged{st}
				case "missing":
					src = missing{st}
				}
				x3, err := Open(ctx, src, o)
				if err != nil {
					t.Fatalf("%s snapshot: %v", name, err)
				}
				if x3.Stats().SnapshotSeq != 0 {
					t.Errorf("%s snapshot was loaded", name)
				}
				checkAgrees(t, st, x3)
				x3.Close()
			}
		})
	}
}

// damaged serves the stored snapshot with one byte flipped in the middle.
type damaged struct{ *storage.Store }

func (d damaged) OpenSnapshot(name string) (io.ReadCloser, uint64, error) {
	rc, seq, err := d.Store.OpenSnapshot(name)
	if err != nil {
		return nil, 0, err
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return nil, 0, err
	}
	b[len(b)/2] ^= 0x40
	return io.NopCloser(bytes.NewReader(b)), seq, nil
}

// missing serves a snapshot record whose file is gone, as storage reports
// it.
type missing struct{ *storage.Store }

func (m missing) OpenSnapshot(name string) (io.ReadCloser, uint64, error) {
	return nil, 0, fmt.Errorf("%w: snapshot %q: file removed", storage.ErrCorruption, name)
}

const crashEnv = "TANDEM_DENSE_CRASH_DIR"

// crashOptions make the child cross from Flat to IVF and snapshot often.
var crashOptions = Options{Model: testModel, Dim: 32, ExactBelow: 400, SnapshotEvery: 150}

// TestCrashChild is the child process of TestCrashRecovery: it writes
// batches through storage and applies them to the index, snapshotting now
// and then, until it is killed. It prints "open" once the index is open
// and "snapshot" after each snapshot, for the parent to time its kill.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("child process of TestCrashRecovery")
	}
	seed, _ := strconv.ParseUint(os.Getenv(crashEnv+"_SEED"), 10, 64)
	ctx := context.Background()
	st, err := storage.Open(dir, &storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	o := crashOptions
	x, err := Open(ctx, st, &o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("open")
	s := newSynth(32, 8, seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	deadline := time.Now().Add(testtime.D(time.Minute)) // never outlive a dead parent for long
	for i := 0; time.Now().Before(deadline); i++ {
		churn(t, st, s, rng, 1+rng.IntN(60), 3000)
		catchUp(t, st, x)
		if i%9 == 0 {
			if err := x.Snapshot(ctx); err != nil {
				t.Fatal(err)
			}
			fmt.Println("snapshot")
		}
	}
}

// TestCrashRecovery kills a writing child process with SIGKILL at random
// moments, then checks that the reopened index holds exactly the documents
// with vectors in storage, with their current vectors (acceptance 4).
// The moments are counted from the child's word, not from its start, so
// that a slow start does not leave a round without writes: up to 700 ms
// after the index is open, or, in every other round, after its first
// snapshot, so that some round reopens from a snapshot.
func TestCrashRecovery(t *testing.T) {
	if os.Getenv(crashEnv) != "" {
		t.Skip("in the child")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(11, 12))
	rounds, snapshots := 12, 0
	for round := range rounds {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashEnv+"_SEED="+strconv.Itoa(round))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out, stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		after := "open"
		if round%2 == 0 {
			after = "snapshot"
		}
		reached, read := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(read)
			seen := false
			for sc := bufio.NewScanner(stdout); sc.Scan(); {
				out.WriteString(sc.Text() + "\n")
				if !seen && sc.Text() == after {
					seen = true
					close(reached)
				}
			}
		}()
		select {
		case <-reached:
		case <-read: // ended; the check that it was killed says so
		case <-time.After(testtime.D(time.Minute)):
			cmd.Process.Kill()
			<-read
			cmd.Wait()
			t.Fatalf("round %d: no %q from the child within %v\n%s%s", round, after, testtime.D(time.Minute), out.String(), stderr.String())
		}
		time.Sleep(time.Duration(rng.IntN(700)) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-read
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child was not killed (it ended first: %v)\n%s%s", round, err, out.String(), stderr.String())
		}
		st, err := storage.Open(dir, nil)
		if err != nil {
			t.Fatalf("round %d: reopen storage: %v", round, err)
		}
		o := crashOptions
		x, err := Open(context.Background(), st, &o)
		if err != nil {
			st.Close()
			t.Fatalf("round %d: reopen index: %v", round, err)
		}
		stats := x.Stats()
		if stats.SnapshotSeq > 0 {
			snapshots++
		}
		t.Logf("round %d: killed after %q; %d vectors (%s), snapshot seq %d, last seq %d", round, after, stats.Vectors, stats.Description, stats.SnapshotSeq, st.LastSeq())
		checkAgrees(t, st, x)
		x.Close()
		st.Close()
	}
	if snapshots == 0 {
		t.Error("no round reopened from a snapshot: the catch-up path was not exercised")
	}
}
