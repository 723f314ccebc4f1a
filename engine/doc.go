// Package engine is Tandem's public Go API: it opens a collection directory,
// indexes and deletes documents, and runs filtered hybrid searches that fuse
// BM25, dense and late-interaction rankings.
//
// An Engine owns every goroutine and native object it creates; Close releases
// them. All methods are safe to call from concurrent goroutines.
//
// # Layout of a collection directory
//
//	<dir>/badger     the source of truth (package storage)
//	<dir>/snapshots  snapshot files of derived indexes
//	<dir>/bleve      the BM25 index (package sparse), derived
//
// # Guarantees
//
//   - Acknowledged means durable: when Index, IndexJSONL, Delete or Write
//     returns, every batch it reports as committed is fsynced in Badger
//     (unless Options.NoSync). Each batch is atomic. A failing batch stores
//     nothing; batches committed before it stay.
//   - Derived indexes (BM25 now; dense and late interaction later) are
//     updated from the change log after each commit, and caught up from
//     their own applied sequence when Open runs. After a crash at any
//     point, Open restores every acknowledged document to every index and
//     removes every deleted one (TestCrash kills a writer 24 times).
//   - Search never returns a deleted document: hits are materialised from
//     storage, and a hit whose document is gone is dropped. During a
//     concurrent write a search may therefore return fewer than K hits.
//   - Writers are serialised; searches run concurrently with them and with
//     each other.
//
// # Retrievers
//
// Each derived index implements a small interface declared here (Name,
// AppliedSeq, Apply, Close). Request.Retrievers names the rankings to run:
// "bm25" now, "dense:<model>" and "late:<model>" later, fused by
// Request.Fusion. Retrievers that need a filter as a bitmap of internal
// document numbers use Engine.FilterBitmap.
package engine
