// Package late is the benchmark behind tandem bench late: what late
// interaction costs at a given size. It builds a collection of synthetic
// token matrices that the documents bring themselves (synth.TokenCorpus,
// one external late-interaction model), closes it, opens it from its
// snapshots and searches it. The Report has the build time, bytes per
// token on disk and in the late index, the peak RSS of each phase, the
// p50/p95 latency without a filter and with a 1% and a 10% one, and the
// recall@10 of each against the exact (exhaustive) late-interaction
// ranking, late-exact.
//
// Invariants:
//   - Config.Dir must not exist, and a bad Config (a token count above
//     tandem.MaxTokens, a late index that Dim cannot have: CheckIndex) is
//     refused before anything is built; the collection is removed
//     afterwards unless Config.Keep;
//   - with Config.SearchOnly, Dir holds a collection an earlier run kept,
//     of Config.Docs documents (refused otherwise), and the run only opens
//     and searches it, with the same queries: two binaries compare on
//     copies of one collection;
//   - the build ends when the late index has applied every committed batch
//     and finished retraining, and Run fails if it returns behind the
//     collection's last sequence;
//   - each phase's peak RSS is its own (the peak is reset between phases,
//     on Linux);
//   - the configurations alternate query by query, the first 10 queries
//     warm up unmeasured, and the exhaustive searches run after the
//     measured ones, on the first RecallQueries queries in the same order.
//
// # Usage
//
//	r, err := late.Run(ctx, late.Config{Dir: dir, Docs: 100_000, Tokens: 128, Dim: 128, QueryTokens: 32,
//		Queries: 200, RecallQueries: 50, LateIndex: "Residual", Output: bench.Output{Log: os.Stderr}})
//	if err != nil {
//		return err
//	}
//	r.WriteMarkdown(os.Stdout)
package late
