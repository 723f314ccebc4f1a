package latecollect

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

const testModel = "synth"

// synthCorpus is a deterministic set of documents whose token matrices are
// random unit vectors, 3 to 40 tokens each.
type synthCorpus struct {
	dim  int
	vecs map[string][]float32
}

func newSynth(n, dim int, seed uint64) *synthCorpus {
	r := rand.New(rand.NewPCG(seed, 1))
	c := &synthCorpus{dim: dim, vecs: map[string][]float32{}}
	for i := range n {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, 3+r.IntN(38), dim)
	}
	return c
}

func randomUnit(r *rand.Rand, n, dim int) []float32 {
	v := make([]float32, n*dim)
	for t := range n {
		row := v[t*dim : (t+1)*dim]
		var s float64
		for j := range row {
			row[j] = float32(r.NormFloat64())
			s += float64(row[j]) * float64(row[j])
		}
		for j := range row {
			row[j] /= float32(math.Sqrt(s))
		}
	}
	return v
}

// write stores the given documents (all of the corpus when ids is nil)
// with their token blobs.
func (c *synthCorpus) write(t testing.TB, st *storage.Store, enc Encoding, ids ...string) storage.WriteResult {
	t.Helper()
	if ids == nil {
		for id := range c.vecs {
			ids = append(ids, id)
		}
		slices.Sort(ids)
	}
	var b storage.Batch
	for _, id := range ids {
		blob, err := EncodeTokens(c.vecs[id], c.dim, enc)
		if err != nil {
			t.Fatal(err)
		}
		b.Put(tandem.Doc{ID: id, Fields: map[string]any{"text": id, "group": float64(len(id) % 2)}}, map[string][]byte{BlobName(testModel): blob})
	}
	res, err := st.Write(context.Background(), &b)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// changeAfterSnapshot writes what a snapshot has not seen: an update
// (d010), a new document and a delete (d020), in the store and the corpus.
func (c *synthCorpus) changeAfterSnapshot(t testing.TB, st *storage.Store, r *rand.Rand) {
	t.Helper()
	c.vecs["d010"] = randomUnit(r, 5, c.dim)
	c.vecs["new"] = randomUnit(r, 7, c.dim)
	c.write(t, st, F16, "d010", "new")
	var b storage.Batch
	b.Delete("d020")
	if _, err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	delete(c.vecs, "d020")
}

func openStore(t testing.TB, dir string) *storage.Store {
	t.Helper()
	opts := &storage.Options{NoSync: true}
	if dir == "" {
		opts.InMemory = true
	}
	st, err := storage.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func openIndex(t testing.TB, st *storage.Store, opts *Options) *Index {
	t.Helper()
	x, err := Open(context.Background(), st, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// faissOf is the FAISS family of an index opened with a FAISS description.
func faissOf(x *Index) *faissFamily { return x.mu.fam.(*faissFamily) }

// residualOf is the family of an index opened with residual codes.
func residualOf(x *Index) *residualFamily { return x.mu.fam.(*residualFamily) }

// setFilterAtCollection sets faissFamily.filterAtCollection (residual
// codes have no such choice: nothing then).
func setFilterAtCollection(x *Index, on bool) {
	if f, ok := x.mu.fam.(*faissFamily); ok {
		f.filterAtCollection = on
	}
}

// bruteForce scores every document of the corpus with the public scoring
// function over the stored (decoded) matrices.
func bruteForce(t testing.TB, st *storage.Store, c *synthCorpus, q []float32, allow func(uint64) bool, s Scoring) []Hit {
	t.Helper()
	var hits []Hit
	for id := range c.vecs {
		num, ok, err := st.Lookup(id)
		if err != nil || !ok {
			continue
		}
		if allow != nil && !allow(num) {
			continue
		}
		blob, ok, err := st.Blob(num, BlobName(testModel))
		if err != nil || !ok {
			t.Fatalf("blob of %s: %v %v", id, ok, err)
		}
		d, _, err := DecodeTokens(blob)
		if err != nil {
			t.Fatal(err)
		}
		f := AvgMax
		if s == ScoreSumMax {
			f = SumMax
		}
		score, err := f(q, d, c.dim, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		hits = append(hits, Hit{DocNum: num, Score: score})
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return int(a.DocNum) - int(b.DocNum)
	})
	return hits
}

func sameHits(t *testing.T, what string, got, want []Hit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d hits, want %d\ngot  %v\nwant %v", what, len(got), len(want), got, want)
	}
	for i := range got {
		if got[i].DocNum != want[i].DocNum || math.Abs(float64(got[i].Score-want[i].Score)) > 1e-5 {
			t.Fatalf("%s: hit %d = %+v, want %+v\ngot  %v\nwant %v", what, i, got[i], want[i], got, want)
		}
	}
}

func TestSearchMatchesBruteForce(t *testing.T) {
	for _, desc := range []string{"", "Residual"} {
		t.Run("desc="+desc, func(t *testing.T) { testSearchMatchesBruteForce(t, desc) })
	}
}

func testSearchMatchesBruteForce(t *testing.T, desc string) {
	ctx := context.Background()
	c := newSynth(300, 16, 1)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: desc})
	r := rand.New(rand.NewPCG(7, 7))
	for qi := range 5 {
		q := randomUnit(r, 2+qi*3, 16)
		for _, s := range []Scoring{ScoreAvgMax, ScoreSumMax} {
			want := bruteForce(t, st, c, q, nil, s)[:10]
			got, err := x.Search(ctx, q, &SearchOptions{Mode: Exhaustive, Scoring: s})
			if err != nil {
				t.Fatal(err)
			}
			sameHits(t, fmt.Sprintf("query %d %s exhaustive", qi, s), got, want)
			// With every knob covering everything, candidate
			// generation must find the exact top 10.
			got, err = x.Search(ctx, q, &SearchOptions{Scoring: s, KPrime: 10000, CandidateCap: 10000, NProbe: maxCentroids, ExactCap: 10000})
			if err != nil {
				t.Fatal(err)
			}
			sameHits(t, fmt.Sprintf("query %d %s candidates", qi, s), got, want)
		}
	}
	st2, _ := x.Stats()
	want := "Flat"
	if desc != "" {
		want = "Residual"
	}
	if st2.Docs != 300 || st2.TokenKeys != st2.Tokens || !strings.HasPrefix(st2.Description, want) {
		t.Errorf("stats %+v: want 300 docs, every token a key or coded, %s", st2, want)
	}
}

// A query token equal to a document token collects that document first,
// through FAISS, with the default knobs.
func TestCandidatesFindPlantedDocument(t *testing.T) {
	ctx := context.Background()
	c := newSynth(300, 16, 2)
	st := openStore(t, "")
	c.write(t, st, F16)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, KPrime: 4, CandidateCap: 8})
	target := c.vecs["d123"]
	q := slices.Clone(target[:3*16]) // its first three tokens
	hits, err := x.Search(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	num, _, _ := st.Lookup("d123")
	if len(hits) == 0 || hits[0].DocNum != num {
		t.Fatalf("hits %v, want document %d first", hits, num)
	}
	// avg-max of tokens found exactly is 1, up to f16 rounding.
	if math.Abs(float64(hits[0].Score)-1) > 2e-3 {
		t.Errorf("score %v, want about 1", hits[0].Score)
	}
}

func TestApplyFollowsUpdatesAndDeletes(t *testing.T) {
	for _, desc := range []string{"", "Residual"} {
		t.Run("desc="+desc, func(t *testing.T) { testApplyFollows(t, desc) })
	}
}

func testApplyFollows(t *testing.T, desc string) {
	ctx := context.Background()
	c := newSynth(100, 8, 3)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 8, SnapshotEvery: -1, Description: desc})
	r := rand.New(rand.NewPCG(9, 9))
	q := randomUnit(r, 4, 8)

	// Update d007 so that its tokens are the query's: it must rank first
	// with avg-max 1.
	c.vecs["d007"] = slices.Clone(q)
	res := c.write(t, st, F32, "d007")
	changes, err := st.Changes(ctx, x.AppliedSeq(), 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Apply(ctx, changes); err != nil {
		t.Fatal(err)
	}
	if x.AppliedSeq() != res.LastSeq {
		t.Errorf("AppliedSeq %d, want %d", x.AppliedSeq(), res.LastSeq)
	}
	num, _, _ := st.Lookup("d007")
	hits, err := x.Search(ctx, q, &SearchOptions{K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if hits[0].DocNum != num || math.Abs(float64(hits[0].Score)-1) > 1e-5 {
		t.Fatalf("after update: hits %v, want doc %d with score 1", hits, num)
	}
	// Replaying the same changes is a no-op.
	if err := x.Apply(ctx, changes); err != nil {
		t.Fatal(err)
	}
	s, _ := x.Stats()
	if s.TokenKeys != s.Tokens {
		t.Errorf("after replay: %d keys for %d tokens", s.TokenKeys, s.Tokens)
	}

	// Delete it: it disappears from both modes and its keys leave FAISS.
	var b storage.Batch
	b.Delete("d007")
	if _, err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	if err := x.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []Mode{Candidates, Exhaustive} {
		hits, err := x.Search(ctx, q, &SearchOptions{K: 100, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			if h.DocNum == num {
				t.Fatalf("%v: deleted document %d returned", mode, num)
			}
		}
	}
	s, _ = x.Stats()
	if s.Docs != 99 || s.TokenKeys != s.Tokens {
		t.Errorf("after delete: %+v, want 99 docs and one key per token", s)
	}
}

func TestFilteredSearchReturnsOnlyAllowed(t *testing.T) {
	for _, desc := range []string{"", "Residual"} {
		t.Run("desc="+desc, func(t *testing.T) { testFiltered(t, desc) })
	}
}

func testFiltered(t *testing.T, desc string) {
	ctx := context.Background()
	c := newSynth(400, 16, 4)
	st := openStore(t, "")
	c.write(t, st, F16)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, KPrime: 16, CandidateCap: 64, Description: desc})
	r := rand.New(rand.NewPCG(11, 11))
	allow := roaring64.New()
	var all []uint64
	for id := range c.vecs {
		num, _, _ := st.Lookup(id)
		all = append(all, num)
		if r.IntN(3) == 0 {
			allow.Add(num)
		}
	}
	small := roaring64.BitmapOf(all[:5]...)
	small.Add(1 << 40) // a docnum that does not exist is ignored
	for _, tc := range []struct {
		name       string
		allow      *roaring64.Bitmap
		collection bool
	}{
		{"token-level filter", allow, false},
		{"filter during collection", allow, true},
		{"small filter scored exactly", small, false},
		{"empty filter", roaring64.New(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setFilterAtCollection(x, tc.collection)
			defer setFilterAtCollection(x, false)
			q := randomUnit(r, 6, 16)
			want := bruteForce(t, st, c, q, tc.allow.Contains, ScoreAvgMax)
			got, err := x.Search(ctx, q, &SearchOptions{K: 10, Allow: tc.allow})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != min(10, len(want)) {
				t.Fatalf("%d hits, want %d", len(got), min(10, len(want)))
			}
			for _, h := range got {
				if !tc.allow.Contains(h.DocNum) {
					t.Fatalf("hit %d is not allowed by the filter", h.DocNum)
				}
			}
			// Filtered exhaustive search is exact.
			ex, err := x.Search(ctx, q, &SearchOptions{K: 10, Allow: tc.allow, Mode: Exhaustive})
			if err != nil {
				t.Fatal(err)
			}
			sameHits(t, "exhaustive", ex, want[:min(10, len(want))])
		})
	}
}

func TestSnapshotAndCatchUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := newSynth(200, 8, 5)
	st := openStore(t, dir)
	c.write(t, st, F16)
	opts := &Options{Model: testModel, Dim: 8, Description: "IVF4,Flat", NProbe: 4, SnapshotEvery: -1}
	x, err := Open(ctx, st, opts)
	if err != nil {
		t.Fatal(err)
	}
	if x.loadedSnapshot {
		t.Fatal("first open loaded a snapshot")
	}
	if err := x.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	x.Close()
	if err := x.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := x.Search(ctx, make([]float32, 8), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("search after close: %v", err)
	}

	r := rand.New(rand.NewPCG(13, 13))
	c.changeAfterSnapshot(t, st, r)

	y := openIndex(t, st, opts)
	if !y.loadedSnapshot {
		t.Fatal("reopen rebuilt instead of loading the snapshot")
	}
	if y.AppliedSeq() != st.LastSeq() {
		t.Errorf("AppliedSeq %d, want %d", y.AppliedSeq(), st.LastSeq())
	}
	s, _ := y.Stats()
	if s.Docs != 200 || s.TokenKeys != s.Tokens || !strings.HasPrefix(s.Description, "IVF4") {
		t.Errorf("stats %+v, want 200 docs, one key per token, IVF4", s)
	}
	q := randomUnit(r, 3, 8)
	want := bruteForce(t, st, c, q, nil, ScoreAvgMax)[:10]
	got, err := y.Search(ctx, q, &SearchOptions{KPrime: 10000, CandidateCap: 10000})
	if err != nil {
		t.Fatal(err)
	}
	sameHits(t, "after catch-up", got, want)

	// Other options must not reuse the snapshot.
	z := openIndex(t, st, &Options{Model: testModel, Dim: 8, Description: "Flat"})
	if z.loadedSnapshot {
		t.Error("a Flat index loaded the IVF snapshot")
	}
}

func TestBadInputIsRejectedAndLosesNothing(t *testing.T) {
	ctx := context.Background()
	c := newSynth(50, 8, 6)
	st := openStore(t, "")
	c.write(t, st, F32)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 8})
	before, _ := x.Stats()

	q := make([]float32, 16)
	q[11] = float32(math.NaN())
	if _, err := x.Search(ctx, q, nil); !errors.Is(err, ErrBadVector) || !strings.Contains(err.Error(), "token 1, dimension 3") {
		t.Errorf("NaN query: %v, want ErrBadVector naming token 1, dimension 3", err)
	}
	if _, err := x.Search(ctx, make([]float32, 9), nil); !errors.Is(err, ErrBadVector) {
		t.Errorf("ragged query: %v", err)
	}
	if _, err := x.Search(ctx, make([]float32, 8), &SearchOptions{K: -1}); !errors.Is(err, ErrBadOptions) {
		t.Errorf("negative K: %v", err)
	}
	if hits, err := x.Search(ctx, nil, nil); err != nil || len(hits) != 0 {
		t.Errorf("empty query: %v %v", hits, err)
	}

	// A blob of the wrong dimension and a corrupt blob are left out with
	// an error naming them; the rest of the batch is applied.
	good, _ := EncodeTokens(randomUnit(rand.New(rand.NewPCG(1, 2)), 4, 8), 8, F32)
	wrongDim, _ := EncodeTokens(make([]float32, 12), 4, F32)
	var b storage.Batch
	b.Put(tandem.Doc{ID: "wrongdim", Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): wrongDim})
	b.Put(tandem.Doc{ID: "corrupt", Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): good[:len(good)-3]})
	b.Put(tandem.Doc{ID: "fine", Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): good})
	b.Put(tandem.Doc{ID: "noblob", Fields: map[string]any{"text": "x"}}, nil)
	if _, err := st.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	err := x.CatchUp(ctx)
	if !errors.Is(err, ErrBadVector) || !errors.Is(err, ErrCorruption) {
		t.Errorf("catch-up error %v, want ErrBadVector and ErrCorruption", err)
	}
	wd, _, _ := st.Lookup("wrongdim")
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("document %d", wd)) {
		t.Errorf("error %v does not name document %d", err, wd)
	}
	after, _ := x.Stats()
	if after.Docs != before.Docs+1 || after.TokenKeys != before.TokenKeys+4 {
		t.Errorf("stats %+v after %+v: want exactly the good document added", after, before)
	}

	for _, o := range []*Options{nil, {Model: testModel}, {Dim: 8}, {Model: "a/b", Dim: 8}, {Model: testModel, Dim: 8, Scoring: "max"}, {Model: testModel, Dim: 8, Description: "NoSuchIndex"}} {
		if _, err := Open(ctx, st, o); !errors.Is(err, ErrBadOptions) {
			t.Errorf("Open(%+v): %v, want ErrBadOptions", o, err)
		}
	}
}

// TestApplyCutDoesNotMatter applies one change log to two indexes, in
// Apply calls of very different lengths, across retrainings (residual
// codes: a provisional codebook, then growth; FAISS: the Flat-to-IVF
// rebuild): both end with the same index and the same rankings.
func TestApplyCutDoesNotMatter(t *testing.T) {
	for _, desc := range []string{"Residual", legacyAuto} {
		t.Run("desc="+desc, func(t *testing.T) { testApplyCut(t, desc) })
	}
}

func testApplyCut(t *testing.T, desc string) {
	ctx := context.Background()
	st := openStore(t, "")
	c := newSynth(6000, 16, 11)
	x1 := openIndex(t, st, &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: desc})
	x2 := openIndex(t, st, &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: desc})
	ids := make([]string, 0, len(c.vecs))
	for id := range c.vecs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i := 0; i < len(ids); i += 100 {
		c.write(t, st, F16, ids[i:min(i+100, len(ids))]...)
	}
	if err := x1.CatchUp(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		ch, err := st.Changes(ctx, x2.AppliedSeq(), 37)
		if err != nil {
			t.Fatal(err)
		}
		if len(ch) == 0 {
			break
		}
		if err := x2.Apply(ctx, ch); err != nil {
			t.Fatal(err)
		}
	}
	// Retrainings run in the background; each ends with the codes of the
	// documents as the log left them, however the log was cut.
	for _, x := range []*Index{x1, x2} {
		if err := x.WaitRetrain(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s1, _ := x1.Stats()
	s2, _ := x2.Stats()
	wantPrefix := "IVF"
	if desc != legacyAuto {
		wantPrefix = desc
	}
	if s1.Description != s2.Description || s1.TokenKeys != s2.TokenKeys || s1.Drift != s2.Drift || s1.Retrains != s2.Retrains || !strings.HasPrefix(s1.Description, wantPrefix) {
		t.Fatalf("indexes differ: %+v vs %+v", s1, s2)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for q := range 10 {
		query := randomUnit(r, 8, 16)
		h1, err1 := x1.Search(ctx, query, &SearchOptions{K: 10})
		h2, err2 := x2.Search(ctx, query, &SearchOptions{K: 10})
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		sameHits(t, fmt.Sprint("query ", q), h2, h1)
	}
}

// TestApplyCutDoesNotMatterFirstRun applies a log shorter than one run
// (applyStride), so that no later run retrains the provisional codebook,
// with an update and a delete at its end, to indexes that cut it
// differently into Apply calls: one call, calls of
// 8, calls of one with a search after each, and calls of 37 with a
// snapshot and a reopen half-way. Every one must end with the codebook and
// the codes an index built from the store trains, and rank alike down to
// the residual-code scores (ExactCap < 0), whether a search or WaitRetrain
// comes first.
func TestApplyCutDoesNotMatterFirstRun(t *testing.T) {
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	opts := &Options{Model: testModel, Dim: 16, SnapshotEvery: -1, Description: "Residual"}
	// Opened on the empty store, so that each applies the log.
	one, eights, ones, reopened := openIndex(t, st, opts), openIndex(t, st, opts), openIndex(t, st, opts), openIndex(t, st, opts)
	c := newSynth(200, 16, 31)
	ids := slices.Sorted(mapsKeys(c.vecs))
	for i := 0; i < len(ids); i += 10 {
		c.write(t, st, F16, ids[i:min(i+10, len(ids))]...)
	}
	r := rand.New(rand.NewPCG(9, 9))
	c.changeAfterSnapshot(t, st, r) // an update, a new document, a delete
	if st.LastSeq() >= applyStride {
		t.Fatalf("the log reaches sequence %d: want it within the first run (%d)", st.LastSeq(), applyStride)
	}
	queries := make([][]float32, 8)
	for i := range queries {
		queries[i] = randomUnit(r, 6, 16)
	}
	// applyIn applies the log to x in calls of n changes, calling after
	// each (nil: nothing), until x has applied sequence upTo.
	applyIn := func(x *Index, n int, upTo uint64, after func()) {
		t.Helper()
		for x.AppliedSeq() < upTo {
			ch, err := st.Changes(ctx, x.AppliedSeq(), n)
			if err != nil {
				t.Fatal(err)
			}
			if err := x.Apply(ctx, ch); err != nil {
				t.Fatal(err)
			}
			if after != nil {
				after()
			}
		}
	}
	codeScores := func(x *Index) [][]Hit {
		t.Helper()
		var out [][]Hit
		for _, q := range queries {
			hits, err := x.Search(ctx, q, &SearchOptions{K: 20, ExactCap: -1})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, hits)
		}
		return out
	}
	last := st.LastSeq()
	applyIn(one, 4096, last, nil)
	applyIn(eights, 8, last, nil)
	applyIn(ones, 1, last, func() { codeScores(ones) })
	built := openIndex(t, st, opts) // before any snapshot: built from the store
	if built.LoadedSnapshot() {
		t.Fatal("the reference index loaded a snapshot")
	}
	applyIn(reopened, 37, last/2, nil)
	if err := reopened.Snapshot(ctx); err != nil {
		t.Fatal(err)
	}
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}
	reopened = openIndex(t, st, opts) // loads the snapshot, applies the rest in one call
	if !reopened.LoadedSnapshot() {
		t.Fatal("the snapshot saved half-way was not loaded")
	}

	want := codeScores(built)
	for _, tc := range []struct {
		name string
		x    *Index
	}{{"one call", one}, {"calls of 8", eights}, {"calls of 1", ones}, {"reopened", reopened}} {
		// eights is searched before WaitRetrain, the others after.
		if tc.x != eights {
			if err := tc.x.WaitRetrain(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for i, hits := range codeScores(tc.x) {
			sameHits(t, fmt.Sprintf("%s, query %d", tc.name, i), hits, want[i])
		}
		sameCodes(t, tc.name, residualOf(tc.x), residualOf(built))
	}
}

// sameCodes fails the test unless got holds the codebook and the codes of
// want, bit for bit (the codebook's provisional mark aside).
func sameCodes(t *testing.T, what string, got, want *residualFamily) {
	t.Helper()
	g, w := got.rc, want.rc
	if g == nil || w == nil {
		t.Fatalf("%s: residual index %v, want %v", what, g != nil, w != nil)
	}
	gc, wc := g.cb, w.cb
	if gc.nlist != wc.nlist || gc.trained != wc.trained || gc.meanRes != wc.meanRes {
		t.Fatalf("%s: codebook of %d centroids trained on %d tokens, mean residual %v; want %d, %d, %v",
			what, gc.nlist, gc.trained, gc.meanRes, wc.nlist, wc.trained, wc.meanRes)
	}
	for _, v := range []struct {
		name      string
		got, want []float32
	}{{"centroids", gc.cent, wc.cent}, {"cut-offs", gc.cutoff, wc.cutoff}, {"low values", gc.lo, wc.lo}, {"high values", gc.hi, wc.hi}} {
		if !slices.Equal(v.got, v.want) {
			t.Fatalf("%s: the codebooks' %s differ", what, v.name)
		}
	}
	if len(g.docs) != len(w.docs) || g.tokens != w.tokens {
		t.Fatalf("%s: %d documents, %d tokens; want %d, %d", what, len(g.docs), g.tokens, len(w.docs), w.tokens)
	}
	for num, wd := range w.docs {
		gd, ok := g.docs[num]
		gc, gcodes := g.tokensOf(num, gd, nil, nil)
		wc, wcodes := w.tokensOf(num, wd, nil, nil)
		if !ok || !slices.Equal(gd.cents, wd.cents) || gd.count != wd.count || !slices.Equal(gc, wc) || !slices.Equal(gcodes, wcodes) || gd.normSum != wd.normSum || gd.blob != wd.blob {
			t.Fatalf("%s: document %d coded differently (held %v)", what, num, ok)
		}
	}
}
