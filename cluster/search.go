package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/fusion"
)

// SearchOptions tune a cluster search.
type SearchOptions struct {
	// MinPosition makes every shard's part be read from a replica that
	// has applied at least that far (a write's WriteResult.Position), so
	// the search sees the write. When it is nil and Stale is false, the
	// search first asks every shard's leader how far it has applied, and
	// so sees every write acknowledged before it began (unless the
	// shard's leadership moved meanwhile; a shard with no leader is read
	// as its replica has it).
	MinPosition Position
	// Stale reads each shard's replica as it is, skipping the round trip
	// to the leaders.
	Stale bool
}

// shardRequest is what a coordinator sends a shard replica.
type shardRequest struct {
	Request  engine.Request       `json:"request"`
	MinIndex uint64               `json:"min_index,omitempty"`
	Shard    *engine.ShardOptions `json:"shard,omitempty"`
	IDs      []string             `json:"ids,omitempty"`
}

// Search runs req over every shard of a collection and merges, so that
// the result is what one engine holding every document would return
// (engine's shard API describes the phases): the query is encoded once,
// here; BM25 scores with the statistics of the whole collection; late
// interaction chooses its candidates over every shard; each retriever's
// lists are merged into one before fusion. Ties at equal scores are
// broken by document id. Each shard is read from this node's replica when
// it holds one, else from another replica.
func (n *Node) Search(ctx context.Context, coll string, req engine.Request, opts *SearchOptions) (*engine.Result, error) {
	start := time.Now()
	c, err := n.collection(coll)
	if err != nil {
		return nil, err
	}
	var o SearchOptions
	if opts != nil {
		o = *opts
	}
	if o.MinPosition == nil && !o.Stale {
		o.MinPosition = n.leaderPosition(ctx, c)
	}
	eng, r, err := n.anyReplica(c)
	if err != nil {
		return nil, err
	}
	req, plan, err := eng.Shard().EncodeQuery(ctx, req)
	r.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	s := &shardSearch{n: n, c: c, o: o}
	all, ids, err := s.rank(ctx, req, plan)
	if err != nil {
		return nil, err
	}
	fused := plan.Page(all)

	// Phase 3: the page's documents, from their shards.
	shards := c.shards
	res := &engine.Result{Retrievers: plan.Retrievers(), Fusion: plan.Fusion()}
	docs := make([]map[string]tandem.Doc, shards)
	want := make([][]string, shards)
	for _, h := range fused {
		id := ids[h.Doc]
		s := ShardOf(id, shards)
		want[s] = append(want[s], id)
	}
	if !req.IDsOnly {
		if err := s.call(ctx, "fetch", func(s int) (shardRequest, bool) { return shardRequest{Request: req, IDs: want[s]}, true }, func(s int) any { return &docs[s] }); err != nil {
			return nil, err
		}
	}
	// Phase 4: the page's highlights, each from the shard holding its
	// document, explained from the query encoded here.
	var hls []map[string]*tandem.Highlights
	if req.Highlight != nil {
		hls = make([]map[string]*tandem.Highlights, shards)
		if err := s.call(ctx, "highlight", func(s int) (shardRequest, bool) { return shardRequest{Request: req, IDs: want[s]}, len(want[s]) > 0 }, func(s int) any { return &hls[s] }); err != nil {
			return nil, err
		}
	}
	for _, h := range fused {
		id := ids[h.Doc]
		if req.IDsOnly {
			res.Hits = append(res.Hits, plan.Hit(h, id, nil))
			continue
		}
		d, ok := docs[ShardOf(id, shards)][id]
		if !ok {
			continue // deleted, or no longer matching the filter, since it was ranked
		}
		res.Hits = append(res.Hits, plan.Hit(h, id, d.Fields))
	}
	if hls != nil {
		for i := range res.Hits {
			res.Hits[i].Highlights = hls[ShardOf(res.Hits[i].ID, shards)][res.Hits[i].ID]
		}
	}
	for i := range res.Hits {
		res.Hits[i].DocNum = 0 // a shard's own number means nothing here
	}
	if plan.FacetScope() != "" {
		if res.Facets, err = s.facets(ctx, req, plan, all, ids); err != nil {
			return nil, err
		}
	}
	res.Took = time.Since(start)
	return res, nil
}

// shardSearch is one search over a collection's shards.
type shardSearch struct {
	n *Node
	c *collection
	o SearchOptions
}

// call runs one phase on every shard for which body gives a request,
// concurrently, and joins them.
func (ss *shardSearch) call(ctx context.Context, phase string, body func(s int) (shardRequest, bool), out func(s int) any) error {
	shards := ss.c.shards
	errs := make([]error, shards)
	var wg sync.WaitGroup
	for s := range shards {
		sr, ok := body(s)
		if !ok {
			continue
		}
		wg.Go(func() {
			sr.MinIndex = ss.o.MinPosition[s]
			errs[s] = ss.n.onShard(ctx, ss.c, s, phase, &sr, out(s))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// rank runs phases 1 and 2 of req (planned as plan) and fuses: the fused
// ranking down to plan.FuseAll's length, whose Doc keys index ids.
func (ss *shardSearch) rank(ctx context.Context, req engine.Request, plan *engine.Plan) ([]fusion.Hit, []string, error) {
	n, c := ss.n, ss.c
	shards := c.shards
	every := func(sr shardRequest) func(int) (shardRequest, bool) {
		return func(int) (shardRequest, bool) { return sr, true }
	}

	// Phase 1: statistics and late-interaction collections.
	var so engine.ShardOptions
	needPrepare := false
	for _, name := range plan.Retrievers() {
		kind, _, _ := strings.Cut(name, ":")
		needPrepare = needPrepare || kind == "late" || (kind == "bm25" && req.Text != "")
	}
	perShard := make([]engine.ShardOptions, shards)
	if needPrepare {
		prep := make([]engine.Collected, shards)
		if err := ss.call(ctx, "prepare", every(shardRequest{Request: req}), func(s int) any { return &prep[s] }); err != nil {
			return nil, nil, err
		}
		for _, p := range prep {
			if p.BM25 != nil {
				if so.BM25 == nil {
					so.BM25 = &engine.BM25Stats{}
				}
				so.BM25.Add(*p.BM25)
			}
		}
		for _, name := range plan.Retrievers() {
			cols := make([]*engine.LateCollection, shards)
			found := false
			for s, p := range prep {
				cols[s] = p.Late[name]
				found = found || cols[s] != nil
			}
			if !found {
				continue
			}
			eng, r, err := n.anyReplica(c)
			if err != nil {
				return nil, nil, err
			}
			work, err := eng.Shard().ChooseLate(req, name, cols)
			r.mu.RUnlock()
			if err != nil {
				return nil, nil, err
			}
			for s := range shards {
				if perShard[s].Late == nil {
					perShard[s].Late = map[string]engine.LateWork{}
				}
				perShard[s].Late[name] = work[s]
			}
		}
	}

	// Phase 2: every shard ranks; each retriever's lists merge into one.
	ranked := make([][]engine.Ranked, shards)
	if err := ss.call(ctx, "rank", func(s int) (shardRequest, bool) {
		sh := perShard[s]
		sh.BM25 = so.BM25
		return shardRequest{Request: req, Shard: &sh}, true
	}, func(s int) any { return &ranked[s] }); err != nil {
		return nil, nil, err
	}
	names := plan.Retrievers()
	type hit struct {
		shard int
		engine.RankedHit
	}
	merged := make([][]hit, len(names))
	for s := range shards {
		if len(ranked[s]) != len(names) {
			return nil, nil, fmt.Errorf("cluster: shard %d ranked %d lists, want %d", s, len(ranked[s]), len(names))
		}
		for i, l := range ranked[s] {
			for _, h := range l.Hits {
				merged[i] = append(merged[i], hit{s, h})
			}
		}
	}
	// Keys for fusion: documents in id order, so fusion breaks ties by id.
	var ids []string
	for i := range merged {
		slices.SortFunc(merged[i], func(a, b hit) int {
			if c := cmp.Compare(b.Score, a.Score); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		merged[i] = merged[i][:min(len(merged[i]), plan.Depth(i))]
		for _, h := range merged[i] {
			ids = append(ids, h.ID)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	key := make(map[string]uint64, len(ids))
	for k, id := range ids {
		key[id] = uint64(k)
	}
	lists := make([][]fusion.Item, len(names))
	for i := range merged {
		lists[i] = make([]fusion.Item, len(merged[i]))
		for j, h := range merged[i] {
			lists[i][j] = fusion.Item{Doc: key[h.ID], Score: h.Score}
		}
	}
	all, err := plan.FuseAll(lists)
	return all, ids, err
}

// facets counts req's facets over the shards: every shard counts its own
// documents (the filter scope) or its documents of each ranking's window
// (the results scope, a ranking per engine.FacetGroup: the request's own,
// all, and one per filter disjunctive facets reduce it to), and their
// counts add up (engine.Plan.Facets).
func (ss *shardSearch) facets(ctx context.Context, req engine.Request, plan *engine.Plan, all []fusion.Hit, ids []string) ([]engine.Facet, error) {
	shards := ss.c.shards
	parts := make([][]engine.FacetCounts, shards)
	if plan.FacetScope() == engine.FacetScopeFilter {
		err := ss.call(ctx, "facets", func(int) (shardRequest, bool) { return shardRequest{Request: req}, true }, func(s int) any { return &parts[s] })
		if err != nil {
			return nil, err
		}
		return plan.Facets(parts)
	}
	groups, err := plan.FacetGroups()
	if err != nil {
		return nil, err
	}
	for s := range parts {
		parts[s] = make([]engine.FacetCounts, len(req.Facets))
	}
	for _, g := range groups {
		gall, gids := all, ids
		if !g.Own {
			if gall, gids, err = ss.rank(ctx, g.Request, g.Plan); err != nil {
				return nil, err
			}
		}
		// Each shard counts its documents of the window; a shard with
		// none counts nothing.
		want := make([][]string, shards)
		for _, h := range gall[:min(len(gall), plan.FacetWindow())] {
			id := gids[h.Doc]
			s := ShardOf(id, shards)
			want[s] = append(want[s], id)
		}
		got := make([][]engine.FacetCounts, shards)
		if err := ss.call(ctx, "facets", func(s int) (shardRequest, bool) {
			return shardRequest{Request: g.Request, IDs: want[s]}, len(want[s]) > 0
		}, func(s int) any { return &got[s] }); err != nil {
			return nil, err
		}
		for s := range shards {
			if got[s] == nil {
				continue
			}
			if len(got[s]) != len(g.Facets) {
				return nil, fmt.Errorf("cluster: shard %d counted %d facets, want %d", s, len(got[s]), len(g.Facets))
			}
			for j, i := range g.Facets {
				parts[s][i] = got[s][j]
			}
		}
	}
	return plan.Facets(parts)
}

// onShard runs one phase of a search on a replica of shard s: this
// node's when it has one in service, else the others in placement order
// until one answers.
func (n *Node) onShard(ctx context.Context, c *collection, s int, phase string, sr *shardRequest, out any) error {
	placement := n.placement(c, s)
	n.mu.RLock()
	r := c.replicas[s]
	n.mu.RUnlock()
	var errs []error
	// A replica a move is still copying does not serve yet.
	if r != nil && slices.Contains(placement, n.cfg.ID) {
		err := r.serve(ctx, phase, sr, out)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errOutOfService) {
			return err
		}
		errs = append(errs, err)
	}
	for _, node := range placement {
		if node == n.cfg.ID {
			continue
		}
		body, err := jsonMarshal(sr)
		if err != nil {
			return err
		}
		err = n.forward(ctx, node, fmt.Sprintf("/_cluster/shard/%s/%d/%s", c.name, s, phase), body, out)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var re *remoteError
		if errors.As(err, &re) && re.Status == 400 {
			return err
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("%w: %s shard %d: %w", ErrNoReplica, c.name, s, errors.Join(errs...))
}

// errOutOfService marks a replica that cannot serve (broken, or not yet
// caught up within the request's time).
var errOutOfService = errors.New("cluster: replica out of service")

// serve runs one phase of a search on this replica.
func (r *replica) serve(ctx context.Context, phase string, sr *shardRequest, out any) error {
	if sr.MinIndex > 0 {
		if err := r.waitApplied(ctx, sr.MinIndex); err != nil {
			return fmt.Errorf("%w: %w", errOutOfService, err)
		}
	}
	eng, err := r.engine()
	if err != nil {
		return fmt.Errorf("%w: %w", errOutOfService, err)
	}
	defer r.mu.RUnlock()
	switch phase {
	case "prepare":
		c, err := eng.Shard().Collect(ctx, sr.Request)
		if err == nil {
			*out.(*engine.Collected) = *c
		}
		return err
	case "rank":
		l, err := eng.Shard().Rank(ctx, sr.Request, sr.Shard)
		*out.(*[]engine.Ranked) = l
		return err
	case "stats":
		st, err := eng.Stats()
		*out.(*engine.Stats) = st
		return err
	case "fetch":
		d, err := eng.Shard().Fetch(ctx, sr.Request, sr.IDs)
		*out.(*map[string]tandem.Doc) = d
		return err
	case "highlight":
		h, err := eng.Shard().Highlight(ctx, sr.Request, sr.IDs)
		*out.(*map[string]*tandem.Highlights) = h
		return err
	case "facets":
		f, err := eng.Shard().Facets(ctx, sr.Request, sr.IDs)
		*out.(*[]engine.FacetCounts) = f
		return err
	}
	return fmt.Errorf("cluster: unknown search phase %q", phase)
}

// leaderPosition asks each shard's leader how far it has applied: every
// write acknowledged so far is at or below. A shard whose leader does not
// answer within a few heartbeat timeouts is left out, and read as its
// replica has it.
func (n *Node) leaderPosition(ctx context.Context, c *collection) Position {
	pos := Position{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for s := range c.shards {
		wg.Go(func() {
			var i uint64
			leader, err := n.leaderOf(ctx, c, s)
			if err != nil {
				return
			}
			if leader == n.cfg.ID {
				n.mu.RLock()
				r := c.replicas[s]
				n.mu.RUnlock()
				if r == nil {
					return
				}
				i = r.applied.Load()
			} else {
				// A leader cut off from the others would hold the read:
				// it gets a few heartbeats to answer.
				lctx, cancel := context.WithTimeout(ctx, 4*n.cfg.HeartbeatTimeout)
				defer cancel()
				var st leaderReply
				if err := n.forward(lctx, leader, fmt.Sprintf("/_cluster/leader/%s/%d", c.name, s), nil, &st); err != nil || st.Leader != leader {
					return
				}
				i = st.Applied
			}
			mu.Lock()
			pos[s] = i
			mu.Unlock()
		})
	}
	wg.Wait()
	return pos
}

// leaderReply is a node's answer about a shard: who leads it, and how far
// the answering node's replica has applied.
type leaderReply struct {
	Leader  string `json:"leader"`
	Applied uint64 `json:"applied"`
	Docs    uint64 `json:"docs,omitempty"`
}
