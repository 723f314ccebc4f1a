package ingest

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/synth"
)

// recall computes the exact top 10 of the first RecallQueries queries and
// sets the dense configurations' Recall in every phase that searched.
func (r *run) recall() error {
	n := r.c.RecallQueries
	if n == 0 {
		return nil
	}
	fmt.Fprintf(r.log, "exact top 10 of %d queries over %d documents (brute force over the generator's vectors)\n", n, r.rep.Docs)
	queries := make([][]float32, n)
	for qi := range queries {
		_, queries[qi] = r.gen.Query(queryNumber(qi))
	}
	start := time.Now()
	all, filtered := exactTop(r.gen, r.rep.Corpus.Model, r.rep.Docs, 10, queries, synth.Category(FilterCategory))
	r.rep.Exact = time.Since(start)
	for p, found := range r.found {
		for ci, cf := range configs {
			if cf.retriever != "dense" {
				continue
			}
			want := all
			if cf.filtered {
				want = filtered
			}
			if len(found[ci]) != n {
				return fmt.Errorf("%s: %d queries' hits kept for recall, want %d", cf.name, len(found[ci]), n)
			}
			var sum float64
			for qi := range n {
				sum += bench.Recall(found[ci][qi], want[qi])
			}
			r.rep.Phases[p].Searches[ci].Recall = sum / float64(n)
		}
	}
	return nil
}

// scored is a document number and its inner product with a query.
type scored struct {
	doc   int
	score float32
}

// before orders the top k: larger scores first, ties to the smaller
// document number.
func (a scored) before(b scored) bool {
	return a.score > b.score || a.score == b.score && a.doc < b.doc
}

// topK keeps the k best of the scores offered, best first.
type topK struct {
	k    int
	list []scored
}

func (t *topK) offer(s scored) {
	if len(t.list) == t.k && !s.before(t.list[t.k-1]) {
		return
	}
	i := len(t.list)
	if i < t.k {
		t.list = append(t.list, s)
	} else {
		i = t.k - 1
	}
	for ; i > 0 && s.before(t.list[i-1]); i-- {
		t.list[i] = t.list[i-1]
	}
	t.list[i] = s
}

// exactTop returns, for each query, the ids of the k documents among the
// generator's 0 to n-1 whose vectors (under model) have the largest inner
// product with it: over all of them, and over those whose "cat" is cat.
// The corpus's vectors and queries are unit vectors, so the inner product
// is the cosine the collection ranks by. Each document is generated again
// (synth is deterministic); the documents are split among up to 4
// goroutines, whose top k are merged.
func exactTop(gen *synth.Generator, model string, n, k int, queries [][]float32, cat string) (all, filtered [][]string) {
	workers := max(1, min(4, runtime.GOMAXPROCS(0)))
	tops := make([][2][]topK, workers) // [worker][all, filtered][query]
	var wg sync.WaitGroup
	for w := range workers {
		for f := range 2 {
			tops[w][f] = make([]topK, len(queries))
			for q := range queries {
				tops[w][f][q].k = k
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				d := gen.Doc(i)
				v := d.Vectors[model].Dense
				match := d.Fields["cat"] == cat
				for q, qv := range queries {
					s := scored{doc: i, score: dot(v, qv)}
					tops[w][0][q].offer(s)
					if match {
						tops[w][1][q].offer(s)
					}
				}
			}
		}()
	}
	wg.Wait()
	ids := func(f int) [][]string {
		out := make([][]string, len(queries))
		for q := range queries {
			merged := topK{k: k}
			for w := range workers {
				for _, s := range tops[w][f][q].list {
					merged.offer(s)
				}
			}
			for _, s := range merged.list {
				out[q] = append(out[q], synth.ID(s.doc))
			}
		}
		return out
	}
	return ids(0), ids(1)
}

func dot(a, b []float32) float32 {
	var s float32
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}
