// Package latecollect owns token-level late interaction: every document token
// key is held in a FAISS index, each query token collects its nearest
// document tokens, and the documents they belong to are rescored exactly over
// all of their tokens (ReAtt avg-max or ColBERT sum-of-MaxSim).
package latecollect
