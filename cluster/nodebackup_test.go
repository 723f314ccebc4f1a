package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// TestBackupRestoreNode backs a node up while the cluster runs, writes
// on, loses the node's directory, restores it from the backup and starts
// it again through a member: it rejoins every group as a non-voter, so
// that it never votes with Raft state older than what it acknowledged,
// follows the log from where its restored stores stand (no snapshot is
// restored), votes again once caught up, and ends with the others'
// documents.
func TestBackupRestoreNode(t *testing.T) {
	ctx := testtime.Context(t)
	root := t.TempDir()
	nodes, _ := snapshotNodes(t, root, 1000)
	defer closeNodes(nodes)
	spec := CollectionSpec{Name: "c", Shards: 2, Replicas: 3, Schema: &tandem.Schema{Fields: []tandem.Field{{Name: "text", Type: tandem.Text}}}}
	if err := nodes[0].CreateCollection(ctx, spec); err != nil {
		t.Fatal(err)
	}
	write := func(n *Node, from, to int) {
		t.Helper()
		for i := from; i < to; i += 10 {
			var docs []tandem.Doc
			for j := i; j < i+10; j++ {
				docs = append(docs, tandem.Doc{ID: fmt.Sprint("d", j%150), Fields: map[string]any{"text": fmt.Sprintf("version %d of note %d", j, j%150)}})
			}
			if _, err := n.Index(ctx, "c", docs); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := n.Delete(ctx, "c", []string{fmt.Sprint("d", from%150)}); err != nil {
			t.Fatal(err)
		}
	}
	write(nodes[0], 0, 100)
	backup := filepath.Join(t.TempDir(), "n2.backup")
	f, err := os.Create(backup)
	if err != nil {
		t.Fatal(err)
	}
	if err := nodes[2].Backup(ctx, f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	write(nodes[1], 100, 250)
	self := nodes[2].self
	if err := nodes[2].Close(); err != nil {
		t.Fatal(err)
	}
	nodes[2] = nil
	dir := filepath.Join(root, "n2")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := RestoreNode(backup, dir); err != nil {
		t.Fatal(err)
	}
	cfg := testRaft(Config{ID: "n2", Dir: dir, Peers: []Peer{self}, Engine: engine.Options{NoSync: true}, Log: testLog{t}})
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "restored from a backup") {
		t.Fatalf("a restored node started without --join: %v", err)
	}
	cfg.Join = nodes[0].self.HTTP
	if nodes[2], err = Start(cfg); err != nil {
		t.Fatal(err)
	}
	// It rejoined as a non-voter of every group.
	st := nodes[0].Status()
	for _, ns := range st.Nodes {
		if ns.ID == "n2" && (!ns.Rejoining || !ns.Demoted) {
			t.Errorf("n2 right after it rejoined: %+v, want rejoining and demoted", ns.NodeInfo)
		}
	}
	c0 := waitCollection(t, nodes[0], "c")
	suffrage := func(r *raft.Raft) raft.ServerSuffrage {
		for _, s := range r.GetConfiguration().Configuration().Servers {
			if s.ID == "n2" {
				return s.Suffrage
			}
		}
		return -1
	}
	nonvoters := 0
	for s := range 2 {
		if suffrage(c0.replicas[s].raft) == raft.Nonvoter {
			nonvoters++
		}
	}
	if nonvoters == 0 {
		t.Error("n2 voted in every shard group as soon as it had rejoined")
	}
	// It votes again once caught up, and holds the others' documents.
	testtime.Until(t, time.Minute, 50*time.Millisecond, "n2 rejoins as a voter", func() error {
		done := suffrage(nodes[0].meta) == raft.Voter
		for _, ns := range nodes[0].Status().Nodes {
			done = done && !ns.Rejoining
		}
		for s := range 2 {
			done = done && suffrage(c0.replicas[s].raft) == raft.Voter
		}
		if !done {
			return fmt.Errorf("status %+v", nodes[0].Status())
		}
		return nil
	})
	write(nodes[2], 250, 300)
	c2 := waitCollection(t, nodes[2], "c")
	for s := range 2 {
		sameDigest(t, ctx, 30*time.Second, fmt.Sprintf("shard %d: the restored n2 catches up with n0", s), c0.replicas[s], c2.replicas[s])
		if r := c2.replicas[s].restores.Load(); r != 0 {
			t.Errorf("shard %d: n2 restored %d snapshots; it should have followed the log from its restored store", s, r)
		}
	}
}
