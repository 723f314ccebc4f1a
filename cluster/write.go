package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// maxEntryBytes bounds one log entry; a larger write is split into
// several entries, each atomic on its own.
const maxEntryBytes = 4 << 20

// Position is how far a write reached, per shard: the Raft index of the
// last entry it committed there. A search given a Position (SearchOptions
// MinPosition) reads replicas that have applied at least that far, so it
// sees the write: read-your-writes.
type Position map[int]uint64

// Merge raises p to cover q.
func (p Position) Merge(q Position) {
	for s, i := range q {
		p[s] = max(p[s], i)
	}
}

// WriteResult counts what a write did.
type WriteResult struct {
	Put, Deleted int
	Position     Position
}

// Index upserts docs into a collection: this node checks them and
// computes their vectors once, then each shard's leader commits its
// documents through Raft. It returns once every entry is committed on a
// majority of its shard's replicas and applied by its leader.
//
// Each shard's part is one entry, or several when it is larger than
// maxEntryBytes; an entry is atomic, the whole write is not. On error the
// result says what was committed. A document's error is a
// *engine.DocError naming its index in docs.
func (n *Node) Index(ctx context.Context, coll string, docs []tandem.Doc) (WriteResult, error) {
	c, err := n.collection(coll)
	if err != nil {
		return WriteResult{}, err
	}
	eng, r, err := n.anyReplica(c)
	if err != nil {
		return WriteResult{}, err
	}
	prepared, err := eng.Shard().Prepare(ctx, docs)
	r.mu.RUnlock()
	if err != nil {
		return WriteResult{}, err
	}
	parts := make([]entry, c.shards)
	for _, p := range prepared {
		s := ShardOf(p.Doc.ID, c.shards)
		parts[s].Puts = append(parts[s].Puts, p)
	}
	return n.commit(ctx, c, parts)
}

// Delete removes documents by id; unknown ids are ignored.
func (n *Node) Delete(ctx context.Context, coll string, ids []string) (WriteResult, error) {
	c, err := n.collection(coll)
	if err != nil {
		return WriteResult{}, err
	}
	parts := make([]entry, c.shards)
	for i, id := range ids {
		if id == "" {
			return WriteResult{}, &engine.DocError{Index: i, Err: tandem.ErrMissingID}
		}
		s := ShardOf(id, c.shards)
		parts[s].Deletes = append(parts[s].Deletes, id)
	}
	return n.commit(ctx, c, parts)
}

// commit commits each shard's part, the shards concurrently.
func (n *Node) commit(ctx context.Context, c *collection, parts []entry) (WriteResult, error) {
	res := WriteResult{Position: Position{}}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	for s := range parts {
		if len(parts[s].Puts)+len(parts[s].Deletes) == 0 {
			continue
		}
		wg.Go(func() {
			for _, e := range split(parts[s]) {
				b, err := e.encode()
				var ar applyReply
				if err == nil {
					ar, err = n.applyShard(ctx, c, s, b)
				}
				mu.Lock()
				if err == nil {
					res.Put += ar.Put
					res.Deleted += ar.Deleted
					res.Position[s] = max(res.Position[s], ar.Index)
				} else {
					errs = append(errs, fmt.Errorf("shard %d: %w", s, err))
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return res, errors.Join(errs...)
}

// split cuts a shard's part into entries of at most maxEntryBytes of
// documents and blobs (a single larger document is an entry of its own).
func split(e entry) []entry {
	var out []entry
	cur, size := entry{}, 0
	for _, p := range e.Puts {
		sz := 256
		for k, v := range p.Blobs {
			sz += len(k) + len(v)
		}
		if size > 0 && size+sz > maxEntryBytes {
			out = append(out, cur)
			cur, size = entry{}, 0
		}
		cur.Puts = append(cur.Puts, p)
		size += sz
	}
	cur.Deletes = e.Deletes
	return append(out, cur)
}

// applyReply is a shard leader's answer to an entry.
type applyReply struct {
	Put     int    `json:"put"`
	Deleted int    `json:"deleted"`
	Index   uint64 `json:"index"`
}

// applyShard commits an encoded entry through the shard's leader: here if
// this node leads, else forwarded over HTTP; it retries while the group
// has no leader or leadership moves, until ctx ends.
func (n *Node) applyShard(ctx context.Context, c *collection, s int, b []byte) (applyReply, error) {
	var last error
	for {
		n.mu.RLock()
		r := c.replicas[s]
		n.mu.RUnlock()
		var ar applyReply
		var err error
		switch {
		case r != nil && r.raft.State() == raft.Leader:
			ar, err = r.applyLocal(ctx, b)
		default:
			var leader string
			if leader, err = n.leaderOf(ctx, c, s); err == nil {
				err = n.forwardToLeader(ctx, c, s, leader, b, &ar)
			}
		}
		if err == nil || !retryable(err) {
			return ar, err
		}
		last = err
		select {
		case <-ctx.Done():
			return applyReply{}, fmt.Errorf("cluster: %w (last: %v)", ctx.Err(), last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// forwardToLeader sends an entry to the node this node takes for the
// shard's leader, and waits for its answer as long as ctx lasts and that
// node still leads: an apply may take long (a large batch on a slow
// machine), and giving up on one that will commit only sends it again.
// A leader cut off from the others never answers, so the attempt ends,
// and the caller tries the new leader, as soon as leaderGone says so. An
// attempt given up may still commit: a write is applied at least once.
func (n *Node) forwardToLeader(ctx context.Context, c *collection, s int, leader string, b []byte, ar *applyReply) error {
	actx, cancel := context.WithCancel(ctx)
	var moved atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		if n.leaderGone(actx, c, s, leader) {
			moved.Store(true)
			cancel()
		}
	})
	err := n.forward(actx, leader, fmt.Sprintf("/_cluster/apply/%s/%d", c.name, s), b, ar)
	cancel()
	wg.Wait()
	if err != nil && moved.Load() && ctx.Err() == nil {
		return &remoteError{Status: 503, Msg: fmt.Sprintf("%s shard %d: leadership moved from %s during the write", c.name, s, leader)}
	}
	return err
}

// leaderGone watches, until ctx ends, whether leader still leads shard
// s, and reports true once it does not. A node holding a replica of the
// shard sees it there: another leader. A node without one asks the
// leader every election timeout: it is gone once it names another
// leader, or has not said that it leads for 10 election timeouts (cut
// off, or too slow even to answer that). A leader busy applying still
// answers, so a slow apply is waited for.
func (n *Node) leaderGone(ctx context.Context, c *collection, s int, leader string) bool {
	n.mu.RLock()
	r := c.replicas[s]
	n.mu.RUnlock()
	if r != nil {
		tick := time.NewTicker(n.cfg.HeartbeatTimeout / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return false
			case <-tick.C:
				if _, id := r.raft.LeaderWithID(); id != "" && string(id) != leader {
					return true
				}
			}
		}
	}
	pctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	answers := make(chan string)
	wg.Go(func() {
		for {
			select {
			case <-pctx.Done():
				return
			case <-time.After(n.cfg.ElectionTimeout):
			}
			var st leaderReply
			if err := n.forward(pctx, leader, fmt.Sprintf("/_cluster/leader/%s/%d", c.name, s), nil, &st); err != nil {
				continue
			}
			select {
			case answers <- st.Leader:
			case <-pctx.Done():
				return
			}
		}
	})
	silence := 10 * n.cfg.ElectionTimeout
	limit := time.NewTimer(silence)
	defer limit.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-limit.C:
			return true
		case id := <-answers:
			switch id {
			case leader:
				limit.Reset(silence)
			case "":
				// Between leaders: the apply fails, or a leader is named.
			default:
				return true
			}
		}
	}
}

// applyLocal commits an entry through this node's replica, which must
// lead its group.
func (r *replica) applyLocal(ctx context.Context, b []byte) (applyReply, error) {
	f := r.raft.Apply(b, timeoutOf(ctx))
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) || errors.Is(err, raft.ErrRaftShutdown) {
			return applyReply{}, &remoteError{Status: 503, Msg: err.Error()}
		}
		return applyReply{}, err
	}
	ar := applyReply{Index: f.Index()}
	res, _ := f.Response().(applyResult)
	if res.Err != nil {
		return ar, res.Err
	}
	ar.Put, ar.Deleted = res.Put, res.Deleted
	return ar, nil
}

// leaderOf finds the leader of a shard's group: from this node's replica
// when it holds one, else by asking the shard's nodes.
func (n *Node) leaderOf(ctx context.Context, c *collection, s int) (string, error) {
	if id, err := n.shardLeader(c, s); err == nil {
		return id, nil
	}
	for _, node := range n.placement(c, s) {
		if node == n.cfg.ID {
			continue
		}
		var st leaderReply
		if err := n.forward(ctx, node, fmt.Sprintf("/_cluster/leader/%s/%d", c.name, s), nil, &st); err == nil && st.Leader != "" {
			return st.Leader, nil
		}
	}
	return "", &remoteError{Status: 503, Msg: fmt.Sprintf("%s shard %d has no known leader", c.name, s)}
}

// anyReplica returns the engine of one of this node's replicas of c,
// read-locked (the caller calls r.mu.RUnlock), to check documents and plan
// searches with: every shard has the collection's schema and models. A
// node that holds no replica in service (one that has just joined, or
// been drained) uses the collection's coordinator engine instead: an
// engine with the collection's options and no documents, opened the
// first time it is needed.
func (n *Node) anyReplica(c *collection) (*engine.Engine, *replica, error) {
	n.mu.RLock()
	rs := make([]*replica, 0, len(c.replicas))
	for _, r := range c.replicas {
		rs = append(rs, r)
	}
	n.mu.RUnlock()
	for _, r := range rs {
		if eng, err := r.engine(); err == nil {
			return eng, r, nil
		}
	}
	r, err := n.coordinator(c)
	if err != nil {
		return nil, nil, err
	}
	eng, err := r.engine()
	return eng, r, err
}

// coordinator returns c's coordinator engine, as a replica outside any
// Raft group, opening it the first time.
func (n *Node) coordinator(c *collection) (*replica, error) {
	c.coordMu.Lock()
	defer c.coordMu.Unlock()
	if c.coord != nil {
		return c.coord, nil
	}
	n.mu.RLock()
	closed, spec := n.closed, c.spec
	n.mu.RUnlock()
	if closed {
		return nil, errors.New("cluster: node closed")
	}
	opts := n.cfg.Engine
	opts.Schema, opts.Dense, opts.Late, opts.LateIndex, opts.LateEncoding = spec.Schema, spec.Dense, spec.Late, spec.LateIndex, spec.LateEncoding
	dir := coordinatorDir(n.cfg.Dir, spec.Name)
	// It holds no documents: start empty every time.
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("cluster: %s coordinator: %w", spec.Name, err)
	}
	eng, err := engine.Open(dir, &opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s: open the coordinator engine of a node without a replica: %w", spec.Name, err)
	}
	c.coord = &replica{coll: spec.Name, shard: -1, dir: dir, opts: opts, eng: eng, waitCh: make(chan struct{})}
	return c.coord, nil
}

func coordinatorDir(root, coll string) string {
	return filepath.Join(root, "collections", coll, "coordinator")
}
