// Package torture is the crash torture harness (tandem torture, make
// torture): it SIGKILLs a writer process at random moments aimed at each
// phase of the write path, and checks that the collection the writer
// leaves behind has lost no acknowledged operation and that its stores
// agree.
//
// A writer process (RunWriter, started by Config.WriterCommand) upserts
// and deletes a mixed stream against one collection: batches of 1 to
// Config.MaxBatch documents that bring dense and token vectors (or are
// encoded by an installed model), through Index, IndexJSONL and
// IndexStream, deletes, and now and then a Close and a reopen. It reports
// each phase it enters on stdout, and records every call in a ledger: an
// intent before the call, an acknowledgement once it has returned,
// fsynced (writer.go describes both). Run kills the writer in the phase
// it aims at, copies the killed collection, reopens the copy and checks
// it against the ledger (check.go), then starts the next writer on the
// killed original, so that the next writer's Open is a crash recovery a
// kill can land in too.
//
// # What each check holds
//
//   - Nothing acknowledged is lost: every document the ledger has live is
//     in Badger at its acknowledged version, and no document it has
//     deleted is back.
//   - The call in flight at the kill committed a prefix of its documents
//     in whole engine batches (a delete: all of its live documents or
//     none), and changed nothing unless the store's last sequence moved.
//   - Badger, Bleve, FAISS and the token index agree: each index holds
//     exactly the live documents; each live document, and no other, has
//     its version's vector blobs; the counts agree; a residual late index
//     with live documents has trained codes.
//   - Searches in every mode, with and without filters, return only live
//     documents at their acknowledged version that pass the filter; the
//     exhaustive ones (BM25 on a term every document holds, flat dense,
//     late-exact) find every such document, with the scores of its
//     acknowledged version's vectors.
//
// A Report counts lost operations (Lost) and disagreements (Disagree); a
// run passes when both are zero and it did not stop on an error
// (Report.Failed).
//
// # Usage
//
//	r, err := torture.Run(ctx, torture.Config{Dir: dir, Kills: 30, WriterCommand: start})
//	if err != nil { ... } // a bad Config or a failure of the harness
//	r.Print(os.Stdout)
//	if r.Failed() { ... }
//
// where start(args) returns a command that parses args with WriterFlags
// and calls RunWriter: cmd/tandem runs its own binary as
// `tandem torture --writer`, and this package's test re-executes the test
// binary (TestWriterProcess).
package torture
