// Package soak is Tandem's soak harness: searchers in every mode, with and
// without filters, run beside a writer and a deleter against one collection
// for a duration, while the process is sampled. Run runs it; tandem soak
// (cmd/tandem) gives it flags, and make soak and make soak-race run that.
//
// # The load
//
// The collection has a text field, a keyword, a number and a date for
// filters, and "owner" and "ver" fields that say which document and which
// version a stored document is. By default documents and queries bring
// their vectors (a 64-dimensional dense model and a late-interaction model
// of 16 tokens of 32 values, indexed twice: with Config.LateIndex and with
// FAISS), so the load stays on the engine, not on ONNX inference;
// Config.Model uses the default ONNX model instead. Prefill upserts ids
// 0..Docs-1 and deletes Docs..2*Docs-1, so a collection an earlier soak
// left can be soaked again. Then, until the duration has passed: the
// searchers cycle through BM25, each dense and late retriever alone, and
// hybrids with every fusion method, each with one of five filters or none;
// the writer upserts new versions of live ids and new or re-created ids;
// the deleter keeps about Docs ids live.
//
// # What it checks
//
//   - No search, upsert or delete returns an error.
//   - Every hit appears once in its result, carries its own fields, and
//     matches its search's filter.
//   - Every hit is judged against a ledger of what the writer and the
//     deleter began and had acknowledged, on one logical clock that
//     searches read too: a hit is never of a document whose delete was
//     acknowledged before its search began (with no upsert of it in flight
//     when the delete began, nor begun since), of a version never written,
//     or older than a version acknowledged before its search began.
//   - Once the load has stopped, storage agrees with the ledger: an id whose
//     last upsert began after its last delete was acknowledged is stored,
//     an id whose last delete began after its last upsert was acknowledged
//     (or that was never upserted) is not, a stored id is at its last
//     acknowledged version, and the collection's count is the ledger's.
//   - After the warm-up (a fifth of the run, at most 10 minutes), the end of
//     the run (the least of its last three samples) stays within bounds of
//     the warm-up's peak: goroutines and open files (each sample's floor of
//     readings four times a second) at most 16 more, and RSS at most 25% or
//     64 MiB more, whichever is larger. Under the race detector RSS is
//     reported, not judged.
//
// Report.Verdict is nil only when all of these held and the run was not
// interrupted; Report.Markdown prints the samples, the totals, the bounds
// and the verdict.
//
// # What it measures
//
// Each Sample holds the resident set (anonymous and file-backed, and its
// peak), the Go heap in use and held, the C heap (FAISS, ONNX Runtime) in
// use and held, goroutines, open files, the collection's disk use and
// document count, and the running totals of searches, writes, deletes,
// errors and violations. Measured runs, and what the bounds rest on, are
// in docs/soak.md.
//
// # Usage
//
//	res, err := soak.Run(ctx, soak.Config{
//		Duration: 5 * time.Minute, Sample: 30 * time.Second,
//		Docs: 5000, Searchers: 4, LateIndex: "Residual", Seed: 1,
//		Progress: os.Stderr,
//	})
//	if err != nil {
//		return err // the soak could not run
//	}
//	fmt.Print(res.Markdown())
//	return res.Verdict()
package soak
