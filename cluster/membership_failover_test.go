package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/cluster"
)

// TestClusterMembership runs node processes as TestClusterFailover does,
// with writers throughout: it starts 3 nodes (3 shards x 3 replicas),
// adds a 4th, which takes replicas by the placement rule, SIGKILLs the
// 4th while a replica is being copied to it and restarts it, then drains
// one of the first three, which leaves. Afterwards every replica of every
// shard holds the same documents, no acknowledged write is lost, and
// searches through every member return exactly the live documents. The
// moves' times are logged. Raft snapshots every 256 entries and keeps 64
// behind, so that a replica joining a shard is sent a snapshot.
func TestClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 4 node processes")
	}
	c := newGrowingCluster(t, 4, 3, 256, 64)
	t.Cleanup(func() {
		if t.Failed() {
			for i, l := range c.logs {
				if l != nil {
					t.Logf("n%d log (tail):\n%s", i, tail(l.String(), 6000))
				}
			}
		}
	})
	ctx := context.Background()
	ready := c.ready
	for i := range 3 {
		ready(i)
	}
	c.until(30*time.Second, "create", func() error {
		code, err := c.call(ctx, 0, "PUT", "/v1/collections/c", map[string]any{"schema": map[string]any{"strict": true,
			"fields": []map[string]string{{"name": "text", "type": "text"}, {"name": "v", "type": "number"}}}}, nil)
		if code == http.StatusConflict {
			return nil
		}
		return err
	})
	// Documents the writers do not touch, so that a move copies some.
	const preload = 3000
	for i := 0; i < preload; i += 500 {
		var docs []map[string]any
		for j := i; j < i+500; j++ {
			docs = append(docs, map[string]any{"_id": fmt.Sprint("p", j), "text": fmt.Sprintf("note p%d version %d", j, -1), "v": -1})
		}
		if _, err := c.call(ctx, i/500%3, "POST", "/v1/collections/c/documents?wait=true", docs, nil); err != nil {
			t.Fatal(err)
		}
	}

	led := &writeLedger{ops: map[string][]op{}}
	var writeTo []int
	var wmu = &c.mu
	setWriteTo := func(nodes ...int) {
		wmu.Lock()
		writeTo = nodes
		wmu.Unlock()
	}
	setWriteTo(0, 1, 2)
	stopWriters := c.write(ctx, led, func() []int {
		wmu.Lock()
		defer wmu.Unlock()
		var out []int
		for _, i := range writeTo {
			if c.procs[i] != nil {
				out = append(out, i)
			}
		}
		return out
	})
	// The writers go on for a number of writes rather than for a time
	// between steps: as many happen on a slow machine.
	const steps = 25
	c.acked(led, time.Time{}, steps, "the writers under way")

	type status struct {
		Collections []struct {
			Spec struct {
				Placement [][]string `json:"placement"`
			} `json:"spec"`
		} `json:"collections"`
		Nodes []struct {
			ID       string `json:"id"`
			Draining bool   `json:"draining"`
			Replicas int    `json:"replicas"`
		} `json:"nodes"`
		Moves []cluster.MoveStatus `json:"moves"`
		Done  []cluster.MoveStatus `json:"done"`
	}
	get := func(via int) (status, error) {
		var st status
		_, err := c.call(ctx, via, "GET", "/_cluster/status", nil, &st)
		return st, err
	}

	// 1. A 4th node joins; SIGKILL it while a replica is copied to it.
	c.start(3)
	ready(3)
	setWriteTo(0, 1, 2, 3)
	var copying cluster.MoveStatus
	c.until(60*time.Second, "a replica being copied to n3", func() error {
		st, err := get(0)
		if err != nil {
			return err
		}
		if len(st.Moves) == 0 || st.Moves[0].To != "n3" || st.Moves[0].Stage != "copy" {
			return fmt.Errorf("moves %+v", st.Moves)
		}
		copying = st.Moves[0]
		return nil
	})
	time.Sleep(100 * time.Millisecond)
	t0 := time.Now()
	c.kill(3)
	t.Logf("killed n3 while shard %d was copied to it from %s", copying.Shard, copying.From)
	c.acked(led, t0, steps, "writes while n3 is down")
	c.start(3)
	ready(3)
	balanced := func(what string, want map[string][2]int) status {
		var st status
		c.until(3*time.Minute, what, func() error {
			var err error
			if st, err = get(0); err != nil {
				return err
			}
			if len(st.Moves) > 0 {
				return fmt.Errorf("a move in progress: %+v", st.Moves[0])
			}
			got := map[string]int{}
			for _, n := range st.Nodes {
				got[n.ID] = n.Replicas
			}
			if len(got) != len(want) {
				return fmt.Errorf("nodes %v, want %v", got, want)
			}
			for id, r := range want {
				if got[id] < r[0] || got[id] > r[1] {
					return fmt.Errorf("nodes %v, want %v", got, want)
				}
			}
			return nil
		})
		return st
	}
	// 9 replicas on 4 nodes: 2 or 3 each.
	balanced("rebalanced onto n3", map[string][2]int{"n0": {2, 3}, "n1": {2, 3}, "n2": {2, 3}, "n3": {2, 3}})

	// 2. Drain n1: it stops taking writes, its replicas move, it leaves.
	setWriteTo(0, 2, 3)
	if _, err := c.call(ctx, 2, "POST", "/_cluster/nodes/n1/drain", nil, nil); err != nil {
		t.Fatal(err)
	}
	if code, err := c.call(ctx, 2, "POST", "/_cluster/nodes/n0/drain", nil, nil); code != http.StatusUnprocessableEntity {
		t.Errorf("draining n0 too, which would leave 2 nodes for 3 replicas: %d %v, want 422", code, err)
	}
	st := balanced("n1 drained", map[string][2]int{"n0": {3, 3}, "n2": {3, 3}, "n3": {3, 3}})
	t0 = time.Now()
	c.kill(1)
	c.acked(led, t0, steps, "writes after n1 left")
	writes, failures := stopWriters()
	t.Logf("writers: %d writes acknowledged, %d failed (in doubt)", writes, failures)
	if writes < 20 {
		t.Fatalf("only %d writes were acknowledged", writes)
	}
	for _, m := range st.Done {
		t.Logf("moved shard %d from %s to %s: %d documents, copied in %.2f s, %.2f s in all", m.Shard, m.From, m.To, m.Docs, m.Switched.Sub(m.Started).Seconds(), m.Seconds)
	}

	// Every replica of each shard holds the same documents.
	members := []int{0, 2, 3}
	placement := st.Collections[0].Spec.Placement
	digests := make([]cluster.Digest, 3)
	c.until(60*time.Second, "replicas converge", func() error {
		for s := range 3 {
			var ds []cluster.Digest
			for _, id := range placement[s] {
				i, _ := strconv.Atoi(id[1:])
				var d cluster.Digest
				if _, err := c.call(ctx, i, "GET", fmt.Sprintf("/_cluster/digest/c/%d", s), nil, &d); err != nil {
					return err
				}
				ds = append(ds, d)
			}
			for k, d := range ds[1:] {
				if d.Applied != ds[0].Applied || !sameDocs(d.Docs, ds[0].Docs) {
					return fmt.Errorf("shard %d: %s applied %d (%d docs), %s applied %d (%d docs)", s, placement[s][0], ds[0].Applied, len(ds[0].Docs), placement[s][k+1], d.Applied, len(d.Docs))
				}
			}
			digests[s] = ds[0]
		}
		return nil
	})
	// Searches through every member return the live documents, and
	// nothing acknowledged is lost.
	total := 0
	for s := range 3 {
		total += len(digests[s].Docs)
	}
	var final map[string]int
	for _, node := range members {
		var res struct {
			Hits []struct {
				ID     string         `json:"id"`
				Fields map[string]any `json:"fields"`
			} `json:"hits"`
		}
		// The writers' documents (the preloaded ones have v -1).
		if _, err := c.call(ctx, node, "POST", "/v1/collections/c/search", map[string]any{"filter": map[string]any{"range": map[string]any{"v": map[string]any{"gte": 0}}}, "k": 1000}, &res); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, h := range res.Hits {
			got[h.ID] = int(h.Fields["v"].(float64))
		}
		if len(got)+preload != total {
			t.Errorf("search through n%d returns %d of the writers' documents; the replicas hold %d", node, len(got), total-preload)
		}
		var info struct {
			Docs int `json:"docs"`
		}
		if _, err := c.call(ctx, node, "GET", "/v1/collections/c", nil, &info); err != nil {
			t.Fatal(err)
		}
		if info.Docs != total {
			t.Errorf("n%d counts %d documents; the replicas hold %d", node, info.Docs, total)
		}
		if final == nil {
			final = got
		} else if fmt.Sprint(got) != fmt.Sprint(final) {
			t.Errorf("search through n%d returns other documents or versions than through n0", node)
		}
	}
	for i := range preload {
		if _, ok := digests[cluster.ShardOf(fmt.Sprint("p", i), 3)].Docs[fmt.Sprint("p", i)]; !ok {
			t.Errorf("preloaded p%d is missing", i)
		}
	}
	lost := 0
	for id := range led.ops {
		if !slices.Contains(led.allowed(id), final[id]) {
			lost++
			t.Errorf("%s is at version %d; its writes allow %v (ops %v)", id, final[id], led.allowed(id), led.ops[id])
		}
	}
	t.Logf("%d ids written, %d documents live at the end, %d with a version their acknowledged writes do not allow", len(led.ops), len(final), lost)
	if d := os.Getenv("TANDEM_TEST_LOGDIR"); d != "" {
		for i, l := range c.logs {
			if l != nil {
				os.WriteFile(filepath.Join(d, fmt.Sprintf("membership-n%d.log", i)), l.Bytes(), 0o644)
			}
		}
	}
}

func sameDocs(a, b map[string]string) bool {
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
