// Package ingest is the benchmark behind tandem bench ingest: what a user
// of a collection of a given size meets. It builds a synthetic collection
// whose documents bring their vectors (internal/synth), closes it, opens it
// from its snapshots, opens it again with the dense index rebuilt from
// Badger, and searches it. The Report has the ingest rate, the disk used,
// the peak RSS of each phase, the open times, and the p50/p95 latency of
// bm25 and dense, without and with a 1% filter.
//
// Invariants:
//   - Config.Dir must not exist: the collection is new, and is removed
//     afterwards unless Config.Keep;
//   - the documents and queries depend only on Config.Docs and the query's
//     number (synth is deterministic), so two runs search the same
//     collection;
//   - each phase's peak RSS is its own: the peak is reset after the ingest
//     and after the first open (on Linux), since a user opens a collection
//     in a fresh process, not in the one that built it;
//   - the search configurations alternate query by query, and the first 10
//     queries warm up unmeasured.
//
// # Usage
//
//	r, err := ingest.Run(ctx, ingest.Config{Dir: dir, Docs: 100_000, Queries: 200,
//		Output: bench.Output{Log: os.Stderr}})
//	if err != nil {
//		return err
//	}
//	r.WriteMarkdown(os.Stdout)
package ingest
