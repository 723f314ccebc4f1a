package latecollect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// topicCorpus is a synthetic corpus whose token vectors cluster around
// topics: each document draws its tokens near two or three of them, so a
// query drawn near a document's topics has near neighbours in many
// documents, unevenly.
type topicCorpus struct {
	dim    int
	topics [][]float32
	ids    []string // in writing order
	vecs   map[string][]float32
	docTop map[string][]int
}

func newTopicCorpus(r *rand.Rand, nDocs, nTopics, dim int) *topicCorpus {
	c := &topicCorpus{dim: dim, vecs: map[string][]float32{}, docTop: map[string][]int{}}
	for range nTopics {
		c.topics = append(c.topics, randomUnit(r, 1, dim))
	}
	for i := range nDocs {
		id := fmt.Sprintf("doc%04d", i)
		tops := make([]int, 2+r.IntN(2))
		for j := range tops {
			tops[j] = r.IntN(nTopics)
		}
		c.ids = append(c.ids, id)
		c.docTop[id] = tops
		c.vecs[id] = c.near(r, tops, 20+r.IntN(181))
	}
	return c
}

// near draws n unit tokens, each near one of the given topics.
func (c *topicCorpus) near(r *rand.Rand, tops []int, n int) []float32 {
	v := make([]float32, 0, n*c.dim)
	for range n {
		centre := c.topics[tops[r.IntN(len(tops))]]
		row := make([]float32, c.dim)
		for j := range row {
			row[j] = centre[j] + float32(r.NormFloat64()*0.25)
		}
		normalizeRows(row, c.dim)
		v = append(v, row...)
	}
	return v
}

// shardOf spreads documents over shards by a hash of their id.
func shardOf(id string, shards int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}

func docOf(id string) tandem.Doc {
	return tandem.Doc{ID: id, Fields: map[string]any{"text": id}}
}

// testIndex is one index with the external ids of its docnums.
type testIndex struct {
	st  *storage.Store
	x   *Index
	id  map[uint64]string // docnum -> external id
	num map[string]uint64
}

func writeTopicDocs(t *testing.T, c *topicCorpus, ids []string, opts *Options) *testIndex {
	t.Helper()
	st := openStore(t, t.TempDir()) // in memory, values are limited to 4 KiB
	var b storage.Batch
	for _, id := range ids {
		blob, err := EncodeTokens(c.vecs[id], c.dim, F16)
		if err != nil {
			t.Fatal(err)
		}
		b.Put(docOf(id), map[string][]byte{BlobName(testModel): blob})
	}
	if _, err := st.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	ti := &testIndex{st: st, x: openIndex(t, st, opts), id: map[uint64]string{}, num: map[string]uint64{}}
	for _, id := range ids {
		num, ok, err := st.Lookup(id)
		if err != nil || !ok {
			t.Fatalf("lookup %s: %v %v", id, ok, err)
		}
		ti.id[num], ti.num[id] = id, num
	}
	return ti
}

// allowOf returns the docnums of ti allowed by keep (nil for no filter).
func (ti *testIndex) allowOf(keep func(string) bool) *roaring64.Bitmap {
	if keep == nil {
		return nil
	}
	bm := roaring64.New()
	for num, id := range ti.id {
		if keep(id) {
			bm.Add(num)
		}
	}
	return bm
}

// idHit is a hit named by its external id.
type idHit struct {
	id    string
	score float32
}

func byIDHit(a, b idHit) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

func (ti *testIndex) named(hits []Hit) []idHit {
	out := make([]idHit, len(hits))
	for i, h := range hits {
		out[i] = idHit{ti.id[h.DocNum], h.Score}
	}
	return out
}

// shardedRun is what the coordinator did for one query.
type shardedRun struct {
	hits       []idHit
	exhaustive bool     // the filter was small enough to score everything
	cands      []string // MergeCandidates' choice, in order
	skips      int      // tokens collected marked Skip
}

// shardedSearch runs the coordinator protocol of the package documentation
// over the shards.
func shardedSearch(t *testing.T, shards []*testIndex, q []float32, so SearchOptions, keep func(string) bool) shardedRun {
	t.Helper()
	ctx := context.Background()
	kPrime, capN := so.KPrime, so.CandidateCap
	if kPrime == 0 {
		kPrime = DefaultKPrime
	}
	if capN == 0 {
		capN = DefaultCandidateCap
	}
	var run shardedRun
	cols := make([]*Collection, len(shards))
	allowed := 0
	for i, s := range shards {
		o := so
		o.Allow = s.allowOf(keep)
		col, err := s.x.Collect(ctx, q, &o)
		if err != nil {
			t.Fatal(err)
		}
		if len(col.Tokens) != len(q)/s.x.Dim() {
			t.Fatalf("shard %d: %d token lists for %d query tokens", i, len(col.Tokens), len(q)/s.x.Dim())
		}
		cols[i] = col
		allowed += col.Allowed
		for _, l := range col.Tokens {
			for _, h := range l {
				if h.Skip {
					run.skips++
				}
			}
		}
	}
	var all []idHit
	if keep != nil && allowed <= capN {
		run.exhaustive = true
		for _, s := range shards {
			o := so
			o.Allow, o.Mode = s.allowOf(keep), Exhaustive
			hits, err := s.x.Search(ctx, q, &o)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, s.named(hits)...)
		}
	} else {
		picked := MergeCandidates(cols, kPrime, capN)
		per := make([][]uint64, len(shards))
		for _, p := range picked {
			per[p.Shard] = append(per[p.Shard], p.Doc)
			run.cands = append(run.cands, shards[p.Shard].id[p.Doc])
		}
		for i, s := range shards {
			o := so
			o.Allow = s.allowOf(keep)
			hits, err := s.x.Rescore(ctx, q, per[i], &o)
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) > max(so.K, 10) {
				t.Fatalf("shard %d: Rescore returned %d hits for K %d", i, len(hits), so.K)
			}
			all = append(all, s.named(hits)...)
		}
	}
	slices.SortFunc(all, byIDHit)
	k := so.K
	if k == 0 {
		k = 10
	}
	run.hits = all[:min(k, len(all))]
	return run
}

// singleCandidates is the candidate list the single index chooses, by id.
func singleCandidates(t *testing.T, ti *testIndex, q []float32, so SearchOptions) []string {
	t.Helper()
	if err := ti.x.fillSearch(&so); err != nil {
		t.Fatal(err)
	}
	ti.x.mu.RLock()
	defer ti.x.mu.RUnlock()
	nums, err := faissOf(ti.x).collectLocked(context.Background(), q, so)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, len(nums))
	for i, n := range nums {
		out[i] = ti.id[n]
	}
	return out
}

func sameIDHits(t *testing.T, what string, got, want []idHit) {
	t.Helper()
	slices.SortFunc(got, byIDHit)
	slices.SortFunc(want, byIDHit)
	if !slices.Equal(got, want) {
		t.Fatalf("%s:\ngot  %v\nwant %v", what, got, want)
	}
}

// TestShardedMatchesOneIndex splits a corpus over three Flat indexes and
// checks that the coordinator protocol (Collect, MergeCandidates, Rescore,
// or exhaustive scoring under a small filter) gives the candidates, hits
// and float32 scores of one Flat index holding every document.
func TestShardedMatchesOneIndex(t *testing.T) {
	const (
		dim     = 32
		nShards = 3
	)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(42, 17))
	c := newTopicCorpus(r, 360, 24, dim)
	opts := &Options{Model: testModel, Dim: dim, Description: "Flat", SnapshotEvery: -1}
	single := writeTopicDocs(t, c, c.ids, opts)
	parts := make([][]string, nShards)
	for _, id := range c.ids {
		s := shardOf(id, nShards)
		parts[s] = append(parts[s], id)
	}
	shards := make([]*testIndex, nShards)
	for i, p := range parts {
		if len(p) < 60 {
			t.Fatalf("shard %d has only %d documents", i, len(p))
		}
		shards[i] = writeTopicDocs(t, c, p, opts)
	}
	// Queries near some document's topics, 8 to 32 tokens.
	var queries [][]float32
	for qi := range 6 {
		doc := c.ids[r.IntN(len(c.ids))]
		queries = append(queries, c.near(r, c.docTop[doc], 8+qi*24/5))
	}

	// Filters by a uniform value per document.
	u := map[string]float64{}
	for _, id := range c.ids {
		u[id] = r.Float64()
	}
	wide := func(id string) bool { return u[id] < 0.3 }
	few := func(id string) bool { return u[id] < 0.015 } // fewer than the cap
	five := func(id string) bool { return u[id] < 0.05 }
	count := func(keep func(string) bool) int {
		n := 0
		for _, id := range c.ids {
			if keep(id) {
				n++
			}
		}
		return n
	}
	if n := count(wide); n <= 64 || n > DefaultCandidateCap {
		t.Fatalf("the 30%% filter keeps %d documents, want 65 to %d", n, DefaultCandidateCap)
	}
	if n := count(few); n == 0 || n > 8 {
		t.Fatalf("the small filter keeps %d documents, want 1 to 8", n)
	}
	if n := count(five); n <= 8 || n > 32 {
		t.Fatalf("the 5%% filter keeps %d documents, want 9 to 32", n)
	}

	cases := []struct {
		name       string
		so         SearchOptions
		keep       func(string) bool
		exhaustive bool
		capBinds   bool
		post       bool // every index filters after collection
	}{
		{name: "K10", so: SearchOptions{K: 10}},
		{name: "K100", so: SearchOptions{K: 100}},
		{name: "K10 sum-max", so: SearchOptions{K: 10, Scoring: ScoreSumMax}},
		// About 108 documents allowed: more than the cap.
		{name: "filter 30% K10", so: SearchOptions{K: 10, CandidateCap: 64}, keep: wide},
		{name: "filter 30% K100", so: SearchOptions{K: 100, CandidateCap: 64}, keep: wide},
		{name: "filter 30% K10 default cap", so: SearchOptions{K: 10}, keep: wide, exhaustive: true},
		{name: "small filter K10", so: SearchOptions{K: 10}, keep: few, exhaustive: true},
		{name: "cap 32 k' 16 K10", so: SearchOptions{K: 10, KPrime: 16, CandidateCap: 32}, capBinds: true},
		{name: "cap 32 k' 16 K100", so: SearchOptions{K: 100, KPrime: 16, CandidateCap: 32}, capBinds: true},
		{name: "cap 32 k' 16 filter 30%", so: SearchOptions{K: 10, KPrime: 16, CandidateCap: 32}, keep: wide, capBinds: true},
		{name: "cap 32 k' 16 filter 30% after collection", so: SearchOptions{K: 10, KPrime: 16, CandidateCap: 32}, keep: wide, post: true},
		{name: "k' 16 filter 30% after collection K100", so: SearchOptions{K: 100, KPrime: 16, CandidateCap: 64}, keep: wide, post: true},
		{name: "cap 8 k' 4 filter small", so: SearchOptions{K: 10, KPrime: 4, CandidateCap: 8}, keep: few, exhaustive: true},
		{name: "cap 8 k' 4 filter 5%", so: SearchOptions{K: 10, KPrime: 4, CandidateCap: 8}, keep: five, capBinds: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, x := range append([]*testIndex{single}, shards...) {
				setFilterAtCollection(x.x, tc.post)
			}
			defer func() {
				for _, x := range append([]*testIndex{single}, shards...) {
					setFilterAtCollection(x.x, false)
				}
			}()
			for qi, q := range queries {
				what := fmt.Sprintf("query %d (%d tokens)", qi, len(q)/dim)
				so := tc.so
				so.Allow = single.allowOf(tc.keep)
				want, err := single.x.Search(ctx, q, &so)
				if err != nil {
					t.Fatal(err)
				}
				if len(want) == 0 {
					t.Fatalf("%s: the single index found nothing", what)
				}
				run := shardedSearch(t, shards, q, tc.so, tc.keep)
				if run.exhaustive != tc.exhaustive {
					t.Fatalf("%s: exhaustive rule %v, want %v", what, run.exhaustive, tc.exhaustive)
				}
				sameIDHits(t, what+": hits", run.hits, single.named(want))
				if tc.keep != nil {
					for _, h := range run.hits {
						if !tc.keep(h.id) {
							t.Fatalf("%s: hit %s is not allowed", what, h.id)
						}
					}
				}
				if run.exhaustive {
					continue
				}
				if (run.skips > 0) != tc.post {
					t.Fatalf("%s: %d tokens marked Skip, filter after collection %v", what, run.skips, tc.post)
				}
				// The candidates themselves are the single index's,
				// in the same order.
				if sc := singleCandidates(t, single, q, so); !slices.Equal(run.cands, sc) {
					t.Fatalf("%s: candidates\ngot  %v\nwant %v", what, run.cands, sc)
				}
				if tc.capBinds {
					capN := tc.so.CandidateCap
					if len(run.cands) != capN {
						t.Fatalf("%s: %d candidates, want the cap %d", what, len(run.cands), capN)
					}
					wider := so
					wider.CandidateCap = 1 << 20
					if n := len(singleCandidates(t, single, q, wider)); n <= capN {
						t.Fatalf("%s: only %d documents collected: the cap %d does not bind", what, n, capN)
					}
				}
			}
		})
	}
}

// legacyCollect is the candidate choice Search made before it was split
// into Collect and MergeCandidates, over FAISS's answer as it was: the
// reference that the single index's candidates must still equal.
func legacyCollect(t *testing.T, x *Index, query []float32, so SearchOptions) []uint64 {
	t.Helper()
	fo := faiss.SearchOptions{NProbe: so.NProbe}
	postFilter := false
	if so.Allow != nil {
		if faissOf(x).filterAtCollection || so.Allow.Maximum() >= maxFilterDoc {
			postFilter = true
		} else {
			fo.Allow, fo.AllowShift = so.Allow, PositionBits
		}
	}
	if so.KPrime == 0 || so.CandidateCap == 0 {
		return nil
	}
	res, err := faissOf(x).fx.Search(context.Background(), query, so.KPrime, fo)
	if err != nil {
		t.Fatal(err)
	}
	type acc struct {
		score float32
		last  int
	}
	approx := map[uint64]*acc{}
	for qi, r := range res {
		for j, id := range r.IDs {
			num := uint64(id) >> PositionBits
			a := approx[num]
			if a == nil {
				if postFilter && !so.Allow.Contains(num) {
					continue
				}
				if !x.mu.fam.has(num) {
					continue
				}
				a = &acc{last: -1}
				approx[num] = a
			}
			if a.last != qi {
				a.last = qi
				a.score += r.Scores[j]
			}
		}
	}
	cands := slices.Collect(maps.Keys(approx))
	slices.SortFunc(cands, func(a, b uint64) int {
		if c := cmp.Compare(approx[b].score, approx[a].score); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	if len(cands) > so.CandidateCap {
		cands = cands[:so.CandidateCap]
	}
	return cands
}

// TestCollectLockedMatchesLegacy checks that the single index's candidates,
// now MergeCandidates over its own Collection, are those of the loop it
// replaced: without a filter, with the filter in FAISS and with the filter
// applied after collection (where filtered-out tokens take places), with
// caps that bind and with zero knobs.
func TestCollectLockedMatchesLegacy(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	c := newTopicCorpus(r, 200, 16, 16)
	x := writeTopicDocs(t, c, c.ids, &Options{Model: testModel, Dim: 16, Description: "Flat", SnapshotEvery: -1})
	allow := x.allowOf(func(id string) bool { return shardOf(id, 3) == 0 })
	for qi := range 5 {
		q := c.near(r, c.docTop[c.ids[r.IntN(len(c.ids))]], 3+qi*5)
		for _, tc := range []struct {
			kPrime, capN int
			allow        *roaring64.Bitmap
			post         bool
		}{
			{64, 256, nil, false}, {8, 16, nil, false}, {3, 5, nil, false},
			{8, 16, allow, false}, {8, 16, allow, true}, {64, 32, allow, true},
			{0, 16, nil, false}, {8, 0, allow, true},
		} {
			setFilterAtCollection(x.x, tc.post)
			so := SearchOptions{KPrime: tc.kPrime, CandidateCap: tc.capN, Allow: tc.allow}
			// fillSearch turns zeros into defaults: set them after.
			if err := x.x.fillSearch(&so); err != nil {
				t.Fatal(err)
			}
			so.KPrime, so.CandidateCap = tc.kPrime, tc.capN
			x.x.mu.RLock()
			got, err := faissOf(x.x).collectLocked(ctx, q, so)
			want := legacyCollect(t, x.x, q, so)
			x.x.mu.RUnlock()
			if err != nil {
				t.Fatal(err)
			}
			what := fmt.Sprintf("query %d, k' %d, cap %d, filter %v, after collection %v", qi, tc.kPrime, tc.capN, tc.allow != nil, tc.post)
			if !slices.Equal(got, want) {
				t.Fatalf("%s: candidates\ngot  %v\nwant %v", what, got, want)
			}
			if tc.kPrime > 0 && tc.capN > 0 && len(got) == 0 {
				t.Fatalf("%s: no candidates", what)
			}
			if tc.allow != nil {
				for _, n := range got {
					if !tc.allow.Contains(n) {
						t.Fatalf("%s: candidate %d is filtered out", what, n)
					}
				}
			}
		}
		setFilterAtCollection(x.x, false)
	}
}

func TestMergeCandidates(t *testing.T) {
	hit := func(doc uint64, score float32) TokenHit { return TokenHit{Doc: doc, Score: score} }
	skip := func(doc uint64, score float32) TokenHit { return TokenHit{Doc: doc, Score: score, Skip: true} }
	docs := func(shard int, nums ...uint64) []ShardDoc {
		out := make([]ShardDoc, len(nums))
		for i, n := range nums {
			out[i] = ShardDoc{Shard: shard, Doc: n}
		}
		return out
	}
	one := &Collection{Tokens: [][]TokenHit{
		// Query token 0: document 1's best token counts, its second
		// does not; the Skip token of 9 takes the third place, so with
		// k' 3 document 4 is cut.
		{hit(1, 0.9), hit(1, 0.8), skip(9, 0.75), hit(4, 0.7)},
		// Query token 1: 2 and 3 tie with 1's 0.9 (0.5+0.4).
		{hit(2, 0.9), hit(3, 0.9), hit(1, 0.5)},
		// Query token 2: nothing.
		nil,
	}}
	for _, tc := range []struct {
		name         string
		cols         []*Collection
		kPrime, capN int
		want         []ShardDoc
	}{
		// approx: 1 = 0.9+0.5 = 1.4, 2 = 0.9, 3 = 0.9; ties by docnum.
		{"one collection", []*Collection{one}, 3, 10, docs(0, 1, 2, 3)},
		{"cut at the cap", []*Collection{one}, 3, 2, docs(0, 1, 2)},
		{"k' past the Skip", []*Collection{one}, 4, 10, docs(0, 1, 2, 3, 4)},
		// k' 1: query token 0 keeps 1 (0.9), query token 1 keeps 2
		// (first of the tie in list order).
		{"k' 1", []*Collection{one}, 1, 10, docs(0, 1, 2)},
		{"k' 0", []*Collection{one}, 0, 10, nil},
		{"cap 0", []*Collection{one}, 3, 0, nil},
		{"no collection", nil, 3, 10, nil},
	} {
		got := MergeCandidates(tc.cols, tc.kPrime, tc.capN)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// Two shards, the same docnums naming different documents.
	// Scores are dyadic so that sums are exact.
	a := &Collection{Tokens: [][]TokenHit{
		{hit(1, 0.875), hit(2, 0.5), hit(3, 0.125)},
		{hit(2, 0.25)},
	}}
	b := &Collection{Tokens: [][]TokenHit{
		{hit(1, 0.875), skip(7, 0.75), hit(2, 0.625)},
		{hit(1, 0.25), hit(5, 0.125)},
		{hit(5, 0.5)}, // a third query token only b has results for
	}}
	for _, tc := range []struct {
		name         string
		cols         []*Collection
		kPrime, capN int
		want         []ShardDoc
	}{
		// Query token 0, k' 3: a1 .875, b1 .875 (tie: shard order),
		// b7 skipped but counted; a2, b2 cut. Query token 1: a2 .25
		// and b1 .25 tie (a first), b5 .125. Query token 2: b5 .5.
		// approx: b1 1.125, a1 .875, b5 .625, a2 .25.
		{"k' 3", []*Collection{a, b}, 3, 10, []ShardDoc{{1, 1}, {0, 1}, {1, 5}, {0, 2}}},
		// k' 1: a1 .875 (tie with b1 goes to shard 0), a2 .25, b5 .5.
		{"k' 1 ties by shard", []*Collection{a, b}, 1, 10, []ShardDoc{{0, 1}, {1, 5}, {0, 2}}},
		// Shards swapped: b is shard 0 now.
		{"k' 1 swapped", []*Collection{b, a}, 1, 10, []ShardDoc{{0, 1}, {0, 5}}},
		// k' 5 reaches b2 .625 and a2 .5 after the skip: a2 .75, and
		// b2 ties with b5 at .625 (docnum order).
		{"k' 5", []*Collection{a, b}, 5, 10, []ShardDoc{{1, 1}, {0, 1}, {0, 2}, {1, 2}, {1, 5}}},
		{"cap 2", []*Collection{a, b}, 3, 2, []ShardDoc{{1, 1}, {0, 1}}},
		{"nil collection", []*Collection{a, nil, b}, 3, 10, []ShardDoc{{2, 1}, {0, 1}, {2, 5}, {0, 2}}},
	} {
		got := MergeCandidates(tc.cols, tc.kPrime, tc.capN)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}

	// Equal approximate scores across shards: shard, then docnum.
	tie := []*Collection{
		{Tokens: [][]TokenHit{{hit(8, 0.5), hit(3, 0.5)}}},
		{Tokens: [][]TokenHit{{hit(2, 0.5)}}},
	}
	if got, want := MergeCandidates(tie, 10, 10), []ShardDoc{{0, 3}, {0, 8}, {1, 2}}; !slices.Equal(got, want) {
		t.Errorf("tied documents: got %v, want %v", got, want)
	}
}

// TestCollectAndRescore checks Collect's and Rescore's contracts on one
// index: Collect's lists and Allowed count, Rescore's exact scores (those
// of Exhaustive mode), its skipping of documents not held, repeated or
// filtered out, query validation, and ErrClosed.
func TestCollectAndRescore(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(8, 8))
	c := newTopicCorpus(r, 120, 8, 16)
	x := writeTopicDocs(t, c, c.ids, &Options{Model: testModel, Dim: 16, Description: "Flat", KPrime: 8, CandidateCap: 10, SnapshotEvery: -1})
	q := c.near(r, c.docTop[c.ids[0]], 5)

	col, err := x.x.Collect(ctx, q, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(col.Tokens) != 5 || col.Allowed != 0 {
		t.Fatalf("collection of %d lists, Allowed %d: want 5 and 0", len(col.Tokens), col.Allowed)
	}
	for qi, l := range col.Tokens {
		if len(l) != 8 {
			t.Fatalf("query token %d collected %d tokens, want k' 8", qi, len(l))
		}
		for j, h := range l {
			if h.Skip || (j > 0 && h.Score > l[j-1].Score) {
				t.Fatalf("query token %d: list %v is not best first without skips", qi, l)
			}
		}
	}
	// Allowed counts held documents only, up to CandidateCap+1.
	for _, tc := range []struct {
		n, want int
	}{{0, 0}, {4, 4}, {10, 10}, {11, 11}, {50, 11}} {
		allow := roaring64.New()
		for _, id := range c.ids[:tc.n] {
			allow.Add(x.num[id])
		}
		allow.Add(100000) // not held
		col, err := x.x.Collect(ctx, q, &SearchOptions{Allow: allow})
		if err != nil {
			t.Fatal(err)
		}
		if col.Allowed != tc.want {
			t.Errorf("filter of %d documents: Allowed %d, want %d", tc.n, col.Allowed, tc.want)
		}
		for _, l := range col.Tokens {
			for _, h := range l {
				if !allow.Contains(h.Doc) || h.Skip {
					t.Fatalf("filter of %d documents: collected %+v", tc.n, h)
				}
			}
		}
	}
	// After collection, filtered-out tokens stay, marked Skip.
	setFilterAtCollection(x.x, true)
	allow := x.allowOf(func(id string) bool { return shardOf(id, 2) == 0 })
	col, err = x.x.Collect(ctx, q, &SearchOptions{Allow: allow})
	setFilterAtCollection(x.x, false)
	if err != nil {
		t.Fatal(err)
	}
	skips := 0
	for _, l := range col.Tokens {
		if len(l) != 8 {
			t.Fatalf("filter after collection: %d tokens, want 8", len(l))
		}
		for _, h := range l {
			if h.Skip == allow.Contains(h.Doc) {
				t.Fatalf("filter after collection: %+v", h)
			}
			if h.Skip {
				skips++
			}
		}
	}
	if skips == 0 {
		t.Error("filter after collection: no token marked Skip")
	}

	// Rescore gives Exhaustive mode's scores.
	all, err := x.x.Search(ctx, q, &SearchOptions{Mode: Exhaustive, K: 1000})
	if err != nil {
		t.Fatal(err)
	}
	exact := map[uint64]float32{}
	for _, h := range all {
		exact[h.DocNum] = h.Score
	}
	some := []uint64{x.num[c.ids[3]], x.num[c.ids[7]], x.num[c.ids[7]], 100000, x.num[c.ids[50]], x.num[c.ids[90]]}
	got, err := x.x.Rescore(ctx, q, some, &SearchOptions{K: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Rescore: %d hits, want 3 (repeats and unknown documents ignored): %v", len(got), got)
	}
	seen := map[uint64]bool{}
	for i, h := range got {
		if seen[h.DocNum] || h.Score != exact[h.DocNum] || (i > 0 && h.Score > got[i-1].Score) {
			t.Fatalf("Rescore: %v (exact %v)", got, exact)
		}
		seen[h.DocNum] = true
	}
	got, err = x.x.Rescore(ctx, q, some, &SearchOptions{K: 10, Allow: roaring64.BitmapOf(x.num[c.ids[50]])})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].DocNum != x.num[c.ids[50]] {
		t.Fatalf("Rescore with a filter: %v", got)
	}
	if got, err := x.x.Rescore(ctx, q, nil, nil); err != nil || len(got) != 0 {
		t.Fatalf("Rescore of nothing: %v %v", got, err)
	}

	// Bad queries, closed index.
	for _, bad := range [][]float32{q[:7], append(slices.Clone(q[:15]), float32(math.NaN()))} {
		if _, err := x.x.Collect(ctx, bad, nil); !errors.Is(err, ErrBadVector) {
			t.Errorf("Collect of a bad query: %v, want ErrBadVector", err)
		}
		if _, err := x.x.Rescore(ctx, bad, some, nil); !errors.Is(err, ErrBadVector) {
			t.Errorf("Rescore of a bad query: %v, want ErrBadVector", err)
		}
	}
	x.x.Close()
	if _, err := x.x.Collect(ctx, q, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Collect after Close: %v", err)
	}
	if _, err := x.x.Rescore(ctx, q, some, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Rescore after Close: %v", err)
	}
}

// TestCollectResidual: a residual-code index has no Collect, and its
// Rescore scores exactly from the stored blobs, as Exhaustive mode does.
func TestCollectResidual(t *testing.T) {
	ctx := context.Background()
	c := newSynth(200, 16, 31)
	st := openStore(t, "")
	c.write(t, st, F16)
	x := openIndex(t, st, &Options{Model: testModel, Dim: 16, Description: "Residual", SnapshotEvery: -1})
	r := rand.New(rand.NewPCG(4, 4))
	q := randomUnit(r, 6, 16)
	if _, err := x.Collect(ctx, q, nil); !errors.Is(err, ErrNoCollect) {
		t.Fatalf("Collect on a residual index: %v, want ErrNoCollect", err)
	}
	all, err := x.Search(ctx, q, &SearchOptions{Mode: Exhaustive, K: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 200 {
		t.Fatalf("exhaustive: %d hits, want 200", len(all))
	}
	// Every other document of the exhaustive ranking, and one not held.
	var docs []uint64
	var want []Hit
	for i, h := range all {
		if i%2 == 1 {
			docs = append(docs, h.DocNum)
			want = append(want, h)
		}
	}
	docs = append(docs, 100000)
	got, err := x.Rescore(ctx, q, docs, &SearchOptions{K: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want[:10]) {
		t.Fatalf("Rescore on a residual index:\ngot  %v\nwant %v", got, want[:10])
	}
}
