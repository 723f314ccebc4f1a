package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// Catalog is a node's view of the cluster's collections, as the HTTP
// server takes it (server.Catalog): tandem serve --cluster serves the
// same API as a single node.
type Catalog struct {
	Node *Node
	// Shards and Replicas are those of the collections it creates; 0
	// means 3 shards and min(3, nodes) replicas.
	Shards, Replicas int
}

// List names the collections.
func (c Catalog) List() []string {
	var out []string
	for _, s := range c.Node.Collections() {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	return out
}

// Open returns a collection; a name the cluster does not know is an
// error wrapping fs.ErrNotExist.
func (c Catalog) Open(name string) (*Collection, error) {
	if _, err := c.Node.collection(name); err != nil {
		return nil, err
	}
	return &Collection{n: c.Node, name: name}, nil
}

// Create creates a collection with opts' Schema, Dense, Late, LateIndex
// and LateEncoding.
func (c Catalog) Create(ctx context.Context, name string, opts engine.Options) (*Collection, error) {
	shards, replicas := c.Shards, c.Replicas
	if shards == 0 {
		shards = 3
	}
	if replicas == 0 {
		replicas = min(3, len(c.Node.activeNodes()))
	}
	err := c.Node.CreateCollection(ctx, CollectionSpec{Name: name, Shards: shards, Replicas: replicas,
		Schema: opts.Schema, Dense: opts.Dense, Late: opts.Late, LateIndex: opts.LateIndex, LateEncoding: opts.LateEncoding})
	if err != nil {
		return nil, err
	}
	return &Collection{n: c.Node, name: name}, nil
}

// Drop deletes a collection from every node (Node.DropCollection).
func (c Catalog) Drop(ctx context.Context, name string) error {
	if _, err := c.Node.collection(name); err != nil {
		return err
	}
	return c.Node.DropCollection(ctx, name)
}

// ErrUnsupported marks an operation a cluster does not offer yet.
var ErrUnsupported = fmt.Errorf("cluster: %w", errors.ErrUnsupported)

// Collection is one collection of a cluster, seen from a node, with the
// methods of a single engine that the HTTP server uses.
type Collection struct {
	n    *Node
	name string
}

// local runs fn with one of this node's replicas' engines.
func (c *Collection) local(fn func(*engine.Engine) error) error {
	col, err := c.n.collection(c.name)
	if err != nil {
		return err
	}
	eng, r, err := c.n.anyReplica(col)
	if err != nil {
		return err
	}
	defer r.mu.RUnlock()
	return fn(eng)
}

// Schema is the collection's schema.
func (c *Collection) Schema() *tandem.Schema {
	var s *tandem.Schema
	c.local(func(e *engine.Engine) error { s = e.Schema(); return nil })
	return s
}

// Retrievers lists the collection's retrievers.
func (c *Collection) Retrievers() []string {
	var out []string
	c.local(func(e *engine.Engine) error { out = e.Retrievers(); return nil })
	return out
}

// Mode maps a mode name to retrievers, as engine.Engine.Mode.
func (c *Collection) Mode(name string) ([]string, error) {
	var out []string
	err := c.local(func(e *engine.Engine) error {
		var err error
		out, err = e.Mode(name)
		return err
	})
	return out, err
}

// Count is the number of documents over every shard (0 when a shard
// cannot be reached).
func (c *Collection) Count() uint64 {
	st, _ := c.Stats()
	return st.Docs
}

// Stats are this node's engine's statistics for one of its replicas, with
// Docs and BleveDocs summed over every shard, each read as its leader has
// applied it.
func (c *Collection) Stats() (engine.Stats, error) {
	var st engine.Stats
	if err := c.local(func(e *engine.Engine) error {
		var err error
		st, err = e.Stats()
		return err
	}); err != nil {
		return st, err
	}
	col, err := c.n.collection(c.name)
	if err != nil {
		return st, err
	}
	st.Docs, st.BleveDocs = 0, 0
	ctx := context.Background()
	pos := c.n.leaderPosition(ctx, col)
	for s := range col.shards {
		var ss engine.Stats
		if err := c.n.onShard(ctx, col, s, "stats", &shardRequest{MinIndex: pos[s]}, &ss); err != nil {
			return st, err
		}
		st.Docs += ss.Docs
		st.BleveDocs += ss.BleveDocs
	}
	return st, nil
}

// Get returns a document by id, from a replica of its shard that has
// applied as far as the shard's leader.
func (c *Collection) Get(ctx context.Context, id string) (tandem.Doc, bool, error) {
	col, err := c.n.collection(c.name)
	if err != nil {
		return tandem.Doc{}, false, err
	}
	docs := map[string]tandem.Doc{}
	s := ShardOf(id, col.shards)
	pos := c.n.leaderPosition(ctx, col)
	if err := c.n.onShard(ctx, col, s, "fetch", &shardRequest{IDs: []string{id}, MinIndex: pos[s]}, &docs); err != nil {
		return tandem.Doc{}, false, err
	}
	d, ok := docs[id]
	return d, ok, nil
}

// Delete removes documents by id.
func (c *Collection) Delete(ctx context.Context, ids []string) (engine.IndexResult, error) {
	r, err := c.n.Delete(ctx, c.name, ids)
	return engine.IndexResult{Deleted: r.Deleted, Batches: len(r.Position)}, err
}

// Search searches every shard (Node.Search).
func (c *Collection) Search(ctx context.Context, req engine.Request) (*engine.Result, error) {
	return c.n.Search(ctx, c.name, req, nil)
}

// streamBatch is the number of documents IndexStream writes at once.
const streamBatch = 256

// IndexStream upserts the documents next returns, streamBatch at a time
// (Node.Index). With opts.SkipBad a document the collection refuses is
// reported to opts.OnSkip, as an *engine.DocError whose Index counts
// from the stream's first document, and the others are written.
// opts.Progress is called after each write, with Lines the documents
// read so far, every one of them written or skipped.
func (c *Collection) IndexStream(ctx context.Context, next func() (tandem.Doc, error), opts engine.StreamOptions) (engine.Progress, error) {
	var p engine.Progress
	var batch []tandem.Doc
	var pos []int
	read := 0 // documents next returned
	flush := func() error {
		for len(batch) > 0 {
			r, err := c.n.Index(ctx, c.name, batch)
			var de *engine.DocError
			if err != nil && errors.As(err, &de) && r.Put == 0 && opts.SkipBad && de.Index >= 0 && de.Index < len(batch) {
				// Prepare refused one document before anything was
				// written: report it and write the rest.
				p.Skipped++
				if opts.OnSkip != nil {
					opts.OnSkip(&engine.DocError{Index: pos[de.Index], ID: de.ID, Err: de.Err})
				}
				batch = append(batch[:de.Index:de.Index], batch[de.Index+1:]...)
				pos = append(pos[:de.Index:de.Index], pos[de.Index+1:]...)
				continue
			}
			p.Docs += r.Put
			p.Batches++
			if err != nil {
				if errors.As(err, &de) && de.Index >= 0 && de.Index < len(pos) {
					err = &engine.DocError{Index: pos[de.Index], ID: de.ID, Err: de.Err}
				}
				return err
			}
			batch, pos = batch[:0], pos[:0]
		}
		// Every document read so far is committed or skipped.
		p.Lines = read
		if opts.Progress != nil {
			opts.Progress(p)
		}
		return nil
	}
	for i := 0; ; i++ {
		d, err := next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return p, err
		}
		read++
		batch = append(batch, d)
		pos = append(pos, i)
		if len(batch) == streamBatch {
			if err := flush(); err != nil {
				return p, err
			}
		}
	}
	return p, flush()
}

// Close does nothing: the node owns the collection.
func (c *Collection) Close() error { return nil }
