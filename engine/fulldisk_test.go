package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/storage"
)

// Supplied-vector collections for the full-disk and fault tests: one
// external model serves both dense and late retrieval, so no ONNX model is
// needed, and BM25 indexes the text.
const (
	faultModel    = "ext"
	faultDim      = 32
	faultTokenDim = 32
	faultTokens   = 96 // 96×32 float16 = 6 KiB: token blobs go to blob segments
)

func faultSchema(lateIndex string) *tandem.Schema {
	s := tandem.DefaultSchema()
	s.Fields = append(s.Fields, tandem.Field{Name: "key", Type: tandem.Keyword})
	s.Models = []tandem.Model{{Name: faultModel, Dense: true, Dim: faultDim, Late: true, TokenDim: faultTokenDim,
		LateIndex: lateIndex, Similarity: tandem.Cosine, External: true}}
	return s
}

var faultWords = strings.Fields(`alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike
	november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu amber basalt cobalt
	dune ember fjord granite harbour iris jasper kelp lagoon meadow nectar onyx pebble quartz reef saffron
	tundra umber violet willow yarrow zephyr`)

// faultDoc is document i of a deterministic stream: text of words, a
// keyword, and unit vectors derived from i, so that it can be rebuilt to
// compare with what was stored.
func faultDoc(i, words int) tandem.Doc {
	r := rand.New(rand.NewPCG(uint64(i), 99))
	var sb strings.Builder
	for w := range words {
		if w > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(faultWords[r.IntN(len(faultWords))])
	}
	unit := func(n int) []float32 {
		v := make([]float32, n)
		var s float64
		for j := range v {
			v[j] = float32(r.NormFloat64())
			s += float64(v[j] * v[j])
		}
		for j := range v {
			v[j] /= float32(math.Sqrt(s))
		}
		return v
	}
	vec := tandem.Vectors{Dense: unit(faultDim)}
	for range faultTokens {
		vec.Tokens = append(vec.Tokens, unit(faultTokenDim))
	}
	id := fmt.Sprintf("d%06d", i)
	return tandem.Doc{ID: id, Fields: map[string]any{"title": "doc " + id, "text": sb.String(), "key": id},
		Vectors: map[string]tandem.Vectors{faultModel: vec}}
}

// checkConsistent checks e against want, the acknowledged documents by id:
// Badger holds exactly them with their fields and vectors, and Bleve, the
// dense index and the late-interaction index hold exactly the same
// document numbers; every search mode returns only them.
func checkConsistent(t *testing.T, e *Engine, want map[string]tandem.Doc) {
	t.Helper()
	ctx := context.Background()
	st := e.Shard().Store()
	inBadger := map[string]uint64{}
	if err := st.ScanDocs(ctx, func(num uint64, d tandem.Doc) error {
		if _, dup := inBadger[d.ID]; dup {
			t.Errorf("%s stored twice", d.ID)
		}
		inBadger[d.ID] = num
		w, ok := want[d.ID]
		if !ok {
			t.Errorf("%s is in Badger but was not acknowledged", d.ID)
			return nil
		}
		for _, f := range []string{"text", "key"} {
			if d.Fields[f] != w.Fields[f] {
				t.Errorf("%s: field %s = %.40v, want %.40v", d.ID, f, d.Fields[f], w.Fields[f])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		num, ok := inBadger[id]
		if !ok {
			t.Errorf("acknowledged %s is not in Badger", id)
			continue
		}
		v := w.Vectors[faultModel]
		b, ok, err := st.Blob(num, dense.BlobName(faultModel))
		if err != nil || !ok {
			t.Errorf("%s: dense blob: %v %v", id, ok, err)
		} else if got, err := dense.DecodeVector(b, faultDim); err != nil || !slices.Equal(got, v.Dense) {
			t.Errorf("%s: stored dense vector differs (%v)", id, err)
		}
		b, ok, err = st.Blob(num, latecollect.BlobName(faultModel))
		if err != nil || !ok {
			t.Errorf("%s: token blob: %v %v", id, ok, err)
		} else if flat, dim, err := latecollect.DecodeTokens(b); err != nil || dim != faultTokenDim || len(flat) != faultTokens*faultTokenDim {
			t.Errorf("%s: stored tokens: %d values of dim %d, %v", id, len(flat), dim, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// Bleve: the documents with a key.
	bm, err := e.FilterBitmap(ctx, []byte(`{"exists":"key"}`))
	if err != nil {
		t.Fatal(err)
	}
	stats, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if stats.Docs != uint64(len(want)) || stats.BleveDocs != stats.Docs || bm.GetCardinality() != stats.Docs {
		t.Errorf("counts: acknowledged %d, badger %d, bleve %d (filter %d)", len(want), stats.Docs, stats.BleveDocs, bm.GetCardinality())
	}
	var m *model
	for _, x := range e.models {
		if x.spec.Name == faultModel {
			m = x
		}
	}
	if m == nil || m.dense == nil || m.late == nil {
		t.Fatal("the collection has no external dense and late index")
	}
	dn := m.dense.DocNums()
	for id, num := range inBadger {
		if !bm.Contains(num) {
			t.Errorf("%s (docnum %d) is missing from bleve", id, num)
		}
		if !dn.Contains(num) {
			t.Errorf("%s (docnum %d) is missing from the dense index", id, num)
		}
	}
	if dn.GetCardinality() != uint64(len(inBadger)) {
		t.Errorf("dense index holds %d documents, badger %d", dn.GetCardinality(), len(inBadger))
	}
	ls, err := m.late.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if ls.Docs != len(inBadger) || ls.Tokens != int64(len(inBadger)*faultTokens) || ls.TokenKeys != ls.Tokens {
		t.Errorf("late index: %d documents, %d tokens, %d keys; badger has %d documents of %d tokens",
			ls.Docs, ls.Tokens, ls.TokenKeys, len(inBadger), faultTokens)
	}
	if len(want) == 0 {
		return
	}
	// Every mode: only acknowledged documents; bm25, dense (exact below
	// 10,000 vectors) and exhaustive late interaction return all of them.
	var q tandem.Doc
	for _, d := range want {
		q = d
		break
	}
	vec := q.Vectors[faultModel]
	all := len(want)
	for _, mode := range [][]string{{"bm25"}, {"dense"}, {"late"}, {"late-exact"}, {"bm25", "dense", "late"}} {
		req := Request{Text: faultWords[0] + " " + q.Fields["text"].(string)[:20], K: all, IDsOnly: true,
			Retrievers: mode, Vectors: map[string]tandem.Vectors{faultModel: vec}}
		res, err := e.Search(ctx, req)
		if err != nil {
			t.Fatalf("search %v: %v", mode, err)
		}
		seen := map[string]bool{}
		for _, h := range res.Hits {
			if _, ok := want[h.ID]; !ok || seen[h.ID] {
				t.Errorf("search %v: hit %s is not an acknowledged document, or came twice", mode, h.ID)
			}
			seen[h.ID] = true
		}
		if (mode[0] == "dense" || mode[0] == "late-exact") && len(seen) != all {
			t.Errorf("search %v: %d hits of %d documents", mode, len(seen), all)
		}
		if len(res.Hits) == 0 {
			t.Errorf("search %v: no hits", mode)
		} else if mode[0] == "dense" && res.Hits[0].ID != q.ID {
			t.Errorf("search dense with %s's own vector: first hit %s", q.ID, res.Hits[0].ID)
		}
	}
}

// mountSmallFS mounts a tmpfs of size MiB on a new directory, unmounted at
// cleanup, or skips the test when it cannot (not root, no mount).
func mountSmallFS(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("full-disk test: needs root to mount a small tmpfs")
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm", size), "tandem-fulldisk", dir).CombinedOutput(); err != nil {
		t.Skipf("full-disk test: cannot mount a %d MiB tmpfs (%v: %s)", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			exec.Command("umount", "-l", dir).Run()
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestFullDisk ingests into a collection on a small file system until it
// is full: the writer must get an error, not crash or hang. Badger writes
// through memory maps, where a full disk raises SIGBUS instead of an error,
// so the store refuses writes that would leave less than its reserve free
// (storage.DefaultDiskReserve); the test then fills the rest of the disk
// itself, so that snapshot files meet a real ENOSPC. Then space is freed,
// and the collection must reopen consistent with every acknowledged batch,
// accept writes and search in every mode.
func TestFullDisk(t *testing.T) {
	for _, late := range []string{"", "Residual"} {
		t.Run("late="+late, func(t *testing.T) { testFullDisk(t, late) })
	}
}

func testFullDisk(t *testing.T, lateIndex string) {
	const ballastSize = 48 << 20
	mnt := mountSmallFS(t, (storage.DefaultDiskReserve+ballastSize)>>20+8)
	// Ballast written first, deleted once the disk is full.
	ballast := filepath.Join(mnt, "ballast")
	if err := os.WriteFile(ballast, make([]byte, ballastSize), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "coll")
	e, err := Open(dir, &Options{Schema: faultSchema(lateIndex), BatchSize: 25})
	if err != nil {
		t.Fatal(err)
	}
	acked := map[string]tandem.Doc{}
	next := 0
	write := func(n, words int) (IndexResult, error) {
		t.Helper()
		docs := make([]tandem.Doc, n)
		for i := range docs {
			docs[i] = faultDoc(next, words)
			next++
		}
		ctx, cancel := context.WithTimeout(context.Background(), testtime.D(30*time.Second))
		defer cancel()
		done := make(chan struct{})
		var res IndexResult
		var err error
		go func() {
			defer close(done)
			res, err = e.Index(ctx, docs)
		}()
		select {
		case <-done:
		case <-time.After(testtime.D(60 * time.Second)):
			t.Fatalf("Index hung after %d documents", next)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Index ran out of time after %d documents: %v", next, err)
		}
		for _, d := range docs[:res.Put] {
			acked[d.ID] = d
		}
		return res, err
	}
	start := time.Now()
	var writeErr error
	for writeErr == nil {
		if _, writeErr = write(100, 150); writeErr == nil && next > 20000 {
			t.Fatalf("no error after %d documents: the file system never filled", next)
		}
	}
	t.Logf("%v: disk full after %d acknowledged documents of %d: %v", time.Since(start), len(acked), next, writeErr)
	if !errors.Is(writeErr, storage.ErrDiskFull) || !errors.Is(writeErr, syscall.ENOSPC) {
		t.Errorf("the write failed with %v, not a full-disk error", writeErr)
	}
	// Fill the disk to the last byte: the snapshot writers, which write
	// their files themselves, meet a real ENOSPC.
	filler := filepath.Join(mnt, "filler")
	if err := fillDisk(filler); err != nil {
		t.Fatal(err)
	}
	if _, err := write(10, 10); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("a write on a disk with no byte free: %v", err)
	}
	m := e.models[0]
	if err := m.dense.Snapshot(context.Background()); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("dense snapshot on a full disk: %v, want ENOSPC", err)
	}
	if err := m.late.Snapshot(context.Background()); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("late snapshot on a full disk: %v, want ENOSPC", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(ents) != 0 {
		t.Errorf("failed snapshots left %d files", len(ents))
	}
	// Searches still work on the full disk.
	checkConsistent(t, e, acked)
	// Close with the filler gone (Badger flushes its memtable on Close,
	// through a memory map) but below the reserve: the snapshots are
	// refused, the data is safe.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The write that failed left free space within one write of the
	// reserve, possibly above it, and compactions may free more since:
	// bring it to 1 MiB below the reserve, so that no snapshot fits.
	var sf syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sf); err != nil {
		t.Fatal(err)
	}
	if free, want := int64(sf.Bavail)*int64(sf.Bsize), int64(storage.DefaultDiskReserve)-1<<20; free > want {
		if err := os.WriteFile(filler, make([]byte, free-want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); !errors.Is(err, storage.ErrDiskFull) {
		t.Errorf("close below the reserve: %v, want ErrDiskFull from the snapshots", err)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	os.Remove(filler)
	e, err = Open(dir, nil)
	if err != nil {
		t.Fatalf("reopen after freeing space: %v", err)
	}
	defer e.Close()
	checkConsistent(t, e, acked)
	// New writes are accepted and searched, and survive a reopen.
	if _, err := write(40, 30); err != nil {
		t.Fatalf("write after freeing space: %v", err)
	}
	checkConsistent(t, e, acked)
	if err := e.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	e = openT(t, dir, nil)
	checkConsistent(t, e, acked)
}

// fillDisk writes path until the file system has no space left.
func fillDisk(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for len(buf) > 0 {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return err
			}
			buf = buf[:len(buf)/2]
		}
	}
	return nil
}
