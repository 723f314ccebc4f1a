//go:build cgo

package faiss

import (
	"math/bits"
	"math/rand/v2"
	"slices"
	"testing"

	gofaiss "github.com/blevesearch/go-faiss"
)

// TestBinaryIVF covers the binary-index extensions: search with IVF
// parameters, list counts, centroids, eligible-centroid search, direct maps,
// code size and a buffer round trip, all against brute-force Hamming
// distances. Selectors are not honoured by FAISS 1.7.3's binary indexes, so
// a search with one must fail rather than ignore it.
func TestBinaryIVF(t *testing.T) {
	const (
		d     = 64 // bits
		n     = 10000
		nlist = 16
	)
	rng := rand.New(rand.NewPCG(31, 32))
	codes := make([]uint8, n*d/8)
	for i := range codes {
		codes[i] = uint8(rng.UintN(256))
	}
	queries := codes[:testNQ*d/8] // stored vectors as queries: rank 0 is exact
	idx, err := gofaiss.BinaryIndexFactory(d, "BIVF16")
	if err != nil {
		t.Fatalf("binary factory: %v", err)
	}
	defer idx.Close()
	if err := idx.Train(codes); err != nil {
		t.Fatal(err)
	}
	if err := idx.Add(codes); err != nil {
		t.Fatal(err)
	}
	if size, err := idx.CodeSize(); err != nil || size != d/8 {
		t.Fatalf("code size %d (%v), want %d", size, err, d/8)
	}
	if idx.Size() < n*d/8 {
		t.Fatalf("Size() %d below the code bytes", idx.Size())
	}

	hamming := func(a, b []uint8) int32 {
		var s int
		for i := range a {
			s += bits.OnesCount8(a[i] ^ b[i])
		}
		return int32(s)
	}
	// With every list probed the search is exact: compare distances rank by
	// rank with brute force.
	dist, labels, err := idx.SearchWithOptions(queries, testK, nil, []byte(`{"ivf_nprobe_pct":100}`))
	if err != nil {
		t.Fatalf("search with IVF params: %v", err)
	}
	for q := 0; q < testNQ; q++ {
		qv := queries[q*d/8 : (q+1)*d/8]
		all := make([]int32, n)
		for i := range all {
			all[i] = hamming(qv, codes[i*d/8:(i+1)*d/8])
		}
		slices.Sort(all)
		for j := 0; j < testK; j++ {
			if dist[q*testK+j] != all[j] {
				t.Fatalf("query %d rank %d: distance %d, brute force %d", q, j, dist[q*testK+j], all[j])
			}
			id := labels[q*testK+j]
			if hamming(qv, codes[id*d/8:(id+1)*d/8]) != dist[q*testK+j] {
				t.Fatalf("query %d rank %d: id %d is not at distance %d", q, j, id, dist[q*testK+j])
			}
		}
	}

	counts, err := idx.ObtainClusterVectorCountsFromIVFIndex(nil, nlist)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, c := range counts {
		total += c
	}
	if total != n {
		t.Fatalf("list counts sum to %d, want %d", total, n)
	}
	// go-faiss v1.1.5's binary ObtainKCentroidCardinalitiesFromIVFIndex
	// slices its centroid buffer by bits instead of bytes and panics for
	// lists past nlist/8, so it is not called here; Tandem does not use it.

	// Eligible centroids: only even lists, nearest first.
	even := make([]int64, 0, nlist/2)
	for l := int64(0); l < nlist; l += 2 {
		even = append(even, l)
	}
	sel, err := gofaiss.NewIDSelectorBatch(even)
	if err != nil {
		t.Fatal(err)
	}
	ids, cdist, err := idx.ObtainClustersWithDistancesFromIVFIndex(queries[:d/8], sel, 4)
	sel.Delete()
	if err != nil {
		t.Fatalf("eligible centroids: %v", err)
	}
	for i, id := range ids {
		if id%2 != 0 || (i > 0 && cdist[i] < cdist[i-1]) {
			t.Fatalf("eligible centroids %v at %v: want even lists, nearest first", ids, cdist)
		}
	}

	if err := idx.SetDirectMap(1); err != nil {
		t.Fatalf("direct map: %v", err)
	}
	buf, err := gofaiss.WriteBinaryIndexIntoBuffer(idx)
	if err != nil {
		t.Fatal(err)
	}
	cp, err := gofaiss.ReadBinaryIndexFromBuffer(buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Close()
	if cp.Ntotal() != n {
		t.Fatalf("copy holds %d codes", cp.Ntotal())
	}

	batch, err := gofaiss.NewIDSelectorBatch([]int64{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Delete()
	if _, _, err := idx.SearchWithOptions(queries, testK, batch, nil); err == nil {
		t.Fatal("a binary search with a selector succeeded, but FAISS 1.7.3 cannot honour it")
	}
}

// TestIVFSearchClusters covers the float IVF cluster extensions: eligible
// centroids and a search restricted to chosen clusters and a selector. With
// every cluster eligible and probed, it must equal exact filtered search.
func TestIVFSearchClusters(t *testing.T) {
	c := newCollection(41)
	idx := build(t, c, "IVF32,Flat", gofaiss.MetricL2)
	sel, err := gofaiss.NewIDSelectorRange(0, 20000)
	if err != nil {
		t.Fatal(err)
	}
	defer sel.Delete()
	allow := func(id int64) bool { return id < 20000 }
	for q := 0; q < testNQ; q++ {
		x := c.query(q)
		clusters, cdist, err := idx.ObtainClustersWithDistancesFromIVFIndex(x, nil, 32)
		if err != nil {
			t.Fatalf("eligible centroids: %v", err)
		}
		for i := 1; i < len(cdist); i++ {
			if cdist[i] < cdist[i-1] {
				t.Fatalf("centroid distances not ascending: %v", cdist)
			}
		}
		dist, labels, err := idx.SearchClustersFromIVFIndex(clusters, cdist, 32, x, testK, sel, nil)
		if err != nil {
			t.Fatalf("search clusters: %v", err)
		}
		checkExact(t, "clusters", dist, labels, bruteForce(c.vecs, c.ids, x, testK, gofaiss.MetricL2, allow))
	}
	cards, _, err := idx.ObtainKCentroidCardinalitiesFromIVFIndex(3, false)
	if err != nil || len(cards) != 3 || cards[0] > cards[2] {
		t.Fatalf("3 smallest cardinalities: %v %v", cards, err)
	}
}
