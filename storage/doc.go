// Package storage is Tandem's source of truth, kept in Badger v4: documents,
// metadata, vectors, token vectors, id maps, index snapshots and the change
// log from which every derived index (Bleve, FAISS) is rebuilt or caught up.
package storage
