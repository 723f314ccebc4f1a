// Package fusion merges ranked lists from several retrievers: reciprocal
// rank fusion (plain and weighted), normalised score combinations and
// CombSUM/CombMNZ. It is pure functions over ranked lists, and every fused hit
// explains the contribution of each retriever.
//
// The entry point is [Fuse], which takes one [List] per retriever and an
// [Options] and returns [Hit]s, each with one [Source] per list. Documents
// are internal document numbers (uint64).
//
// # Usage
//
//	m, err := fusion.ParseMethod("rrf") // from a -fusion flag
//	hits, err := fusion.Fuse([]fusion.List{
//		{Name: "bm25", Depth: 100, Items: sparseHits},
//		{Name: "dense", Weight: 2, Depth: 50, Items: denseHits},
//	}, fusion.Options{Method: m, Limit: 10})
//	for _, h := range hits {
//		fmt.Println(h.Doc, h.Score, h.Sources[0].Rank, h.Sources[1].Contribution)
//	}
//
// # Methods
//
// With w the list's weight, r the 1-based rank, s the raw score and the
// statistics taken per list over its first Depth items:
//
//	rrf      Σ 1/(K+r)                      weights ignored, K = 60 by default
//	wrrf     Σ w/(K+r)
//	minmax   Σ w·(s−min)/(max−min)
//	zscore   Σ w·(s−mean)/σ                 σ: population standard deviation
//	max      Σ w·s/max
//	dbsf     Σ w·(s−(mean−3σ))/(6σ)         distribution-based score fusion
//	combsum  Σ (s−min)/(max−min)            weights ignored
//	combmnz  n·Σ (s−min)/(max−min)          n: lists holding the doc; weights ignored
//
// These are ranx's definitions (ranx 0.3: rrf; min-max, zmuv and max
// normalisation followed by wsum; comb_sum and comb_mnz after ranx's default
// min-max normalisation), and Qdrant's for dbsf, which ranx lacks. As in
// ranx, the max denominator is floored at 1e-9, so a max-normalised list
// whose scores are all ≤ 0 is divided by 1e-9 (use minmax for such scores).
// DBSF does not clip scores beyond mean ± 3σ.
//
// # Lists whose scores are all equal
//
// A list of one hit, or whose spread (max − min; σ for zscore and dbsf) is
// under 1e-9, has nothing to normalise by. ranx maps it to 0, which makes
// the best match of a one-hit search look like no match. Tandem follows
// Elasticsearch's linear retriever and Weaviate's relative-score fusion
// instead: under minmax, combsum and combmnz each of its scores normalises
// to 1 (the list's best), and under dbsf to 0.5 (the centre of mean ± 3σ).
// Under zscore it is 0, the mean's z-score. rrf, wrrf and max divide by no
// spread (max gives s/s = 1 for one positive score).
//
// # Invariants
//
//   - A doc missing from a list contributes 0 (ranx's convention), and its
//     Source has Rank 0. The contributions of a hit add up to its score.
//   - Hits are ordered by fused score descending, then Doc ascending, so the
//     output depends only on the input, never on map order.
//   - Fuse rejects, naming the list and item: a doc twice in one list, a
//     non-finite score, a negative or non-finite weight, a negative depth.
//
// scripts/crosscheck/fusion_expected.py computes every method with ranx on
// the committed fixture in testdata/, and the tests compare with it.
package fusion
