// Package fusion merges ranked lists from several retrievers: reciprocal
// rank fusion (plain and weighted), normalised score combinations and
// CombSUM/CombMNZ. It is pure functions over ranked lists, and every fused hit
// explains the contribution of each retriever.
package fusion
