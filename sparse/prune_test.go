package sparse

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// pruneLog is a generated collection for the pruned scorer: documents of
// Zipf-distributed words (so that a few terms have long postings and
// many have short ones), some identical (ties), reached through several
// batches with replacements and deletes.
func pruneLog(n int, seed uint64) *changeLog {
	rng := rand.New(rand.NewPCG(seed, 11))
	vocab := make([]string, 400)
	for i := range vocab {
		vocab[i] = fmt.Sprintf("w%03d", i)
	}
	zipf := rand.NewZipf(rand.New(rand.NewPCG(seed, 12)), 1.1, 2, uint64(len(vocab)-1))
	words := func(lo, hi int) string {
		k := lo + rng.IntN(hi-lo+1)
		w := make([]string, k)
		for i := range w {
			w[i] = vocab[zipf.Uint64()]
		}
		return strings.Join(w, " ")
	}
	groups := []string{"red", "green", "blue", "grey"}
	l := newChangeLog()
	id := func(num uint64) string { return fmt.Sprint("doc-", num) }
	per := n / 4
	for b := range 4 {
		l.batch()
		for i := range per {
			num := uint64(b*per + i)
			title, text := words(0, 6), words(2, 80)
			if num%97 == 0 {
				title, text = "tie same", "tie same words" // many equal scores
			}
			l.put(num, id(num), title, text, groups[rng.IntN(len(groups))])
		}
	}
	l.batch()
	for num := uint64(0); num < uint64(4*per); num++ {
		switch {
		case num%13 == 5:
			l.del(num)
		case num%9 == 4:
			l.put(num, id(num), words(0, 6), words(2, 80), groups[rng.IntN(len(groups))])
		}
	}
	return l
}

// TestPrunedMatchesExhaustive holds the pruned scorer (block-max
// MaxScore) to the exhaustive one over random queries of one to eight
// terms, k from 1 to 500, with and without filters, on the composite
// field and on fields with boosts, with the collection's statistics and
// with a sharded collection's, on an index whose segments keep deleted and
// replaced documents (every postings list given blocks) and on a merged
// one (only lists of 4,096 postings or more), with postings decoded by the
// cache and, when it is small, read through zap: the same hits, in the
// same order, with bit-identical scores.
func TestPrunedMatchesExhaustive(t *testing.T) {
	ctx := context.Background()
	schema := shardTestSchema()
	log := pruneLog(6000, 3)
	rng := rand.New(rand.NewPCG(4, 5))
	filters := []string{``, `{"term":{"group":"red"}}`, `{"not":{"term":{"group":"blue"}}}`,
		`{"or":[{"term":{"group":"grey"}},{"term":{"group":"green"}}]}`, `{"term":{"group":"nosuch"}}`}
	compiled := make([]filter.Expr, len(filters))
	for i, f := range filters {
		if f == "" {
			continue
		}
		e, err := filter.Parse([]byte(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := filter.Check(e, schema); err != nil {
			t.Fatal(err)
		}
		compiled[i] = e
	}
	defer func(b uint64, c, a int) { blocksFrom, decodedBytes, decodeAfter = b, c, a }(blocksFrom, decodedBytes, decodeAfter)
	for _, cf := range []struct {
		unmerged bool
		from     uint64 // blocksFrom
		cache    int    // decodedBytes
		after    int    // decodeAfter
	}{
		// Every list with blocks, decoded at once; only long ones (few,
		// here), decoded at their second search; every list with
		// blocks, those of up to 500 postings decoded while 1,000 fit,
		// the longer ones read through zap.
		{true, 0, 512 << 20, 1},
		{false, 4096, 512 << 20, 2},
		{true, 0, (4*500 + 4) * decodeShare, 1},
	} {
		unmerged := cf.unmerged
		x := openApplied(t, schema, log, unmerged, func(storage.Change) bool { return true })
		blocksFrom, decodedBytes, decodeAfter = cf.from, cf.cache, cf.after
		checked, pruned := 0, 0
		for qi := range 300 {
			n := 1 + rng.IntN(8)
			w := make([]string, n)
			for i := range w {
				// Mostly common terms, where pruning has work to do.
				w[i] = fmt.Sprintf("w%03d", int(float64(400)*rng.Float64()*rng.Float64()*rng.Float64()))
			}
			if qi%17 == 0 {
				w = append(w, "tie")
			}
			q := Query{Text: strings.Join(w, " "), K: []int{1, 3, 10, 10, 50, 500}[rng.IntN(6)]}
			fi := rng.IntN(len(filters))
			q.Filter = compiled[fi]
			if qi%3 == 1 {
				q.Fields = map[string]float64{"title": 2.5, "text": 1}
			}
			if qi%5 == 2 {
				st, err := x.QueryStats(ctx, schema, q)
				if err != nil {
					t.Fatal(err)
				}
				// A sharded collection's statistics: this index's, twice.
				sum := Stats{}
				sum.Add(st)
				sum.Add(st)
				q.Stats = &sum
			}
			want := q
			want.Exhaustive = true
			exp, err := x.Search(ctx, schema, want)
			if err != nil {
				t.Fatal(err)
			}
			got, err := x.Search(ctx, schema, q)
			if err != nil {
				t.Fatal(err)
			}
			label := fmt.Sprintf("unmerged %v, cache %d, query %d %q, k %d, filter %s, fields %v, stats %v", unmerged, cf.cache, qi, q.Text, q.K, filters[fi], q.Fields, q.Stats != nil)
			if len(got) != len(exp) {
				t.Fatalf("%s: %d hits pruned, %d exhaustive", label, len(got), len(exp))
			}
			for i := range got {
				if got[i] != exp[i] {
					t.Fatalf("%s: hit %d is %+v pruned, %+v exhaustive", label, i, got[i], exp[i])
				}
			}
			checked++
			if len(exp) == q.K {
				pruned++
			}
		}
		if pruned < 100 {
			t.Errorf("unmerged %v: only %d of %d queries had k hits to choose among", unmerged, pruned, checked)
		}
		// The cursors read what each configuration means them to.
		dec, viaZap := 0, 0
		for _, tb := range x.blocks.m {
			if tb.post != nil {
				dec++
			} else {
				viaZap++
			}
		}
		if _, got := x.blocks.size(); got > decodedBytes {
			t.Errorf("unmerged %v: the cache holds %d bytes of postings, past its %d", unmerged, got, decodedBytes)
		}
		if dec == 0 || (cf.after == 1 && (cf.cache < 1<<20) != (viaZap > 0)) {
			t.Errorf("unmerged %v, cache %d: %d lists decoded, %d read through zap", unmerged, cf.cache, dec, viaZap)
		}
	}
}

// TestPrunedConcurrentEviction searches from four goroutines with a
// cache that holds a few lists, so that lists are decoded, evicted and
// freed while other searches read them, with collections between: every
// pruned search still returns what exhaustive scoring does, and once the
// searches are done only the cache's own references remain.
func TestPrunedConcurrentEviction(t *testing.T) {
	ctx := context.Background()
	schema := shardTestSchema()
	defer func(b uint64, c, a int) { blocksFrom, decodedBytes, decodeAfter = b, c, a }(blocksFrom, decodedBytes, decodeAfter)
	blocksFrom, decodedBytes, decodeAfter = 0, (4*300+4)*decodeShare, 1
	x := openApplied(t, schema, pruneLog(6000, 9), true, func(storage.Change) bool { return true })
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 77))
			for qi := range 60 {
				w := make([]string, 1+rng.IntN(5))
				for i := range w {
					w[i] = fmt.Sprintf("w%03d", int(float64(400)*rng.Float64()*rng.Float64()))
				}
				q := Query{Text: strings.Join(w, " "), K: 10}
				want := q
				want.Exhaustive = true
				exp, err := x.Search(ctx, schema, want)
				if err != nil {
					errs <- err
					return
				}
				got, err := x.Search(ctx, schema, q)
				if err != nil {
					errs <- err
					return
				}
				if !slices.Equal(got, exp) {
					errs <- fmt.Errorf("goroutine %d, query %d %q: %v pruned, %v exhaustive", g, qi, q.Text, got, exp)
					return
				}
				if qi%10 == 0 {
					runtime.GC()
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	x.blocks.mu.Lock()
	defer x.blocks.mu.Unlock()
	held := 0
	for _, tb := range x.blocks.m {
		if tb.post != nil {
			held++
			if r := tb.post.refs.Load(); r != 1 {
				t.Errorf("a decoded list has %d references after the searches, want the cache's 1", r)
			}
		}
	}
	if held == 0 {
		t.Error("no list decoded")
	}
}

// TestDecoded checks the decoded postings against what they were given:
// frequencies and lengths too wide for their 16 bits come back exact,
// documents come back whole across windows of 65,536 (some empty), and
// seek finds the first posting at or after any document from any start.
func TestDecoded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 3000
	d := newDecoded(n + 1)
	defer d.release()
	type posting struct{ doc, tf, dl uint64 }
	var want []posting
	doc := uint64(0)
	for range n {
		doc += 1 + uint64(rng.IntN(40))
		if rng.IntN(100) == 0 {
			doc += uint64(rng.IntN(300_000)) // past one window or more
		}
		p := posting{doc: doc, tf: 1 + uint64(rng.IntN(15)), dl: uint64(rng.IntN(4096))}
		switch rng.IntN(40) {
		case 0:
			p.tf = 16 + uint64(rng.IntN(1000))
		case 1:
			p.dl = 4096 + uint64(rng.IntN(1<<20))
		case 2:
			p.tf, p.dl = 15, 4095
		case 3:
			p.tf = 0
		}
		if !d.add(uint32(p.doc), p.tf, p.dl) {
			t.Fatalf("posting %d refused", len(want))
		}
		want = append(want, p)
	}
	win := 0
	for i, p := range want {
		tf, dl := d.at(i)
		win = d.window(i, win)
		if got := d.doc(i, win); got != p.doc || tf != float64(p.tf) || dl != float64(p.dl) {
			t.Fatalf("posting %d: (%d, %v, %v), want (%d, %d, %d)", i, got, tf, dl, p.doc, p.tf, p.dl)
		}
	}
	if !d.add(uint32(doc+1), 1, 1) || d.add(uint32(doc+2), 1, 1) {
		t.Fatal("the room for n+1 postings did not take exactly one more")
	}
	want = append(want, posting{doc: doc + 1, tf: 1, dl: 1})
	for range 20000 {
		from := rng.IntN(len(want) + 1)
		target := uint64(rng.IntN(int(doc) + 50))
		if rng.IntN(100) == 0 {
			target = math.MaxUint32 + uint64(rng.IntN(3))
		}
		exp := from
		for exp < len(want) && want[exp].doc < target {
			exp++
		}
		if got := d.seek(from, target); got != exp {
			t.Fatalf("seek(%d, %d) = %d, want %d", from, target, got, exp)
		}
	}
}

// TestBlockCacheAdmission checks the decoded postings' admission and
// eviction: decoded at a term's decodeAfter-th search, within
// decodedBytes, the least recently used dropped first (keeping its
// blocks), and never a list longer than its share.
func TestBlockCacheAdmission(t *testing.T) {
	defer func(c, a int) { decodedBytes, decodeAfter = c, a }(decodedBytes, decodeAfter)
	decodedBytes, decodeAfter = 4*decodeShare*100+4*8, 2 // 800 postings in all, 100 a list, and one window index each
	var c blockCache
	key := func(i int) blockKey { return blockKey{field: "text", term: fmt.Sprint("t", i)} }
	list := func(n int) *decoded {
		d := newDecoded(n) // as blocks sizes them
		for i := range n {
			d.add(uint32(i), 1, 10)
		}
		return d
	}
	bl := []block{{last: 99, maxTF: 1, minDL: 10}}
	if tb, _, decode := c.lookup(key(0), 100); tb != nil || decode {
		t.Fatalf("a term never searched: entry %v, decode %v", tb, decode)
	}
	c.put(key(0), bl, 100, nil)
	if _, post, decode := c.lookup(key(0), 100); post != nil || !decode {
		t.Fatalf("second search: postings %v, decode %v; want none held, decode", post, decode)
	}
	c.put(key(100), bl, 102, nil)
	if _, _, decode := c.lookup(key(100), 102); decode {
		t.Fatal("a list longer than its share is decoded")
	}
	// Eight lists of 100 fill the budget; a ninth drops the least
	// recently used, which is 1 once 0 has been asked for again.
	for i := range 9 {
		if i > 0 {
			c.put(key(i), bl, 100, nil)
		}
		c.put(key(i), bl, 100, list(100))
		if i == 7 {
			c.lookup(key(0), 100)
		}
	}
	if b, d := c.size(); d > decodedBytes || b != 16*10 {
		t.Fatalf("size: %d bytes of blocks, %d of postings (budget %d)", b, d, decodedBytes)
	}
	for i, want := range []bool{true, false, true, true, true, true, true, true, true} {
		tb := c.m[key(i)]
		if tb == nil || (tb.post != nil) != want {
			t.Errorf("term %d: entry %+v, want postings held %v", i, tb, want)
		}
	}
	// Full: a term is decoded only once searched more often than the
	// list it would push out.
	for _, tb := range c.m {
		if tb.post != nil {
			tb.uses = 5
		}
	}
	c.put(key(20), bl, 100, nil)
	for i := 2; i <= 5; i++ {
		if _, _, decode := c.lookup(key(20), 100); decode {
			t.Fatalf("search %d of a new term is decoded over terms searched 5 times", i)
		}
	}
	if _, _, decode := c.lookup(key(20), 100); !decode {
		t.Fatal("the 6th search of a term is not decoded over terms searched 5 times")
	}
}
