package main

import (
	"context"
	"io"

	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/internal/bench/cluster"
)

// runBenchCluster measures a 3-node cluster (3 shards x 3 replicas, nodes
// in this process on loopback) against one engine, on the same documents
// and queries, alternating between the two: the added latency of an
// acknowledged batch and the write throughput, then search latency per
// mode. Documents are encoded once, before either is timed, and both
// are given the vectors, so that the writes measure replication, not
// encoding.
func runBenchCluster(args []string, stdout, stderr io.Writer) error {
	fset := newFlagSet("bench cluster", stderr)
	var c cluster.Config
	fset.StringVar(&c.Data, "data", "", "BEIR directory (corpus.jsonl, queries.jsonl), e.g. ../shared/data/scifact")
	fset.IntVar(&c.Docs, "docs", 0, "documents to index (default all)")
	fset.IntVar(&c.Batch, "batch", 64, "documents per acknowledged batch")
	fset.IntVar(&c.Queries, "queries", 300, "queries per search mode")
	fset.StringVar(&c.Model, "model", encoder.DefaultModel, "dense model")
	fset.BoolVar(&c.Late, "late", false, "index late interaction too (three more copies of every token matrix in memory)")
	fset.StringVar(&c.Dir, "dir", "", "working directory (default a temporary one, removed afterwards)")
	if err := parseOrUsage(fset, args, stderr, "tandem bench cluster --data BEIR_DIR [--docs N] [--batch 64] [--queries 300] [--late]", func() bool { return c.Data == "" || c.Batch <= 0 || c.Queries <= 0 || fset.NArg() > 0 }); err != nil {
		return err
	}
	c.Log = stderr
	r, err := cluster.Run(context.Background(), c)
	if err != nil {
		return err
	}
	r.WriteMarkdown(stdout)
	return nil
}
