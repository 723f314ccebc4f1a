package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

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

// EvalResult is the outcome of Evaluate.
type EvalResult struct {
	Report evaluate.Report
	// Run holds every query's ranking, for TREC run files.
	Run evaluate.Run
	// P50, P95 and Mean are the search latencies over the queries.
	P50, P95, Mean time.Duration
	Queries        int
}

// Evaluate runs req once per judged query (req.Text replaced by the query's
// text; IDsOnly forced; K 0 means 100) and scores the rankings against the
// qrels. A query the engine rejects as a bad request (empty text) gets no
// results and so scores 0, as trec_eval counts it.
func (e *Engine) Evaluate(ctx context.Context, queries []evaluate.Query, qrels evaluate.Qrels, req Request) (EvalResult, error) {
	if req.K == 0 {
		req.K = 100
	}
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
	return out, nil
}
