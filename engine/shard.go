package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/latecollect"
	"github.com/tandemsearch/tandem/sparse"
	"github.com/tandemsearch/tandem/storage"
)

// A collection split over several engines (the shards of package cluster)
// is searched in phases, so that it ranks exactly as one engine holding
// every document would:
//
//  1. the coordinating engine checks the request (Shard.Plan) and encodes the
//     query once (EncodeQuery), so that no shard encodes it again;
//  2. every shard reports the BM25 statistics of the query's terms and
//     what its late-interaction token search collected (Collect); the
//     coordinator sums the statistics and chooses the
//     late-interaction candidates over every shard
//     (latecollect.MergeCandidates);
//  3. every shard ranks with the sums and its own candidates (Rank); the
//     coordinator merges each retriever's lists into one, cut to its depth,
//     and fuses them with its Plan;
//  4. the shards load the page's documents (Fetch).
//
// Dense retrieval needs no phase of its own: a document's vector lives
// with it, and each shard's best hits include every one of its documents
// in the union's best hits. Ranks tied at equal scores may differ from
// one engine's, which breaks ties by document number.

// Shard is an engine seen as one shard of a collection split over several
// engines (package cluster): the phases of a sharded search, the writes a
// replica applies, and the store beneath. A program that embeds one engine
// needs none of it; Engine.Shard returns it.
type Shard struct{ e *Engine }

// Shard returns the engine's shard methods.
func (e *Engine) Shard() *Shard { return &Shard{e} }

// Write commits one storage batch atomically and applies it to the derived
// indexes, as Index and Delete do with the batches they build: a replica
// applies the batches its log replicates, which may carry blobs
// (vectors) and marks. Once storage commits, the batch is acknowledged: if
// a derived index then fails, the error is returned but the batch stays
// committed and the index catches up on the next Open. A document the
// store refuses is a *DocError naming its position in the batch.
func (s *Shard) Write(ctx context.Context, b *storage.Batch) (storage.WriteResult, error) {
	r, err := s.e.write(ctx, b)
	return r, docFailure(err, false)
}

// Store is the source of truth beneath the engine: its marks, change log,
// backups and documents, which a replica reads and restores.
func (s *Shard) Store() *storage.Store { return s.e.st }

// What a replica and a coordinator handle, named here so that they reach
// the store and the retrievers only through the engine.
type (
	// Batch is an atomic batch of puts (with their blobs), deletes and
	// marks, as Shard.Write commits it and a replica's log carries it.
	Batch = storage.Batch
	// WriteResult describes a committed Batch.
	WriteResult = storage.WriteResult
	// BM25Stats are a query's BM25 statistics (Collected.BM25,
	// ShardOptions.BM25), summed over the shards by the coordinator.
	BM25Stats = sparse.Stats
	// LateCollection is what one shard's late-interaction token search
	// collected (Collected.Late), for latecollect.MergeCandidates.
	LateCollection = latecollect.Collection
)

// ErrBatchTooLarge is Shard.Write's error for a Batch too large for one
// store transaction; nothing of it is stored.
var ErrBatchTooLarge = storage.ErrBatchTooLarge

// RestoreStore creates a collection's store in dir, which must not hold
// one, from a backup written by Shard().Store().Backup: a replica that
// catches up from a peer's snapshot. noSync is Options.NoSync.
func RestoreStore(dir string, r io.Reader, noSync bool) error {
	return storage.Restore(dir, r, &storage.Options{NoSync: noSync})
}

// ShardOptions run a search as one shard of a collection split over
// several engines.
type ShardOptions struct {
	// BM25 holds the collection's statistics for the query, the sum of
	// every shard's Collected.BM25; nil scores with this engine's own.
	BM25 *sparse.Stats `json:"bm25,omitempty"`
	// Late holds, per late-interaction retriever (canonical name,
	// "late:<model>"), what this shard scores exactly. A retriever with no
	// entry searches on its own (residual-code indexes, which collect
	// nothing shard-independent).
	Late map[string]LateWork `json:"late,omitempty"`
}

// LateWork is the part of a late-interaction search one shard scores:
// the candidates the coordinator chose for it, or, with AllAllowed, every
// document the filter allows (when every shard together allows no more
// than the candidate cap, as one engine would).
type LateWork struct {
	Docs       []uint64 `json:"docs,omitempty"`
	AllAllowed bool     `json:"all_allowed,omitempty"`
}

func (so *ShardOptions) late(name string) (LateWork, bool) {
	if so == nil {
		return LateWork{}, false
	}
	w, ok := so.Late[name]
	return w, ok
}

// EncodeQuery returns req with a query vector in Vectors for every dense
// and late-interaction retriever that would otherwise encode the text, so
// that shards given it encode nothing, and req's plan. Each model encodes
// once.
func (s *Shard) EncodeQuery(ctx context.Context, req Request) (Request, *Plan, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return req, nil, err
	}
	defer e.mu.RUnlock()
	q := newQueries(p)
	if len(q.m) == 0 {
		return req, p, nil
	}
	vs := make(map[string]tandem.Vectors, len(req.Vectors)+len(q.m))
	for k, v := range req.Vectors {
		vs[k] = v
	}
	for m, x := range q.m {
		b, err := q.encode(ctx, m)
		if err != nil {
			return req, nil, err
		}
		v := vs[m.spec.Name]
		if m.spec.Dense && v.Dense == nil {
			v.Dense = b.Vectors[0]
		}
		if x.tokens && v.Tokens == nil {
			t := b.Tokens[0]
			v.Tokens = make([][]float32, len(t.Vectors)/t.Dim)
			for i := range v.Tokens {
				v.Tokens[i] = t.Vectors[i*t.Dim : (i+1)*t.Dim : (i+1)*t.Dim]
			}
		}
		vs[m.spec.Name] = v
	}
	req.Vectors = vs
	return req, p, nil
}

// Collected is a shard's part of a search's first phase: the BM25
// statistics of the query's terms (nil when no BM25 retriever runs or
// there is no text) and, by canonical retriever name, what each
// late-interaction retriever's token search collected (no entry for the
// exhaustive ones, nor for residual-code indexes, which collect nothing
// shard-independent).
type Collected struct {
	BM25 *sparse.Stats                      `json:"bm25,omitempty"`
	Late map[string]*latecollect.Collection `json:"late,omitempty"`
}

// Collect runs the first phase of a sharded search on this engine, with
// one plan and one filter bitmap for every retriever. Query vectors come
// from req.Vectors, else the text is encoded.
func (s *Shard) Collect(ctx context.Context, req Request) (*Collected, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	out := &Collected{Late: map[string]*latecollect.Collection{}}
	var allow *roaring64.Bitmap
	q := newQueries(p)
	for _, r := range p.rets {
		switch {
		case r.kind == "bm25" && req.Text != "" && out.BM25 == nil:
			st, err := e.sparse.QueryStats(ctx, p.schema, sparse.Query{Text: req.Text, Fields: req.Fields})
			if err != nil {
				return nil, fmt.Errorf("engine: bm25 statistics: %w", err)
			}
			out.BM25 = &st
		case r.kind == "late" && !r.exact:
			if p.filter != nil && allow == nil {
				if allow, err = e.allowed(ctx, p); err != nil {
					return nil, err
				}
			}
			qt, err := q.tokens(ctx, &r)
			if err != nil {
				return nil, err
			}
			c, err := r.model.late.Collect(ctx, qt, &latecollect.SearchOptions{K: r.depth, Allow: allow, Scoring: p.scoring})
			if errors.Is(err, latecollect.ErrNoCollect) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("engine: %s: %w", r.name, err)
			}
			out.Late[r.name] = c
		}
	}
	return out, nil
}

// Ranked is one retriever's ranking on one shard: its hits best first,
// with their ids, cut to the retriever's depth.
type Ranked struct {
	Retriever string      `json:"retriever"`
	Hits      []RankedHit `json:"hits"`
}

// RankedHit is one document of a Ranked list.
type RankedHit struct {
	ID     string  `json:"id"`
	DocNum uint64  `json:"doc"`
	Score  float64 `json:"score"`
}

// Rank runs req's retrievers as one shard of a collection (see
// ShardOptions) and returns their rankings, unfused, in the order of
// Plan.Retrievers. A document deleted since an index last caught up is
// left out.
func (s *Shard) Rank(ctx context.Context, req Request, so *ShardOptions) ([]Ranked, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	rets, err := e.run(ctx, p, so)
	if err != nil {
		return nil, err
	}
	var nums []uint64
	for _, r := range rets {
		for _, h := range r.hits {
			nums = append(nums, h.Doc)
		}
	}
	idOf, err := e.st.IDs(nums)
	if err != nil {
		return nil, fmt.Errorf("engine: load hits: %w", err)
	}
	out := make([]Ranked, len(rets))
	for i, r := range rets {
		out[i] = Ranked{Retriever: r.name, Hits: make([]RankedHit, 0, len(r.hits))}
		for _, h := range r.hits {
			if id, ok := idOf[h.Doc]; ok {
				out[i].Hits = append(out[i].Hits, RankedHit{ID: id, DocNum: h.Doc, Score: h.Score})
			}
		}
	}
	return out, nil
}

// Fetch loads the documents with the given ids that exist and match
// req's filter (when it has one), for the page of a sharded search.
// Documents deleted since they were ranked are left out.
func (s *Shard) Fetch(ctx context.Context, req Request, ids []string) (map[string]tandem.Doc, error) {
	e := s.e
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	schema := e.st.Schema()
	var fe filter.Expr
	if len(strings.TrimSpace(string(req.Filter))) > 0 {
		// As plan reads it: a blank filter is none.
		var err error
		if fe, err = e.compileFilter(req.Filter, schema); err != nil {
			return nil, err
		}
	}
	nums := make([]uint64, 0, len(ids))
	for _, id := range ids {
		n, ok, err := e.st.Lookup(id)
		if err != nil {
			return nil, fmt.Errorf("engine: fetch %q: %w", id, err)
		}
		if ok {
			nums = append(nums, n)
		}
	}
	docs, err := e.st.GetMany(nums)
	if err != nil {
		return nil, fmt.Errorf("engine: fetch: %w", err)
	}
	out := make(map[string]tandem.Doc, len(docs))
	for _, d := range docs {
		if fe == nil || filter.Match(fe, schema, d.Fields) {
			out[d.ID] = d
		}
	}
	return out, nil
}

// Prepared is a document ready to commit: checked against the schema,
// with a blob for every model of the collection, from the vectors it
// brought or encoded. Package cluster replicates prepared documents, so
// that a document is encoded once, by the node that accepted it, and every
// replica stores the same vectors.
type Prepared struct {
	Doc   tandem.Doc        `json:"doc"`
	Blobs map[string][]byte `json:"blobs,omitempty"`
}

// Prepare checks docs and computes their blobs as Index does before it
// commits them. A document's error is a *DocError naming it by
// its index in docs. Fields a document adds to a non-strict schema are
// checked against the schema as it is, not as the earlier documents of
// docs would extend it.
func (s *Shard) Prepare(ctx context.Context, docs []tandem.Doc) ([]Prepared, error) {
	e := s.e
	if err := e.enter(); err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	schema := e.st.Schema()
	cs := make([]checked, len(docs))
	for i, d := range docs {
		c, err := e.check(schema, d)
		if err != nil {
			return nil, docFailure(&docError{pos: i, id: d.ID, err: err}, false)
		}
		cs[i] = c
	}
	var blobs []map[string][]byte
	if len(e.models) > 0 {
		in, err := e.tokenize(cs)
		if err != nil {
			return nil, err
		}
		if blobs, _, err = e.encodeChecked(ctx, cs, in); err != nil {
			return nil, docFailure(err, false)
		}
	}
	out := make([]Prepared, len(docs))
	for i, c := range cs {
		d := c.doc
		d.Vectors = nil // in the blobs now
		out[i] = Prepared{Doc: d}
		if blobs != nil {
			out[i].Blobs = blobs[i]
		}
	}
	return out, nil
}

// ChooseLate decides, from every shard's Collected.Late entry for the
// late-interaction retriever name (cols[i] is shard i's), what each shard
// scores, as this engine's own search would choose over the union of the
// shards (latecollect.Index.Choose).
func (s *Shard) ChooseLate(req Request, name string, cols []*latecollect.Collection) ([]LateWork, error) {
	e := s.e
	p, err := e.enterPlan(req)
	if err != nil {
		return nil, err
	}
	defer e.mu.RUnlock()
	for _, r := range p.rets {
		if r.name != name || r.kind != "late" {
			continue
		}
		so := &latecollect.SearchOptions{K: r.depth, Scoring: p.scoring}
		if p.filter != nil {
			// The filter's presence decides the rule; the shards counted
			// the documents it allows.
			so.Allow = roaring64.New()
		}
		all, docs, err := r.model.late.Choose(cols, so)
		if err != nil {
			return nil, fmt.Errorf("engine: %s: %w", name, err)
		}
		out := make([]LateWork, len(cols))
		for i := range out {
			if all {
				out[i].AllAllowed = true
			} else {
				out[i].Docs = docs[i]
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: %q is not a late-interaction retriever of the request", ErrBadRequest, name)
}

// BlobVectors decodes model's vectors from a prepared document's blobs:
// a document given them as Doc.Vectors is stored with the same blobs.
func BlobVectors(blobs map[string][]byte, model string) (tandem.Vectors, error) {
	var v tandem.Vectors
	if b := blobs[dense.BlobName(model)]; b != nil {
		var err error
		if v.Dense, err = decodeDense(b, model); err != nil {
			return v, err
		}
	}
	if b := blobs[latecollect.BlobName(model)]; b != nil {
		var err error
		if v.Tokens, err = decodeTokens(b, model); err != nil {
			return v, err
		}
	}
	return v, nil
}

// decodeDense decodes a stored dense vector blob of model.
func decodeDense(b []byte, model string) ([]float32, error) {
	v, err := dense.DecodeVector(b, len(b)/4)
	if err != nil {
		return nil, fmt.Errorf("engine: %s vector: %w", model, err)
	}
	return v, nil
}

// decodeTokens decodes a stored token matrix blob of model into rows.
func decodeTokens(b []byte, model string) ([][]float32, error) {
	flat, dim, err := latecollect.DecodeTokens(b)
	if err != nil {
		return nil, fmt.Errorf("engine: %s tokens: %w", model, err)
	}
	var rows [][]float32
	for r := 0; r+dim <= len(flat); r += dim {
		rows = append(rows, flat[r:r+dim:r+dim])
	}
	return rows, nil
}

// ScanVectors calls fn with the id and stored vectors of every live
// document that holds model's vectors of kind ("dense": Vectors.Dense;
// "late": Vectors.Tokens), in document-number order: what `tandem export`
// writes. A document deleted during the scan may be left out.
func (s *Shard) ScanVectors(ctx context.Context, model, kind string, fn func(id string, v tandem.Vectors) error) error {
	var blob string
	var decode func([]byte) (tandem.Vectors, error)
	switch kind {
	case "dense":
		blob = dense.BlobName(model)
		decode = func(b []byte) (v tandem.Vectors, err error) { v.Dense, err = decodeDense(b, model); return v, err }
	case "late":
		blob = latecollect.BlobName(model)
		decode = func(b []byte) (v tandem.Vectors, err error) { v.Tokens, err = decodeTokens(b, model); return v, err }
	default:
		return fmt.Errorf("%w: vectors of kind %q: want dense or late", ErrBadRequest, kind)
	}
	st := s.e.st
	return st.ScanBlobs(ctx, blob, func(num uint64, value []byte) error {
		ids, err := st.IDs([]uint64{num})
		if err != nil {
			return err
		}
		id, ok := ids[num]
		if !ok {
			return nil // deleted since the scan began
		}
		v, err := decode(value)
		if err == nil {
			err = fn(id, v)
		}
		if err != nil {
			return fmt.Errorf("document %q: %w", id, err)
		}
		return nil
	})
}
