package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/evaluate"
)

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("eval", stderr)
	dir := fs.String("dir", "", "collection directory")
	queriesPath := fs.String("queries", "", "BEIR queries.jsonl")
	qrelsPath := fs.String("qrels", "", "BEIR qrels TSV (query-id, corpus-id, score)")
	mode := fs.String("mode", "bm25", "retriever: bm25")
	k := fs.Int("k", 100, "hits retrieved per query")
	asJSON := fs.Bool("json", false, `print {"ndcg@10","mrr@10","recall@100","map"}`)
	fieldsFlag := fs.String("fields", "", "search these text fields with boosts, e.g. title=2,text=1 (default: all text fields as one)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *queriesPath == "" || *qrelsPath == "" {
		fmt.Fprintln(stderr, "usage: tandem eval --dir DIR --queries queries.jsonl --qrels qrels.tsv [--mode bm25] [--json]")
		return errUsage
	}
	fields, err := parseBoosts(*fieldsFlag)
	if err != nil {
		return err
	}
	queries, err := evaluate.LoadQueries(*queriesPath)
	if err != nil {
		return err
	}
	qrels, err := evaluate.LoadQrels(*qrelsPath)
	if err != nil {
		return err
	}
	e, err := engine.Open(*dir, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	run := evaluate.Run{}
	var took time.Duration
	n := 0
	for _, q := range queries {
		if _, judged := qrels[q.ID]; !judged {
			continue
		}
		start := time.Now()
		res, err := e.Search(context.Background(), engine.Request{Text: q.Text, K: *k, Retrievers: []string{*mode}, IDsOnly: true, Fields: fields})
		took += time.Since(start)
		n++
		if errors.Is(err, engine.ErrBadRequest) {
			continue // an empty query scores 0, as trec_eval counts it
		}
		if err != nil {
			return fmt.Errorf("query %s: %w", q.ID, err)
		}
		rs := make([]evaluate.Result, len(res.Hits))
		for i, h := range res.Hits {
			rs[i] = evaluate.Result{DocID: h.ID, Score: h.Score}
		}
		run[q.ID] = rs
	}
	rep, err := evaluate.Evaluate(qrels, run)
	if err != nil {
		return err
	}
	if n > 0 {
		fmt.Fprintf(stderr, "%d queries, %.2f ms/query\n", n, float64(took.Microseconds())/1000/float64(n))
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(rep.Mean)
	}
	m := rep.Mean
	fmt.Fprintf(stdout, "nDCG@10    %.4f\nMRR@10     %.4f\nRecall@100 %.4f\nMAP        %.4f\n", m.NDCG10, m.MRR10, m.Recall100, m.MAP)
	return nil
}
