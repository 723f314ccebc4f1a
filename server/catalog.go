package server

import (
	"context"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// Collection is what the server uses of a collection. *engine.Engine is
// one (a collection on this node); package cluster's Collection is
// another (a collection sharded over a cluster), so that a client cannot
// tell them apart.
type Collection interface {
	Count() uint64
	Retrievers() []string
	Stats() (engine.Stats, error)
	Schema() *tandem.Schema
	Mode(name string) ([]string, error)
	IndexStream(ctx context.Context, next func() (tandem.Doc, error), opts engine.StreamOptions) (engine.Progress, error)
	Get(ctx context.Context, id string) (tandem.Doc, bool, error)
	Delete(ctx context.Context, ids []string) (engine.IndexResult, error)
	Search(ctx context.Context, req engine.Request) (*engine.Result, error)
	Close() error
}

var _ Collection = (*engine.Engine)(nil)

// Catalog holds the collections of a server that does not keep them in
// its data directory: a cluster (Config.Catalog). Collections another
// node creates appear in it.
type Catalog interface {
	// List names the collections.
	List() []string
	// Open returns a collection, or an error wrapping fs.ErrNotExist.
	// The server does not close it.
	Open(name string) (Collection, error)
	// Create makes a collection with opts' Schema, Dense, Late and
	// LateIndex; an existing name is an error wrapping fs.ErrExist.
	Create(ctx context.Context, name string, opts engine.Options) (Collection, error)
	// Drop removes a collection.
	Drop(ctx context.Context, name string) error
}
