package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/evaluate"
)

// Mode maps a mode name to retrievers: "bm25", "dense" and "late" (the
// collection's first model of that kind), "late-exact" (late interaction
// scored exhaustively, the reference), "hybrid" (every retriever of the
// collection, Engine.Retrievers), or retriever names joined by "+"
// ("bm25+dense:bge-small-en-v1.5").
func (e *Engine) Mode(name string) ([]string, error) {
	switch name {
	case "hybrid":
		return e.Retrievers(), nil
	case "":
		return nil, fmt.Errorf("%w: empty mode", ErrBadRequest)
	}
	var out []string
	for _, part := range strings.Split(name, "+") {
		r, err := e.resolve(part)
		if err != nil {
			return nil, fmt.Errorf("mode %q: %w", name, err)
		}
		out = append(out, r.name)
	}
	return out, nil
}

// VectorsMode is the mode (for Mode) of the retrievers that a query's
// supplied vectors for model serve: "dense:<model>", "late:<model>" or
// both joined by "+"; empty when v holds neither.
func VectorsMode(model string, v tandem.Vectors) string {
	var parts []string
	if v.Dense != nil {
		parts = append(parts, "dense:"+model)
	}
	if v.Tokens != nil {
		parts = append(parts, "late:"+model)
	}
	return strings.Join(parts, "+")
}

// EvalResult is the outcome of Evaluate.
type EvalResult struct {
	Report evaluate.Report
	// Run holds every query's ranking, for TREC run files.
	Run evaluate.Run
	// P50, P95 and Mean are the search latencies over the queries.
	P50, P95, Mean time.Duration
	Queries        int
	// Highlight is set when Evaluate was given a highlight request: the
	// latency of a page of hits with and without highlights.
	Highlight *HighlightLatency
}

// HighlightLatency compares searches of Hits hits (with their fields, as
// a result page loads them) without and with highlights, run one after
// the other for each judged query, the order alternating from one query
// to the next so that neither side always runs on a warmer cache.
type HighlightLatency struct {
	Hits int
	// P50 and P95 without highlights; P50Highlight and P95Highlight
	// with.
	P50, P95, P50Highlight, P95Highlight time.Duration
}

// EvalHighlightHits is the page of hits Evaluate times with and without
// highlights.
const EvalHighlightHits = 10

// Evaluate runs req once per judged query (req.Text replaced by the query's
// text; IDsOnly forced; K 0 means 100) and scores the rankings against the
// qrels. A query the engine rejects as a bad request (empty text) gets no
// results and so scores 0, as trec_eval counts it.
//
// With req.Highlight set, the rankings are made without highlights, and
// each judged query is also searched for EvalHighlightHits hits with their
// fields, once without and once with the highlights asked for; their
// latencies are EvalResult.Highlight, apart from P50, P95 and Mean.
func (e *Engine) Evaluate(ctx context.Context, queries []evaluate.Query, qrels evaluate.Qrels, req Request) (EvalResult, error) {
	if req.K == 0 {
		req.K = 100
	}
	hl := req.Highlight
	req.Highlight = nil
	var page, pageHL []time.Duration
	req.IDsOnly = true
	run := evaluate.Run{}
	var lat []time.Duration
	var total time.Duration
	for _, q := range queries {
		if _, judged := qrels[q.ID]; !judged {
			continue
		}
		r := req
		r.Text = q.Text
		start := time.Now()
		res, err := e.Search(ctx, r)
		took := time.Since(start)
		lat = append(lat, took)
		total += took
		if errors.Is(err, ErrBadRequest) && strings.TrimSpace(q.Text) == "" {
			continue
		}
		if err != nil {
			return EvalResult{}, fmt.Errorf("query %s: %w", q.ID, err)
		}
		if hl != nil {
			plain := r
			plain.K, plain.Offset, plain.IDsOnly = EvalHighlightHits, 0, false
			lit := plain
			lit.Highlight = hl
			order := [2]Request{plain, lit}
			if len(lat)%2 == 0 {
				order = [2]Request{lit, plain} // every other query, highlights first
			}
			for _, pr := range order {
				start := time.Now()
				if _, err := e.Search(ctx, pr); err != nil {
					return EvalResult{}, fmt.Errorf("query %s with highlights: %w", q.ID, err)
				}
				if pr.Highlight != nil {
					pageHL = append(pageHL, time.Since(start))
				} else {
					page = append(page, time.Since(start))
				}
			}
		}
		rs := make([]evaluate.Result, len(res.Hits))
		for i, h := range res.Hits {
			rs[i] = evaluate.Result{DocID: h.ID, Score: h.Score}
		}
		run[q.ID] = rs
	}
	rep, err := evaluate.Evaluate(qrels, run)
	if err != nil {
		return EvalResult{}, err
	}
	out := EvalResult{Report: rep, Run: run, Queries: len(lat)}
	if len(lat) > 0 {
		slices.Sort(lat)
		out.P50 = lat[len(lat)/2]
		out.P95 = lat[min(len(lat)-1, len(lat)*95/100)]
		out.Mean = total / time.Duration(len(lat))
	}
	if hl != nil {
		out.Highlight = &HighlightLatency{Hits: EvalHighlightHits}
		out.Highlight.P50, out.Highlight.P95 = percentiles(page)
		out.Highlight.P50Highlight, out.Highlight.P95Highlight = percentiles(pageHL)
	}
	return out, nil
}

// percentiles returns the median and the 95th percentile of lat (zero
// when empty), sorting it.
func percentiles(lat []time.Duration) (p50, p95 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*95/100)]
}
