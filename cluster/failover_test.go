package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/testnet"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/server"
)

// The node processes of TestClusterFailover are this test binary, run
// with clusterNodeEnv holding the node's nodeSpec in JSON.
const clusterNodeEnv = "TANDEM_TEST_CLUSTER_NODE"

// nodeSpec is a node process of TestClusterFailover: its id and data
// directory, the cluster's peers and key, and the map from each other
// node's address to the proxy this node reaches it through.
type nodeSpec struct {
	ID, Dir, Key string
	Peers        []cluster.Peer
	Dial         map[string]string
	// Join is the HTTP address of a member, for a node joining the
	// cluster; SnapshotThreshold and TrailingLogs are Raft's (0: its
	// defaults).
	Join                            string
	SnapshotThreshold, TrailingLogs uint64
	// RaftTimeout is Raft's heartbeat and election timeout, and
	// RequestTimeout the server's --timeout: serve's defaults (500 ms
	// and server.DefaultTimeout), stretched by the test time scale.
	RaftTimeout, RequestTimeout time.Duration
}

// TestClusterNodeProcess runs a node of TestClusterFailover as tandem
// serve --cluster does (cluster.Serve), with serve's defaults, no API key,
// and the spec's Raft and request timeouts, until the test kills it.
func TestClusterNodeProcess(t *testing.T) {
	env := os.Getenv(clusterNodeEnv)
	if env == "" {
		t.Skip("a node process of TestClusterFailover")
	}
	var spec nodeSpec
	if err := json.Unmarshal([]byte(env), &spec); err != nil {
		t.Fatal(err)
	}
	creds, err := cluster.KeyCredentials([]byte(spec.Key))
	if err != nil {
		t.Fatal(err)
	}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p, ok := spec.Dial[addr]; ok {
			addr = p
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	eopts := engine.Options{ // serve's defaults
		FilterLimits:    filter.Limits{MaxClauses: filter.DefaultMaxClauses, MaxDepth: filter.DefaultMaxDepth},
		DocumentThreads: max(1, runtime.NumCPU()/2),
	}
	err = cluster.Serve(context.Background(), cluster.ServeConfig{
		Node: cluster.Config{ID: spec.ID, Dir: spec.Dir, Peers: spec.Peers, Join: spec.Join, Engine: eopts, Log: os.Stderr, Dial: dial,
			Credentials: creds, RequestTimeout: spec.RequestTimeout, HeartbeatTimeout: spec.RaftTimeout, ElectionTimeout: spec.RaftTimeout,
			SnapshotThreshold: spec.SnapshotThreshold, TrailingLogs: spec.TrailingLogs},
		Server: server.Config{Engine: eopts, Logger: slog.New(slog.NewJSONHandler(os.Stderr, nil)), ReleaseAfterTimeout: true, Timeout: spec.RequestTimeout},
		Shards: 3,
		Listening: func(addr string) {
			fmt.Printf("node %s listening on http://%s (data %s)\n", spec.ID, addr, spec.Dir)
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// failoverCluster is 3 node processes whose every link, Raft and HTTP,
// goes through a proxy of its own (from node i to node j), so that a node
// can be cut off from the others in both directions.
type failoverCluster struct {
	t      *testing.T
	root   string
	peers  []cluster.Peer
	web    []string                      // each node's HTTP address, for clients
	proxy  map[[2]int][]*toxiproxy.Proxy // (from, to) -> raft and HTTP proxies
	dial   []map[string]string           // per node: address -> proxy
	procs  []*exec.Cmd
	logs   []*bytes.Buffer
	mu     sync.Mutex
	client *http.Client
	// peer calls the routes between nodes with the cluster key, which the
	// nodes hold.
	peer *http.Client
	key  string
	// members is the number of nodes that start the cluster; the others
	// join it through n0. snapshots and trailing are Raft's settings.
	members             int
	snapshots, trailing uint64
}

func newFailoverCluster(t *testing.T, n int) *failoverCluster {
	return newGrowingCluster(t, n, n, 0, 0)
}

// newGrowingCluster is newFailoverCluster for a cluster of members nodes
// that n-members more may join (start), with Raft's snapshot threshold
// and trailing logs (0: its defaults).
func newGrowingCluster(t *testing.T, n, members int, snapshots, trailing uint64) *failoverCluster {
	root := t.TempDir()
	if d := os.Getenv("TANDEM_TEST_LOGDIR"); d != "" {
		root = filepath.Join(d, "data") // kept for inspection
	}
	const key = "5e0d1c2b3a49586776859a4b3c2d1e0f"
	creds, err := cluster.KeyCredentials([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	// A call that hangs fails after 30 s (scaled); until polls again.
	c := &failoverCluster{t: t, root: root, proxy: map[[2]int][]*toxiproxy.Proxy{}, key: key, members: members, snapshots: snapshots, trailing: trailing,
		client: &http.Client{Timeout: testtime.D(30 * time.Second)},
		peer:   &http.Client{Timeout: testtime.D(30 * time.Second), Transport: &http.Transport{TLSClientConfig: creds.ClientTLS("")}}}
	var raftAddrs []string
	addrs := testnet.Addrs(t, 2*n)
	for i := range n {
		r, h := addrs[2*i], addrs[2*i+1]
		raftAddrs, c.web = append(raftAddrs, r), append(c.web, h)
		c.peers = append(c.peers, cluster.Peer{ID: fmt.Sprint("n", i), Raft: r, HTTP: h})
	}
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	for i := range n {
		c.dial = append(c.dial, map[string]string{})
		for j := range n {
			if i == j {
				continue
			}
			for _, up := range []string{raftAddrs[j], c.web[j]} {
				p := toxiproxy.NewProxy(srv, fmt.Sprintf("%d-%d-%s", i, j, up), "127.0.0.1:0", up)
				if err := p.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Stop)
				c.proxy[[2]int{i, j}] = append(c.proxy[[2]int{i, j}], p)
				c.dial[i][up] = p.Listen
			}
		}
	}
	c.procs, c.logs = make([]*exec.Cmd, n), make([]*bytes.Buffer, n)
	for i := range members {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.procs {
			c.kill(i)
		}
	})
	return c
}

func (c *failoverCluster) start(i int) {
	ns := nodeSpec{ID: c.peers[i].ID, Dir: filepath.Join(c.root, c.peers[i].ID), Key: c.key, Peers: c.peers[:c.members], Dial: c.dial[i],
		SnapshotThreshold: c.snapshots, TrailingLogs: c.trailing,
		RaftTimeout: testtime.D(500 * time.Millisecond), RequestTimeout: testtime.D(server.DefaultTimeout)}
	if i >= c.members {
		ns.Peers, ns.Join = c.peers[i:i+1], c.web[0]
	}
	spec, _ := json.Marshal(ns)
	cmd := exec.Command(os.Args[0], "-test.run=^TestClusterNodeProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), clusterNodeEnv+"="+string(spec))
	c.mu.Lock()
	defer c.mu.Unlock()
	log := c.logs[i] // one log per node, across restarts
	if log == nil {
		log = &bytes.Buffer{}
		c.logs[i] = log
	}
	fmt.Fprintf(log, "--- start n%d\n", i)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.procs[i] = cmd
}

// kill SIGKILLs node i.
func (c *failoverCluster) kill(i int) {
	c.mu.Lock()
	p := c.procs[i]
	c.procs[i] = nil
	c.mu.Unlock()
	if p != nil {
		p.Process.Signal(syscall.SIGKILL)
		p.Wait()
	}
}

// cut blackholes every link to and from node k (both directions, Raft and
// HTTP); heal lets them through again.
func (c *failoverCluster) cut(k int, on bool) {
	for pair, ps := range c.proxy {
		if pair[0] != k && pair[1] != k {
			continue
		}
		for _, p := range ps {
			for _, dir := range []string{"upstream", "downstream"} {
				name := "cut-" + dir
				if on {
					body := fmt.Sprintf(`{"name":%q,"type":"timeout","stream":%q,"toxicity":1,"attributes":{"timeout":0}}`, name, dir)
					if _, err := p.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
						c.t.Fatal(err)
					}
				} else if err := p.Toxics.RemoveToxic(context.Background(), name); err != nil {
					c.t.Fatal(err)
				}
			}
		}
	}
}

// call sends a JSON request to node i's API.
func (c *failoverCluster) call(ctx context.Context, i int, method, path string, body any, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	url, client := "http://"+c.web[i]+path, c.client
	if strings.HasPrefix(path, "/_cluster/digest/") {
		url, client = "https://"+c.web[i]+path, c.peer
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, fmt.Errorf("%s %s on n%d: %d %s", method, path, i, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out != nil {
		return resp.StatusCode, json.Unmarshal(data, out)
	}
	return resp.StatusCode, nil
}

// until calls f every 50 ms until it returns nil, failing after d
// stretched by the test time scale (testtime.Until).
func (c *failoverCluster) until(d time.Duration, what string, f func() error) {
	c.t.Helper()
	testtime.Until(c.t, d, 50*time.Millisecond, what, f)
}

// op is one write of the ledger: a put of version v, or a delete (v 0).
type op struct {
	v     int
	acked bool
}

// writeLedger records every write to every id in order, and whether it was
// acknowledged.
type writeLedger struct {
	mu   sync.Mutex
	ops  map[string][]op
	acks []ack
}

// ack is an acknowledged write: when it was sent and answered, and a bit
// per shard it wrote to.
type ack struct {
	start, end time.Time
	shards     uint
}

// allowed lists the final versions an id may have (0: absent): that of
// its last acknowledged write, or of any unacknowledged one after it.
func (l *writeLedger) allowed(id string) []int {
	ops := l.ops[id]
	last := -1
	for i, o := range ops {
		if o.acked {
			last = i
		}
	}
	var out []int
	if last < 0 {
		out = append(out, 0)
	} else {
		out = append(out, ops[last].v)
	}
	for _, o := range ops[last+1:] {
		out = append(out, o.v)
	}
	return out
}

// TestClusterFailover runs 3 node processes (3 shards x 3 replicas) with a
// writer upserting and deleting through random nodes, and: SIGKILLs the
// leader of a shard, restarts it, SIGKILLs a follower, restarts it, cuts a
// node off from the others with the proxies, heals it. Then every replica
// of every shard must hold the same documents, each id must be at a
// version its acknowledged writes allow (nothing acknowledged lost), and
// searches through every node must return exactly the live documents.
func TestClusterFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 3 node processes")
	}
	c := newFailoverCluster(t, 3)
	t.Cleanup(func() {
		if d := os.Getenv("TANDEM_TEST_LOGDIR"); d != "" {
			for i, l := range c.logs {
				os.WriteFile(filepath.Join(d, fmt.Sprintf("n%d.log", i)), l.Bytes(), 0o644)
			}
		}
		if t.Failed() {
			for i, l := range c.logs {
				t.Logf("n%d log (tail):\n%s", i, tail(l.String(), 6000))
			}
		}
	})
	ctx := context.Background()
	for i := range 3 {
		c.ready(i)
	}
	c.until(30*time.Second, "create", func() error {
		code, err := c.call(ctx, 0, "PUT", "/v1/collections/c", map[string]any{"schema": map[string]any{"strict": true,
			"fields": []map[string]string{{"name": "text", "type": "text"}, {"name": "v", "type": "number"}}}}, nil)
		if code == http.StatusConflict {
			return nil
		}
		return err
	})

	led := &writeLedger{ops: map[string][]op{}}
	alive := c.alive
	stopWriters := c.write(ctx, led, alive)
	// recovery is the time from t0 to the first acknowledgement of a write
	// to shard that was sent after t0.
	recovery := func(t0 time.Time, shard int) time.Duration {
		var d time.Duration
		c.until(30*time.Second, fmt.Sprintf("a write to shard %d acknowledged", shard), func() error {
			led.mu.Lock()
			defer led.mu.Unlock()
			d = 0
			for _, a := range led.acks {
				if !a.start.Before(t0) && a.shards&(1<<shard) != 0 && (d == 0 || a.end.Sub(t0) < d) {
					d = a.end.Sub(t0)
				}
			}
			if d == 0 {
				return fmt.Errorf("none yet")
			}
			return nil
		})
		return d
	}
	// status is a node's view of the shards' leaders; each poll decodes
	// into a new one, as Unmarshal would keep a leader the last poll saw
	// and this one omits.
	type status struct {
		Collections []struct {
			Shards []struct {
				Shard  int    `json:"shard"`
				Leader string `json:"leader"`
			} `json:"shards"`
		} `json:"collections"`
	}
	leaderOf := func(shard int) int {
		var l int
		c.until(20*time.Second, fmt.Sprintf("shard %d leader", shard), func() error {
			var status status
			if _, err := c.call(ctx, alive()[0], "GET", "/_cluster/status", nil, &status); err != nil {
				return err
			}
			if len(status.Collections) == 0 || status.Collections[0].Shards[shard].Leader == "" {
				return fmt.Errorf("no leader")
			}
			_, err := fmt.Sscanf(status.Collections[0].Shards[shard].Leader, "n%d", &l)
			return err
		})
		return l
	}
	// Each step below lets the writers go on for a number of writes
	// rather than for a time: as many happen on a slow machine.
	const steps = 25
	c.acked(led, time.Time{}, steps, "the writers under way")

	// 1. SIGKILL the leader of each shard in turn while the writers run,
	// restarting it once more writes are acknowledged without it.
	var recoveries []time.Duration
	for shard := range 3 {
		leader := leaderOf(shard)
		t0 := time.Now()
		c.kill(leader)
		d := recovery(t0, shard)
		recoveries = append(recoveries, d)
		t.Logf("killed n%d, the leader of shard %d: a write to it sent after the kill was acknowledged %v later", leader, shard, d.Round(time.Millisecond))
		c.acked(led, t0, steps, fmt.Sprintf("writes while n%d is down", leader))
		c.start(leader)
		c.ready(leader)
		c.acked(led, time.Now(), steps, fmt.Sprintf("writes after n%d restarted", leader))
	}
	slices.Sort(recoveries)
	t.Logf("writes recovered after a leader's SIGKILL in %v (min), %v (median), %v (max)", recoveries[0].Round(time.Millisecond), recoveries[1].Round(time.Millisecond), recoveries[2].Round(time.Millisecond))

	// 2. SIGKILL a follower of shard 0.
	follower := (leaderOf(0) + 1) % 3
	t0 := time.Now()
	c.kill(follower)
	t.Logf("killed n%d, a follower of shard 0: a write to it was acknowledged %v later", follower, recovery(t0, 0).Round(time.Millisecond))
	c.acked(led, t0, steps, fmt.Sprintf("writes while n%d is down", follower))
	c.start(follower)
	c.ready(follower)

	// 3. Cut a node off, then heal it.
	c.acked(led, time.Now(), steps, fmt.Sprintf("writes after n%d restarted", follower))
	cut := leaderOf(0)
	c.cut(cut, true)
	t0 = time.Now()
	t.Logf("cut n%d (leading shard 0) off: a write to shard 0 was acknowledged %v later", cut, recovery(t0, 0).Round(time.Millisecond))
	// The cut-off leader, which the test still reaches (its links to the
	// other nodes are cut, not the test's), sees it leads no more.
	c.until(30*time.Second, fmt.Sprintf("n%d, cut off, steps down from leading shard 0", cut), func() error {
		var status status
		if _, err := c.call(ctx, cut, "GET", "/_cluster/status", nil, &status); err != nil {
			return err
		}
		if len(status.Collections) == 0 {
			return fmt.Errorf("no collection")
		}
		if l := status.Collections[0].Shards[0].Leader; l == fmt.Sprint("n", cut) {
			return fmt.Errorf("it takes itself for the leader")
		}
		return nil
	})
	// A write sent through the cut-off node waits out its 3 s: while it
	// is cut off, and until it has caught up, writes come slower.
	const cutSteps = 10
	c.acked(led, t0, cutSteps, fmt.Sprintf("writes while n%d is cut off", cut))
	c.cut(cut, false)
	c.acked(led, time.Now(), cutSteps, fmt.Sprintf("writes after n%d is healed", cut))
	writes, failures := stopWriters()
	t.Logf("writers: %d writes acknowledged, %d failed (in doubt)", writes, failures)
	if writes < 20 {
		t.Fatalf("only %d writes were acknowledged", writes)
	}

	// Every replica converges on the same documents.
	var digests [3][3]cluster.Digest
	c.until(60*time.Second, "replicas converge", func() error {
		for node := range 3 {
			for s := range 3 {
				digests[node][s] = cluster.Digest{} // Unmarshal would merge into the last poll's map
				if _, err := c.call(ctx, node, "GET", fmt.Sprintf("/_cluster/digest/c/%d", s), nil, &digests[node][s]); err != nil {
					return err
				}
			}
		}
		for s := range 3 {
			for node := 1; node < 3; node++ {
				a, b := digests[0][s], digests[node][s]
				if a.Applied != b.Applied {
					return fmt.Errorf("shard %d: n0 applied %d (%d docs), n%d applied %d (%d docs)", s, a.Applied, len(a.Docs), node, b.Applied, len(b.Docs))
				}
			}
			for node := 1; node < 3; node++ {
				a, b := digests[0][s], digests[node][s]
				var diff []string
				for id, h := range a.Docs {
					if bh, ok := b.Docs[id]; !ok {
						diff = append(diff, "n0 only: "+id)
					} else if bh != h {
						diff = append(diff, "differs: "+id)
					}
				}
				for id := range b.Docs {
					if _, ok := a.Docs[id]; !ok {
						diff = append(diff, fmt.Sprintf("n%d only: %s", node, id))
					}
				}
				if len(diff) > 0 {
					return fmt.Errorf("shard %d at %d (change logs at %d and %d): %v", s, a.Applied, a.LastSeq, b.LastSeq, diff)
				}
			}
		}
		return nil
	})
	// Nothing acknowledged is lost: each id is at a version its writes allow.
	final := map[string]int{}
	for node := range 3 {
		var res struct {
			Hits []struct {
				ID     string         `json:"id"`
				Fields map[string]any `json:"fields"`
			} `json:"hits"`
		}
		if _, err := c.call(ctx, node, "POST", "/v1/collections/c/search", map[string]any{"filter": map[string]any{"exists": "v"}, "k": 1000}, &res); err != nil {
			t.Fatal(err)
		}
		got := map[string]int{}
		for _, h := range res.Hits {
			got[h.ID] = int(h.Fields["v"].(float64))
		}
		if node == 0 {
			final = got
		} else if fmt.Sprint(got) != fmt.Sprint(final) {
			t.Errorf("search through n%d returns %d documents, through n0 %d, or other versions", node, len(got), len(final))
		}
	}
	total := 0
	for s := range 3 {
		total += len(digests[0][s].Docs)
	}
	if total != len(final) {
		t.Errorf("search returns %d documents; the replicas hold %d", len(final), total)
	}
	lost := 0
	for id := range led.ops {
		if !slices.Contains(led.allowed(id), final[id]) {
			lost++
			t.Errorf("%s is at version %d; its writes allow %v (ops %v)", id, final[id], led.allowed(id), led.ops[id])
		}
	}
	for id := range final {
		if _, ok := led.ops[id]; !ok {
			t.Errorf("search returns %s, which was never written", id)
		}
	}
	t.Logf("%d ids written, %d live at the end, %d with a version their acknowledged writes do not allow", len(led.ops), len(final), lost)
}

// ready waits until node i's API answers /readyz.
func (c *failoverCluster) ready(i int) {
	c.t.Helper()
	c.until(60*time.Second, fmt.Sprintf("n%d ready", i), func() error {
		_, err := c.call(context.Background(), i, "GET", "/readyz", nil, nil)
		return err
	})
}

// acked waits until n writes sent at or after since are acknowledged.
func (c *failoverCluster) acked(led *writeLedger, since time.Time, n int, what string) {
	c.t.Helper()
	c.until(60*time.Second, fmt.Sprintf("%s: %d writes acknowledged", what, n), func() error {
		led.mu.Lock()
		defer led.mu.Unlock()
		got := 0
		for _, a := range led.acks {
			if !a.start.Before(since) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

// alive lists the nodes whose processes run.
func (c *failoverCluster) alive() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, p := range c.procs {
		if p != nil {
			out = append(out, i)
		}
	}
	return out
}

// write runs three writers on collection c, recording into led, until
// the returned function stops them and counts the writes acknowledged
// and failed. Each writer has ids of its own (so that each id's writes
// are ordered), and sends each write through a random node of nodes()
// within 3 s (scaled): one stuck behind a lost node leaves the others
// writing.
func (c *failoverCluster) write(ctx context.Context, led *writeLedger, nodes func() []int) func() (writes, failures int) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes, failures int
	var version atomic.Int64
	for w := range 3 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(1, uint64(w)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				live := nodes()
				node := live[r.IntN(len(live))]
				var ids []string
				for len(ids) < 6 {
					id := fmt.Sprint("d", 3*r.IntN(50)+w)
					if !slices.Contains(ids, id) {
						ids = append(ids, id)
					}
				}
				wctx, cancel := context.WithTimeout(ctx, testtime.D(3*time.Second))
				start := time.Now()
				var err error
				var vs []int
				if r.IntN(5) == 0 {
					_, err = c.call(wctx, node, "POST", "/v1/collections/c/delete", map[string]any{"ids": ids[:2]}, nil)
					ids, vs = ids[:2], []int{0, 0}
				} else {
					var docs []map[string]any
					for _, id := range ids {
						v := int(version.Add(1))
						vs = append(vs, v)
						docs = append(docs, map[string]any{"_id": id, "text": fmt.Sprintf("note %s version %d", id, v), "v": v})
					}
					var res struct{ Indexed, Failed int }
					_, err = c.call(wctx, node, "POST", "/v1/collections/c/documents?wait=true", docs, &res)
					if err == nil && (res.Indexed != len(docs) || res.Failed != 0) {
						err = fmt.Errorf("indexed %d of %d", res.Indexed, len(docs))
					}
				}
				cancel()
				led.mu.Lock()
				for k, id := range ids {
					led.ops[id] = append(led.ops[id], op{v: vs[k], acked: err == nil})
				}
				if err == nil {
					a := ack{start: start, end: time.Now()}
					for _, id := range ids {
						a.shards |= 1 << cluster.ShardOf(id, 3)
					}
					led.acks = append(led.acks, a)
					writes++
				} else {
					failures++
				}
				led.mu.Unlock()
			}
		})
	}
	halt := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	c.t.Cleanup(halt) // when the test fails before it stops them
	return func() (int, int) {
		halt()
		return writes, failures
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
