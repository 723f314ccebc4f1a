// Package sparse owns BM25 retrieval over a Bleve v2 inverted index
// (scoring model "bm25"), the text analysis of each schema field, and the
// compilation of metadata filters into Bleve queries and bitmaps.
//
// The Bleve index is derived state: it is caught up with the change log
// kept in storage (Index.Apply) and, when it is missing or behind what the
// log still holds, rebuilt from the stored documents (Index.Rebuild). The
// main type is Index.
//
// # Invariants
//
//   - The Bleve document id is the decimal internal document number, never
//     the external id: hits are mapped back through storage, which also
//     guarantees that a document deleted since the index caught up is not
//     returned.
//   - Apply writes the changes and the last applied sequence (the internal
//     key "tandem.applied_seq") in one Bleve batch, so after a crash the
//     index holds exactly the changes up to its recorded sequence, and
//     replaying the log from there converges. Replayed changes at or below
//     the recorded sequence are skipped.
//   - Bleve writes batches to disk in the background (unsafe_batch), in
//     order. SavedSeq, at most AppliedSeq, is the last sequence of a batch
//     Bleve's persister has written and synced (the batch's persisted
//     callback), or the sequence Open read, or AppliedSeq after Close's
//     flush: after a crash the index reopens at SavedSeq or later, so the
//     change log must keep the changes after it (TestPersistedSeq).
//   - Rebuild reads the log's last sequence s0 before it scans the
//     documents, indexes them into a new, empty index in batches, and
//     records s0 as the applied sequence in the final batch only: an
//     interrupted rebuild leaves no applied sequence, so the index opens
//     at 0 and is rebuilt again (TestRebuildInterrupted). Catching up
//     from s0 applies again what the scan already saw, to the same state.
//     A rebuilt index equals one built by applying the whole log: the same
//     documents, BM25 statistics and scores (TestRebuildFromDocs).
//   - Documents are indexed with Batch.IndexAdvanced from the schema, not
//     through a Bleve mapping, because a non-strict schema gains fields
//     after the index is created. Text fields are analysed with their
//     analyzer ("en" by default); keyword fields are single terms;
//     numbers, dates and bools use Bleve's numeric, datetime and boolean
//     fields; the internal field "_exists" lists the fields a document has.
//   - Keyword, keywords and bool fields also keep doc values (layout 3):
//     each document's terms in a column beside the inverted index. A
//     number or date field keeps its exact value, the shift-0
//     prefix-coded term, in an internal field of its own,
//     "_value.<field>", with doc values: Bleve indexes a number at every
//     precision shift, 16 terms, which the field's own doc values would
//     hold and a scan would visit. ScanValues reads these columns for the
//     documents of a scope (a filter's matches, optionally cut to listed
//     documents) without loading a stored document: the engine counts
//     facets with it. A keywords field's terms are distinct per document.
//     Over 100,000 documents with five metadata fields (BenchmarkFacets,
//     docs/facets.md) the columns add 3% to the index (41.6 MB against
//     40.4 MB without; doc values on the number and date fields
//     themselves made it 46.9 to 51.7 MB) and counting a year histogram
//     over every document takes 12 ms (53 ms through the fields' own doc
//     values).
//
// # Scoring
//
// Every text field is indexed on its own and also joined, space-separated,
// into the internal field "_text", which queries search by default: one
// combined field ranks BEIR collections better than a disjunction of
// title and text, boosted or not (docs/evaluation.md has the SciFact
// figures). Query.Fields searches chosen fields with boosts instead.
//
// Scoring is textbook BM25 (bm25.go has the formula) unless the schema
// chooses Bleve's own (tandem.BM25Bleve). The textbook scorer is a Bleve
// query with its own searcher, so top-k collection and paging stay
// Bleve's. The searcher scores term at a time from each segment's postings
// (zap stores each document's field length exactly, as the norm's bits),
// and, told the K of the search, yields only the top K, cut as the next
// section says (TestBM25TopKCut). The number of documents and total
// length of each field come from statistics that Apply keeps in the same
// batch as the documents: a replaced or deleted
// document's lengths come out through the internal length field's doc
// values. TestBM25MatchesReference pins its scores, to 1e-6, to an
// independent Python implementation over the same analysed tokens.
//
// # Dynamic pruning
//
// Asked for the top K, the textbook scorer skips the documents that cannot
// enter it (prune.go): block-max MaxScore, document at a time, with each
// term's largest tf and smallest length per block of 128 postings,
// computed once per segment and term (segments never change) and cached
// while the segment lives; a list of fewer than 4,096 postings is bounded
// by its term's weight alone. A filter is then tested per candidate against
// its bitmap in the segment (as FilterBitmap computes it) instead of
// running its searcher over every match. The hits and their scores are
// bit for bit the exhaustive path's, which Query.Exhaustive keeps for
// tests and benchmarks (TestPrunedMatchesExhaustive: random queries, k,
// filters, field boosts, sharded statistics, deleted and replaced
// documents). Figures are in docs/bm25.md.
//
// # Equal scores
//
// Search ranks equal scores by ascending document number, and when more
// documents tie at the K-th best score than K leaves room for, it returns
// the ones with the smallest numbers: the hits, and a page cut from the
// top K+Offset, are a function of the live documents and their scores,
// the same in an index built batch by batch, merged or not, and in one
// rebuilt (TestTiesByDocNum). Bleve alone would break ties by its hit
// number, the order of the snapshot's documents, which a merge changes.
//
// The searcher chooses the top K, not Bleve's collector (topk.go), in a
// heap that maps a document to its number only when its score equals one
// it is compared with, through the cache FilterBitmap uses (see Filters):
// the textbook scorer over the matches it holds anyway, and a cutQuery,
// which takes another searcher's matches one at a time, for Bleve's BM25.
// Either yields exactly the top K, which the collector keeps whole, and
// Search sorts them. A search with no text scores every match alike, so
// its top K are the smallest document numbers among the filter's
// matches: searchAll reads them from the filter's bitmaps, with no Bleve
// searcher (TestSearchAllMatchesBleve holds it to Bleve's match-all).
// A second sort key in Bleve's collector, after the score, would load
// the id of every match instead.
//
// Over 1,000,000 documents (BenchmarkSearchMillion; 2-core AMD EPYC with
// AVX-512, two runs alternating with the previous code, medians in ms):
// a search with no text takes 5.8 against 27 through Bleve's match-all,
// 3.4 against 66 filtered to half the documents, and 28 against 27 when
// the cache of document numbers is cold, as after a merge replaced every
// segment (Bleve's sort by id: 70); a textbook BM25 query whose 100,000
// matches all score alike takes 2.8 against 3.3, and 7.3 against 3.3
// with the cache cold. Over 200,000
// documents (BenchmarkSearch) textbook BM25 without ties and Bleve's BM25
// stay within 3%, Bleve's BM25 with 20,000 tied matches takes 10% more.
//
// # Sharded scoring
//
// A collection split into shards ranks as one index holding all its
// documents would, in two phases after Bleve's pre-search. First each
// shard's QueryStats reads, from one snapshot, the statistics of the
// query's analysed terms in the searched fields: per field the documents
// with a token in it and their total length, per term the live documents
// holding it. These count disjoint sets of documents, so their sum
// (Stats.Add) is the whole collection's. Then each shard searches with the
// sum as Query.Stats: its scorer takes N, avgdl and df from the sum and tf
// and dl from its own postings, through the same expressions as an
// unsharded search, so every document scores bit for bit as in one index,
// and the shards' top K, merged by score, are the one index's top K up to
// the order of equal scores (TestShardedBM25MatchesOneIndex on SciFact,
// TestShardedBM25Synthetic on a generated collection with replaced and
// deleted documents). This holds when no shard changes between the two
// phases. A filter restricts each shard's ranking and, as unsharded, no
// statistic. Bleve's own BM25 keeps its statistics per segment layout
// and refuses collection statistics.
//
// Bleve's BM25 is not the textbook formula (pinned in TestBM25PinnedScores):
// sqrt(tf), k1=1.2 and b=0.75 fixed, average length ceil(vocabulary size /
// doc count) per segment layout, query norm 1/sqrt(Σ idf²), and a coord
// factor matched/total terms. Its scores therefore shift slightly with
// segment layout (batch sizes), and it ranks SciFact and Cranfield below
// the textbook formula (docs/evaluation.md).
//
// # Filters
//
// A filter compiles (Compile) into a Bleve query that matches exactly what
// filter.Match accepts. With textbook BM25 the scorer runs the filter's
// (unscored) Bleve searcher itself over its matches before the cut at K;
// with Bleve's scoring, Search applies it as the Filter clause of a
// boolean query whose only other clause is the text query. Either way a
// filtered ranking is the unfiltered ranking restricted to the matching
// documents, with identical scores (a conjunction would change Bleve's
// through the coord factor and query norm). FilterBitmap
// returns the matching internal document numbers as a roaring64 bitmap for
// the dense and late-interaction retrievers: document numbers are uint64
// and never reused, so a 32-bit bitmap would cap a collection's lifetime at
// 2^32 insertions.
//
// FilterBitmap runs no searcher: it compiles the filter to the terms
// Compile's query would search for (a keyword's own term, a bool's "T"
// or "F", the "_exists" term of a field, a prefix's terms, and for a
// number or date range the prefix-coded terms of Bleve's trie split,
// trieRanges), reads their postings in each segment as roaring bitmaps,
// unites, intersects and complements them as the filter says, and drops
// the segment's deleted documents. A range's terms are found by walking
// the dictionary between the ends of each part of the split, so a range
// costs a few hundred terms at most, whatever it spans (Bleve's searcher
// enumerates every possible term of each part). TestFilterBitmapMatchesSearch
// and TestFilterBitmapRanges hold it to Bleve's search of the compiled
// query on random filters, TestTrieRanges the split to the values it
// covers.
//
// It maps each match to its document number through a cache, not
// through the match's stored id: per segment, the document number of
// each of its documents, read from the stored id on first use. A segment
// never changes, so an entry is valid for as long as the segment lives,
// whichever snapshot holds it and whatever that snapshot deletes (a
// deleted document is dropped before it is mapped). Search maps
// documents through the same cache to choose among equal scores (see
// Equal scores). The cache keeps only the segments of the last snapshot
// FilterBitmap or Search read it for, 8 bytes for each of their
// documents, deleted ones included, and none after Close
// (TestFilterBitmapDuringApply).
//
// # Highlighting
//
// Highlighter marks what a query's text matches in a text field's value:
// the query and the value are analysed with the field's analyzer, and each
// token of the value whose analysed term is one of the query's is marked,
// with its byte range in the value (the range of the word it came from,
// so "cat's" for the term "cat"). Stemmed forms are therefore marked
// ("running" marks "runs" with "en") and stop words never, since the
// analyzer drops them from both (TestHighlighterMarksAnalysedTerms). The
// marks say which words share a term with the query, whichever field the
// search scored: a search of the default CompositeField analyses with the
// first text field's analyzer, a highlight of another field with that
// field's.
//
// # Cancellation
//
// Search and FilterBitmap stop with the context's error once it is done,
// at every stage of their work: Compile looks at each node, each clause
// of a compiled filter as Bleve builds its searcher and every 1024 moves
// of it (Bleve's searchers never look, and its collector only between
// matches, so a filter walking postings that match nothing would not
// stop), and the BM25 scorer before each term's postings and every 65,536
// postings, or, pruned, every 1024 candidates (TestFilterHonoursContext). A prefix clause is the one whose
// expansion has no bound (every term of the field may start with it):
// Bleve builds a term searcher per matching term, uninterruptibly, so the
// clause has a searcher of its own, which unites each segment's postings
// of the matching terms and looks every 256 terms (TestPrefixMatchesBleve,
// TestPrefixHonoursContext). A prefix matching all of 200,000 distinct
// keywords took 1.76 s through Bleve's and takes 0.08 s. FilterBitmap
// looks at each node as it compiles the filter, at each clause in each
// segment, every 256 terms of a prefix or range, and every 1024 matches
// it maps.
package sparse
