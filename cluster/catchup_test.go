package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testnet"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestCatchUpFromSnapshot stops a node, writes on while the others
// snapshot and truncate their logs past what it has, and restarts it: its
// replicas must restore a snapshot (a backup of another replica's store),
// then follow the log, and end with the others' documents.
func TestCatchUpFromSnapshot(t *testing.T) {
	ctx := testtime.Context(t)
	root := t.TempDir()
	nodes, start := snapshotNodes(t, root, 4)
	defer closeNodes(nodes)
	spec := CollectionSpec{Name: "c", Shards: 2, Replicas: 3, Schema: &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text}}}}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	write := func(n *Node, from, to int) {
		t.Helper()
		for i := from; i < to; i += 5 {
			var docs []tandem.Doc
			for j := i; j < i+5; j++ {
				docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", j%60), Fields: map[string]any{"text": fmt.Sprintf("version %d of note %d", j, j%60)}})
			}
			if _, err := n.Index(ctx, "c", docs); err != nil {
				t.Fatal(err)
			}
			if i%15 == 0 {
				if _, err := n.Delete(ctx, "c", []string{fmt.Sprint("d", (i+7)%60)}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	write(nodes[0], 0, 100)
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	write(nodes[1], 100, 400)
	// Snapshot and truncate every shard's log on the nodes still up.
	for _, n := range nodes[:2] {
		c, _ := n.collection("c")
		for _, r := range c.replicas {
			if err := r.raft.Snapshot().Error(); err != nil && err != raft.ErrNothingNewToSnapshot {
				t.Fatal(err)
			}
		}
	}
	nodes[2] = start(2)
	c2 := waitCollection(t, nodes[2], "c")
	var want [2]Digest
	for s := range 2 {
		c0, _ := nodes[0].collection("c")
		want[s] = sameDigest(t, ctx, time.Minute, fmt.Sprintf("shard %d: the restarted replica catches up", s), c0.replicas[s], c2.replicas[s])
	}
	restored := 0
	for s := range 2 {
		// A restored replica's change log starts over from the snapshot's
		// store, which holds the whole log: it is as long as the others'.
		if want[s].LastSeq == 0 || len(want[s].Docs) == 0 {
			t.Errorf("shard %d: empty after catching up", s)
		}
		restored += int(c2.replicas[s].restores.Load())
	}
	if restored == 0 {
		t.Error("no replica of the restarted node restored a snapshot: the test did not exercise catch-up from one")
	}
	// And it follows the log from there.
	write(nodes[2], 400, 430)
	for s := range 2 {
		c0, _ := nodes[0].collection("c")
		sameDigest(t, ctx, 30*time.Second, fmt.Sprintf("shard %d: after more writes, the restarted replica follows", s), c0.replicas[s], c2.replicas[s])
	}
}

// sameDigest waits, up to d scaled (testtime.Until), until replica b has
// applied as far as a and holds the same documents, and returns b's
// digest.
func sameDigest(t *testing.T, ctx context.Context, d time.Duration, what string, a, b *replica) Digest {
	t.Helper()
	var db Digest
	testtime.Until(t, d, 50*time.Millisecond, what, func() error {
		da, erra := a.digest(ctx)
		var errb error
		db, errb = b.digest(ctx)
		if err := errors.Join(erra, errb); err != nil {
			return err
		}
		if da.Applied != db.Applied || !equalDocs(da.Docs, db.Docs) {
			return fmt.Errorf("at %d with %d documents, want %d with %d", db.Applied, len(db.Docs), da.Applied, len(da.Docs))
		}
		return nil
	})
	return db
}

func equalDocs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitCollection waits until n holds a replica of every shard of
// collection name, and returns it.
func waitCollection(t *testing.T, n *Node, name string) *collection {
	t.Helper()
	var c *collection
	testtime.Until(t, time.Minute, 20*time.Millisecond, fmt.Sprintf("%s reopens %s", n.ID(), name), func() error {
		var err error
		if c, err = n.collection(name); err != nil {
			return err
		}
		n.mu.RLock()
		held := len(c.replicas)
		n.mu.RUnlock()
		if held != c.shards {
			return fmt.Errorf("%d of %d shards open", held, c.shards)
		}
		return nil
	})
	return c
}

// TestRestartAfterUnappliedSnapshot restarts a replica in the state a
// SIGKILL leaves while it installs a snapshot: Raft has persisted the
// snapshot it received (it does so before the FSM's Restore runs), and
// the replica's directory is halfway through Restore's swap, renamed
// aside with nothing in its place. Raft then counts the snapshot's
// entries as applied (NoSnapshotRestoreOnStart) and never sends them
// again, so the replica must restore the snapshot itself when it opens:
// it must end with the others' documents. (The others keep enough log
// that n2 catches up from it without another snapshot, which would hide
// the loss.)
func TestRestartAfterUnappliedSnapshot(t *testing.T) {
	ctx := testtime.Context(t)
	root := t.TempDir()
	nodes, start := snapshotNodes(t, root, 1000)
	defer closeNodes(nodes)
	spec := CollectionSpec{Name: "c", Shards: 1, Replicas: 3, Schema: &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text}}}}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	write := func(n *Node, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			doc := tandem.Doc{ID: fmt.Sprint("d", i%70), Fields: map[string]any{"text": fmt.Sprintf("version %d of note %d", i, i%70)}}
			if _, err := n.Index(ctx, "c", []tandem.Doc{doc}); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(nodes[0], 0, 40)
	waitApplied(t, nodes, 3)
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	write(nodes[1], 40, 200)
	c0, _ := nodes[0].collection("c")
	if err := c0.replicas[0].raft.Snapshot().Error(); err != nil && err != raft.ErrNothingNewToSnapshot {
		t.Fatal(err)
	}
	// What Raft on n2 had persisted of the leader's snapshot when the
	// kill came: the snapshot, in n2's snapshot store.
	snaps, err := raft.NewFileSnapshotStore(shardDir(filepath.Join(root, "n0"), "c", 0)+".raft-snapshots", 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		t.Fatalf("n0 has no snapshot: %v", err)
	}
	meta, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	dst, err := raft.NewFileSnapshotStore(shardDir(filepath.Join(root, "n2"), "c", 0)+".raft-snapshots", 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, inmem := raft.NewInmemTransport("")
	sink, err := dst.Create(raft.SnapshotVersionMax, meta.Index, meta.Term, meta.Configuration, meta.ConfigurationIndex, inmem)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(sink, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	// And Restore's swap, interrupted after its first rename.
	dir := shardDir(filepath.Join(root, "n2"), "c", 0)
	if err := os.Rename(dir, dir+".replaced"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir+".restoring", 0o755); err != nil {
		t.Fatal(err)
	}

	nodes[2] = start(2)
	c2 := waitCollection(t, nodes[2], "c")
	write(nodes[1], 200, 210)
	sameDigest(t, ctx, time.Minute, "the restarted replica catches up with n0", c0.replicas[0], c2.replicas[0])
	if got := c2.replicas[0].restores.Load(); got != 1 {
		t.Errorf("n2 restored %d snapshots when it opened, want 1", got)
	}
	for _, leftover := range []string{dir + ".replaced", dir + ".restoring"} {
		if _, err := os.Stat(leftover); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v)", leftover, err)
		}
	}
}

// waitApplied waits until every node's replicas of shard 0 of "c" have
// applied as far as each other.
func waitApplied(t *testing.T, nodes []*Node, n int) {
	t.Helper()
	testtime.Until(t, 30*time.Second, 20*time.Millisecond, "the replicas of shard 0 apply as far as each other", func() error {
		var applied []uint64
		for _, nd := range nodes[:n] {
			c, _ := nd.collection("c")
			applied = append(applied, c.replicas[0].applied.Load())
		}
		if slices.Min(applied) != slices.Max(applied) {
			return fmt.Errorf("applied %v", applied)
		}
		return nil
	})
}

// snapshotNodes starts 3 nodes in this process, under root, whose groups
// snapshot every 8 entries and keep trailing entries behind; start(i)
// starts node i again after it was closed.
func snapshotNodes(t *testing.T, root string, trailing uint64) (nodes []*Node, start func(i int) *Node) {
	t.Helper()
	var peers []Peer
	addrs := testnet.Addrs(t, 6)
	for i := range 3 {
		peers = append(peers, Peer{ID: fmt.Sprint("n", i), Raft: addrs[2*i], HTTP: addrs[2*i+1]})
	}
	start = func(i int) *Node {
		t.Helper()
		nd, err := Start(testRaft(Config{ID: peers[i].ID, Dir: filepath.Join(root, peers[i].ID), Peers: peers,
			SnapshotThreshold: 8, TrailingLogs: trailing, Engine: engine.Options{NoSync: true}, Log: testLog{t}}))
		if err != nil {
			t.Fatal(err)
		}
		return nd
	}
	return []*Node{start(0), start(1), start(2)}, start
}

// closeNodes closes the nodes that are not nil.
func closeNodes(nodes []*Node) {
	for _, n := range nodes {
		if n != nil {
			n.Close()
		}
	}
}
