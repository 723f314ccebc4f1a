package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem/engine"
)

// ErrBadMember refuses a membership change: a node that cannot join, a
// drain that would leave too few nodes, a move that does not apply.
var ErrBadMember = fmt.Errorf("cluster: membership change refused (%w)", engine.ErrBadRequest)

// reconcile opens the replicas the state gives this node and closes,
// then deletes, those it no longer does, and the collections the state
// no longer holds. It runs in the metadata group's FSM.
func (n *Node) reconcile(st metaState) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	for id, ni := range st.Nodes {
		n.peers[id] = ni.Peer
	}
	for id := range n.peers {
		if _, ok := st.Nodes[id]; !ok && id != n.cfg.ID {
			delete(n.peers, id)
		}
	}
	var gone []*collection
	for name, c := range n.colls {
		if spec, ok := st.Specs[name]; !ok || spec.UID != c.uid {
			gone = append(gone, c)
			delete(n.colls, name)
		}
	}
	n.mu.Unlock()
	var errs []error
	for _, c := range gone {
		errs = append(errs, n.removeCollection(c.name, c))
	}
	names := slices.Sorted(maps.Keys(st.Specs))
	for _, name := range names {
		spec := st.Specs[name]
		want := map[int]bool{}
		for s, nodes := range spec.Placement {
			want[s] = slices.Contains(nodes, n.cfg.ID)
		}
		for _, m := range st.Moves {
			if m.Collection == name && (m.To == n.cfg.ID || m.From == n.cfg.ID) {
				want[m.Shard] = true
			}
		}
		errs = append(errs, n.openCollection(spec, want, st.Nodes[n.cfg.ID].Rejoining))
	}
	return errors.Join(errs...)
}

// removeCollection closes a dropped collection's replicas on this node
// and deletes its directory and Raft state.
func (n *Node) removeCollection(name string, c *collection) error {
	var errs []error
	if c != nil {
		errs = append(errs, c.close())
	}
	// Raft state first, the directory (with its UID) last: a crash in
	// between leaves a directory that claimDir clears again, never Raft
	// state that a new collection of the same name would take up.
	if err := n.rs.dropGroups(name + "/"); err != nil {
		return errors.Join(append(errs, err)...)
	}
	errs = append(errs, os.RemoveAll(filepath.Join(n.cfg.Dir, "collections", name)))
	return errors.Join(errs...)
}

// removeReplica deletes a closed replica's directory, snapshots and Raft
// state.
func (n *Node) removeReplica(coll string, s int) error {
	dir := shardDir(n.cfg.Dir, coll, s)
	// Raft state first (a log left without its snapshots would start
	// above index 1 with nothing to restore), then the files.
	if err := n.rs.group(fmt.Sprintf("%s/%d", coll, s)).drop(); err != nil {
		return err
	}
	return errors.Join(os.RemoveAll(dir+".raft-snapshots"), os.RemoveAll(dir))
}

// Drain empties a node of its replicas: they move to the other nodes by
// the placement rule, one at a time, and once it holds none the node
// leaves the cluster (Status shows the moves). It is refused when too few
// nodes would be left for a collection's replicas.
func (n *Node) Drain(ctx context.Context, node string) error {
	return n.applyCommand(ctx, metaCommand{Op: "drain", Node: node})
}

// DropCollection deletes a collection from every node.
func (n *Node) DropCollection(ctx context.Context, name string) error {
	if err := n.applyCommand(ctx, metaCommand{Op: "drop", Name: name}); err != nil {
		return err
	}
	// Gone from this node once its metadata has applied the drop.
	for {
		if _, err := n.collection(name); err != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (n *Node) applyCommand(ctx context.Context, c metaCommand) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return n.applyMeta(ctx, b)
}

// --- joining ---

// joinReply is the answer to a node asking to join: the cluster's nodes,
// the founders (the nodes the metadata state starts from, which the
// joining node keeps in foundersFile), and the metadata index the joining
// node waits to apply before it serves.
type joinReply struct {
	Nodes    []Peer `json:"nodes"`
	Founders []Peer `json:"founders"`
	Index    uint64 `json:"index"`
}

// foundersFile holds, in a joined node's Dir, the founders its metadata
// state starts from.
const foundersFile = "founders.json"

func writeFounders(dir string, founders []Peer) error {
	if len(founders) == 0 {
		return errors.New("cluster: join: the answer names no founding nodes")
	}
	b, err := json.Marshal(founders)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, foundersFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := syncFile(tmp); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, foundersFile)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	return syncDir(dir)
}

// readFounders returns the founders a node keeps, or none if it keeps
// none yet.
func readFounders(dir string) ([]Peer, error) {
	b, err := os.ReadFile(filepath.Join(dir, foundersFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	var founders []Peer
	if err := json.Unmarshal(b, &founders); err != nil {
		return nil, fmt.Errorf("cluster: %s: %w", foundersFile, err)
	}
	return founders, nil
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// join asks a member of the cluster, at its HTTP address, to add this
// node, and returns the cluster's nodes.
func (n *Node) join(ctx context.Context, addr string) (joinReply, error) {
	body, err := json.Marshal(n.self)
	if err != nil {
		return joinReply{}, err
	}
	var last error
	for {
		var jr joinReply
		err := n.post(ctx, addr, addr, "/_cluster/join", body, &jr)
		if err == nil {
			return jr, nil
		}
		if !retryable(err) {
			return joinReply{}, fmt.Errorf("cluster: join through %s: %w", addr, err)
		}
		last = err
		select {
		case <-ctx.Done():
			return joinReply{}, fmt.Errorf("cluster: join through %s: %w (last: %v)", addr, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// handleJoin records a joining node in the metadata (through its leader)
// and answers with the cluster's nodes; the metadata leader then makes it
// a voter of the metadata group (step).
func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var p Peer
	if err := json.Unmarshal(b, &p); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("cluster: join: %w", err))
		return
	}
	// A member asking to join again has lost its Raft state (restored
	// from a backup): it is demoted in every group before it may start
	// them (rejoin; step).
	op := "join"
	if _, member := n.fsm.state().Nodes[p.ID]; member {
		op = "rejoin"
	}
	if err := n.applyCommand(r.Context(), metaCommand{Op: op, Peer: &p, Node: p.ID}); err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	// Answer once this node has applied the join (and a rejoining node
	// is demoted everywhere), with what it has applied.
	var st metaState
	for {
		st = n.fsm.state()
		if ni, ok := st.Nodes[p.ID]; ok && (op == "join" || ni.Demoted) {
			break
		}
		select {
		case <-r.Context().Done():
			writeError(w, http.StatusServiceUnavailable, r.Context().Err())
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
	jr := joinReply{Index: n.meta.AppliedIndex(), Founders: n.fsm.founders}
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		jr.Nodes = append(jr.Nodes, st.Nodes[id].Peer)
	}
	writeJSON(w, http.StatusOK, jr)
}

// --- the metadata leader's work: membership and moves ---

// rebalance runs on every node and acts on the metadata leader: it makes
// the metadata group's voters the state's nodes, advances the move in
// progress, lets a drained node leave, and starts the next move the
// placement rule calls for.
func (n *Node) rebalance(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n.fsm.retry()
		if n.meta.State() != raft.Leader {
			n.settled = false
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, stepTimeout)
		err := n.step(sctx)
		cancel()
		n.mu.Lock()
		n.stepErr = err
		n.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			n.log.Warn("rebalance", "error", err)
		}
	}
}

// stepTimeout bounds one step of the metadata leader's work.
const stepTimeout = 30 * time.Second

// step does one step of the metadata leader's work, from the state as of
// everything committed before it (a barrier, once a leadership; then its
// own commands apply before they return): a leader that has just won
// acts on the moves its predecessor recorded, not on its own lag.
func (n *Node) step(ctx context.Context) error {
	if !n.settled {
		// Once a leadership: a barrier is a log entry.
		if err := n.meta.Barrier(min(timeoutOf(ctx), 5*time.Second)).Error(); err != nil {
			return err
		}
		n.settled = true
	}
	st := n.fsm.state()
	if err := n.metaVoters(ctx, st); err != nil {
		return err
	}
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		if st.Nodes[id].Rejoining {
			return n.rejoin(ctx, st, id)
		}
	}
	if len(st.Moves) > 0 {
		return n.advance(ctx, st, st.Moves[0])
	}
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		if st.Nodes[id].Draining && st.holds(id) == 0 {
			if id == n.cfg.ID {
				// Another node's leader takes it out.
				return n.meta.LeadershipTransfer().Error()
			}
			return n.applyCommand(ctx, metaCommand{Op: "leave", Node: id})
		}
	}
	if m, ok := planMove(st); ok {
		m.Started = time.Now().UTC()
		return n.applyCommand(ctx, metaCommand{Op: "move", Move: &m})
	}
	return nil
}

// rejoin takes a rejoining node one step on: first it is demoted to a
// non-voter in the metadata group and every shard group it is placed in;
// then each of its replicas votes again once it has caught up with its
// shard's leader; then, once the metadata group has made it a voter
// again too (metaVoters), it has rejoined.
func (n *Node) rejoin(ctx context.Context, st metaState, id string) error {
	ni := st.Nodes[id]
	var held [][2]any // collection, shard
	for _, name := range slices.Sorted(maps.Keys(st.Specs)) {
		for s, nodes := range st.Specs[name].Placement {
			if slices.Contains(nodes, id) {
				held = append(held, [2]any{name, s})
			}
		}
	}
	if !ni.Demoted {
		if err := n.meta.DemoteVoter(raft.ServerID(id), 0, 10*time.Second).Error(); err != nil {
			return fmt.Errorf("cluster: demote %s in the metadata group: %w", id, err)
		}
		for _, h := range held {
			c, err := n.collection(h[0].(string))
			if err != nil {
				return err
			}
			if _, err := n.memberOp(ctx, c, h[1].(int), "demote", ni.Peer, 0); err != nil {
				return err
			}
		}
		return n.applyCommand(ctx, metaCommand{Op: "demoted", Node: id})
	}
	voting := true
	for _, h := range held {
		c, err := n.collection(h[0].(string))
		if err != nil {
			return err
		}
		s := h[1].(int)
		key := fmt.Sprintf("rejoin:%s:%s/%d", id, c.name, s)
		if n.marked(key + "#voter") {
			continue
		}
		voting = false
		lead, err := n.shardState(ctx, c, s, "")
		if err != nil {
			return err
		}
		got, err := n.shardState(ctx, c, s, id)
		if err != nil {
			return err
		}
		if n.caughtUp(key, lead.Applied, got.Applied) {
			if _, err := n.memberOp(ctx, c, s, "add-voter", ni.Peer, 0); err != nil {
				return err
			}
			n.mark(key + "#voter")
		}
	}
	f := n.meta.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id && srv.Suffrage != raft.Voter {
			voting = false
		}
	}
	if !voting {
		return nil
	}
	n.mu.Lock()
	for _, h := range held {
		delete(n.copyMark, fmt.Sprintf("rejoin:%s:%s/%d#voter", id, h[0], h[1]))
	}
	n.mu.Unlock()
	return n.applyCommand(ctx, metaCommand{Op: "rejoined", Node: id})
}

// metaVoters makes the metadata group's configuration the state's nodes.
func (n *Node) metaVoters(ctx context.Context, st metaState) error {
	f := n.meta.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	in := map[string]raft.ServerSuffrage{}
	for _, s := range f.Configuration().Servers {
		in[string(s.ID)] = s.Suffrage
		if _, ok := st.Nodes[string(s.ID)]; !ok && string(s.ID) != n.cfg.ID {
			if err := n.meta.RemoveServer(s.ID, f.Index(), 10*time.Second).Error(); err != nil {
				return fmt.Errorf("cluster: remove %s from the metadata group: %w", s.ID, err)
			}
			return nil // one change a step
		}
	}
	// A new node joins as a non-voter, and votes once it has applied as
	// far as this leader had at the step before: one that never comes up
	// costs the group no quorum.
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		addr := raft.ServerAddress(st.Nodes[id].Raft)
		suffrage, ok := in[id]
		switch {
		case !ok:
			if err := n.meta.AddNonvoter(raft.ServerID(id), addr, f.Index(), 10*time.Second).Error(); err != nil {
				return fmt.Errorf("cluster: add %s to the metadata group: %w", id, err)
			}
			return nil
		case suffrage == raft.Nonvoter:
			if ni := st.Nodes[id]; ni.Rejoining && !ni.Demoted {
				continue // being demoted (rejoin)
			}
			applied, err := n.metaApplied(ctx, id)
			if err != nil {
				continue // down, or not started yet: the other steps go on
			}
			if n.caughtUp("meta:"+id, n.meta.AppliedIndex(), applied) {
				if err := n.meta.AddVoter(raft.ServerID(id), addr, f.Index(), 10*time.Second).Error(); err != nil {
					return fmt.Errorf("cluster: make %s a voter of the metadata group: %w", id, err)
				}
			}
			return nil
		}
	}
	return nil
}

// caughtUp reports whether a follower that has applied got has caught up
// with a leader that has applied lead, in two rounds under key: the
// follower must reach where the leader was at the first look, and then
// where it was when that was reached. It forgets the key once caught up.
// A fixed target is reached however long the follower trails the
// leader's latest index under a steady load; the second round bounds the
// lag to one catching up.
func (n *Node) caughtUp(key string, lead, got uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.copyMark == nil {
		n.copyMark = map[string]uint64{}
	}
	target, looked := n.copyMark[key]
	round := n.copyMark[key+"#round"]
	switch {
	case !looked:
		n.copyMark[key], n.copyMark[key+"#round"] = lead, 1
	case got >= target && round >= 2:
		delete(n.copyMark, key)
		delete(n.copyMark, key+"#round")
		return true
	case got >= target:
		n.copyMark[key], n.copyMark[key+"#round"] = lead, 2
	}
	return false
}

// mark and marked keep a flag under key in copyMark.
func (n *Node) mark(key string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.copyMark == nil {
		n.copyMark = map[string]uint64{}
	}
	n.copyMark[key] = 1
}

func (n *Node) marked(key string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.copyMark[key]
	return ok
}

// metaApplied asks a node how far its metadata has applied.
func (n *Node) metaApplied(ctx context.Context, id string) (uint64, error) {
	if id == n.cfg.ID {
		return n.meta.AppliedIndex(), nil
	}
	var r struct {
		Applied uint64 `json:"applied"`
	}
	err := n.forward(ctx, id, "/_cluster/meta-applied", nil, &r)
	return r.Applied, err
}

func (n *Node) handleMetaApplied(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]uint64{"applied": n.meta.AppliedIndex()})
}

// advance takes the move in progress one stage on, when it can.
func (n *Node) advance(ctx context.Context, st metaState, m Move) error {
	c, err := n.collection(m.Collection)
	if err != nil {
		return err // dropped: the drop took the move with it
	}
	to, ok := st.Nodes[m.To]
	if !ok {
		return fmt.Errorf("cluster: move %s/%d: node %s left", m.Collection, m.Shard, m.To)
	}
	key := fmt.Sprintf("%s/%d:%s>%s", m.Collection, m.Shard, m.From, m.To)
	switch m.Stage {
	case "copy":
		// To must have applied the move, and so every move before it
		// (a replica it held and gave up is closed and deleted), before
		// its group takes it in.
		if !n.marked("ready:" + key) {
			applied, err := n.metaApplied(ctx, m.To)
			if err != nil {
				return err
			}
			if !n.caughtUp("move:"+key, n.meta.AppliedIndex(), applied) {
				return nil
			}
			n.mark("ready:" + key)
		}
		if _, err := n.memberOp(ctx, c, m.Shard, "add-nonvoter", to.Peer, 0); err != nil {
			return err
		}
		lead, err := n.shardState(ctx, c, m.Shard, "")
		if err != nil {
			return err
		}
		got, err := n.shardState(ctx, c, m.Shard, m.To)
		if err != nil {
			return err
		}
		if !n.caughtUp(key, lead.Applied, got.Applied) {
			return nil // not caught up yet
		}
		idx, err := n.memberOp(ctx, c, m.Shard, "add-voter", to.Peer, 0)
		if err != nil {
			return err
		}
		n.mu.Lock()
		delete(n.copyMark, "ready:"+key)
		n.mu.Unlock()
		sw := m
		sw.Index, sw.Conf, sw.Switched, sw.Docs = lead.Applied, idx, time.Now().UTC(), got.Docs
		return n.applyCommand(ctx, metaCommand{Op: "switch", Move: &sw})
	case "remove":
		got, err := n.shardState(ctx, c, m.Shard, m.To)
		if err != nil || got.Applied < m.Index {
			return err
		}
		if lead, err := n.leaderOf(ctx, c, m.Shard); err != nil {
			return err
		} else if lead == m.From {
			// Hand the lead to To first: a leader removing itself leaves
			// the group leaderless until an election.
			_, err := n.memberOp(ctx, c, m.Shard, "transfer", to.Peer, 0)
			return err
		}
		from := st.Nodes[m.From].Peer
		from.ID = m.From
		// Only from the configuration the switch made: a step of a
		// deposed leader, late, cannot remove a replica that a later
		// move brought back.
		if _, err := n.memberOp(ctx, c, m.Shard, "remove", from, m.Conf); err != nil {
			return err
		}
		m.Ended, m.Docs = time.Now().UTC(), got.Docs
		return n.applyCommand(ctx, metaCommand{Op: "done", Move: &m})
	}
	return fmt.Errorf("cluster: move %s/%d: unknown stage %q", m.Collection, m.Shard, m.Stage)
}

// shardState asks a node (its leader when node is "") about its replica
// of a shard.
func (n *Node) shardState(ctx context.Context, c *collection, s int, node string) (leaderReply, error) {
	if node == "" {
		leader, err := n.leaderOf(ctx, c, s)
		if err != nil {
			return leaderReply{}, err
		}
		node = leader
	}
	var lr leaderReply
	if node == n.cfg.ID {
		n.mu.RLock()
		r := c.replicas[s]
		n.mu.RUnlock()
		if r == nil {
			return lr, fmt.Errorf("cluster: %s shard %d is not on this node", c.name, s)
		}
		return r.state(), nil
	}
	err := n.forward(ctx, node, fmt.Sprintf("/_cluster/leader/%s/%d", c.name, s), nil, &lr)
	return lr, err
}

// state describes the replica: its group's leader, how far it has
// applied and its documents.
func (r *replica) state() leaderReply {
	_, id := r.raft.LeaderWithID()
	lr := leaderReply{Leader: string(id), Applied: r.applied.Load()}
	if eng, err := r.engine(); err == nil {
		lr.Docs = eng.Count()
		r.mu.RUnlock()
	}
	return lr
}

// memberRequest asks a shard's leader to change its group; Prev, when
// not 0, is the configuration index the change must follow.
type memberRequest struct {
	Op   string `json:"op"` // add-nonvoter, add-voter, transfer, remove, demote
	Peer Peer   `json:"peer"`
	Prev uint64 `json:"prev,omitempty"`
}

// memberOp changes a shard group's configuration through its leader and
// returns the index of the configuration it made (0 for a change that
// was made already, or a transfer).
func (n *Node) memberOp(ctx context.Context, c *collection, s int, op string, p Peer, prev uint64) (uint64, error) {
	leader, err := n.leaderOf(ctx, c, s)
	if err != nil {
		return 0, err
	}
	if leader == n.cfg.ID {
		n.mu.RLock()
		r := c.replicas[s]
		n.mu.RUnlock()
		if r == nil {
			return 0, fmt.Errorf("cluster: %s shard %d is not on this node", c.name, s)
		}
		return r.member(op, p, prev, timeoutOf(ctx))
	}
	body, err := json.Marshal(memberRequest{Op: op, Peer: p, Prev: prev})
	if err != nil {
		return 0, err
	}
	var out struct {
		Index uint64 `json:"index"`
	}
	err = n.forward(ctx, leader, fmt.Sprintf("/_cluster/member/%s/%d", c.name, s), body, &out)
	return out.Index, err
}

// member changes the configuration of the replica's group, which it must
// lead. Each change is idempotent: adding a member it has, or removing
// one it lacks, changes nothing.
func (r *replica) member(op string, p Peer, prev uint64, timeout time.Duration) (uint64, error) {
	id, addr := raft.ServerID(p.ID), raft.ServerAddress(p.Raft)
	cf := r.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return 0, err
	}
	suffrage, in := raft.ServerSuffrage(0), false
	for _, s := range cf.Configuration().Servers {
		if s.ID == id {
			suffrage, in = s.Suffrage, true
		}
	}
	var f raft.IndexFuture
	switch op {
	case "add-nonvoter":
		if in {
			return 0, nil // a non-voter already, or promoted
		}
		f = r.raft.AddNonvoter(id, addr, prev, timeout)
	case "add-voter":
		if in && suffrage == raft.Voter {
			return cf.Index(), nil
		}
		f = r.raft.AddVoter(id, addr, prev, timeout)
	case "remove":
		if !in {
			return 0, nil
		}
		f = r.raft.RemoveServer(id, prev, timeout)
	case "demote":
		if !in || suffrage != raft.Voter {
			return 0, nil
		}
		f = r.raft.DemoteVoter(id, prev, timeout)
	case "transfer":
		if err := r.raft.LeadershipTransferToServer(id, addr).Error(); err != nil {
			return 0, &remoteError{Status: 503, Msg: fmt.Sprintf("cluster: %s shard %d: hand the lead to %s: %v", r.coll, r.shard, p.ID, err)}
		}
		return 0, nil
	default:
		return 0, fmt.Errorf("%w: unknown op %q", ErrBadMember, op)
	}
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return 0, &remoteError{Status: 503, Msg: err.Error()}
		}
		return 0, fmt.Errorf("cluster: %s shard %d: %s %s: %w", r.coll, r.shard, op, p.ID, err)
	}
	return f.Index(), nil
}

func (n *Node) handleMember(w http.ResponseWriter, r *http.Request) {
	rep, ok := n.replicaOf(w, r)
	if !ok {
		return
	}
	b, ok := readBody(w, r)
	if !ok {
		return
	}
	var mr memberRequest
	if err := json.Unmarshal(b, &mr); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("cluster: member request: %w", err))
		return
	}
	if rep.raft.State() != raft.Leader {
		writeError(w, http.StatusServiceUnavailable, ErrNotLeader)
		return
	}
	idx, err := rep.member(mr.Op, mr.Peer, mr.Prev, timeoutOf(r.Context()))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]uint64{"index": idx})
}

// planMove is the placement rule (docs/cluster.md, "Placement"): for each
// collection, in name order, every node that is not draining holds the
// floor or the ceiling of the mean number of its replicas, draining nodes
// hold none, and no node holds two replicas of a shard. It returns the
// first move toward that: from a draining node if there is one, else from
// the node holding the most replicas of the collection, to the node
// holding the fewest (then the fewest of every collection, then the
// lowest id) that does not hold the shard, taking the lowest shard that
// can move; a move from a node that is not draining is made only when
// the two nodes differ by two or more.
func planMove(st metaState) (Move, bool) {
	for _, ni := range st.Nodes {
		if ni.Rejoining {
			return Move{}, false // its replicas are catching up
		}
	}
	var active []string
	for _, id := range slices.Sorted(maps.Keys(st.Nodes)) {
		if !st.Nodes[id].Draining {
			active = append(active, id)
		}
	}
	if len(active) == 0 {
		return Move{}, false
	}
	total := map[string]int{}
	for _, spec := range st.Specs {
		for _, nodes := range spec.Placement {
			for _, id := range nodes {
				total[id]++
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(st.Specs)) {
		spec := st.Specs[name]
		count := map[string]int{}
		holds := map[string]map[int]bool{}
		for s, nodes := range spec.Placement {
			for _, id := range nodes {
				count[id]++
				if holds[id] == nil {
					holds[id] = map[int]bool{}
				}
				holds[id][s] = true
			}
		}
		// Sources: draining nodes first, then by most replicas.
		var from []string
		for id := range holds {
			from = append(from, id)
		}
		sort.Slice(from, func(i, j int) bool {
			a, b := from[i], from[j]
			da, db := st.Nodes[a].Draining || !slices.Contains(active, a), st.Nodes[b].Draining || !slices.Contains(active, b)
			if da != db {
				return da
			}
			if count[a] != count[b] {
				return count[a] > count[b]
			}
			return a < b
		})
		to := slices.Clone(active)
		sort.SliceStable(to, func(i, j int) bool {
			a, b := to[i], to[j]
			if count[a] != count[b] {
				return count[a] < count[b]
			}
			if total[a] != total[b] {
				return total[a] < total[b]
			}
			return a < b
		})
		for _, f := range from {
			draining := st.Nodes[f].Draining || !slices.Contains(active, f)
			for _, t := range to {
				if t == f || (!draining && count[f]-count[t] < 2) {
					continue
				}
				for s := range spec.Shards {
					if holds[f][s] && !holds[t][s] {
						return Move{Collection: name, Shard: s, From: f, To: t}, true
					}
				}
			}
		}
	}
	return Move{}, false
}

// dropGroups deletes the Raft state of every group whose name starts
// with prefix.
func (s *raftStore) dropGroups(prefix string) error {
	return deletePrefixes(s.db, []byte("l"+prefix), []byte("s"+prefix))
}

// drop deletes the group's Raft log and stable state.
func (g *groupStore) drop() error { return deletePrefixes(g.db, g.log, g.stable) }

// deletePrefixes deletes every key under the prefixes, in transactions
// (Badger's DropPrefix would block the writes of every other group while
// it runs).
func deletePrefixes(db *badger.DB, prefixes ...[]byte) error {
	for _, p := range prefixes {
		var keys [][]byte
		err := db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: p})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("cluster: delete raft state %q: %w", p, err)
		}
		wb := db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return fmt.Errorf("cluster: delete raft state %q: %w", p, err)
			}
		}
		if err := wb.Flush(); err != nil {
			return fmt.Errorf("cluster: delete raft state %q: %w", p, err)
		}
	}
	return nil
}

// uidFile records, in a collection's directory on a node, the collection's
// UID: a directory left by a dropped collection of the same name is
// deleted before a new one opens there.
const uidFile = "uid"

// claimDir readies a collection's directory for spec: one recording
// another UID (or none, for a spec with one) was a dropped collection's.
func (n *Node) claimDir(spec CollectionSpec) error {
	if spec.UID == "" {
		return nil // a collection from before UIDs
	}
	dir := filepath.Join(n.cfg.Dir, "collections", spec.Name)
	b, err := os.ReadFile(filepath.Join(dir, uidFile))
	if err == nil && strings.TrimSpace(string(b)) == spec.UID {
		return nil
	}
	// Files or Raft state a dropped collection of this name left.
	if _, serr := os.Stat(dir); serr == nil {
		n.log.Warn("deleting a dropped collection's files", "collection", spec.Name, "dir", dir)
	}
	if err := n.removeCollection(spec.Name, nil); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, uidFile), []byte(spec.UID+"\n"), 0o644)
}
