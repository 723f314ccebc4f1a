package dense

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

func TestVectorEncoding(t *testing.T) {
	v := []float32{1, -2.5, 0, math.SmallestNonzeroFloat32}
	got, err := DecodeVector(EncodeVector(v), 4)
	if err != nil {
		t.Fatal(err)
	}
	for i := range v {
		if got[i] != v[i] {
			t.Fatalf("round trip: %v, want %v", got, v)
		}
	}
	if _, err := DecodeVector(EncodeVector(v), 3); !errors.Is(err, ErrDimension) {
		t.Errorf("decode 4-d blob as 3-d: err = %v, want ErrDimension", err)
	}
	if _, err := DecodeVector([]byte{1, 2, 3}, 1); !errors.Is(err, ErrDimension) {
		t.Errorf("decode 3-byte blob: err = %v, want ErrDimension", err)
	}
	nan := EncodeVector([]float32{1, float32(math.NaN())})
	if _, err := DecodeVector(nan, 2); !errors.Is(err, ErrBadVector) {
		t.Errorf("decode NaN: err = %v, want ErrBadVector", err)
	}
	if err := CheckVector([]float32{float32(math.Inf(1))}, 1); !errors.Is(err, ErrBadVector) {
		t.Errorf("CheckVector(+Inf) = %v, want ErrBadVector", err)
	}
}

func FuzzDecodeVector(f *testing.F) {
	f.Add(EncodeVector([]float32{1, 2, 3}), 3)
	f.Add([]byte{0, 0, 0xc0, 0x7f}, 1)
	f.Fuzz(func(t *testing.T, b []byte, dim int) {
		if dim <= 0 || dim > 1024 {
			return
		}
		v, err := DecodeVector(b, dim)
		if err != nil {
			return
		}
		if string(EncodeVector(v)) != string(b) {
			t.Fatalf("re-encoding changed the blob")
		}
	})
}

// TestExactMatchesBruteForce: the automatic index of a small collection is
// exact, and returns the same ranking as a float64 brute force in Go.
func TestExactMatchesBruteForce(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(384, 50, 1)
	vecs := s.many(3000)
	nums := putVectors(t, st, 0, vecs)
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 384})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if got := x.Stats().Description; got != "Flat" {
		t.Fatalf("automatic description at 3000 vectors = %q, want Flat", got)
	}
	if x.Len() != len(vecs) {
		t.Fatalf("Len = %d, want %d", x.Len(), len(vecs))
	}
	allow := roaring64.New()
	for i := 0; i < len(nums); i += 3 {
		allow.Add(nums[i])
	}
	for qi, q := range s.many(20) {
		for _, a := range []*roaring64.Bitmap{nil, allow} {
			got, err := x.Search(ctx, q, 10, a)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRanking(got, bruteForce(q, vecs, nums, 10, a), 1e-5); err != nil {
				t.Errorf("query %d (filtered %v): %v", qi, a != nil, err)
			}
			ex, err := x.SearchExact(ctx, q, 10, a)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameRanking(ex, bruteForce(q, vecs, nums, 10, a), 1e-5); err != nil {
				t.Errorf("exact query %d (filtered %v): %v", qi, a != nil, err)
			}
		}
	}
}

// TestUpdatesAndDeletes: after Apply, an updated vector is found with its
// new value and a deleted document is gone, for Flat and IVF.
func TestUpdatesAndDeletes(t *testing.T) {
	for _, desc := range []string{"", "IVF16,Flat", "HNSW16"} {
		t.Run(desc, func(t *testing.T) {
			ctx := context.Background()
			st := openStore(t, t.TempDir())
			s := newSynth(64, 20, 2)
			vecs := s.many(2000)
			nums := putVectors(t, st, 0, vecs)
			x, err := Open(ctx, st, &Options{Model: testModel, Dim: 64, Description: desc})
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			if want := map[string]string{"": "Flat", "IVF16,Flat": "IVF16,Flat", "HNSW16": "HNSW16"}[desc]; x.Stats().Description != want {
				t.Fatalf("description %q, want %q", x.Stats().Description, want)
			}
			// Update doc 7 to a fresh vector q: it becomes q's top hit with
			// score 1; its old vector no longer matches.
			q := s.next()
			old := vecs[7]
			putVectors(t, st, 7, [][]float32{q})
			catchUp(t, st, x)
			hits, err := x.Search(ctx, q, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) != 1 || hits[0].DocNum != nums[7] || math.Abs(float64(hits[0].Score)-1) > 1e-4 {
				t.Errorf("after update, top hit %+v, want doc %d with score 1", hits, nums[7])
			}
			hits, _ = x.Search(ctx, old, 5, nil)
			for _, h := range hits {
				if h.DocNum == nums[7] && h.Score > 0.999 {
					t.Errorf("old vector of doc %d still indexed (score %v)", nums[7], h.Score)
				}
			}
			if x.Len() != 2000 {
				t.Errorf("Len after update = %d, want 2000", x.Len())
			}
			// Delete doc 7: gone at once, even from a filter that allows it.
			var b storage.Batch
			b.Delete(docID(7))
			if _, err := st.Write(ctx, &b); err != nil {
				t.Fatal(err)
			}
			catchUp(t, st, x)
			only := roaring64.BitmapOf(nums[7], nums[8])
			for _, a := range []*roaring64.Bitmap{nil, only} {
				hits, err = x.Search(ctx, q, 10, a)
				if err != nil {
					t.Fatal(err)
				}
				for _, h := range hits {
					if h.DocNum == nums[7] {
						t.Errorf("deleted doc %d returned (filter %v)", nums[7], a != nil)
					}
				}
			}
			if x.Len() != 1999 || x.DocNums().Contains(nums[7]) {
				t.Errorf("after delete Len = %d, contains deleted = %v", x.Len(), x.DocNums().Contains(nums[7]))
			}
			// A document written without a vector blob is not indexed, and
			// replacing a document without its blob removes its vector.
			var b2 storage.Batch
			b2.Put(tandem.Doc{ID: docID(8), Fields: map[string]any{"text": "no vector"}}, nil)
			if _, err := st.Write(ctx, &b2); err != nil {
				t.Fatal(err)
			}
			catchUp(t, st, x)
			if x.DocNums().Contains(nums[8]) {
				t.Errorf("doc %d replaced without a vector is still indexed", nums[8])
			}
		})
	}
}

// TestBadInput: wrong dimensions, NaN and bad options give clear errors,
// and the index keeps serving what it holds.
func TestBadInput(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(16, 4, 3)
	nums := putVectors(t, st, 0, s.many(100))
	for _, o := range []*Options{nil, {Dim: 16}, {Model: testModel}, {Model: testModel, Dim: -1}, {Model: testModel, Dim: 16, Description: "NoSuchIndex"}} {
		if _, err := Open(ctx, st, o); !errors.Is(err, ErrOptions) {
			t.Errorf("Open(%+v) = %v, want ErrOptions", o, err)
		}
	}
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if _, err := x.Search(ctx, make([]float32, 15), 10, nil); !errors.Is(err, ErrDimension) {
		t.Errorf("15-d query: %v, want ErrDimension", err)
	}
	q := s.next()
	q[3] = float32(math.NaN())
	if _, err := x.Search(ctx, q, 10, nil); !errors.Is(err, ErrBadVector) {
		t.Errorf("NaN query: %v, want ErrBadVector", err)
	}
	if _, err := x.Search(ctx, s.next(), 0, nil); err == nil {
		t.Error("k=0: no error")
	}
	// A blob of the wrong dimension in storage (a writer that skipped
	// CheckVector) fails Apply naming the document; the document is not
	// indexed, the index still holds every earlier vector, and a rebuild
	// skips it too.
	var b storage.Batch
	b.Put(tandem.Doc{ID: "bad", Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(make([]float32, 8))})
	if _, err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	ch, err := st.Changes(ctx, x.AppliedSeq(), 10)
	if err != nil {
		t.Fatal(err)
	}
	err = x.Apply(ctx, ch)
	if !errors.Is(err, ErrDimension) {
		t.Errorf("Apply of an 8-d blob: %v, want ErrDimension", err)
	}
	t.Logf("bad blob error: %v", err)
	if x.Len() != len(nums) {
		t.Errorf("after failed Apply Len = %d, want %d", x.Len(), len(nums))
	}
	if hits, err := x.Search(ctx, s.next(), 5, nil); err != nil || len(hits) != 5 {
		t.Errorf("search after failed Apply: %d hits, %v", len(hits), err)
	}
	if x.AppliedSeq() != st.LastSeq() || x.Stats().Invalid != 1 {
		t.Errorf("after failed Apply: applied %d of %d, invalid %d", x.AppliedSeq(), st.LastSeq(), x.Stats().Invalid)
	}
	x2, err := Open(ctx, st, &Options{Model: testModel, Dim: 16, Description: "Flat"})
	if err != nil {
		t.Fatalf("rebuild over an invalid blob: %v", err)
	}
	if x2.Len() != len(nums) || x2.Stats().Invalid != 1 {
		t.Errorf("rebuild over an invalid blob: Len %d, Invalid %d", x2.Len(), x2.Stats().Invalid)
	}
	x2.Close()
	x.Close()
	if _, err := x.Search(ctx, s.next(), 5, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("search after Close: %v, want ErrClosed", err)
	}
	if err := x.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestConcurrentSearchAndApply runs searches while batches are applied
// and the index is rebuilt from Flat to IVF (run it with -race).
func TestConcurrentSearchAndApply(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(32, 8, 6)
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 32, ExactBelow: 500, SnapshotEvery: 400})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	qs := s.many(8)
	done := make(chan struct{})
	errs := make(chan error, 2)
	for w := range 2 {
		go func() {
			var err error
			defer func() { errs <- err }()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				var allow *roaring64.Bitmap
				if i%2 == 1 {
					allow = roaring64.New()
					allow.AddRange(0, uint64(50+i%300))
				}
				var hits []Hit
				if hits, err = x.Search(ctx, qs[(i+w)%len(qs)], 5, allow); err != nil {
					return
				}
				for _, h := range hits {
					if allow != nil && !allow.Contains(h.DocNum) {
						err = errors.New("hit outside the filter")
						return
					}
				}
			}
		}()
	}
	for i := range 20 {
		putVectors(t, st, i*100, s.many(100))
		catchUp(t, st, x)
	}
	close(done)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := x.WaitRetrain(ctx); err != nil {
		t.Fatal(err)
	}
	if d := x.Stats().Description; d == "Flat" {
		t.Errorf("2000 vectors with ExactBelow 500: still %s", d)
	}
	checkAgrees(t, st, x)
}

// TestLocationsFollowChanges applies rounds of random updates and deletes
// to an IVF-SQ8 index, which keeps every vector's location itself, and
// checks after each round that the locations it keeps are FAISS's, that a
// filter searched through them (one allowed document at a time) returns
// the exact filtered top 10, and that a snapshot reopens to the same.
func TestLocationsFollowChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t, dir)
	s := newSynth(64, 20, 4)
	const n = 3000
	vecs := s.many(n)
	nums := putVectors(t, st, 0, vecs)
	opts := &Options{Model: testModel, Dim: 64, Description: "IVF16,SQ8", SnapshotEvery: -1}
	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { x.Close() }()
	live := map[int]bool{}
	for i := range n {
		live[i] = true
	}
	rng := rand.New(rand.NewPCG(8, 8))
	check := func(round int) {
		t.Helper()
		x.mu.RLock()
		// The kept locations equal FAISS's when each located vector's is
		// kept and there are as many kept as located.
		kept := x.mu.loc.Len()
		located, agree := 0, true
		err := x.mu.fx.Locate(func(id int64, lo uint64) {
			located++
			if got, ok := x.mu.loc.Get(uint64(id)); !ok || got != lo {
				agree = false
			}
		})
		x.mu.RUnlock()
		if err != nil || !agree || kept != located || kept != len(live) {
			t.Fatalf("round %d: %d locations kept, %d located (%v, agree %v), %d live documents", round, kept, located, err, agree, len(live))
		}
		allow := roaring64.New()
		var idx []int
		for i := range live {
			if rng.IntN(50) == 0 {
				allow.Add(nums[i])
				idx = append(idx, i)
			}
		}
		q := s.next()
		x.mu.RLock()
		got, err := x.searchIDsLocked(ctx, q, 10, allow, x.mu.ids.GetCardinality(), allow.AndCardinality(x.mu.ids))
		x.mu.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
		want := topK(allScores(q, vecs), nums, 10, allow)
		if recall(got, want) < 1 {
			t.Fatalf("round %d: filtered top 10 %v, want %v", round, got, want)
		}
	}
	check(0)
	for round := 1; round <= 4; round++ {
		var b storage.Batch
		for range 300 {
			i := rng.IntN(n)
			if !live[i] {
				continue // a deleted id put again would get a new docnum
			}
			if rng.IntN(2) == 0 {
				b.Delete(docID(i))
				delete(live, i)
				continue
			}
			vecs[i] = s.next()
			b.Put(tandem.Doc{ID: docID(i), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(vecs[i])})
			live[i] = true
		}
		if _, err := st.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
		catchUp(t, st, x)
		check(round)
	}
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if x, err = Open(ctx, st, opts); err != nil {
		t.Fatal(err)
	}
	check(5)
}

// TestSnapshotSpacedBySequences upserts one document over and over: each
// batch is one document for the index but many change-log sequences, and
// automatic snapshots follow the sequences, so SavedSeq (which bounds the
// change log the collection keeps) keeps up. It also checks SavedSeq
// across a reopen.
func TestSnapshotSpacedBySequences(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(16, 4, 9)
	putVectors(t, st, 0, s.many(5))
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: 100}
	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := x.SavedSeq(); got != 0 {
		t.Fatalf("SavedSeq %d before any snapshot, want 0", got)
	}
	for round := range 3 {
		var b storage.Batch
		for range 60 {
			b.Put(tandem.Doc{ID: docID(0), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(s.next())})
		}
		if _, err := st.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
		catchUp(t, st, x)
		t.Logf("round %d: applied %d, saved %d", round, x.AppliedSeq(), x.SavedSeq())
	}
	// 5 + 180 sequences, snapshots every 100: one at the second round.
	if got, applied := x.SavedSeq(), x.AppliedSeq(); got == 0 || applied-got >= 100 {
		t.Fatalf("after 185 sequences of one document: SavedSeq %d, AppliedSeq %d; want a snapshot within the last 100", got, applied)
	}
	saved := x.SavedSeq()
	x.Close()
	if x, err = Open(ctx, st, opts); err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if got := x.SavedSeq(); got != saved {
		t.Fatalf("SavedSeq %d after reopening, want the snapshot's %d", got, saved)
	}
}

// TestSnapshotSpacedByIndexSize: past 16 vectors per SnapshotEvery,
// automatic snapshots wait for 1/16 of the index in sequences, so that an
// ingest does not write the whole index over and over.
func TestSnapshotSpacedByIndexSize(t *testing.T) {
	for _, c := range []struct {
		since, every int
		held         uint64
		want         bool
	}{
		{99, 100, 0, false}, {100, 100, 0, true}, {100, 100, 1600, true},
		{100, 100, 1616, false}, {101, 100, 1616, true},
		{62_499, 50_000, 10_000_000, false}, {625_000, 50_000, 10_000_000, true},
		{1 << 30, 0, 0, false}, {1 << 30, -1, 0, false},
	} {
		if got := snapshotDue(c.since, c.every, c.held); got != c.want {
			t.Errorf("snapshotDue(%d sequences, every %d, %d held) = %v, want %v", c.since, c.every, c.held, got, c.want)
		}
	}

	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(16, 4, 9)
	putVectors(t, st, 0, s.many(320))
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 16, SnapshotEvery: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	saved := x.SavedSeq()
	upsert := func(n int) {
		var b storage.Batch
		for i := range n {
			b.Put(tandem.Doc{ID: docID(i), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(s.next())})
		}
		if _, err := st.Write(ctx, &b); err != nil {
			t.Fatal(err)
		}
		catchUp(t, st, x)
	}
	upsert(15) // 15 of the 20 that 320 vectors wait for
	if got := x.SavedSeq(); got != saved {
		t.Fatalf("a snapshot after 15 sequences at 320 vectors (SavedSeq %d, was %d); want it after 20", got, saved)
	}
	upsert(5)
	if got := x.SavedSeq(); got != x.AppliedSeq() {
		t.Fatalf("no snapshot after 20 sequences at 320 vectors: SavedSeq %d, AppliedSeq %d", got, x.AppliedSeq())
	}
}

// TestSnapshotBehindFloor saves a snapshot, changes vectors and truncates
// the change log past the snapshot: Open must not load it (the changes
// after it are gone) but rebuild from the stored vectors.
func TestSnapshotBehindFloor(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	s := newSynth(16, 4, 11)
	vecs := s.many(50)
	nums := putVectors(t, st, 0, vecs)
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: -1}
	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()
	var b storage.Batch
	for i := range 10 {
		vecs[i] = s.next()
		b.Put(tandem.Doc{ID: docID(i), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): EncodeVector(vecs[i])})
	}
	if _, err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if _, err := st.TruncateLog(ctx, st.LastSeq()); err != nil {
		t.Fatal(err)
	}
	y, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if y.SavedSeq() != 0 || y.AppliedSeq() != st.LastSeq() {
		t.Fatalf("snapshot behind the floor: SavedSeq %d, applied %d of %d", y.SavedSeq(), y.AppliedSeq(), st.LastSeq())
	}
	q := s.next()
	got, err := y.Search(ctx, q, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := topK(allScores(q, vecs), nums, 10, nil); recall(got, want) < 1 {
		t.Fatalf("rebuilt past the floor: %v, want %v", got, want)
	}
}
