package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/evaluate"
)

// runTune searches fusion methods, weights and depths on judged queries and,
// with --holdout, scores the best configuration on other queries.
func runTune(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("tune", stderr)
	dir := fs.String("dir", "", "collection directory")
	queriesPath := fs.String("queries", "", "BEIR queries.jsonl")
	qrelsPath := fs.String("qrels", "", "qrels to tune on (BEIR TSV), e.g. the train split")
	holdoutPath := fs.String("holdout", "", "qrels to score the best configuration on (e.g. the test split); never used for tuning")
	mode := fs.String("mode", "hybrid", "retrievers to fuse: hybrid, or names joined by '+'")
	fusions := fs.String("fusion", "all", "fusion methods to try, comma-separated, or 'all'")
	weightsFlag := fs.String("weights", "", "candidate weights per retriever, comma-separated (default 0.5,1,2,3)")
	depthsFlag := fs.String("depths", "", fmt.Sprintf("candidate depths per retriever, comma-separated (default %d)", engine.DefaultDepth))
	metric := fs.String("metric", "ndcg@10", "metric to maximise: ndcg@10, mrr@10, recall@100 or map")
	top := fs.Int("top", 10, "configurations to print")
	fieldsFlag := fs.String("fields", "", "search these text fields with boosts, e.g. title=2,text=1")
	if err := parseOrUsage(fs, args, stderr, "tandem tune --dir DIR --queries queries.jsonl --qrels train.tsv [--holdout test.tsv] [--mode hybrid] [--fusion all] [--weights 0.5,1,2,3] [--depths 100,200]", func() bool { return *dir == "" || *queriesPath == "" || *qrelsPath == "" }); err != nil {
		return err
	}
	if *top < 1 {
		return fmt.Errorf("--top %d: want at least 1", *top)
	}
	weights, err := parseList[float64]("--weights", *weightsFlag)
	if err != nil {
		return err
	}
	depths, err := parseList[int]("--depths", *depthsFlag)
	if err != nil {
		return err
	}
	fields, _, err := parseFieldsWeights(*fieldsFlag, "")
	if err != nil {
		return err
	}
	var methods []string
	if *fusions != "all" {
		methods = strings.Split(*fusions, ",")
	}
	queries, err := evaluate.LoadQueries(*queriesPath)
	if err != nil {
		return err
	}
	qrels, err := evaluate.LoadQrels(*qrelsPath)
	if err != nil {
		return err
	}
	var holdout evaluate.Qrels
	if *holdoutPath != "" {
		if holdout, err = evaluate.LoadQrels(*holdoutPath); err != nil {
			return err
		}
		for q := range holdout {
			if _, both := qrels[q]; both {
				return fmt.Errorf("query %s is judged in both %s and %s: the holdout must not overlap the tuning queries", q, *qrelsPath, *holdoutPath)
			}
		}
	}
	e, err := engine.Open(*dir, &engine.Options{MustExist: true})
	if err != nil {
		return err
	}
	defer e.Close()
	rets, err := e.Mode(*mode)
	if err != nil {
		return err
	}
	ctx := context.Background()
	start := time.Now()
	fmt.Fprintf(stderr, "tune: running %s once per query of %s, then fusing offline\n", strings.Join(rets, ", "), *qrelsPath)
	results, err := e.Tune(ctx, queries, qrels, engine.TuneRequest{
		Retrievers: rets, Methods: methods, Weights: weights, Depths: depths,
		Metric: *metric, Base: engine.Request{Fields: fields},
		Progress: func(done, total int) {
			if done%50 != 0 && done != total {
				return
			}
			el := time.Since(start)
			rate := float64(done) / el.Seconds()
			eta := time.Duration(float64(total-done) / rate * float64(time.Second))
			fmt.Fprintf(stderr, "tune: %d of %d queries, %.1f queries/s, ETA %s\n", done, total, rate, eta.Round(time.Second))
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "tune: %d configurations in %s\n", len(results), time.Since(start).Round(time.Millisecond))

	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "rank\tconfiguration\tnDCG@10\tMRR@10\tR@100\tMAP\n")
	for i, r := range results[:min(*top, len(results))] {
		m := r.Report.Mean
		fmt.Fprintf(tw, "%d\t%s\t%.4f\t%.4f\t%.4f\t%.4f\n", i+1, r, m.NDCG10, m.MRR10, m.Recall100, m.MAP)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if holdout == nil || len(results) == 0 {
		return nil
	}
	best := results[0]
	res, err := e.Evaluate(ctx, queries, holdout, best.Request(engine.Request{Fields: fields}, rets, 100))
	if err != nil {
		return err
	}
	m := res.Report.Mean
	fmt.Fprintf(stdout, "\nbest on %s, scored on %s (%d queries, searched by the engine, p50 %.1f ms):\n", *qrelsPath, *holdoutPath, res.Queries, float64(res.P50.Microseconds())/1000)
	fmt.Fprintf(stdout, "%s\tnDCG@10 %.4f  MRR@10 %.4f  R@100 %.4f  MAP %.4f\n", best, m.NDCG10, m.MRR10, m.Recall100, m.MAP)
	return nil
}

// parseList parses a comma-separated list of positive numbers: --weights
// (float64) or --depths (int).
func parseList[T int | float64](flag, s string) ([]T, error) {
	if s == "" {
		return nil, nil
	}
	_, isInt := any(T(0)).(int)
	kind := "number"
	if isInt {
		kind = "integer"
	}
	var out []T
	for _, part := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if isInt {
			var n int
			n, err = strconv.Atoi(strings.TrimSpace(part))
			v = float64(n)
		}
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("%s: %q is not a positive %s", flag, part, kind)
		}
		out = append(out, T(v))
	}
	return out, nil
}
