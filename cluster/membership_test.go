package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestNodeWithoutReplica writes and searches through a node that holds no
// replica of the collection (as a node that has just joined, or been
// drained): it checks documents and encodes queries with its coordinator
// engine, and reads the shards from the nodes that hold them.
func TestNodeWithoutReplica(t *testing.T) {
	nodes := testCluster(t, 3, engine.Options{})
	ctx := testtime.Context(t)
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 2, Replicas: 1, Schema: testSchema()}); err != nil {
		t.Fatal(err)
	}
	bare := nodes[2]
	c, err := bare.collection("c")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.replicas) != 0 {
		t.Fatalf("%s holds %d replicas, want none", bare.ID(), len(c.replicas))
	}
	var docs []tandem.Doc
	for i := range 40 {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"text": fmt.Sprintf("note %d about wings and flow %d", i, i%7)}})
	}
	wr, err := bare.Index(ctx, "c", docs)
	if err != nil {
		t.Fatal(err)
	}
	if wr.Put != 40 {
		t.Fatalf("put %d, want 40", wr.Put)
	}
	if _, err := bare.Delete(ctx, "c", []string{"d3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := bare.Index(ctx, "c", []tandem.Doc{{ID: "bad", Fields: map[string]any{"nope": 1}}}); err == nil {
		t.Error("a document with an undeclared field was accepted through the node without a replica")
	}
	req := engine.Request{Text: "wings flow 3", K: 50}
	got, err := bare.Search(ctx, "c", req, nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := nodes[0].Search(ctx, "c", req, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Hits) != 39 {
		t.Errorf("%d hits through %s, want the 39 live documents", len(got.Hits), bare.ID())
	}
	if d := sameRanking(got.Hits, want.Hits); d != "" {
		t.Errorf("through %s against n0: %s", bare.ID(), d)
	}
	col, err := Catalog{Node: bare}.Open("c")
	if err != nil {
		t.Fatal(err)
	}
	if n := col.Count(); n != 39 {
		t.Errorf("count through %s: %d, want 39", bare.ID(), n)
	}
	if len(col.Retrievers()) == 0 {
		t.Error("no retrievers through the node without a replica")
	}
}

// startJoining starts a node that joins the cluster of nodes[0].
func startJoining(t *testing.T, id string, root string, via *Node) *Node {
	t.Helper()
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := Peer{ID: id, Raft: rl.Addr().String(), HTTP: hl.Addr().String()}
	nd, err := Start(testRaft(Config{ID: id, Dir: filepath.Join(root, id), Peers: []Peer{self}, Join: via.self.HTTP,
		RaftListener: rl, HTTPListener: hl, Log: testLog{t}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nd.Close() })
	return nd
}

// ledger records a writer's writes to each id, in order, and whether
// each was acknowledged.
type ledger struct {
	mu  sync.Mutex
	ops map[string][]ledgerOp
}

type ledgerOp struct {
	v     int // 0: a delete
	acked bool
}

func (l *ledger) record(id string, v int) func(acked bool) {
	l.mu.Lock()
	l.ops[id] = append(l.ops[id], ledgerOp{v: v})
	i := len(l.ops[id]) - 1
	l.mu.Unlock()
	return func(acked bool) {
		l.mu.Lock()
		l.ops[id][i].acked = acked
		l.mu.Unlock()
	}
}

// allowed lists the versions an id may end at (0: absent): its last
// acknowledged write's, or any later unacknowledged one's.
func (l *ledger) allowed(id string) []int {
	ops := l.ops[id]
	last := -1
	for i, o := range ops {
		if o.acked {
			last = i
		}
	}
	out := []int{0}
	if last >= 0 {
		out = []int{ops[last].v}
	}
	for _, o := range ops[last+1:] {
		out = append(out, o.v)
	}
	return out
}

// TestAddAndDrainNode grows a 3-node cluster to 4 and drains one of the
// first three while a writer runs through every node: the 4th node joins
// and takes replicas by the placement rule, the drained node's replicas
// move away and it leaves. Then every replica of every shard holds the
// same documents, no acknowledged write is lost, and a search through
// every member returns exactly the live documents.
func TestAddAndDrainNode(t *testing.T) {
	ctx := testtime.Context(t)
	nodes := testCluster(t, 3, engine.Options{NoSync: true})
	root := t.TempDir()
	if err := nodes[0].CreateCollection(ctx, CollectionSpec{Name: "c", Shards: 3, Replicas: 2, Schema: testSchema()}); err != nil {
		t.Fatal(err)
	}
	members := slices.Clone(nodes)
	var mu sync.Mutex
	l := &ledger{ops: map[string][]ledgerOp{}}
	wctx, stopWriter := context.WithCancel(ctx)
	var writes atomic.Int64
	// wrote waits until n more writes are acknowledged: the writer goes
	// on for a number of writes rather than for a time, as many on a
	// slow machine.
	wrote := func(n int64, what string) {
		t.Helper()
		from := writes.Load()
		testtime.Until(t, time.Minute, 10*time.Millisecond, what, func() error {
			if got := writes.Load() - from; got < n {
				return fmt.Errorf("%d of %d writes acknowledged", got, n)
			}
			return nil
		})
	}
	var wg sync.WaitGroup
	defer func() { stopWriter(); wg.Wait() }() // also when a wait fails
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for v := 1; wctx.Err() == nil; v++ {
			mu.Lock()
			via := members[rng.IntN(len(members))]
			mu.Unlock()
			id := fmt.Sprint("d", rng.IntN(150))
			var err error
			if rng.IntN(8) == 0 {
				done := l.record(id, 0)
				_, err = via.Delete(wctx, "c", []string{id})
				done(err == nil)
			} else {
				done := l.record(id, v)
				_, err = via.Index(wctx, "c", []tandem.Doc{{ID: id, Fields: map[string]any{"text": fmt.Sprintf("wing note version %d", v), "year": v}}})
				done(err == nil)
			}
			if err == nil {
				writes.Add(1)
			} else if wctx.Err() == nil {
				t.Logf("write through %s: %v", via.ID(), err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	})

	wrote(20, "writes before n3 joins")
	n3 := startJoining(t, "n3", root, nodes[0])
	mu.Lock()
	members = append(members, n3)
	mu.Unlock()
	balanced := func(what string, check func(Status) error) Status {
		t.Helper()
		var st Status
		testtime.Until(t, 2*time.Minute, 100*time.Millisecond, what, func() error {
			st = nodes[0].Status()
			if err := check(st); err != nil {
				return fmt.Errorf("%w; status: %+v", err, st)
			}
			if len(st.Moves) > 0 {
				return fmt.Errorf("a move in progress; status: %+v", st)
			}
			return nil
		})
		return st
	}
	st := balanced("after n3 joined", func(st Status) error {
		for _, ns := range st.Nodes {
			if ns.Replicas < 1 || ns.Replicas > 2 {
				return fmt.Errorf("%s holds %d replicas, want 1 or 2", ns.ID, ns.Replicas)
			}
		}
		if len(st.Nodes) != 4 {
			return fmt.Errorf("%d nodes", len(st.Nodes))
		}
		return nil
	})
	t.Logf("after n3 joined: %d moves done", len(st.Done))
	// n3 restarts: its metadata starts again from the founders it keeps,
	// so it sees the same cluster as the others.
	self := n3.self
	mu.Lock()
	members = members[:3]
	mu.Unlock()
	if err := n3.Close(); err != nil {
		t.Fatal(err)
	}
	n3, err := Start(testRaft(Config{ID: "n3", Dir: filepath.Join(root, "n3"), Peers: []Peer{self}, Join: nodes[0].self.HTTP, Log: testLog{t}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n3.Close() })
	testtime.Until(t, time.Minute, 50*time.Millisecond, "the restarted n3 sees the cluster as n0 does", func() error {
		a, b := nodes[0].Status(), n3.Status()
		if fmt.Sprint(a.Nodes) == fmt.Sprint(b.Nodes) && len(b.Collections) == 1 && fmt.Sprint(a.Collections[0].Spec.Placement) == fmt.Sprint(b.Collections[0].Spec.Placement) {
			return nil
		}
		return fmt.Errorf("n3 sees nodes %+v, n0 %+v", b.Nodes, a.Nodes)
	})
	mu.Lock()
	members = append(members, n3)
	mu.Unlock()

	if err := nodes[2].Drain(ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].Drain(ctx, "n9"); !errors.Is(err, ErrBadMember) {
		t.Errorf("draining a node that is not a member: %v, want ErrBadMember", err)
	}
	st = balanced("after draining n1", func(st Status) error {
		if len(st.Nodes) != 3 {
			return fmt.Errorf("%d nodes, want 3 (n1 gone)", len(st.Nodes))
		}
		for _, ns := range st.Nodes {
			if ns.ID == "n1" || ns.Replicas != 2 {
				return fmt.Errorf("%s holds %d replicas", ns.ID, ns.Replicas)
			}
		}
		return nil
	})
	for _, m := range st.Done {
		t.Logf("moved %s/%d from %s to %s: %d documents in %.2f s (copy %.2f s)", m.Collection, m.Shard, m.From, m.To, m.Docs, m.Seconds, m.Switched.Sub(m.Started).Seconds())
	}
	mu.Lock()
	members = []*Node{nodes[0], nodes[2], n3}
	mu.Unlock()
	wrote(20, "writes to the new placement")
	stopWriter()
	wg.Wait()
	if writes.Load() < 50 {
		t.Fatalf("only %d writes acknowledged", writes.Load())
	}

	// Every replica of each shard holds the same documents, which the
	// ledger allows.
	c0, _ := nodes[0].collection("c")
	byNode := map[string]*Node{"n0": nodes[0], "n2": nodes[2], "n3": n3}
	live := map[string]bool{}
	version := map[string]int{}
	for s := range 3 {
		var reps []*replica
		for _, id := range nodes[0].placement(c0, s) {
			c, _ := byNode[id].collection("c")
			reps = append(reps, c.replicas[s])
		}
		testtime.Until(t, 30*time.Second, 50*time.Millisecond, fmt.Sprintf("shard %d: the replicas hold the same documents", s), func() error {
			var ds []Digest
			same := true
			for _, r := range reps {
				d, err := r.digest(ctx)
				if err != nil {
					return err
				}
				ds = append(ds, d)
				same = same && d.Applied == ds[0].Applied && equalDocs(d.Docs, ds[0].Docs)
			}
			if !same {
				var b strings.Builder
				for i, r := range reps {
					st := r.raft.Stats()
					fmt.Fprintf(&b, "\n%s: state %s applied %d (%d documents) commit %s last-log %s config %s", nodes[0].placement(c0, s)[i], st["state"], ds[i].Applied, len(ds[i].Docs), st["commit_index"], st["last_log_index"], st["latest_configuration"])
				}
				return fmt.Errorf("they differ:%s", b.String())
			}
			for id := range ds[0].Docs {
				live[id] = true
			}
			return nil
		})
		eng, err := reps[0].engine()
		if err != nil {
			t.Fatal(err)
		}
		for id := range l.ops {
			if ShardOf(id, 3) != s {
				continue
			}
			d, ok, err := eng.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				version[id] = int(d.Fields["year"].(float64))
			}
		}
		reps[0].mu.RUnlock()
	}
	for id := range l.ops {
		if !slices.Contains(l.allowed(id), version[id]) {
			t.Errorf("%s is at version %d; its writes allow %v", id, version[id], l.allowed(id))
		}
	}
	for _, nd := range []*Node{nodes[0], nodes[2], n3} {
		res, err := nd.Search(ctx, "c", engine.Request{Text: "wing note version", K: 500}, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, h := range res.Hits {
			got[h.ID] = true
		}
		if !maps.Equal(got, live) {
			t.Errorf("search through %s: %d hits, want the %d live documents", nd.ID(), len(got), len(live))
		}
	}
	// n1 holds nothing any more.
	if c1, err := nodes[1].collection("c"); err == nil {
		nodes[1].mu.RLock()
		held := len(c1.replicas)
		nodes[1].mu.RUnlock()
		if held != 0 {
			t.Errorf("the drained n1 still holds %d replicas", held)
		}
	}
	t.Logf("%d writes acknowledged, %d live documents", writes.Load(), len(live))
}

// TestPlacementRule checks planMove against the rule: every node that is
// not draining ends at the floor or the ceiling of the mean, draining
// nodes at none, never two replicas of a shard on one node; and a drain
// that would leave too few nodes is refused.
func TestPlacementRule(t *testing.T) {
	for _, tc := range []struct {
		nodes            int
		draining         []string
		shards, replicas int
	}{
		{4, nil, 3, 2}, {4, nil, 3, 3}, {5, nil, 7, 3}, {4, []string{"n1"}, 3, 3},
		{6, []string{"n0", "n5"}, 10, 2}, {3, nil, 1, 1}, {8, nil, 3, 3},
	} {
		st := metaState{Specs: map[string]CollectionSpec{}, Nodes: map[string]NodeInfo{}}
		for i := range tc.nodes {
			id := fmt.Sprint("n", i)
			st.Nodes[id] = NodeInfo{Peer: Peer{ID: id}, Draining: slices.Contains(tc.draining, id)}
		}
		// Created on the first three nodes, as a 3-node cluster would.
		spec := CollectionSpec{Name: "c", Shards: tc.shards, Replicas: tc.replicas}
		for s := range tc.shards {
			var ns []string
			for i := range tc.replicas {
				ns = append(ns, fmt.Sprint("n", (s+i)%3))
			}
			spec.Placement = append(spec.Placement, ns)
		}
		st.Specs["c"] = spec
		moves := 0
		for {
			m, ok := planMove(st)
			if !ok {
				break
			}
			moves++
			if moves > 100 {
				t.Fatalf("%+v: no end to the moves", tc)
			}
			next := st.clone()
			if err := next.apply(&metaCommand{Op: "move", Move: &m}); err != nil {
				t.Fatalf("%+v: planned %+v: %v", tc, m, err)
			}
			for _, op := range []string{"switch", "done"} {
				if err := next.apply(&metaCommand{Op: op, Move: &m}); err != nil {
					t.Fatal(err)
				}
			}
			st = next
		}
		active := tc.nodes - len(tc.draining)
		lo, hi := tc.shards*tc.replicas/active, (tc.shards*tc.replicas+active-1)/active
		count := map[string]int{}
		for s, ns := range st.Specs["c"].Placement {
			if len(ns) != tc.replicas {
				t.Errorf("%+v: shard %d on %v", tc, s, ns)
			}
			seen := map[string]bool{}
			for _, id := range ns {
				if seen[id] {
					t.Errorf("%+v: shard %d twice on %s", tc, s, id)
				}
				seen[id] = true
				count[id]++
			}
		}
		for id, ni := range st.Nodes {
			c := count[id]
			if ni.Draining && c != 0 || !ni.Draining && (c < lo || c > hi) {
				t.Errorf("%+v: %s (draining %v) holds %d, want %d to %d", tc, id, ni.Draining, c, lo, hi)
			}
		}
		t.Logf("%d nodes (%d draining), %d shards x %d: %d moves", tc.nodes, len(tc.draining), tc.shards, tc.replicas, moves)
	}
	st := metaState{Specs: map[string]CollectionSpec{"c": {Name: "c", Shards: 1, Replicas: 2, Placement: [][]string{{"n0", "n1"}}}},
		Nodes: map[string]NodeInfo{"n0": {Peer: Peer{ID: "n0"}}, "n1": {Peer: Peer{ID: "n1"}}, "n2": {Peer: Peer{ID: "n2"}}}}
	if err := st.apply(&metaCommand{Op: "drain", Node: "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.apply(&metaCommand{Op: "drain", Node: "n1"}); !errors.Is(err, ErrBadMember) {
		t.Errorf("draining to 1 node for 2 replicas: %v, want ErrBadMember", err)
	}
	if err := st.apply(&metaCommand{Op: "leave", Node: "n0"}); !errors.Is(err, ErrBadMember) {
		t.Errorf("n0 leaving while it holds a replica: %v, want ErrBadMember", err)
	}
}

// TestDropCollection drops a collection through a node that does not
// lead the metadata: it is gone from every node, with its files, and a
// new collection of the same name starts empty.
func TestDropCollection(t *testing.T) {
	ctx := testtime.Context(t)
	nodes := testCluster(t, 3, engine.Options{NoSync: true})
	spec := CollectionSpec{Name: "c", Shards: 2, Replicas: 2, Schema: testSchema()}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var docs []tandem.Doc
	for i := range 20 {
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", i), Fields: map[string]any{"text": "wing"}})
	}
	if _, err := nodes[0].Index(ctx, "c", docs); err != nil {
		t.Fatal(err)
	}
	if err := (Catalog{Node: nodes[1]}).Drop(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		dir := filepath.Join(n.cfg.Dir, "collections", "c")
		testtime.Until(t, 10*time.Second, 20*time.Millisecond, fmt.Sprintf("%s drops the collection and its files", n.ID()), func() error {
			if got := n.Collections(); len(got) != 0 {
				return fmt.Errorf("it still has %d collections", len(got))
			}
			if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("the dropped collection's directory: %v", err)
			}
			return nil
		})
	}
	if err := (Catalog{Node: nodes[2]}).Drop(ctx, "c"); !errors.Is(err, ErrNoCollection) {
		t.Errorf("dropping it again: %v, want ErrNoCollection", err)
	}
	if err := nodes[2].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	col, err := Catalog{Node: nodes[0]}.Open("c")
	if err != nil {
		t.Fatal(err)
	}
	if n := col.Count(); n != 0 {
		t.Errorf("the new collection holds %d documents, want 0", n)
	}
	if _, err := nodes[1].Index(ctx, "c", docs[:5]); err != nil {
		t.Fatal(err)
	}
	if n := col.Count(); n != 5 {
		t.Errorf("the new collection holds %d documents, want 5", n)
	}
}

// TestMetaSnapshotFormats restores a metadata snapshot of this format
// and one of the format before it (a bare map of specs, whose nodes are
// the configured peers), without reconciling replicas (not live).
func TestMetaSnapshotFormats(t *testing.T) {
	peers := []Peer{{ID: "n0", Raft: "a:1", HTTP: "a:2"}, {ID: "n1", Raft: "b:1", HTTP: "b:2"}}
	spec := CollectionSpec{Name: "c", Shards: 1, Replicas: 2, Placement: [][]string{{"n0", "n1"}}}
	old, _ := json.Marshal(map[string]CollectionSpec{"c": spec})
	f := newMetaFSM(nil, peers)
	if err := f.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	st := f.state()
	if len(st.Specs) != 1 || st.Specs["c"].Replicas != 2 || len(st.Nodes) != 2 || st.Nodes["n1"].HTTP != "b:2" {
		t.Fatalf("from the old format: %+v", st)
	}
	st.Nodes["n2"] = NodeInfo{Peer: Peer{ID: "n2", Raft: "c:1", HTTP: "c:2"}, Draining: true}
	st.Moves = []Move{{Collection: "c", Shard: 0, From: "n1", To: "n2", Stage: "copy"}}
	f.st = st
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	g := newMetaFSM(nil, peers[:1])
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap.(metaSnapshot)))); err != nil {
		t.Fatal(err)
	}
	got := g.state()
	if len(got.Nodes) != 3 || !got.Nodes["n2"].Draining || len(got.Moves) != 1 || got.Moves[0].To != "n2" || got.holds("n2") != 1 {
		t.Errorf("from this format: %+v", got)
	}
}
