// Package latecollect owns token-level late interaction: a document is
// scored by how well its tokens match each query token (ReAtt avg-max or
// ColBERT sum-of-MaxSim, over every token of both). An Index finds the
// documents worth scoring through a token index of one of two families,
// chosen by Options.Description when it is opened:
//
//   - FAISS token keys (the default: "" or "FAISS" choose a FAISS
//     description automatically; any FAISS factory description, such as
//     "Flat" or "IVF2048,SQ8", fixes it). Every document token is a key in
//     a FAISS index and every token matrix is held in memory; each query
//     token collects its nearest document tokens, and the documents they
//     belong to are rescored exactly over all their tokens.
//   - Residual codes ("Residual", or "Residual<n>" for n centroids). Every
//     document token is a one-bit-per-dimension residual in the code list
//     of its nearest centroid, held in memory; the full-precision tokens
//     are the store's blobs. Candidates are found and ranked in stages
//     through the centroids and the code lists the query probes, and the
//     best are rescored exactly from the blobs.
//
// The main types are Index (one model's retriever over a storage.Store),
// Options, SearchOptions and Hit; AvgMax and SumMax are the pure scoring
// functions; EncodeTokens and DecodeTokens define the stored token format;
// Explainer says what a document's exact score is made of.
//
// # Storage
//
// A document's token matrix is the per-document blob "tok/<model>"
// (BlobName), written atomically with the document by whoever writes it
// (storage.Batch.Put). Format version 1 (FormatVersion) is an 8-byte header,
// little endian: version (1 byte), encoding (1 byte: 1 f32, 2 f16, 3 i8),
// dimension (uint16), token count (uint32); then the rows: float32, float16
// (round to nearest even), or per row a float32 scale followed by int8
// values. DecodeTokens checks the version and that the length matches the
// header exactly, and reports ErrCorruption otherwise. I8 is what the
// engine stores for its installed models: a quarter of the bytes of f32,
// scored in int8, ranking SciFact and Cranfield as F16 does; F16, which
// it stores for external models, loses less than 2^-11 per value of a
// unit-length token (README.md in this directory).
//
// # Invariants
//
//   - Badger is the source of truth. An Index holds exactly the live
//     documents that have a valid blob as of AppliedSeq. Apply brings it up
//     to date with the change log in runs that end every applyStride
//     sequences, the last change of each document in a run winning (a
//     change carries the document as it is now), so replaying changes is
//     harmless. A family rebuilds only where a run starts, so the index
//     built from a log does not depend on how the log was cut into Apply
//     calls, given the same stored blobs. Residual codes would within the
//     run where they get their first tokens (their codebook is trained on
//     the first Apply call's documents), so there the index settles before
//     it is read: every search, Rescore, snapshot and WaitRetrain sees the
//     codebook and codes of every document held, in that run as in later
//     ones (TestApplyCutDoesNotMatter, TestApplyCutDoesNotMatterFirstRun).
//   - Each family saves its own snapshot "late-<model>" with the sequence
//     it includes, on Snapshot and every SnapshotEvery applied changes.
//     Open loads it when it was saved with the same Dim and Description
//     and then applies the changes after its sequence; otherwise it builds
//     the index from the blobs.
//   - Exhaustive mode scores every allowed document exactly, and every
//     exact score, in Candidates and Exhaustive modes and in Rescore,
//     comes from the same function over the stored blob (scoreBlob): a
//     document gets the same float32 score wherever it is scored exactly.
//     An I8 blob is scored in int8, the query quantised once per search
//     (queryI8: integer sums, exact, then scaled), with the AVX512-VNNI
//     or AVX2 kernel where the CPU has one and the portable code
//     elsewhere, bit for bit alike (TestMaxSimI8Kernels); float16 and
//     float32 blobs in float32.
//   - Reference mode scores every allowed document in float32 over the
//     stored tokens as decoded and the query as given: the full-precision
//     reference ("late-exact" in the engine). It equals Exhaustive for
//     float16 and float32 blobs, and for I8 blobs measures what the
//     quantised query costs.
//
// # Explaining a score
//
// A document's exact score is, per query token, the largest inner product
// with one of its tokens, combined (avg-max or sum-max). The scorer
// computes those maxima and keeps only the score; Explainer recomputes
// them for the documents a caller shows (the hits a search returns) from
// their stored blobs, and reports which document token (row of the
// stored matrix) gave each, the first among equal products. Invariants:
//
//   - Explainer.Explain computes every product with the kernel a search
//     in its mode uses on this CPU (AVX-512, AVX2 or Go: dotsInto mirrors
//     maxSimInto, over the rows decoded as maxSimBlob decodes them; for
//     an I8 blob outside Reference mode, the int8 kernel a row at a
//     time), so Explanation.Max equals the maxima the exact score took
//     and Explanation.Score equals the document's exact score, bit for
//     bit (TestExplainMatchesExactScore with each kernel, encoding and
//     mode; TestExplainEqualsIndexScore against both families' hits, in
//     every mode, over float16 and I8 blobs).
//   - A hit scored from its residual codes rather than its stored blob
//     (ExactStale, ExactReadErrors: the document changed since the index
//     applied it) is explained from the blob as it is now, so its score
//     may differ from the hit's; at rest there are none.
//   - It costs one exact scoring per document explained
//     (BenchmarkExplain: 43 µs for 32 query tokens against 327 document
//     tokens of 384 values, AVX-512).
//
// # FAISS token keys
//
//   - The token id of row r of document n is n<<PositionBits | r, so the
//     map from FAISS id to (document, row) is implicit. A document has at
//     most 4096 token keys; any rows beyond are scored but are not keys.
//   - The Index keeps every document's stored matrix in memory (in its
//     stored encoding) for rescoring and holds exactly the keys of the
//     documents it has; Apply removes a document's keys before adding its
//     new ones.
//   - The automatic description is Flat up to 100,000 tokens, then
//     "IVF<n>,SQ8" with n the least power of two at least sqrt(tokens), at
//     most 8192; the index is rebuilt where a run of the log starts when
//     that changes (Flat stands in until there are tokens enough to train).
//   - The snapshot holds the FAISS index and the list of (document, key
//     count) it holds; the matrices are loaded from the blobs at Open.
//   - Candidate mode rescores every token of every candidate with the
//     same function as Exhaustive mode, so every hit's score is exact and
//     a document found as a candidate gets exactly its exhaustive score.
//   - Filters are applied in FAISS: allowed documents become token-id
//     ranges, given to FAISS as an ID selector, so every collected token
//     belongs to an allowed document; when no more documents are allowed
//     than the candidate cap, they are all scored exactly instead.
//
// # Residual codes
//
// With Options.Description "Residual" (or "Residual<n>") the index keeps
// no token key in FAISS and no token matrix in memory (centroids are
// trained by spherical k-means, kmeansIterations iterations, and tokens
// assigned to them on every core: in int8 with AVX-512 VNNI, else with
// float kernels or BLAS products; tokens are coded in two levels from
// twoLevelCentroids centroids, k-means from twoLevelTrainCentroids). Each
// document token is the id (16 bits) of its nearest centroid (or, coded in
// two levels, a near one for a few tokens) and its residual from that
// centroid quantised to one bit per dimension (per-dimension cut-off at
// the training median, reconstructed as the mean of the training residuals
// on its side). The codes are grouped by centroid, as WARP groups them:
// each centroid's code list holds the docnum and code of every token
// coded to it, in ascending docnum order (so a document's entries are
// contiguous; an update of an older document is put in its place, and a
// list from an older snapshot is sorted as it is read); a document
// records its distinct centroids. Search is staged: the query tokens are scored
// against every centroid (AVX-512 kernels, or BLAS products where the
// CPU lacks AVX-512); each query token probes its best centroids, up to
// NProbe, until their lists hold DepthProbeEntries per hit asked for, and
// never fewer than MinCentroidProbe or one centroid in MinProbeShare;
// the listed documents are ranked by their best probed centroids
// (summed, from 65,536 docnums on, one bucket of docnums at a time, each
// list read from a cursor that only moves forward); the
// best CandidateCap go to the list stage, which scores every token of
// theirs listed under a probed centroid from its residual code against
// every query token, keeps per document and query token the best, and
// stands in the document's centroid interaction (the query token's best
// score against the document's own centroids) where none of the query
// token's own probed lists holds a token of the document; when it would
// drop only a few candidates, it is skipped (listStagePays). The best
// ExactCap are scored
// exactly from their full-precision tokens. The caps grow with the hits
// asked for (DepthCandidates per hit, a quarter more exact than hits), so
// that a fusion's list of 100 ranks as the exhaustive search would.
//
//   - The list stage does not decode codes: a token's score is its
//     centroid's score plus one looked-up value per 4-bit nibble of its
//     code, in 16-bit integers with a scale per query token chosen so
//     that no sum leaves the range (the rounding error is bounded and
//     small against the 1-bit quantisation's).
//   - A document's list-stage score per query token is at most its best
//     token's residual-code score, or its centroid interaction: the lists
//     it reads are a subset of the document's tokens, and the exact stage
//     scores every token.
//   - The full-precision tokens are stored once, as the store's blobs:
//     the exact stage reads each candidate's with Store.ReadBlobCRC (pread
//     from a blob segment, checked against its CRC-32C, never mapped), so
//     they cost page cache, not process memory.
//   - Each document records the length and CRC-32C of the blob its codes
//     were made from. The exact stage scores a stored blob only if it is
//     that one; a document whose blob changed or went since (a change not
//     applied yet) is scored from its codes, the version the index
//     applied, and so is one whose blob fails its checksum
//     (storage.ErrCorruption). Stats counts both (ExactStale,
//     ExactReadErrors, with the latest error); any other read error fails
//     the search. A collection at rest has applied every change, so every
//     document is scored exactly and searches are deterministic.
//   - The snapshot holds the codebook and every document's codes and blob
//     stamp. A snapshot of format 1, from when the index kept a copy of
//     every blob in a token file of its own, loads as well, and the file
//     is removed.
//   - New documents are coded against the current centroids and deletes
//     take effect at once. Where a run of the change log starts, the
//     centroids are retrained on the documents held when the automatic
//     number of centroids has doubled (about RetrainGrowth times the
//     tokens) or the mean residual norm has risen RetrainDrift times over
//     the training sample's, so the index does not depend on how the log
//     was cut into Apply calls (once a retraining has swapped its codes
//     in: see WaitRetrain).
//   - The first documents with tokens train a provisional codebook, which
//     holds the documents of one run at most (applyStride sequences): the
//     first Apply call's are its training sample and the later calls' are
//     coded with it. Before a search, a Rescore or a snapshot reads it
//     after an Apply, and in WaitRetrain, it settles: it is retrained on
//     every document held and they are all coded again, as a build from
//     the store and a single Apply call train them (the same sample, the
//     same seeded k-means). Where the next run starts it stops being
//     provisional (retrained first if unsettled). So at rest a collection
//     smaller than a run has the codebook and codes of its documents, bit
//     for bit, however the ingest cut the log; Stats alone may show the
//     codes of before until something settles them.
//   - A settling costs one training on at most one run's documents
//     (BenchmarkFirstRun: 255 documents of 300 384-value tokens, about
//     7.5 s of CPU, 4.5 s on two cores), and only a read that follows an
//     Apply pays it: a load in one Apply call never settles, one in many
//     calls settles once (at its snapshot or first search), and a writer
//     that searches after every write pays one per write until the next
//     run. A settling that cannot read a blob leaves the codes in use
//     (Stats.RetrainErr): searches go on with them and try again after
//     the next Apply; a snapshot is saved as unsettled, and the index
//     loaded from it settles at its first read.
//   - Only a provisional codebook is retrained under the write lock. Other
//     retrainings run in the background (Stats.Retraining): the codebook
//     is trained on every stride-th token held when it started, every
//     document held then is coded again from its stored blob, and the
//     documents applied meanwhile are coded again before the new codes are
//     swapped in under the lock, at once. Until then searches and Apply
//     use the old codes, which stay valid. Close cancels a retraining; the
//     next Open starts it again.
//   - Every hit is one of the documents the exact stage rescored, and its
//     score is exact, as with FAISS token keys (a negative ExactCap, for
//     measurements, ranks residual-code scores instead). Exhaustive mode
//     scores every document as the exact stage does.
//   - Docnums must be below 2^32 and the dimension a multiple of 8.
//
// # Sharded search
//
// A collection split into shards, each with its own Index of FAISS token
// keys, ranks as one Index holding every document when a coordinator runs
// Candidates mode in steps; Search itself is these steps over one index:
//
//  1. Each shard runs Collect with the same KPrime, CandidateCap and
//     NProbe, and Allow restricted to its documents. A Collection holds,
//     per query token, the shard's KPrime best token keys with their inner
//     products, and the number of held documents the filter allows,
//     counted up to CandidateCap+1.
//  2. When a filter is set and the Allowed counts sum to at most
//     CandidateCap, every allowed document is scored exactly: each shard
//     runs Search with Mode Exhaustive and its Allow. Otherwise
//     MergeCandidates (or Choose) chooses the candidates, each shard
//     Rescores its own, and the coordinator merges the hits by score.
//
// Invariants:
//
//   - MergeCandidates keeps, per query token, the KPrime best tokens of
//     the union of the collections; a token marked Skip (its document is
//     filtered out after collection, or no longer held) keeps its place
//     among them, as it does in FAISS's answer. Over one Collection it is
//     the single index's choice.
//   - Rescore scores exactly, with the same function as Search, so a
//     document gets the same float32 score in whichever index and mode it
//     is scored exactly.
//   - With exact (Flat) token indexes, the hits and their scores are those
//     of Search on one Index holding every document, ties excepted (tied
//     tokens or documents may be cut differently), provided every shard
//     applies the filter the same way as that index (in FAISS, which it
//     does while the filter's docnums are below 8·(2^31−1)).
//   - Residual-code indexes have no shard-independent collection step:
//     each shard trains its own centroids, so their scores are not
//     comparable across shards, and Collect returns ErrNoCollect. A
//     coordinator can only merge each shard's Search hits, whose scores
//     below the exact stage come from that shard's codes: not the list one
//     index would give. Their Rescore scores as their exact stage does.
//
// An Index is safe for concurrent use; Close frees the token index and is
// idempotent. It never closes the Store.
//
// # Usage
//
// Writing documents (the engine does this with the encoder's token output):
//
//	b, err := enc.Encode(ctx, encoder.Request{Side: encoder.Document, Texts: texts, Tokens: true})
//	for i, doc := range docs {
//		blob, err := latecollect.EncodeTokens(b.Tokens[i].Vectors, b.Tokens[i].Dim, latecollect.F16)
//		batch.Put(doc, map[string][]byte{latecollect.BlobName(enc.Name()): blob})
//	}
//	st.Write(ctx, &batch) // then x.Apply(ctx, changes), as for every derived index
//
// Opening and searching:
//
//	x, err := latecollect.Open(ctx, st, &latecollect.Options{Model: enc.Name(), Dim: enc.TokenDim()})
//	if err != nil { ... }
//	defer x.Close()
//	q, err := enc.Encode(ctx, encoder.Request{Side: encoder.Query, Texts: []string{text}, Tokens: true})
//	allow, err := eng.FilterBitmap(ctx, filterJSON) // nil without a filter
//	hits, err := x.Search(ctx, q.Tokens[0].Vectors, &latecollect.SearchOptions{K: 10, Allow: allow})
//	// hits[i].DocNum, hits[i].Score; Mode: latecollect.Reference for the float32 reference.
//	err = x.Snapshot(ctx) // before closing, so that the next Open does not rebuild
//
// *Index satisfies the engine's derived-index interface (Name, AppliedSeq,
// Apply, Close). Open already catches up with the change log; changes at or
// below AppliedSeq given to Apply are ignored.
package latecollect
