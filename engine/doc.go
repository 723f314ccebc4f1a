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
//	<dir>/blobs      its segments of large blobs (token matrices), part of it
//	<dir>/snapshots  snapshot files of derived indexes
//	<dir>/bleve      the BM25 index (package sparse), derived
//
// The dense (package dense) and late-interaction (package latecollect)
// indexes are derived too: rebuilt from the vectors and token blobs in the
// store, or loaded from their snapshots, which Close saves when they
// changed. A collection made before token blobs were stored once may hold
// <dir>/derived, the residual codes' old copy of every blob: Open removes
// it.
//
// # Guarantees
//
//   - Acknowledged means durable: when Index, IndexJSONL, Delete or Write
//     returns, every batch it reports as committed is fsynced in Badger
//     (unless Options.NoSync). Each batch is atomic. A failing batch stores
//     nothing; batches committed before it stay.
//   - Derived indexes (BM25, dense, late interaction) are updated from the change log after each commit, and caught up from
//     their own applied sequence when Open runs. After a crash at any
//     point, Open restores every acknowledged document to every index and
//     removes every deleted one (TestCrash kills a writer 24 times).
//   - The change log is bounded: it keeps only the changes after the
//     lowest sequence every derived index has saved (SavedSeq: what it
//     reopens to after a crash), truncated in the background once that
//     floor can move by Options.TruncateEvery and at Close. An index whose
//     files are missing, damaged or behind the floor rebuilds from the
//     stored documents (BM25) or vectors (dense, late interaction) instead
//     of replaying the log (TestLogTruncation, TestRebuildAfterTruncation,
//     TestStaleBleveBehindFloor). Stats.Log reports the log's length and
//     what holds it.
//   - Search never returns a deleted document: hits are materialised from
//     storage, and a hit whose document is gone is dropped. During a
//     concurrent write a search may therefore return fewer than K hits.
//   - Writers are serialised; searches run concurrently with them and with
//     each other.
//   - A document's vectors are committed in the same atomic batch as the
//     document: Index encodes each batch's texts once per model (pooled
//     and token vectors from one forward pass when the model serves both
//     retrievers), attaches them as blobs "vec/<model>" and
//     "tok/<model>", then writes. A document the schema rejects fails its
//     batch before any encoding.
//   - With a filter, every hit satisfies it: bm25 applies it inside Bleve,
//     dense and late inside FAISS through the filter's bitmap, and each
//     materialised hit is checked once more against its stored fields
//     (filter.Match), so an update applied between two indexes cannot leak.
//   - A search's work is bounded: its filter within Options.FilterLimits
//     (refused before any work otherwise), k+offset within 100,000
//     (compared without overflow), and every stage (filter compilation,
//     the bitmap, each retriever, the hits' loading) stops with its
//     context, so a deadline ends it.
//
// # Models
//
// A collection records in its schema (tandem.Schema.Models) which encoder
// models it indexes, for dense retrieval, late interaction or both, with
// their dimensions. Options.Dense and Options.Late choose them for a new
// collection; Open loads the stored ones for an existing collection, fails
// with ErrModel when one is not installed, and refuses (encoder.ErrDimMismatch)
// a model whose vectors no longer have the stored dimension. Open takes
// each encoder from the process's cache (encoder.Cache), closed by Close:
// the engines of a process that use one model with the same options
// (EncoderThreads, DocumentThreads and the query options below) share one
// load of it, one set of ONNX
// Runtime sessions, whether they are the collections of one server or the
// shard replicas of a cluster node; the last engine to close releases it.
// They share its thread budgets too: their query runs together take at most
// EncoderThreads threads per run and the encoder's concurrent runs, and
// their document runs at most DocumentThreads, so concurrent ingest into
// several collections queues where it would have oversubscribed the cores.
//
// A search encodes its text with encoder.EncodeQuery: from the model's
// cache of query encodings when the text came lately (QueryCacheBytes,
// 64 MiB by default), else in a model run shared with the searches whose
// queries arrived while the model's runs were in flight (QueryBatch,
// QueryBatchWait; a lone search never waits). Either way it ranks as it
// would with a run of its own: the vectors are bit-identical
// (TestQueryEncodingSameRanking). Stats.QueryEncoding counts the cache's
// hits, misses, evictions and size, and the runs.
//
// # Retrievers and fusion
//
// Each derived index implements a small interface declared here (Name,
// AppliedSeq, Apply, Close). Request.Retrievers names the rankings to run:
// "bm25", "dense:<model>" and "late:<model>" (Engine.Retrievers lists the
// collection's). They run concurrently, joined before Search returns; the
// query is encoded once per model. Each contributes its top Depth hits
// (DefaultDepth) to fusion.Fuse with Request.Fusion (DefaultFusion), and
// each fused hit carries, per retriever, its rank, raw score and share of
// the fused score (tandem.Source). Fused, dense and late-interaction
// score ties break by document number; BM25 ties keep Bleve's index
// order, which is fixed between writes but may change when segments merge.
//
// # Highlights
//
// Request.Highlight asks a search to show, on each hit returned
// (tandem.Hit.Highlights), what its query matched. Offsets are
// characters (Unicode code points) of the field value or query text,
// half-open; fragments are plain text with mark ranges beside them, so a
// client marks them without markup and nothing stored can inject any.
//
//   - BM25 fragments (Highlights.Fields), when bm25 is among the
//     retrievers and the query has text: each highlighted text field's
//     value and the query are analysed with that field's analyzer, and
//     every token whose analysed term is one of the query's is marked, as
//     the word it was analysed from (sparse.Highlighter): stemmed forms
//     are marked, stop words never. Fragments of at most FragmentSize
//     characters (longer only to hold one long word whole) are chosen
//     for the most distinct terms, then the most marks; they never
//     overlap or cut a mark, and come in the value's order. A field
//     without a match has none.
//   - Late-interaction matches (Highlights.Late), one entry per late
//     retriever that ran: for every query token (special tokens, prefix,
//     text and ColBERT's [MASK]s included, each labelled with its kind),
//     the document token whose vector gave its largest inner product, the
//     first among equals, and that product. They come from
//     latecollect.Explainer over the document's stored tokens and the
//     query tokens the retriever searched with: each maximum is the one
//     the exact scorer took, computed by the same kernel, and
//     LateMatches.Score, the maxima combined, is bit for bit the hit's
//     Source.Score for that retriever whenever it ranked the document
//     (TestHighlightLate, TestSciFactHighlight). A document token is
//     placed in its field by tokenizing the document's text again with
//     offsets (encoder.Spans; the text fields joined as at indexing,
//     docTextParts), which gives exactly the stored rows when the model
//     encoded the document; a document that brought its own vectors, of
//     another count, keeps its rows unplaced (tandem.TokenUnknown), and
//     so do query tokens a request brought that are not its text's, and
//     every token of an external model. Tokens past the model's maximum
//     length were never encoded and are never matched.
//   - Dense retrieval compares one pooled vector with another: it has no
//     token-level match to show and adds nothing.
//
// The cost is paid for the hits returned only (at most MaxHighlightHits),
// after fusion: per hit an analysis of its highlighted fields, and per
// late retriever one stored token matrix read, one exact scoring and one
// tokenization (BenchmarkHighlight; docs/highlights.md has the figures).
// A document deleted or changed between its ranking and its highlight is
// highlighted as stored when highlighted. Shard.Highlight computes a
// sharded search's highlights on each document's shard. A non-strict
// collection that meets two new text fields in one document may have
// encoded them in another order than the schema then records; the
// token counts agree, so their late matches may then be placed in the
// wrong one of the two fields.
//
// # Fusion default
//
// Request.Fusion defaults to DefaultFusion, min-max, with equal weights and
// DefaultDepth hits per retriever; DefaultFusion's comment says why. The
// weights stay equal because weights fitted on one set of judged queries
// did not carry over to another (docs/evaluation.md); Tune fits them, and
// the method and depth, on a collection's own judged queries.
//
// # Facets
//
// Request.Facets asks for facet counts, and Result.Facets answers in the
// request's order (types in facets.go). A keyword, keywords or bool field
// gives its values with the documents holding each, most first, ties by
// value; a number or date field gives the documents in each of the
// ranges the request names, half-open [from, to), or a histogram:
// buckets [k·interval, (k+1)·interval) for a number field, and for a
// date field calendar buckets in UTC (minute to year; weeks from Monday)
// or fixed lengths aligned to multiples of the length since 1970. A facet
// counts documents: a keywords document counts once for each distinct
// value it holds. Every facet reports the documents it counted (Docs)
// and those without a value (Missing).
//
// Request.FacetScope chooses the documents counted:
//
//   - FacetScopeFilter, the default: every document the request's
//     filter matches, every document without one, whatever the text and
//     the retrievers. These are the documents a page narrows down to
//     when a value is added to the filter, and their counts do not move
//     as a query is typed.
//   - FacetScopeResults: the first FacetWindow hits (default
//     DefaultFacetWindow, raised to K+Offset, at most 100,000; a scope
//     or window without facets, or a window of the filter scope,
//     changes nothing) of the fused
//     ranking, or all of it when the retrievers found fewer. Every
//     retriever's depth is raised to the window as it is to K+Offset, so
//     the window is the hits a search with K = FacetWindow and Offset 0
//     returns, and the page is its ranks Offset+1 to Offset+K.
//
// Counts are exact under these definitions: they are read from the BM25
// index's doc values (sparse.ScanValues) in one snapshot, as the filter's
// bitmap is; during a write they may be a write away from the hits'
// stored fields, which materialisation reads later.
//
// A disjunctive facet (FacetRequest.Disjunctive) is counted as if the
// filter did not hold its field's own conditions: the filter's top-level
// conjuncts (the filter itself, or the clauses of its and, nested ands
// flattened) that refer to that field alone are dropped, and every other
// clause kept, including one that mixes the field with others. So with
// {"and":[{"terms":{"lang":["en","fr"]}},{"range":{"year":{"gte":2000}}}]},
// a disjunctive lang facet counts the documents of 2000 on, every
// language. Facets whose filter is the same are counted together: the
// filter scope scans the doc values once per distinct filter, and the
// results scope ranks once more per distinct reduced filter (every
// retriever runs again under it) and counts that ranking's window.
//
// Invariants, which TestFacetsProperty checks against a brute-force count
// of the stored documents over random documents, filters, retrievers,
// scopes, windows, pages and facets:
//
//   - A values facet lists at most Size values, each in at least
//     MinCount documents; the values left out number OtherValues and
//     their counts sum to Other, so the listed counts plus Other count
//     every (document, value) pair, and for a keyword or bool field,
//     plus Missing, every document (Docs).
//   - A range facet lists every range, in the request's order, even
//     empty; ranges may overlap.
//   - A histogram lists its buckets with at least MinCount documents
//     (default 1: empty buckets are left out), ascending; with MinCount
//     1 its counts plus Missing are Docs.
//   - The shards of a collection count their own documents and their
//     FacetCounts add up (Shard.Facets, Plan.Facets): a cluster's facets
//     equal one engine's.
//
// Bounds: MaxFacets facets, Size up to MaxFacetSize, MaxFacetRanges
// ranges, and MaxFacetBuckets buckets per histogram, which fails, asking
// for a larger interval, when its documents would need more; each is
// refused with ErrBadRequest naming the facet, field and parameter. A
// values facet holds every distinct value of its scope in memory while it
// counts, as Bleve's own terms facet does. A request without facets does
// no facet work. docs/facets.md has the measurements.
//
// # Usage
//
// See Example_hybrid: Open with Options.Dense and Options.Late, Index or
// IndexJSONL, Search with Retrievers: e.Retrievers() and a Filter, Close.
package engine
