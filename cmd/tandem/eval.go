package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/fusion"
	"github.com/tandemsearch/tandem/internal/bench"
)

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("eval", stderr)
	dir := fs.String("dir", "", "collection directory")
	queriesPath := fs.String("queries", "", "BEIR queries.jsonl")
	qrelsPath := fs.String("qrels", "", "BEIR qrels TSV (query-id, corpus-id, score)")
	modes := fs.String("mode", "bm25", "modes to evaluate, comma-separated: bm25, dense, late, late-exact (late interaction scored exhaustively, the reference), hybrid, or retrievers joined by '+'")
	fusions := fs.String("fusion", "", "fusion methods for modes with several retrievers, comma-separated, or 'all' (default "+engine.DefaultFusion+")")
	k := fs.Int("k", 100, "hits retrieved per query")
	depth := fs.Int("depth", 0, fmt.Sprintf("hits each retriever contributes to fusion (default %d)", engine.DefaultDepth))
	weightsFlag := fs.String("weights", "", "fusion weights per retriever, e.g. bm25=1,dense=2,late=1")
	runsDir := fs.String("runs", "", "write one TREC run file per row into this directory")
	asJSON := fs.Bool("json", false, `print {"ndcg@10","mrr@10","recall@100","map"} for one mode; with several rows, one JSON object per row with "mode", "p50_ms" and "p95_ms" added`)
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the searches to this file (go tool pprof)")
	fieldsFlag := fs.String("fields", "", "search these text fields with boosts, e.g. title=2,text=1 (default: all text fields as one)")
	filterFlag := fs.String("filter", "", `a metadata filter every search runs under, e.g. {"range":{"year":{"gte":2000}}}`)
	highlight := fs.Bool("highlight", false, fmt.Sprintf("also time each query's page of %d hits with their fields, without and with highlights, one after the other (the p50s go to standard error, and to --json)", engine.EvalHighlightHits))
	if err := parseOrUsage(fs, args, stderr, "tandem eval --dir DIR --queries queries.jsonl --qrels qrels.tsv [--mode bm25,dense,late,hybrid] [--fusion a,b] [--runs DIR] [--json]", func() bool { return *dir == "" || *queriesPath == "" || *qrelsPath == "" }); err != nil {
		return err
	}
	fields, weights, err := parseFieldsWeights(*fieldsFlag, *weightsFlag)
	if err != nil {
		return err
	}
	methods := strings.Split(*fusions, ",")
	if *fusions == "all" {
		methods = methods[:0]
		for _, m := range fusion.Methods() {
			methods = append(methods, m.String())
		}
	}
	stopProfile, err := bench.StartCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	queries, err := evaluate.LoadQueries(*queriesPath)
	if err != nil {
		return err
	}
	qrels, err := evaluate.LoadQrels(*qrelsPath)
	if err != nil {
		return err
	}
	// No cache of query encodings: each row's latencies include its own.
	e, err := engine.Open(*dir, &engine.Options{MustExist: true, QueryCacheBytes: -1})
	if err != nil {
		return err
	}
	defer e.Close()

	type row struct {
		name string
		req  engine.Request
	}
	var rows []row
	for _, m := range strings.Split(*modes, ",") {
		m = strings.TrimSpace(m)
		rets, err := e.Mode(m)
		if err != nil {
			return err
		}
		req := engine.Request{K: *k, Retrievers: rets, Fields: fields, Weight: weights}
		if *filterFlag != "" {
			req.Filter = []byte(*filterFlag)
		}
		if *highlight {
			req.Highlight = &engine.HighlightRequest{}
		}
		if *depth != 0 {
			req.Depth = map[string]int{}
			for _, r := range rets {
				req.Depth[r] = *depth
			}
		}
		if len(rets) == 1 {
			rows = append(rows, row{m, req})
			continue
		}
		for _, f := range methods {
			r := req
			r.Fusion = strings.TrimSpace(f)
			name := m
			if len(methods) > 1 || r.Fusion != "" {
				name += "/" + r.Fusion
			}
			rows = append(rows, row{name, r})
		}
	}
	if *runsDir != "" {
		if err := os.MkdirAll(*runsDir, 0o755); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	if !*asJSON {
		fmt.Fprintln(tw, "mode\tnDCG@10\tMRR@10\tR@100\tMAP\tp50 ms\t")
	}
	enc := json.NewEncoder(stdout)
	for _, r := range rows {
		res, err := e.Evaluate(context.Background(), queries, qrels, r.req)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		m := res.Report.Mean
		p50, p95 := ms(res.P50), ms(res.P95)
		fmt.Fprintf(stderr, "%s: %d queries, p50 %.2f ms, p95 %.2f ms, mean %.2f ms\n", r.name, res.Queries, p50, p95, ms(res.Mean))
		row := map[string]any{"mode": r.name, "ndcg@10": m.NDCG10, "mrr@10": m.MRR10, "recall@100": m.Recall100, "map": m.MAP, "p50_ms": p50, "p95_ms": p95}
		if h := res.Highlight; h != nil {
			fmt.Fprintf(stderr, "%s: page of %d hits with fields: p50 %.2f ms without highlights, %.2f ms with (p95 %.2f, %.2f)\n", r.name, h.Hits, ms(h.P50), ms(h.P50Highlight), ms(h.P95), ms(h.P95Highlight))
			row["page_p50_ms"], row["page_highlight_p50_ms"] = ms(h.P50), ms(h.P50Highlight)
		}
		if *runsDir != "" {
			tag := strings.NewReplacer("/", "_", " ", "_").Replace(r.name)
			if err := evaluate.WriteTRECFile(filepath.Join(*runsDir, runFileName(r.name)), res.Run, tag); err != nil {
				return err
			}
		}
		switch {
		case *asJSON && len(rows) == 1:
			if err := enc.Encode(m); err != nil {
				return err
			}
		case *asJSON:
			if err := enc.Encode(row); err != nil {
				return err
			}
		default:
			fmt.Fprintf(tw, "%s\t%.4f\t%.4f\t%.4f\t%.4f\t%.1f\t\n", r.name, m.NDCG10, m.MRR10, m.Recall100, m.MAP, p50)
		}
	}
	if !*asJSON {
		return tw.Flush()
	}
	return nil
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// runFileName is a mode's TREC file name: "hybrid/rrf" → "hybrid_rrf.trec".
func runFileName(mode string) string {
	r := strings.NewReplacer("/", "_", ":", "_", "+", "-")
	return r.Replace(mode) + ".trec"
}
