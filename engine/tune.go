package engine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/fusion"
)

// TuneRequest describes a search over fusion configurations.
//
// Tune runs each retriever once per judged query, at the largest depth, and
// then fuses the stored rankings offline for every configuration: the
// product of Methods, one weight from Weights per retriever (for the methods
// that take weights) and one depth from Depths shared by all retrievers.
// Because fusion cuts each list to its depth before normalising, the offline
// fusion of a configuration ranks exactly as Search does with the same
// Request (see TuneResult.Request).
type TuneRequest struct {
	// Retrievers to fuse, at least two (as in Request.Retrievers).
	Retrievers []string
	// Methods are fusion method names; empty means every method.
	Methods []string
	// Weights are the candidate weights of each retriever; empty means
	// DefaultTuneWeights. Weight vectors that differ only by a common
	// factor rank alike and are tried once.
	Weights []float64
	// Depths are the candidate depths; empty means {DefaultDepth}.
	Depths []int
	// K is the number of fused hits scored; 0 means 100.
	K int
	// Metric is the mean metric to maximise: "ndcg@10" (the default),
	// "mrr@10", "recall@100" or "map".
	Metric string
	// Base supplies the rest of every search (Filter, Fields,
	// LateScoring); its Text, K, Retrievers, Fusion, Depth and Weight are
	// ignored.
	Base Request
	// Progress, if set, is called after each query's retrievers have run,
	// with the number of judged queries done and their total.
	Progress func(done, total int)
}

// DefaultTuneWeights is the weight grid Tune tries per retriever.
var DefaultTuneWeights = []float64{0.5, 1, 2, 3}

// TuneResult is one configuration and its scores.
type TuneResult struct {
	Fusion string
	Weight map[string]float64 // nil for methods without weights
	Depth  int
	Report evaluate.Report
	// Value is the mean of the tuned metric.
	Value float64
}

// Request returns the search request of the configuration, for use with
// Search or Evaluate.
func (t TuneResult) Request(base Request, retrievers []string, k int) Request {
	req := base
	req.Retrievers = slices.Clone(retrievers)
	req.Fusion = t.Fusion
	req.K = k
	req.Depth = map[string]int{}
	for _, r := range retrievers {
		req.Depth[r] = t.Depth
	}
	req.Weight = maps.Clone(t.Weight) // nil stays nil
	return req
}

// String describes the configuration as tandem's flags spell it:
// "minmax depth=100 weights=bm25=1,dense:m=2".
func (t TuneResult) String() string {
	s := fmt.Sprintf("%s depth=%d", t.Fusion, t.Depth)
	if t.Weight != nil {
		names := slices.Sorted(maps.Keys(t.Weight))
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = n + "=" + strconv.FormatFloat(t.Weight[n], 'g', -1, 64)
		}
		s += " weights=" + strings.Join(parts, ",")
	}
	return s
}

// metricValue picks the tuned metric out of a mean.
func metricValue(metric string, m evaluate.Metrics) (float64, error) {
	switch strings.ToLower(metric) {
	case "", "ndcg@10":
		return m.NDCG10, nil
	case "mrr@10":
		return m.MRR10, nil
	case "recall@100":
		return m.Recall100, nil
	case "map":
		return m.MAP, nil
	}
	return 0, fmt.Errorf("%w: metric %q (ndcg@10, mrr@10, recall@100 or map)", ErrBadRequest, metric)
}

// tuneQuery is one query's stored rankings: lists[i] is retriever i's,
// with docs numbered into ids.
type tuneQuery struct {
	id    string
	ids   []string
	lists [][]fusion.Item
}

// Tune evaluates fusion configurations on the judged queries and returns
// them best first (ties: the order of Methods, then smaller weights and
// depths). Tuning on one set of queries and reporting on another keeps the
// figures honest: see tandem tune --holdout.
func (e *Engine) Tune(ctx context.Context, queries []evaluate.Query, qrels evaluate.Qrels, tr TuneRequest) ([]TuneResult, error) {
	if len(tr.Retrievers) < 2 {
		return nil, fmt.Errorf("%w: tuning fusion needs at least two retrievers, got %d", ErrBadRequest, len(tr.Retrievers))
	}
	if _, err := metricValue(tr.Metric, evaluate.Metrics{}); err != nil {
		return nil, err
	}
	k := tr.K
	if k == 0 {
		k = 100
	}
	parsed := fusion.Methods()
	if len(tr.Methods) > 0 {
		parsed = make([]fusion.Method, len(tr.Methods))
		for i, name := range tr.Methods {
			m, err := fusion.ParseMethod(strings.TrimSpace(name))
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadRequest, err)
			}
			parsed[i] = m
		}
	}
	weights := tr.Weights
	if len(weights) == 0 {
		weights = DefaultTuneWeights
	}
	for _, w := range weights {
		if !(w > 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("%w: tuning weight %v (must be positive)", ErrBadRequest, w)
		}
	}
	depths := tr.Depths
	if len(depths) == 0 {
		depths = []int{DefaultDepth}
	}
	maxDepth := 0
	for _, d := range depths {
		if d < k || d > maxK {
			return nil, fmt.Errorf("%w: tuning depth %d (from k=%d to %d)", ErrBadRequest, d, k, maxK)
		}
		maxDepth = max(maxDepth, d)
	}

	names := make([]string, len(tr.Retrievers))
	for i, n := range tr.Retrievers {
		r, err := e.resolve(n)
		if err != nil {
			return nil, err
		}
		names[i] = r.name
	}
	stored, err := e.tuneRankings(ctx, queries, qrels, tr.Base, names, maxDepth, tr.Progress)
	if err != nil {
		return nil, err
	}

	type config struct {
		method fusion.Method
		weight []float64
		depth  int
	}
	var configs []config
	vectors := weightVectors(weights, len(names))
	for _, m := range parsed {
		for _, d := range depths {
			if !m.Weighted() {
				configs = append(configs, config{m, nil, d})
				continue
			}
			for _, w := range vectors {
				configs = append(configs, config{m, w, d})
			}
		}
	}
	results := make([]TuneResult, len(configs))
	errs := make([]error, len(configs))
	var wg sync.WaitGroup
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c := configs[i]
				results[i], errs[i] = fuseStored(stored, names, c.method, c.weight, c.depth, k, qrels, tr.Metric)
			}
		}()
	}
	for i := range configs {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	order := make([]int, len(results))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(results[b].Value, results[a].Value) })
	out := make([]TuneResult, len(order))
	for i, j := range order {
		out[i] = results[j]
	}
	return out, nil
}

// weightVectors lists every assignment of grid weights to n retrievers,
// dropping vectors that are a multiple of an earlier one.
func weightVectors(grid []float64, n int) [][]float64 {
	var out [][]float64
	seen := map[string]bool{}
	cur := make([]float64, n)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			top := slices.Max(cur)
			key := ""
			for _, w := range cur {
				key += strconv.FormatFloat(w/top, 'g', 12, 64) + ","
			}
			if !seen[key] {
				seen[key] = true
				out = append(out, slices.Clone(cur))
			}
			return
		}
		for _, w := range grid {
			cur[i] = w
			rec(i + 1)
		}
	}
	rec(0)
	return out
}

// tuneRankings runs each retriever alone at depth over the judged queries.
func (e *Engine) tuneRankings(ctx context.Context, queries []evaluate.Query, qrels evaluate.Qrels, base Request, names []string, depth int, progress func(done, total int)) ([]tuneQuery, error) {
	var judged []evaluate.Query
	for _, q := range queries {
		if _, ok := qrels[q.ID]; ok {
			judged = append(judged, q)
		}
	}
	var out []tuneQuery
	for n, q := range judged {
		if progress != nil && n > 0 {
			progress(n, len(judged))
		}
		tq := tuneQuery{id: q.ID, lists: make([][]fusion.Item, len(names))}
		num := map[string]uint64{}
		for i, name := range names {
			req := base
			req.Text, req.K, req.Offset, req.IDsOnly = q.Text, depth, 0, true
			req.Retrievers, req.Depth, req.Weight, req.Fusion = []string{name}, nil, nil, ""
			res, err := e.Search(ctx, req)
			if err != nil {
				if strings.TrimSpace(q.Text) == "" {
					break // scored 0 in every configuration, as Evaluate does
				}
				return nil, fmt.Errorf("query %s: %s: %w", q.ID, name, err)
			}
			items := make([]fusion.Item, len(res.Hits))
			for j, h := range res.Hits {
				d, ok := num[h.ID]
				if !ok {
					d = uint64(len(tq.ids))
					num[h.ID] = d
					tq.ids = append(tq.ids, h.ID)
				}
				items[j] = fusion.Item{Doc: d, Score: h.Score}
			}
			tq.lists[i] = items
		}
		out = append(out, tq)
	}
	if progress != nil && len(judged) > 0 {
		progress(len(judged), len(judged))
	}
	return out, nil
}

// fuseStored scores one configuration over the stored rankings.
func fuseStored(stored []tuneQuery, names []string, m fusion.Method, w []float64, depth, k int, qrels evaluate.Qrels, metric string) (TuneResult, error) {
	run := make(evaluate.Run, len(stored))
	lists := make([]fusion.List, len(names))
	for _, q := range stored {
		for i, name := range names {
			lists[i] = fusion.List{Name: name, Depth: depth, Items: q.lists[i]}
			if w != nil {
				lists[i].Weight = w[i]
			}
		}
		hits, err := fusion.Fuse(lists, fusion.Options{Method: m, Limit: k})
		if err != nil {
			return TuneResult{}, fmt.Errorf("query %s: %w", q.id, err)
		}
		rs := make([]evaluate.Result, len(hits))
		for j, h := range hits {
			rs[j] = evaluate.Result{DocID: q.ids[h.Doc], Score: h.Score}
		}
		run[q.id] = rs
	}
	rep, err := evaluate.Evaluate(qrels, run)
	if err != nil {
		return TuneResult{}, err
	}
	res := TuneResult{Fusion: m.String(), Depth: depth, Report: rep}
	if w != nil {
		res.Weight = map[string]float64{}
		for i, n := range names {
			res.Weight[n] = w[i]
		}
	}
	res.Value, _ = metricValue(metric, rep.Mean)
	return res, nil
}
