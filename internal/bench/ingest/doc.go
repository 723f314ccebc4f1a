// Package ingest is the benchmark behind tandem bench ingest: what a user
// of a collection of a given size meets, in figures to plan with. It builds
// a synthetic collection whose documents bring their vectors
// (internal/synth), closes it, opens it from its snapshots and searches it,
// then opens it again with the dense index rebuilt from Badger and searches
// it again. The Report has, for each phase, its time (and rate) and its
// peak memory, in all and per document: the kernel's peak RSS, and the
// peaks of anonymous and mapped-file memory apart (procstat.Sampler), with
// the Go heap at the anonymous peak; the disk per document after the
// close, by part of the collection directory; the dense index as each
// open found it; and per searching phase the p50/p95 latency of bm25 and
// dense, without and with a 1% filter, with dense recall@10 against the
// exact top 10.
//
// With Config.SearchOnly, a run opens a collection an earlier run kept
// and only searches it (one phase, with the same queries, warm-up and
// recall), so that two binaries can be compared on copies of one
// collection, alternately.
//
// Invariants:
//   - Config.Dir must not exist: the collection is new, and is removed
//     afterwards unless Config.Keep (with SearchOnly it must hold one,
//     which is kept);
//   - the documents and queries depend only on their numbers (synth is
//     deterministic), so two runs search the same collection with the
//     same queries, and the exact top 10 is computed without the engine,
//     by brute force over the regenerated vectors (the documents 0 to
//     Docs-1; an opened collection must hold that many documents and
//     vectors of the corpus's model);
//   - each phase's peaks are its own: the Go runtime returns its free
//     memory and the kernel's and the sampler's peaks are reset between
//     phases (on Linux), since a user opens a collection in a fresh
//     process, not in the one that built it; a phase that searches counts
//     its searches; the exact top 10 is computed after the last phase;
//   - the search configurations alternate query by query, and the first 10
//     queries warm up unmeasured; recall is over the first RecallQueries
//     measured queries.
//
// # Usage
//
//	r, err := ingest.Run(ctx, ingest.Config{Dir: dir, Docs: 100_000, Queries: 200,
//		RecallQueries: 20, Output: bench.Output{Log: os.Stderr}})
//	if err != nil {
//		return err
//	}
//	r.WriteMarkdown(os.Stdout)
package ingest
