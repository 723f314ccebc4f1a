package sparse

import (
	"context"
	"errors"
	"fmt"

	"github.com/tandemsearch/tandem"
)

// Sharded scoring, after Bleve's pre-search: a collection split into
// shards ranks as one index holding all its documents would when every
// shard scores with the collection's statistics rather than its own. The
// coordinator asks each shard for the statistics of the query's terms
// (QueryStats), sums them (Stats.Add), and sends the sum with the query
// (Query.Stats); each shard then scores its documents with the
// collection's N, total lengths and dfs, and the shards' hits merge by
// score.

// FieldStats are one field's BM25 collection statistics.
type FieldStats struct {
	Docs   uint64 `json:"docs"`   // documents with a token in the field
	Tokens uint64 `json:"tokens"` // their tokens, in total
}

// Stats are the collection statistics a BM25 query is scored with: per
// searched field, the documents with a token in it and their total
// length, and per analysed query term, the live documents holding it in
// that field. Every one is a count over documents, so summing the Stats
// of indexes holding disjoint sets of documents gives the Stats of the
// index holding their union, and a Query carrying the union's Stats
// scores every document exactly as the union's index would.
type Stats struct {
	Fields map[string]FieldStats        `json:"fields"` // per searched field
	DF     map[string]map[string]uint64 `json:"df"`     // per field, per analysed query term: documents holding it
}

// Add adds o's statistics to s (allocating s's maps as needed). A field or
// term that only o has enters s with o's counts.
func (s *Stats) Add(o Stats) {
	if s.Fields == nil && len(o.Fields) > 0 {
		s.Fields = make(map[string]FieldStats, len(o.Fields))
	}
	for f, fs := range o.Fields {
		cur := s.Fields[f]
		cur.Docs += fs.Docs
		cur.Tokens += fs.Tokens
		s.Fields[f] = cur
	}
	if s.DF == nil && len(o.DF) > 0 {
		s.DF = make(map[string]map[string]uint64, len(o.DF))
	}
	for f, dfs := range o.DF {
		cur := s.DF[f]
		if cur == nil {
			cur = make(map[string]uint64, len(dfs))
			s.DF[f] = cur
		}
		for t, n := range dfs {
			cur[t] += n
		}
	}
}

// errBleveStats refuses collection statistics under Bleve's own BM25,
// which computes its statistics itself, per segment layout.
var errBleveStats = errors.New(`sparse: sharded BM25 statistics (Query.Stats, QueryStats) need textbook BM25; the schema's bm25.scoring is "bleve", which scores with each index's own statistics`)

// QueryStats returns this index's statistics for the terms q.Text
// analyses to, in the fields q searches (q.Fields, or CompositeField),
// read from one consistent index snapshot. q.Filter and q.K are ignored:
// statistics are collection-wide, as they are for an unsharded search.
//
// Every searched field and every analysed term is present, with zero
// counts where the index has none. The dfs count live documents exactly
// as Search's scorer does, so an index given its own QueryStats scores
// exactly as it does without them. With the schema's BM25Bleve scoring
// it returns an error.
func (x *Index) QueryStats(ctx context.Context, schema *tandem.Schema, q Query) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	if scoring, _, _ := schema.BM25.Params(); scoring == tandem.BM25Bleve {
		return Stats{}, errBleveStats
	}
	sf, err := searchFields(schema, q.Fields)
	if err != nil {
		return Stats{}, err
	}
	clauses, err := x.bm25Clauses(sf, q.Text)
	if err != nil {
		return Stats{}, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return Stats{}, ErrClosed
	}
	r, err := x.reader()
	if err != nil {
		return Stats{}, err
	}
	defer r.Close()
	snap, ok := r.(postingsSnapshot)
	if !ok {
		return Stats{}, fmt.Errorf("sparse: BM25 needs scorch's index reader, got %T", r)
	}
	st, err := statsOf(r)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Fields: make(map[string]FieldStats, len(sf)), DF: make(map[string]map[string]uint64, len(sf))}
	for _, f := range sf {
		out.Fields[f.name] = st[f.name]
		out.DF[f.name] = map[string]uint64{}
	}
	tp := newTermPostings(snap)
	for _, c := range clauses {
		if err := ctx.Err(); err != nil {
			return Stats{}, err
		}
		df := uint64(0)
		if st[c.field].Docs > 0 { // else no document has a token in the field
			if _, df, err = tp.postings(c.field, c.term); err != nil {
				return Stats{}, err
			}
		}
		out.DF[c.field][c.term] = df
	}
	return out, nil
}
