// Package engine is Tandem's public Go API: it opens a collection directory,
// indexes and deletes documents, and runs filtered hybrid searches that fuse
// BM25, dense and late-interaction rankings.
//
// An Engine owns every goroutine and native object it creates; Close releases
// them. All methods are safe to call from concurrent goroutines.
package engine
