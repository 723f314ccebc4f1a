//go:build cgo

package faiss

// These tests exercise github.com/blevesearch/go-faiss directly against the
// libfaiss_c built by scripts/setup-faiss.sh (FAISS 1.7.3's C API plus
// Tandem's extensions), and check every answer against brute force in Go.

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	gofaiss "github.com/blevesearch/go-faiss"
)

const (
	testN   = 10000 // vectors per test collection (acceptance: at least 10,000)
	testD   = 32
	testNQ  = 20
	testK   = 10
	testTol = 1e-3
)

func randomVectors(rng *rand.Rand, n, d int) []float32 {
	v := make([]float32, n*d)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// scored is one brute-force hit.
type scored struct {
	id    int64
	score float32
}

// bruteForce returns the exact top k of query q among the vectors whose
// position passes allow (nil: all), with ids[i] the id of vector i.
func bruteForce(vecs []float32, ids []int64, q []float32, k int, metric int, allow func(int64) bool) []scored {
	d := len(q)
	var all []scored
	for i := 0; i < len(vecs)/d; i++ {
		if allow != nil && !allow(ids[i]) {
			continue
		}
		var s float64
		for j := 0; j < d; j++ {
			if metric == gofaiss.MetricL2 {
				diff := float64(vecs[i*d+j] - q[j])
				s += diff * diff
			} else {
				s += float64(vecs[i*d+j]) * float64(q[j])
			}
		}
		all = append(all, scored{ids[i], float32(s)})
	}
	sort.Slice(all, func(a, b int) bool {
		if metric == gofaiss.MetricL2 {
			return all[a].score < all[b].score
		}
		return all[a].score > all[b].score
	})
	if len(all) > k {
		all = all[:k]
	}
	return all
}

// checkExact asserts that FAISS's answer for one query equals brute force:
// the same ids in the same order (up to ties) and the same scores.
func checkExact(t *testing.T, what string, dist []float32, labels []int64, want []scored) {
	t.Helper()
	for j, w := range want {
		if math.Abs(float64(dist[j]-w.score)) > testTol*math.Max(1, math.Abs(float64(w.score))) {
			t.Fatalf("%s: rank %d score %v, brute force %v (id %d vs %d)", what, j, dist[j], w.score, labels[j], w.id)
		}
		if labels[j] != w.id && math.Abs(float64(dist[j]-w.score)) > 1e-6 {
			t.Fatalf("%s: rank %d id %d, brute force %d", what, j, labels[j], w.id)
		}
	}
	for j := len(want); j < len(labels); j++ {
		if labels[j] != -1 {
			t.Fatalf("%s: rank %d has id %d beyond the %d allowed vectors", what, j, labels[j], len(want))
		}
	}
}

// recallAt returns the share of want's ids found in got.
func recallAt(got []int64, want []scored) float64 {
	if len(want) == 0 {
		return 1
	}
	hit := 0
	for _, w := range want {
		if slices.Contains(got, w.id) {
			hit++
		}
	}
	return float64(hit) / float64(len(want))
}

// collection is a random vector collection with sparse, shuffled ids, so
// that positions and ids differ.
type collection struct {
	vecs    []float32
	ids     []int64
	queries []float32
}

func newCollection(seed uint64) collection {
	rng := rand.New(rand.NewPCG(seed, 7))
	c := collection{
		vecs:    randomVectors(rng, testN, testD),
		queries: randomVectors(rng, testNQ, testD),
		ids:     make([]int64, testN),
	}
	perm := rng.Perm(testN * 3)
	for i := range c.ids {
		c.ids[i] = int64(perm[i])
	}
	return c
}

func (c collection) query(i int) []float32 { return c.queries[i*testD : (i+1)*testD] }

// build creates an index from desc, trains it when needed, and adds the
// collection with its ids.
func build(t *testing.T, c collection, desc string, metric int) *gofaiss.IndexImpl {
	t.Helper()
	idx, err := gofaiss.IndexFactory(testD, desc, metric)
	if err != nil {
		t.Fatalf("IndexFactory(%q): %v", desc, err)
	}
	t.Cleanup(idx.Close)
	if !idx.IsTrained() {
		if err := idx.Train(c.vecs); err != nil {
			t.Fatalf("train %q: %v", desc, err)
		}
	}
	if err := idx.AddWithIDs(c.vecs, c.ids); err != nil {
		t.Fatalf("add_with_ids %q: %v", desc, err)
	}
	if got := idx.Ntotal(); got != testN {
		t.Fatalf("%q: ntotal %d, want %d", desc, got, testN)
	}
	return idx
}

// selectorCase is one filter, given both as a go-faiss selector and as a
// predicate for brute force.
type selectorCase struct {
	name  string
	make  func() (gofaiss.Selector, error)
	allow func(int64) bool
}

func selectorCases(c collection, rng *rand.Rand) []selectorCase {
	// A batch of 1% of the ids, and a bitmap of about 20%.
	batch := map[int64]bool{}
	var batchIDs []int64
	for len(batchIDs) < testN/100 {
		id := c.ids[rng.IntN(testN)]
		if !batch[id] {
			batch[id] = true
			batchIDs = append(batchIDs, id)
		}
	}
	var maxID int64
	for _, id := range c.ids {
		maxID = max(maxID, id)
	}
	bitmap := make([]byte, maxID/8+1)
	inBitmap := func(id int64) bool { return bitmap[id>>3]>>(id&7)&1 == 1 }
	for _, id := range c.ids {
		if rng.IntN(5) == 0 {
			bitmap[id>>3] |= 1 << (id & 7)
		}
	}
	return []selectorCase{
		{"batch", func() (gofaiss.Selector, error) { return gofaiss.NewIDSelectorBatch(batchIDs) }, func(id int64) bool { return batch[id] }},
		{"not-batch", func() (gofaiss.Selector, error) { return gofaiss.NewIDSelectorBatchNot(batchIDs) }, func(id int64) bool { return !batch[id] }},
		{"bitmap", func() (gofaiss.Selector, error) {
			// The selector must copy the bitmap: scribble over ours after
			// creating it, then restore it only for the brute force.
			cp := slices.Clone(bitmap)
			sel, err := gofaiss.NewIDSelectorBitmap(cp)
			clear(cp)
			return sel, err
		}, inBitmap},
		{"not-bitmap", func() (gofaiss.Selector, error) { return gofaiss.NewIDSelectorBitmapNot(bitmap) }, func(id int64) bool { return !inBitmap(id) }},
		{"range", func() (gofaiss.Selector, error) { return gofaiss.NewIDSelectorRange(1000, 9000) }, func(id int64) bool { return id >= 1000 && id < 9000 }},
	}
}

// TestExactIndexesMatchBruteForce covers the exact index types (Flat,
// IDMap2+Flat, IVF+Flat probing every list) with and without selectors,
// for both metrics.
func TestExactIndexesMatchBruteForce(t *testing.T) {
	c := newCollection(1)
	for _, metric := range []int{gofaiss.MetricInnerProduct, gofaiss.MetricL2} {
		for _, desc := range []string{"IDMap,Flat", "IDMap2,Flat", "IVF64,Flat"} {
			idx := build(t, c, desc, metric)
			var params []byte
			if idx.IsIVFIndex() {
				idx.SetNProbe(64) // every list: exact
				params = []byte(`{"ivf_nprobe_pct":100}`)
			}
			dist, labels, err := idx.Search(c.queries, testK)
			if err != nil {
				t.Fatalf("%s: search: %v", desc, err)
			}
			for q := 0; q < testNQ; q++ {
				want := bruteForce(c.vecs, c.ids, c.query(q), testK, metric, nil)
				checkExact(t, desc, dist[q*testK:(q+1)*testK], labels[q*testK:(q+1)*testK], want)
			}
			for _, sc := range selectorCases(c, rand.New(rand.NewPCG(2, 3))) {
				sel, err := sc.make()
				if err != nil {
					t.Fatalf("%s/%s: selector: %v", desc, sc.name, err)
				}
				dist, labels, err := idx.SearchWithOptions(c.queries, testK, sel, params)
				sel.Delete()
				if err != nil {
					t.Fatalf("%s/%s: search: %v", desc, sc.name, err)
				}
				for q := 0; q < testNQ; q++ {
					want := bruteForce(c.vecs, c.ids, c.query(q), testK, metric, sc.allow)
					checkExact(t, desc+"/"+sc.name, dist[q*testK:(q+1)*testK], labels[q*testK:(q+1)*testK], want)
				}
			}
		}
	}
}

// TestHNSWWithSelectors covers HNSW behind IDMap2. HNSW is approximate, so
// it is held to recall against brute force rather than equality, and every
// returned id must pass the selector. FAISS 1.7.3 applies the selector to
// HNSW's result set only, so a restrictive selector may return fewer than
// k hits (label -1); the 1% batch case documents that.
func TestHNSWWithSelectors(t *testing.T) {
	c := newCollection(3)
	idx := build(t, c, "IDMap2,HNSW32", gofaiss.MetricInnerProduct)
	ps, err := gofaiss.NewParameterSpace()
	if err != nil {
		t.Fatal(err)
	}
	defer ps.Delete()
	if err := ps.SetIndexParameter(idx, "efSearch", 256); err != nil {
		t.Fatalf("set efSearch: %v", err)
	}
	_, labels, err := idx.Search(c.queries, testK)
	if err != nil {
		t.Fatal(err)
	}
	var recall float64
	for q := 0; q < testNQ; q++ {
		want := bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, nil)
		recall += recallAt(labels[q*testK:(q+1)*testK], want)
	}
	if recall /= testNQ; recall < 0.9 {
		t.Errorf("HNSW recall@%d %.3f < 0.9", testK, recall)
	}
	for _, sc := range selectorCases(c, rand.New(rand.NewPCG(4, 5))) {
		sel, err := sc.make()
		if err != nil {
			t.Fatal(err)
		}
		_, labels, err := idx.SearchWithOptions(c.queries, testK, sel, nil)
		sel.Delete()
		if err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
		var recall float64
		for q := 0; q < testNQ; q++ {
			got := labels[q*testK : (q+1)*testK]
			for _, id := range got {
				if id >= 0 && !sc.allow(id) {
					t.Fatalf("%s: id %d does not pass the selector", sc.name, id)
				}
			}
			recall += recallAt(got, bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, sc.allow))
		}
		recall /= testNQ
		t.Logf("HNSW %s recall@%d = %.3f", sc.name, testK, recall)
		if sc.name != "batch" && recall < 0.8 {
			t.Errorf("HNSW %s recall@%d %.3f < 0.8", sc.name, testK, recall)
		}
	}
}

// TestIVFApproximateRecall checks IVF with a partial probe against brute
// force, with a selector applied inside the search.
func TestIVFApproximateRecall(t *testing.T) {
	c := newCollection(5)
	idx := build(t, c, "IVF64,Flat", gofaiss.MetricL2)
	sel, err := gofaiss.NewIDSelectorRange(0, 15000)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Delete()
	_, labels, err := idx.SearchWithOptions(c.queries, testK, sel, []byte(`{"ivf_nprobe_pct":25}`))
	if err != nil {
		t.Fatal(err)
	}
	allow := func(id int64) bool { return id < 15000 }
	var recall float64
	for q := 0; q < testNQ; q++ {
		got := labels[q*testK : (q+1)*testK]
		for _, id := range got {
			if id >= 0 && !allow(id) {
				t.Fatalf("id %d outside the range selector", id)
			}
		}
		recall += recallAt(got, bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricL2, allow))
	}
	if recall /= testNQ; recall < 0.6 {
		t.Errorf("IVF64 nprobe=16 recall@%d %.3f < 0.6", testK, recall)
	}
}

// TestRangeSearch compares range search with brute force on a flat index.
func TestRangeSearch(t *testing.T) {
	c := newCollection(6)
	idx := build(t, c, "IDMap2,Flat", gofaiss.MetricL2)
	q := c.query(0)
	all := bruteForce(c.vecs, c.ids, q, testN, gofaiss.MetricL2, nil)
	// 50 hits, with the radius halfway between two scores so that float
	// rounding cannot move the boundary.
	radius := (all[49].score + all[50].score) / 2
	res, err := idx.RangeSearch(q, radius)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Delete()
	labels, dists := res.Labels()
	want := map[int64]float32{}
	for _, s := range all {
		if s.score < radius {
			want[s.id] = s.score
		}
	}
	if len(labels) != len(want) {
		t.Fatalf("range search found %d, brute force %d", len(labels), len(want))
	}
	for i, id := range labels {
		w, ok := want[id]
		if !ok || math.Abs(float64(w-dists[i])) > testTol {
			t.Fatalf("range hit %d (%v) not in brute force (%v, %v)", id, dists[i], w, ok)
		}
	}
}

// TestRemoveIDs removes a third of the ids from each index type and checks
// that searches never return them and still match brute force.
func TestRemoveIDs(t *testing.T) {
	c := newCollection(7)
	for _, desc := range []string{"IDMap2,Flat", "IVF32,Flat"} {
		idx := build(t, c, desc, gofaiss.MetricInnerProduct)
		removed := map[int64]bool{}
		var rm []int64
		for i, id := range c.ids {
			if i%3 == 0 {
				removed[id] = true
				rm = append(rm, id)
			}
		}
		sel, err := gofaiss.NewIDSelectorBatch(rm)
		if err != nil {
			t.Fatal(err)
		}
		n, err := idx.RemoveIDs(sel.(*gofaiss.IDSelector))
		sel.Delete()
		if err != nil {
			t.Fatalf("%s: remove_ids: %v", desc, err)
		}
		if n != len(rm) || idx.Ntotal() != int64(testN-len(rm)) {
			t.Fatalf("%s: removed %d (ntotal %d), want %d", desc, n, idx.Ntotal(), len(rm))
		}
		idx.SetNProbe(32)
		dist, labels, err := idx.Search(c.queries, testK)
		if err != nil {
			t.Fatal(err)
		}
		keep := func(id int64) bool { return !removed[id] }
		for q := 0; q < testNQ; q++ {
			want := bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricInnerProduct, keep)
			checkExact(t, desc+" after remove", dist[q*testK:(q+1)*testK], labels[q*testK:(q+1)*testK], want)
		}
	}
}

// TestMergeFrom splits the collection over two IVF indexes sharing one
// trained quantizer, merges them, and checks the merged index is exact with
// a full probe.
func TestMergeFrom(t *testing.T) {
	c := newCollection(8)
	half := testN / 2 * testD
	a, err := gofaiss.IndexFactory(testD, "IVF32,Flat", gofaiss.MetricL2)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Train(c.vecs); err != nil {
		t.Fatal(err)
	}
	b, err := gofaiss.IndexFactory(testD, "IVF32,Flat", gofaiss.MetricL2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.SetQuantizers(a); err != nil {
		t.Fatalf("set_quantizers: %v", err)
	}
	if !b.IsTrained() {
		t.Fatal("index not trained after set_quantizers")
	}
	if err := a.AddWithIDs(c.vecs[:half], c.ids[:testN/2]); err != nil {
		t.Fatal(err)
	}
	if err := b.AddWithIDs(c.vecs[half:], c.ids[testN/2:]); err != nil {
		t.Fatal(err)
	}
	if err := a.MergeFrom(b, 0); err != nil {
		t.Fatalf("merge_from: %v", err)
	}
	if a.Ntotal() != testN || b.Ntotal() != 0 {
		t.Fatalf("after merge: ntotal %d and %d, want %d and 0", a.Ntotal(), b.Ntotal(), testN)
	}
	a.SetNProbe(32)
	dist, labels, err := a.Search(c.queries, testK)
	if err != nil {
		t.Fatal(err)
	}
	for q := 0; q < testNQ; q++ {
		want := bruteForce(c.vecs, c.ids, c.query(q), testK, gofaiss.MetricL2, nil)
		checkExact(t, "merged", dist[q*testK:(q+1)*testK], labels[q*testK:(q+1)*testK], want)
	}
	counts, err := a.ObtainClusterVectorCountsFromIVFIndex(nil, 32)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	if total != testN {
		t.Fatalf("list counts sum to %d, want %d", total, testN)
	}
}

// TestBufferRoundTrip serialises each index type to memory and back; the
// copy must answer every query exactly as the original.
func TestBufferRoundTrip(t *testing.T) {
	c := newCollection(9)
	for _, desc := range []string{"IDMap2,Flat", "IVF32,Flat", "IDMap2,HNSW16", "IVF32,SQ8"} {
		idx := build(t, c, desc, gofaiss.MetricInnerProduct)
		buf, err := gofaiss.WriteIndexIntoBuffer(idx)
		if err != nil {
			t.Fatalf("%s: write: %v", desc, err)
		}
		cp, err := gofaiss.ReadIndexFromBuffer(buf, 0)
		if err != nil {
			t.Fatalf("%s: read: %v", desc, err)
		}
		if cp.Ntotal() != idx.Ntotal() || cp.D() != idx.D() {
			cp.Close()
			t.Fatalf("%s: copy has ntotal %d d %d", desc, cp.Ntotal(), cp.D())
		}
		d1, l1, err1 := idx.Search(c.queries, testK)
		d2, l2, err2 := cp.Search(c.queries, testK)
		cp.Close()
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: search: %v %v", desc, err1, err2)
		}
		if !slices.Equal(l1, l2) || !slices.Equal(d1, d2) {
			t.Fatalf("%s: copy answers differently", desc)
		}
	}
}

// TestExtensionErrors checks that the extensions report unsupported
// features as errors instead of crashing or answering wrongly.
func TestExtensionErrors(t *testing.T) {
	c := newCollection(10)
	idx := build(t, c, "IVF16,Flat", gofaiss.MetricL2)
	if idx.HasRaBitQ() {
		t.Fatal("FAISS 1.7.3 has no RaBitQ, but HasRaBitQ says yes")
	}
	if _, err := gofaiss.ReadIndexFromBuffer([]byte("not an index"), 0); err == nil {
		t.Fatal("reading garbage succeeded")
	}
	buf, err := gofaiss.WriteIndexIntoBuffer(idx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gofaiss.ReadIndexFromBuffer(buf, gofaiss.IOFlagReadMmap); err == nil {
		t.Fatal("mmap from a buffer succeeded")
	}
	flat, err := gofaiss.IndexFactory(testD, "Flat", gofaiss.MetricL2)
	if err != nil {
		t.Fatal(err)
	}
	defer flat.Close()
	if err := flat.SetQuantizers(idx); err == nil {
		t.Fatal("set_quantizers from IVF into Flat succeeded")
	}
}

// TestDistComputeAndReconstruct checks per-id distances and batch
// reconstruction on an IDMap2 index against the stored vectors.
func TestDistComputeAndReconstruct(t *testing.T) {
	c := newCollection(11)
	idx := build(t, c, "IDMap2,Flat", gofaiss.MetricInnerProduct)
	ids := []int64{c.ids[0], c.ids[17], c.ids[9999]}
	pos := []int{0, 17, 9999}
	q := c.query(0)
	dists, err := idx.DistCompute(q, ids)
	if err != nil {
		t.Fatal(err)
	}
	recons, err := idx.ReconstructBatch(ids, make([]float32, len(ids)*testD))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pos {
		v := c.vecs[p*testD : (p+1)*testD]
		if !slices.Equal(recons[i*testD:(i+1)*testD], v) {
			t.Fatalf("reconstruct id %d differs from the stored vector", ids[i])
		}
		var dot float64
		for j := range v {
			dot += float64(v[j]) * float64(q[j])
		}
		if math.Abs(dot-float64(dists[i])) > testTol {
			t.Fatalf("dist_compute id %d = %v, want %v", ids[i], dists[i], dot)
		}
	}
	if idx.Size() < uint64(testN*testD*4) {
		t.Fatalf("Size() %d is below the raw vector bytes %d", idx.Size(), testN*testD*4)
	}
}
