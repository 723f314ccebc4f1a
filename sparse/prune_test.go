package sparse

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
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
// one (only lists of 4,096 postings or more): the same hits, in the same
// order, with bit-identical scores.
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
	defer func(b uint64) { blocksFrom = b }(blocksFrom)
	for _, unmerged := range []bool{true, false} {
		x := openApplied(t, schema, log, unmerged, func(storage.Change) bool { return true })
		// Every list with blocks, and only long ones (few, here).
		blocksFrom = map[bool]uint64{true: 0, false: 4096}[unmerged]
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
			label := fmt.Sprintf("unmerged %v, query %d %q, k %d, filter %s, fields %v, stats %v", unmerged, qi, q.Text, q.K, filters[fi], q.Fields, q.Stats != nil)
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
	}
}
