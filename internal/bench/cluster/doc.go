// Package cluster is the benchmark behind tandem bench cluster: a 3-node
// cluster (3 shards x 3 replicas, the nodes in this process on loopback)
// against one engine, on the same documents and queries. The Report has
// the latency of an acknowledged batch and the write throughput on each
// side, then each search mode's p50/p95 latency on each side.
//
// Invariants:
//   - the documents are encoded once, before either side is timed, and
//     both sides are given the vectors, so that the writes measure
//     replication, not encoding; the searches encode their queries on
//     each side;
//   - the two sides alternate batch by batch and query by query; batches
//     go to the nodes in turn, and so do queries;
//   - what it builds is under Config.Dir, or a temporary directory that is
//     removed afterwards.
//
// # Usage
//
//	r, err := cluster.Run(ctx, cluster.Config{Data: "../shared/data/scifact", Batch: 64, Queries: 300,
//		Model: encoder.DefaultModel, Log: os.Stderr})
//	if err != nil {
//		return err
//	}
//	r.WriteMarkdown(os.Stdout)
package cluster
