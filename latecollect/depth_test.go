package latecollect

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/evaluate"
)

// TestSciFactResidualDepth traces, for the residual-code index at the
// depth fusion and evaluation use (K=100), where the staged search loses
// the exhaustive top 100: the share of it each stage passes on (stage 2's
// probe, the first N of the list stage's order), the recall@100 against
// exhaustive of the default search and of exact rescoring of the first N
// by list-stage score, how far list-stage scores stand from exact ones,
// the list stage's time and tokens, and the qrels' nDCG@10 and R@100 of
// each. Opt-in (TANDEM_LATE_DEPTH_TRACE=1); with
// TANDEM_LATE_COLLECTION it reads a collection `tandem index --late-index
// Residual` made.
//
//	TANDEM_LATE_DEPTH_TRACE=1 TANDEM_LATE_MODEL=bge-small-en-v1.5 TANDEM_LATE_COLLECTION=DIR go test -run ResidualDepth -v -timeout 3h ./latecollect/
func TestSciFactResidualDepth(t *testing.T) {
	if os.Getenv("TANDEM_LATE_DEPTH_TRACE") == "" {
		t.Skip("skipping the depth trace; set TANDEM_LATE_DEPTH_TRACE=1")
	}
	f := loadSciFact(t)
	fam, ok := f.x.mu.fam.(*residualFamily)
	if !ok {
		t.Skip("the fixture's index is not the residual-code index")
	}
	ctx := context.Background()
	const k = 100
	ns := []int{100, 128, 160, 192, 256, 384, 512}
	if v := sweepList("TANDEM_DEPTH_NS", ",", nil); v != nil {
		ns = ns[:0]
		for _, s := range v {
			n, err := strconv.Atoi(s)
			if err != nil {
				t.Fatalf("TANDEM_DEPTH_NS: %q: %v", s, err)
			}
			ns = append(ns, n)
		}
	}
	qs := f.recallQueries()
	s, _ := f.x.Stats()
	t.Logf("index: %s, %d docs, %d tokens, exact cap %d; %d queries, K=%d", s.Description, s.Docs, s.Tokens, fam.exactCapLocked(), len(qs), k)

	// The exhaustive top K of each query, computed once.
	exh := map[int][]Hit{}
	var tExh time.Duration
	for _, i := range qs {
		start := time.Now()
		ex, err := f.x.Search(ctx, f.qtok[i], &SearchOptions{K: k, Mode: Exhaustive})
		if err != nil {
			t.Fatal(err)
		}
		tExh += time.Since(start)
		exh[i] = ex
	}
	t.Logf("exhaustive: %.1f ms per query", ms(tExh)/float64(len(qs)))
	// TANDEM_DEPTH_GRID lists settings
	// "nprobe/candidates/exact/rank/probe/budget" separated by ',': rank
	// is the list stage's estimate rank, probe stage 2's nprobe when it
	// differs from the list stage's, budget the entries a query token
	// probes (-1: none); 0 keeps a default.
	for _, g := range sweepList("TANDEM_DEPTH_GRID", ",", []string{"0/0/0/0/0/0"}) {
		var base SearchOptions
		if _, err := fmt.Sscanf(g, "%d/%d/%d/%d/%d/%d", &base.NProbe, &base.candCap, &base.ExactCap, &base.listEst, &base.candProbe, &base.probeBudget); err != nil {
			t.Fatalf("TANDEM_DEPTH_GRID: %q: %v", g, err)
		}
		t.Logf("--- nprobe/candidates/exact/rank/probe/budget %s", g)
		depthTrace(t, f, qs, exh, base, k, ns)
	}
}

// depthTrace runs the queries qs with the staged search under base at
// depth k and logs where it loses the exhaustive top k (exh).
func depthTrace(t *testing.T, f *sciFact, qs []int, exh map[int][]Hit, base SearchOptions, k int, ns []int) {
	ctx := context.Background()
	var probed float64
	within := make([]float64, len(ns))
	exactAt := make([]float64, len(ns))
	var deflt float64
	var bias, spread, overExact float64
	var nbias int
	runs := map[string]evaluate.Run{"exhaustive": {}, "default": {}}
	for _, n := range ns {
		runs[fmt.Sprintf("exact@%d", n)] = evaluate.Run{}
	}
	var tDef time.Duration
	var stages [5]time.Duration
	var lt stageTrace
	add := func(name string, i int, hits []Hit) {
		id := f.queries[i].ID
		for _, h := range hits {
			runs[name][id] = append(runs[name][id], evaluate.Result{DocID: f.ids[h.DocNum], Score: float64(h.Score)})
		}
	}
	share := func(want map[uint64]float32, got []uint64) float64 {
		n := 0
		for _, d := range got {
			if _, ok := want[d]; ok {
				n++
			}
		}
		return float64(n) / float64(max(1, len(want)))
	}
	for _, i := range qs {
		q := f.qtok[i]
		ex := exh[i]
		want := map[uint64]float32{}
		for _, h := range ex {
			want[h.DocNum] = h.Score
		}
		add("exhaustive", i, ex)
		tr := &stageTrace{}
		so := base
		so.K, so.trace = k, tr
		start := time.Now()
		def, err := f.x.Search(ctx, q, &so)
		if err != nil {
			t.Fatal(err)
		}
		tDef += time.Since(start)
		for j := range stages {
			stages[j] += tr.took[j]
		}
		lt.listSetup += tr.listSetup
		lt.listScan += tr.listScan
		lt.listTokens += tr.listTokens
		add("default", i, def)
		probed += share(want, tr.probed)
		defNums := make([]uint64, len(def))
		for j, h := range def {
			defNums[j] = h.DocNum
		}
		deflt += share(want, defNums)
		res := make([]uint64, len(tr.residual))
		for j, c := range tr.residual {
			res[j] = c.num
		}
		for j, n := range ns {
			top := res[:min(n, len(res))]
			within[j] += share(want, top)
			hits, err := f.x.Rescore(ctx, q, slices.Sorted(slices.Values(top)), &SearchOptions{K: k})
			if err != nil {
				t.Fatal(err)
			}
			nums := make([]uint64, len(hits))
			for h := range hits {
				nums[h] = hits[h].DocNum
			}
			exactAt[j] += share(want, nums)
			add(fmt.Sprintf("exact@%d", n), i, hits)
		}
		// How residual-code scores stand against exact ones, on the
		// documents of the exhaustive top 100 the residual stage scored.
		for _, c := range tr.residual {
			if e, ok := want[c.num]; ok {
				d := float64(c.score - e)
				bias += d
				spread += d * d
				if d > 0 {
					overExact++
				}
				nbias++
			}
		}
	}
	nq := float64(len(qs))
	t.Logf("share of the exhaustive top %d passed on by stage 2 (probe): %.4f", k, probed/nq)
	for j, n := range ns {
		t.Logf("  first %4d by list-stage score: %.4f of the exhaustive top %d; exact rescoring of them: recall@%d vs exhaustive %.4f", n, within[j]/nq, k, k, exactAt[j]/nq)
	}
	t.Logf("default search: recall@%d vs exhaustive %.4f", k, deflt/nq)
	if nbias > 0 {
		mean := bias / float64(nbias)
		t.Logf("list-stage score minus exact, over %d documents of the exhaustive top %d: mean %+.4f, rms %.4f, above exact %.1f%%", nbias, k, mean, math.Sqrt(spread/float64(nbias)), 100*overExact/float64(nbias))
	}
	qrels := evaluate.Qrels{}
	for _, i := range qs {
		id := f.queries[i].ID
		qrels[id] = f.qrels[id]
	}
	var names []string
	for name := range runs {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		rep, err := evaluate.Evaluate(qrels, runs[name])
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-12s nDCG@10 %.4f  R@100 %.4f", name, rep.Mean.NDCG10, rep.Mean.Recall100)
	}
	if lt.listTokens > 0 {
		t.Logf("list stage per query: setup %.2f ms, scan %.2f ms, %d tokens", ms(lt.listSetup)/nq, ms(lt.listScan)/nq, lt.listTokens/len(qs))
	}
	t.Logf("time per query: %.1f ms (traced); to the end of centroid scores %.1f, probe %.1f, list stage %.1f, exact %.1f",
		ms(tDef)/nq, ms(stages[0])/nq, ms(stages[1])/nq, ms(stages[3])/nq, ms(stages[4])/nq)
}
