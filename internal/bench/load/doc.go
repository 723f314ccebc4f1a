// Package load is the benchmark behind tandem bench serve: a running
// tandem serve under load over HTTP, as a client sees it (JSON, HTTP and
// the engine together). Concurrent searchers cycle through the search
// modes with real queries while writers upsert documents, for a fixed
// time (or, with Config.MinPerMode, until every mode has had so many
// requests answered). Queries come in turn, or, with Config.Zipf, from a Zipfian draw
// that repeats a few of them often, as a query log does. The Report has
// each mode's requests, QPS, p50/p95/p99 latency and errors, and what the
// server's /metrics say of its query encodings over the run: cache hits
// and misses, and the queries its model runs encoded.
//
// Invariants:
//   - modes the collection cannot serve are dropped before the load
//     starts, and a collection the server does not have is an error then;
//   - a request that fails is counted in its mode and kept in the Report
//     (Report.Failed), not returned by Run: the load goes on, and the
//     caller decides (the command exits non-zero);
//   - a request cut short by the end of the run is not counted;
//   - upserts that the server answers with failed documents are errors.
//
// # Usage
//
//	r, err := load.Run(ctx, load.Config{URL: "http://127.0.0.1:7700", Collection: "scifact",
//		QueriesFile: "queries.jsonl", Duration: time.Minute, Searchers: 8, WriteBatch: 8,
//		Modes: "bm25,dense,late,hybrid", K: 10})
//	if err != nil {
//		return err
//	}
//	r.WriteMarkdown(os.Stdout)
package load
