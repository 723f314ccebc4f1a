package cluster

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The metadata group replicates the cluster's state (metaState): its
// nodes, its collections with their placement, and the move of a shard
// replica in progress. Every node applies the same commands in the same
// order; once its copy has caught up with the group's log as it found it
// on starting, each applied command also reconciles the node's replicas
// with the state (Node.reconcile): it opens those the state gives it and
// closes, and deletes, those it no longer does. A node replaying its log
// reconciles only once it reaches the end, so that no replica is deleted
// on the way to a state that holds it again.

// metaCommand is one entry of the metadata group's log.
type metaCommand struct {
	// Op is "create", "drop", "join", "rejoin", "demoted", "rejoined",
	// "drain", "leave", "move", "switch" or "done".
	Op   string          `json:"op"`
	Spec *CollectionSpec `json:"spec,omitempty"` // create
	Name string          `json:"name,omitempty"` // drop
	Peer *Peer           `json:"peer,omitempty"` // join, rejoin
	Node string          `json:"node,omitempty"` // drain, leave, rejoin, demoted, rejoined
	Move *Move           `json:"move,omitempty"` // move, switch, done
}

// NodeInfo is a member of the cluster as the metadata group records it.
type NodeInfo struct {
	Peer
	// Draining nodes are being emptied of replicas (Node.Drain); once
	// they hold none they leave the cluster.
	Draining bool `json:"draining,omitempty"`
	// Rejoining marks a member that came back without its Raft state
	// (restored from a backup): it is demoted to a non-voter in every
	// group (Demoted), and votes again once it has caught up.
	Rejoining bool `json:"rejoining,omitempty"`
	Demoted   bool `json:"demoted,omitempty"`
}

// Move is the move of one shard replica from one node to another
// (docs/cluster.md, "Moves"). The stages:
//
//   - "copy": To opens an empty replica, and the shard's leader adds it
//     to the group as a non-voter: Raft sends it a snapshot, then the
//     log. Once it has applied as far as the leader had a step before,
//     it is made a voter, and the placement switches From for To.
//   - "remove": To serves the shard. Once it has applied as far as the
//     leader had at the switch (Index), From leaves the group, and then
//     closes and deletes its replica.
//
// Writes and searches go on throughout: From serves the shard until the
// switch, To after it.
type Move struct {
	Collection string    `json:"collection"`
	Shard      int       `json:"shard"`
	From       string    `json:"from"`
	To         string    `json:"to"`
	Stage      string    `json:"stage"`
	Started    time.Time `json:"started"`
	// Index is, from the switch on, the leader's applied index when To
	// replaced From, and Conf the index of the group's configuration
	// that made To a voter, which From's removal must follow.
	Index uint64 `json:"index,omitempty"`
	Conf  uint64 `json:"conf,omitempty"`
	// When To replaced From in the placement, the documents To held when
	// From left, and when From had left.
	Switched time.Time `json:"switched,omitzero"`
	Docs     uint64    `json:"docs,omitempty"`
	Ended    time.Time `json:"ended,omitzero"`
}

// Took is how long a move took, from its start to From's leaving (or to
// now, for one in progress).
func (m Move) Took() time.Duration {
	if m.Ended.IsZero() {
		return time.Since(m.Started)
	}
	return m.Ended.Sub(m.Started)
}

// keepDone is the number of finished moves the state remembers, for
// Status.
const keepDone = 16

// metaState is what the metadata group replicates.
type metaState struct {
	// Format tells a snapshot of this state from one of the format
	// before it (a bare map of specs).
	Format int                       `json:"tandem_meta"`
	Specs  map[string]CollectionSpec `json:"specs"`
	Nodes  map[string]NodeInfo       `json:"nodes"`
	Moves  []Move                    `json:"moves,omitempty"` // in progress: at most one
	Done   []Move                    `json:"done,omitempty"`  // the last keepDone finished, oldest first
}

func (s *metaState) clone() metaState {
	c := metaState{Format: 2, Specs: maps.Clone(s.Specs), Nodes: maps.Clone(s.Nodes),
		Moves: slices.Clone(s.Moves), Done: slices.Clone(s.Done)}
	if c.Specs == nil {
		c.Specs = map[string]CollectionSpec{}
	}
	if c.Nodes == nil {
		c.Nodes = map[string]NodeInfo{}
	}
	return c
}

// metaFSM applies the metadata group's log to a metaState.
type metaFSM struct {
	n  *Node
	mu sync.Mutex
	st metaState
	// live is set once the state has caught up with the log the node
	// found on starting; from then on every change reconciles replicas.
	live bool
	// stale is set while the last reconcile failed; the node tries again
	// (retry).
	stale bool
	// founders are the nodes the state starts from, the same on every
	// node (Start).
	founders []Peer
}

func newMetaFSM(n *Node, founders []Peer) *metaFSM {
	f := &metaFSM{n: n, founders: founders, st: metaState{Format: 2, Specs: map[string]CollectionSpec{}, Nodes: map[string]NodeInfo{}}}
	for _, p := range founders {
		f.st.Nodes[p.ID] = NodeInfo{Peer: p}
	}
	return f
}

// reconcile reconciles the node with the state, when live. A failure
// (a replica that cannot open) is logged, not the command's result,
// which every node applied alike: the node tries again (retry).
func (f *metaFSM) reconcile() {
	if !f.live || f.n == nil {
		return
	}
	if err := f.n.reconcile(f.st.clone()); err != nil {
		f.stale = true
		f.n.log.Error("open or close replicas; trying again", "error", err)
		return
	}
	f.stale = false
}

// retry reconciles again after a failure.
func (f *metaFSM) retry() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		f.reconcile()
	}
}

// state returns a copy of the state.
func (f *metaFSM) state() metaState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.clone()
}

func (f *metaFSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c metaCommand
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return fmt.Errorf("cluster: metadata entry %d: %w", l.Index, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.st.clone()
	if err := next.apply(&c); err != nil {
		return err
	}
	f.st = next
	f.reconcile()
	return nil
}

// apply changes s by c, or refuses c leaving s as it was (the caller
// applies to a clone).
func (s *metaState) apply(c *metaCommand) error {
	switch c.Op {
	case "create":
		if c.Spec == nil {
			return fmt.Errorf("%w: create without a spec", ErrBadCollection)
		}
		if _, ok := s.Specs[c.Spec.Name]; ok {
			return fmt.Errorf("%w: %q", ErrExists, c.Spec.Name)
		}
		for sh, nodes := range c.Spec.Placement {
			for _, id := range nodes {
				if ni, ok := s.Nodes[id]; !ok || ni.Draining {
					return fmt.Errorf("%w: shard %d placed on %q, which is not an active node", ErrBadCollection, sh, id)
				}
			}
		}
		s.Specs[c.Spec.Name] = *c.Spec
	case "drop":
		if _, ok := s.Specs[c.Name]; !ok {
			return fmt.Errorf("%w: %q", ErrNoCollection, c.Name)
		}
		delete(s.Specs, c.Name)
		s.Moves = slices.DeleteFunc(s.Moves, func(m Move) bool { return m.Collection == c.Name })
	case "join":
		if c.Peer == nil || c.Peer.ID == "" || c.Peer.Raft == "" || c.Peer.HTTP == "" {
			return fmt.Errorf("%w: a joining node needs an id and its raft and http addresses", ErrBadMember)
		}
		if old, ok := s.Nodes[c.Peer.ID]; ok {
			if old.Peer != *c.Peer {
				return fmt.Errorf("%w: node %q is a member already, at %s/%s", ErrBadMember, c.Peer.ID, old.Raft, old.HTTP)
			}
			return nil // joining again, as after a restart
		}
		for id, o := range s.Nodes {
			if o.Raft == c.Peer.Raft || o.HTTP == c.Peer.HTTP {
				return fmt.Errorf("%w: node %q has an address of node %q", ErrBadMember, c.Peer.ID, id)
			}
		}
		s.Nodes[c.Peer.ID] = NodeInfo{Peer: *c.Peer}
	case "rejoin", "demoted", "rejoined":
		ni, ok := s.Nodes[c.Node]
		if !ok {
			return fmt.Errorf("%w: no node %q", ErrBadMember, c.Node)
		}
		switch c.Op {
		case "rejoin":
			if c.Peer == nil || *c.Peer != ni.Peer {
				return fmt.Errorf("%w: node %q is a member at %s/%s", ErrBadMember, c.Node, ni.Raft, ni.HTTP)
			}
			ni.Rejoining, ni.Demoted = true, false
		case "demoted":
			ni.Demoted = ni.Rejoining
		case "rejoined":
			ni.Rejoining, ni.Demoted = false, false
		}
		s.Nodes[c.Node] = ni
	case "drain":
		ni, ok := s.Nodes[c.Node]
		if !ok {
			return fmt.Errorf("%w: no node %q", ErrBadMember, c.Node)
		}
		if err := s.canDrain(c.Node); err != nil {
			return err
		}
		ni.Draining = true
		s.Nodes[c.Node] = ni
	case "leave":
		if s.holds(c.Node) > 0 || slices.ContainsFunc(s.Moves, func(m Move) bool { return m.From == c.Node }) {
			return fmt.Errorf("%w: node %q still holds replicas", ErrBadMember, c.Node)
		}
		delete(s.Nodes, c.Node)
	case "move":
		if len(s.Moves) > 0 {
			return fmt.Errorf("%w: a move is in progress", ErrBadMember)
		}
		m := *c.Move
		spec, ok := s.Specs[m.Collection]
		if !ok || m.Shard < 0 || m.Shard >= spec.Shards {
			return fmt.Errorf("%w: no shard %s/%d", ErrBadMember, m.Collection, m.Shard)
		}
		if _, ok := s.Nodes[m.To]; !ok || !slices.Contains(spec.Placement[m.Shard], m.From) || slices.Contains(spec.Placement[m.Shard], m.To) {
			return fmt.Errorf("%w: cannot move %s/%d from %s to %s", ErrBadMember, m.Collection, m.Shard, m.From, m.To)
		}
		m.Stage = "copy"
		s.Moves = append(s.Moves, m)
	case "switch":
		i := s.move(c.Move)
		if i < 0 || s.Moves[i].Stage != "copy" {
			return nil // done already: the command came twice
		}
		m := &s.Moves[i]
		spec := s.Specs[m.Collection]
		spec.Placement = slices.Clone(spec.Placement)
		nodes := slices.Clone(spec.Placement[m.Shard])
		nodes[slices.Index(nodes, m.From)] = m.To
		spec.Placement[m.Shard] = nodes
		spec.Moved = slices.Clone(spec.Moved)
		for len(spec.Moved) < spec.Shards {
			spec.Moved = append(spec.Moved, false)
		}
		spec.Moved[m.Shard] = true
		s.Specs[m.Collection] = spec
		m.Stage, m.Index, m.Conf, m.Switched, m.Docs = "remove", c.Move.Index, c.Move.Conf, c.Move.Switched, c.Move.Docs
	case "done":
		i := s.move(c.Move)
		if i < 0 {
			return nil
		}
		m := s.Moves[i]
		m.Ended, m.Docs = c.Move.Ended, c.Move.Docs
		s.Moves = slices.Delete(s.Moves, i, i+1)
		s.Done = append(s.Done, m)
		if len(s.Done) > keepDone {
			s.Done = s.Done[len(s.Done)-keepDone:]
		}
	default:
		return fmt.Errorf("cluster: metadata: unknown op %q", c.Op)
	}
	return nil
}

// move finds the move in progress that m names.
func (s *metaState) move(m *Move) int {
	if m == nil {
		return -1
	}
	return slices.IndexFunc(s.Moves, func(o Move) bool {
		return o.Collection == m.Collection && o.Shard == m.Shard && o.From == m.From && o.To == m.To
	})
}

// holds counts the replicas a node holds or is receiving.
func (s *metaState) holds(node string) int {
	n := 0
	for _, spec := range s.Specs {
		for _, nodes := range spec.Placement {
			if slices.Contains(nodes, node) {
				n++
			}
		}
	}
	for _, m := range s.Moves {
		if m.To == node && m.Stage == "copy" {
			n++
		}
	}
	return n
}

// canDrain refuses to drain a node when too few nodes would be left for a
// collection's replicas.
func (s *metaState) canDrain(node string) error {
	active := 0
	for id, ni := range s.Nodes {
		if !ni.Draining && id != node {
			active++
		}
	}
	for _, spec := range s.Specs {
		if spec.Replicas > active {
			return fmt.Errorf("%w: draining %s would leave %d nodes for collection %q's %d replicas of each shard", ErrBadMember, node, active, spec.Name, spec.Replicas)
		}
	}
	return nil
}

func (f *metaFSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := json.Marshal(f.st)
	return metaSnapshot(b), err
}

// Restore replaces the state with a snapshot's: the format of metaState,
// or the one before it, a map of specs by name (the nodes are then those
// of Config.Peers, as they were).
func (f *metaFSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("cluster: restore metadata: %w", err)
	}
	var probe struct {
		Format int `json:"tandem_meta"`
	}
	json.Unmarshal(b, &probe)
	f.mu.Lock()
	defer f.mu.Unlock()
	next := f.st.clone()
	if probe.Format >= 2 {
		next = metaState{}
		if err := json.Unmarshal(b, &next); err != nil {
			return fmt.Errorf("cluster: restore metadata: %w", err)
		}
		next = next.clone()
	} else {
		var specs map[string]CollectionSpec
		if err := json.Unmarshal(b, &specs); err != nil {
			return fmt.Errorf("cluster: restore metadata: %w", err)
		}
		next.Specs = specs
		next = next.clone()
	}
	f.st = next
	f.reconcile()
	return nil
}

// goLive reconciles the node with the state once the group's log, as the
// node found it on starting, has been applied, and from then on at every
// change.
func (f *metaFSM) goLive() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live = true
	f.reconcile()
}

type metaSnapshot []byte

func (s metaSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (metaSnapshot) Release() {}

// newUID returns a collection's unique id.
func newUID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
