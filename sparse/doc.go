// Package sparse owns BM25 retrieval over a Bleve v2 inverted index
// (scoring model "bm25"), the text analysis of each schema field, and the
// compilation of metadata filters into Bleve queries.
//
// The Bleve index is derived state: it is rebuilt from, and caught up with,
// the change log kept in storage.
package sparse
