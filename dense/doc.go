// Package dense owns single-vector retrieval: one FAISS index per encoder
// in a collection, ranked by inner product (cosine for the normalised
// vectors Tandem's encoders produce), with the metadata filter applied
// inside the search.
//
// The main type is Index. Its FAISS ids are storage docnums.
//
// # Source of truth and derived state
//
// Vectors live in storage: each document's vector for model M is its blob
// BlobName(M) = "vec/M", float32 little-endian (EncodeVector,
// DecodeVector), committed atomically with the document. The FAISS index
// is derived from those blobs and from the change log:
//
//   - Open loads the snapshot SnapshotName(M) if it is present and
//     consistent (format version, checksum, dimension, requested
//     description, vector count, not newer than the log); otherwise it
//     rebuilds from every stored vector. A snapshot is only an
//     optimisation: any mismatch or damage means rebuild, never an error.
//     Open then catches up with the log after the snapshot's sequence.
//   - Apply applies committed changes. A put reads the document's current
//     blob (the log holds no vectors); an update removes the old vector and
//     adds the new one; a delete, a put of a since-deleted document (Doc
//     nil) or a document without this model's blob removes the docnum.
//     Changes at or before AppliedSeq are skipped, and because every put
//     reads the current blob, re-applying any suffix of the log converges
//     to storage: this is what makes a crash at any moment harmless.
//   - Deletes take effect at once with FAISS remove_ids (Flat, IVF).
//     HNSW in FAISS 1.7.3 cannot remove: a delete or update then rebuilds
//     the index, so HNSW only suits append-only collections.
//   - Apply saves a snapshot every Options.SnapshotEvery changes; Snapshot
//     saves one on demand (call it before a clean shutdown). Snapshots are
//     written by storage.SaveSnapshot, which commits them atomically.
//
// Invariant: the set of docnums the index holds (DocNums) is exactly the
// set of documents with a vector blob in storage as of AppliedSeq, each
// with its current vector. TestCrashRecovery checks it after SIGKILLs.
//
// # Index types
//
// Options.Description is a FAISS factory description; "" is automatic:
//
//   - Flat (exact) below ExactBelow = 10,000 vectors, where a full scan
//     costs a few milliseconds.
//   - IVF(4·√n),SQ8 above: each vector's residual to its list's centroid
//     quantised to 8 bits a dimension, a quarter of float32's memory
//     (about 400 bytes a 384-d vector with its id and location).
//     It is trained on a uniform sample of 39 vectors per list (FAISS's
//     minimum without warnings) and searched with NProbe = 32 lists; the
//     best k + Rescore (20) candidates are then rescored with the
//     exact inner product of their stored float32 vectors, so the scores
//     a search returns are exact. IVF supports remove_ids, which HNSW does
//     not in FAISS 1.7.3, and its nprobe can be set per search. An index
//     an earlier default built as IVF-Flat is rebuilt as SQ8 once.
//   - The type follows the size: crossing ExactBelow rebuilds as IVF,
//     falling under ExactBelow/2 rebuilds as Flat, and growing fourfold
//     since training retrains IVF with more lists. A Flat or IVF index
//     retrains in the background (retrain.go): searches and writes go on
//     against it while the next is trained and filled from storage, the
//     writes made meanwhile are applied to the next, and the two swap
//     under the lock; until then both are in memory (Stats.RetrainBytes).
//     Only an index that cannot remove vectors (HNSW), or none at all,
//     is rebuilt inside Apply or Open.
//
// For every IVF index the Index keeps each vector's place in the lists,
// list and offset, in a paged array by docnum (8 bytes a docnum, where
// FAISS's own direct map is a hashtable of about 40 bytes a vector):
// removals are lookups rather than a scan of every list, and a filter's
// allowed documents can be scored one by one (below). The locations are
// not saved; Open reads them off the lists.
//
// An explicit description needing training (IVF, SQ, PQ) is served by a
// Flat index until there are enough vectors to train it. Any description
// whose codec is a scalar or product quantiser is rescored like the
// automatic one.
//
// # Filtered search
//
// Search takes the filter's bitmap of allowed docnums (from
// engine.FilterBitmap). Let c be the number of allowed documents that
// have vectors, among n:
//
//   - IVF: when scoring the allowed codes one by one at their kept
//     locations costs less than a widened search (a fixed part, and the
//     vectors of the NProbe·n/c lists it probes), by the measured costs
//     subsetCostNS, widenFixedNS and widenProbedNS, Search scores the
//     allowed documents that lie in those NProbe·n/c nearest lists (8-bit
//     codes by weights on the codes, other codes by FAISS's own scanner,
//     on OpenMP's threads above 4,096 documents; then the rescoring): the
//     widened search's candidates, without reading the codes of the
//     documents the filter refuses. At 1M vectors this takes filters
//     below about 6%.
//   - otherwise, c ≤ ExactFilterMax (1,000): exact. For Flat and IVF-Flat
//     this is FAISS itself with every list probed; for quantised or graph
//     indexes without locations, a scan of the stored vectors.
//   - otherwise the bitmap goes into FAISS as an ID selector, and IVF
//     probes NProbe·n/c lists (capped at all of them), so that a filtered
//     search scores about as many allowed vectors as an unfiltered one.
//   - if FAISS returns fewer than min(k, c) hits (HNSW applies selectors
//     to its result set only), the exact path answers instead.
//
// TestRecallDefaultANN checks that at 100k vectors the automatic index is
// IVF and, unfiltered, under random filters keeping 50%, 5%, 0.5% and
// 0.05% of the documents and under filters correlated with the vectors,
// returns only allowed documents, with recall@10 at least 0.95 against
// exact (filtered) search. BenchmarkDense measures every index type with
// and without filters, and BenchmarkOpen opening from a snapshot against
// a rebuild; docs/evaluation.md and docs/ingest.md have their figures.
//
// # Concurrency
//
// An Index is safe for concurrent use: searches share a read lock. Apply,
// Snapshot and a retraining's last pass hold the writers' mutex; Apply
// takes the write lock for FAISS's updates only, Snapshot the read lock,
// a retraining the write lock for its swap. The only goroutine an Index
// starts is a retraining's (retrain.go), which Close cancels and waits for.
//
// # Usage
//
// The engine opens one Index per encoder after storage, writes vectors as
// blobs with the documents, and applies each committed batch:
//
//	x, err := dense.Open(ctx, st, &dense.Options{Model: "bge-small-en-v1.5", Dim: 384})
//	if err != nil { ... }
//	defer x.Close()
//
//	// Ingest: validate, then attach the vector to its document.
//	if err := dense.CheckVector(vec, x.Dim()); err != nil { ... } // before storage
//	var b storage.Batch
//	b.Put(doc, map[string][]byte{dense.BlobName("bge-small-en-v1.5"): dense.EncodeVector(vec)})
//	st.Write(ctx, &b)
//	changes, _ := st.Changes(ctx, x.AppliedSeq(), 10000)
//	x.Apply(ctx, changes) // x.Name() is "dense:bge-small-en-v1.5"
//
//	// Search, optionally filtered.
//	allow, _ := eng.FilterBitmap(ctx, filterJSON) // nil for no filter
//	hits, err := x.Search(ctx, queryVec, 10, allow) // []dense.Hit{DocNum, Score}, best first
//
//	// Clean shutdown: snapshot so the next Open skips the rebuild.
//	x.Snapshot(ctx)
//
// Index satisfies the engine's derived-index interface (Name, AppliedSeq,
// Apply, Close).
package dense
