package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/cluster"
	"github.com/tandemsearch/tandem/internal/testnet"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// serveNodes is `serve --cluster` nodes run in this process.
type serveNodes struct {
	t    *testing.T
	web  []string // each node's HTTP address
	root string   // node i's data is root/ni
}

// startServeNodes starts n nodes on loopback, each given args besides its
// --node, --peers and --data; they stop when the test ends, which fails
// if one stops with an error. Their --raft-timeout is the default 500 ms
// scaled by the test time scale (internal/testtime), so that a node
// starved on a slow or busy machine does not call elections it need not
// (args may set another).
func startServeNodes(t *testing.T, n int, args ...string) *serveNodes {
	t.Helper()
	c := &serveNodes{t: t}
	var peers []string
	addrs := testnet.Addrs(t, 2*n)
	for i := range n {
		h := addrs[2*i+1]
		c.web = append(c.web, h)
		peers = append(peers, fmt.Sprintf("n%d=%s/%s", i, addrs[2*i], h))
	}
	c.root = t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, n)
	for i := range n {
		sc, err := parseServe(append([]string{"--cluster", "--node", fmt.Sprint("n", i), "--peers", strings.Join(peers, ","),
			"--data", filepath.Join(c.root, fmt.Sprint("n", i)), "--raft-timeout", testtime.D(500 * time.Millisecond).String()}, args...), io.Discard)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if sc.addr != c.web[i] {
			cancel()
			t.Fatalf("node %d serves on %s, want its peer HTTP address %s", i, sc.addr, c.web[i])
		}
		go func() { done <- serveCluster(ctx, sc, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard, nil) }()
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-done; err != nil {
				t.Errorf("node stopped with %v", err)
			}
		}
	})
	return c
}

// call sends a request to node i, with key as a bearer key unless it is
// "", and returns the body of its answer once the status is want. While
// the node is starting, or its cluster electing, it answers 503 or not at
// all: call retries those for up to a minute (scaled by the test time
// scale), and fails the test on any other status.
func (c *serveNodes) call(key string, i int, method, path, body string, want int) string {
	c.t.Helper()
	var last string
	for deadline := time.Now().Add(testtime.D(time.Minute)); ; time.Sleep(20 * time.Millisecond) {
		req, _ := http.NewRequest(method, "http://"+c.web[i]+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		req.Header.Set("Content-Type", "application/json")
		if strings.HasSuffix(path, "/documents") || strings.Contains(path, "/documents?") {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return string(data)
			}
			if resp.StatusCode != http.StatusServiceUnavailable {
				c.t.Fatalf("%s %s on node %d: %d %s, want %d", method, path, i, resp.StatusCode, data, want)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, data)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s %s on node %d: still %s after %v (TANDEM_TEST_TIMESCALE %g), want %d", method, path, i, last, testtime.D(time.Minute), testtime.Scale(), want)
		}
	}
}

// TestServeCluster runs three `serve --cluster` nodes in this process and
// uses the server's HTTP API on them: a collection created through one
// node is written through another and read through the third, as a
// client would use one server.
//
// The nodes are protected as a deployment would be: a cluster key between
// nodes and API keys for clients, the same on every node.
func TestServeCluster(t *testing.T) {
	const admin, read = "admin-key-for-the-test", "read-key-for-the-test"
	t.Setenv("TANDEM_API_KEYS", admin)
	t.Setenv("TANDEM_READ_KEYS", read)
	t.Setenv("TANDEM_CLUSTER_KEY", "")
	keyFile := filepath.Join(t.TempDir(), "cluster.key")
	if err := os.WriteFile(keyFile, []byte("c2a1e0f4b3d69788a1b2c3d4e5f60718\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nodes := startServeNodes(t, 3, "--shards", "3", "--replicas", "3", "--cluster-key-file", keyFile)
	web := nodes.web
	callAs := func(key string, node int, method, path, body string, want int) map[string]any {
		t.Helper()
		var out map[string]any
		json.Unmarshal([]byte(nodes.call(key, node, method, path, body, want)), &out)
		return out
	}
	call := func(node int, method, path, body string, want int) map[string]any {
		t.Helper()
		return callAs(admin, node, method, path, body, want)
	}
	call(0, "GET", "/readyz", "", 200)
	call(0, "PUT", "/v1/collections/c", `{"schema":{"strict":true,"fields":[{"name":"title","type":"text"},{"name":"text","type":"text"},{"name":"kind","type":"keyword"}]}}`, 201)
	var nd strings.Builder
	for i := range 60 {
		fmt.Fprintf(&nd, `{"_id":"d%d","title":"note %d","text":"%s","kind":"%s"}`+"\n", i, i,
			[]string{"glaciers carve valleys", "bees make honey", "trains run on rails"}[i%3], []string{"a", "b"}[i%2])
	}
	nd.WriteString(`{"_id":"bad","title":"x","colour":"red"}` + "\n") // not in the strict schema: line 61
	up := call(1, "POST", "/v1/collections/c/documents?wait=true", nd.String(), 200)
	if up["indexed"] != 60.0 || up["failed"] != 1.0 || !strings.Contains(fmt.Sprint(up["errors"]), "line:61") {
		t.Fatalf("upsert through node 1: %v", up)
	}
	// A read through node 2 sees every acknowledged write at once: it
	// reads replicas that have applied as far as each shard's leader.
	res := call(2, "POST", "/v1/collections/c/search", `{"text":"honey bees","filter":{"term":{"kind":"b"}},"k":50}`, 200)
	hits := res["hits"].([]any)
	if len(hits) != 10 {
		t.Fatalf("filtered search through node 2: %d hits, want the 10 honey notes of kind b", len(hits))
	}
	for _, h := range hits {
		id := h.(map[string]any)["id"].(string)
		var n int
		fmt.Sscanf(id, "d%d", &n)
		if n%3 != 1 || n%2 != 1 {
			t.Errorf("hit %s does not match the query's term and filter", id)
		}
	}
	doc := call(2, "GET", "/v1/collections/c/documents/d7", "", 200)
	if doc["id"] != "d7" {
		t.Errorf("get d7 through node 2: %v", doc)
	}
	call(2, "GET", "/v1/collections/c/documents/nope", "", 404)
	if del := call(0, "POST", "/v1/collections/c/delete", `{"ids":["d1","d7","nope"]}`, 200); del["deleted"] != 2.0 {
		t.Errorf("delete through node 0: %v", del)
	}
	// An upload as a task through node 0: acknowledged once spooled on
	// that node, indexed into the shards in the background.
	var tasked strings.Builder
	for i := 100; i < 140; i++ {
		fmt.Fprintf(&tasked, `{"_id":"d%d","title":"task note %d","text":"owls hunt at night","kind":"c"}`+"\n", i, i)
	}
	tasked.WriteString(`{"_id":"bad2","colour":"red"}` + "\n") // line 41
	task := call(0, "POST", "/v1/collections/c/documents?wait=false", tasked.String(), 202)
	taskPath := fmt.Sprintf("/v1/tasks/%v", task["id"])
	testtime.Until(t, time.Minute, 20*time.Millisecond, "the task through node 0 to succeed", func() error {
		if task = call(0, "GET", taskPath, "", 200); task["state"] != "succeeded" {
			return fmt.Errorf("task %v", task)
		}
		return nil
	})
	if task["indexed"] != 40.0 || task["refused"] != 1.0 || task["committed_lines"] != 41.0 || !strings.Contains(fmt.Sprint(task["errors"]), "line:41") {
		t.Fatalf("task through node 0: %v", task)
	}
	if res := call(2, "POST", "/v1/collections/c/search", `{"text":"owls","filter":{"term":{"kind":"c"}},"k":100}`, 200); len(res["hits"].([]any)) != 40 {
		t.Fatalf("the task's documents through node 2: %d hits, want 40", len(res["hits"].([]any)))
	}
	list := call(1, "GET", "/v1/collections", "", 200)
	if !strings.Contains(fmt.Sprint(list), "docs:98") { // 60 - 2 deleted + 40 by the task
		t.Errorf("list through node 1: %v, want c with 98 documents", list)
	}
	// A collection dropped through one node is gone from every node.
	call(2, "PUT", "/v1/collections/gone", `{"schema":{"strict":true,"fields":[{"name":"text","type":"text"}]}}`, 201)
	call(1, "DELETE", "/v1/collections/gone", "", 204)
	call(1, "GET", "/v1/collections/gone", "", 404)
	// The others as soon as their metadata applies the drop.
	for node := range 3 {
		testtime.Until(t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("node %d drops the collection", node), func() error {
			req, _ := http.NewRequest("GET", "http://"+web[node]+"/v1/collections/gone", nil)
			req.Header.Set("Authorization", "Bearer "+admin)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound {
				return fmt.Errorf("it still serves it: %d", resp.StatusCode)
			}
			return nil
		})
	}
	call(2, "GET", "/v1/collections/nope", "", 404)
	st := call(2, "GET", "/_cluster/status", "", 200)
	if cs := st["collections"].([]any); len(cs) != 1 || len(cs[0].(map[string]any)["shards"].([]any)) != 3 {
		t.Errorf("status: %v", st)
	}
	// tandem cluster: the status through any node, with the admin key;
	// a drain that would leave too few nodes for 3 replicas is refused.
	code, out, errs := tandemRun(t, "cluster", "--server", "http://"+web[1], "--key", admin, "status")
	var cst cluster.Status
	if err := json.Unmarshal([]byte(out), &cst); code != 0 || err != nil || len(cst.Nodes) != 3 || cst.Nodes[0].Replicas != 3 || len(cst.Moves) != 0 {
		t.Errorf("tandem cluster status: %d, %v, %s%s", code, err, out, errs)
	}
	if code, _, errs := tandemRun(t, "cluster", "--server", "http://"+web[1], "--key", admin, "drain", "n2"); code == 0 || !strings.Contains(errs, "422") || !strings.Contains(errs, "would leave 2 nodes") {
		t.Errorf("tandem cluster drain n2 of 3 nodes with 3 replicas: exit %d, %s", code, errs)
	}
	if code, _, errs := tandemRun(t, "cluster", "--server", "http://"+web[1], "--key", read, "drain", "n2"); code == 0 || !strings.Contains(errs, "403") {
		t.Errorf("tandem cluster drain with a read key: exit %d, %s", code, errs)
	}
	// A node's backup, laid out again by tandem restore.
	nodeBackup := filepath.Join(t.TempDir(), "n1.backup")
	if code, _, errs := tandemRun(t, "cluster", "--server", "http://"+web[1], "--key", admin, "backup", nodeBackup); code != 0 {
		t.Errorf("tandem cluster backup: exit %d, %s", code, errs)
	}
	restored := filepath.Join(t.TempDir(), "n1")
	if code, out, errs := tandemRun(t, "restore", "--from", nodeBackup, "--dir", restored); code != 0 || !strings.Contains(out, "--join") {
		t.Errorf("tandem restore of a node backup: exit %d, %s%s", code, out, errs)
	}
	for _, p := range []string{"founders.json", "restored.json", "collections/c/shard-0", "collections/c/shard-1", "collections/c/shard-2"} {
		if _, err := os.Stat(filepath.Join(restored, p)); err != nil {
			t.Errorf("the restored node: %v", err)
		}
	}
	if code, _, errs := tandemRun(t, "cluster", "--server", "http://"+web[1], "drain"); code != 1 || !strings.Contains(errs, "usage: tandem cluster") {
		t.Errorf("tandem cluster drain without a node: exit %d, %s", code, errs)
	}

	// Client keys work the same on every node, and no API key opens the
	// routes between nodes: those need the cluster key.
	for node := range 3 {
		callAs("", node, "POST", "/v1/collections/c/search", `{"text":"honey"}`, 401)
		callAs("wrong", node, "POST", "/v1/collections/c/search", `{"text":"honey"}`, 401)
		if res := callAs(read, node, "POST", "/v1/collections/c/search", `{"text":"honey","k":50}`, 200); len(res["hits"].([]any)) != 18 {
			t.Errorf("search with the read key through node %d: %d hits, want the 18 honey notes left", node, len(res["hits"].([]any)))
		}
		callAs(read, node, "POST", "/v1/collections/c/delete", `{"ids":["d4"]}`, 403)
		callAs("", node, "GET", "/_cluster/status", "", 401)
		callAs(read, node, "GET", "/_cluster/status", "", 403)
		callAs(admin, node, "POST", "/_cluster/apply/c/0", "\x01", 401)
		callAs(admin, node, "GET", "/_cluster/digest/c/0", "", 401)
	}
	if doc := callAs(read, 1, "GET", "/v1/collections/c/documents/d4", "", 200); doc["id"] != "d4" {
		t.Errorf("d4 after a refused delete: %v", doc)
	}
	req, _ := http.NewRequest("GET", "http://"+web[0]+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+read)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `tandem_cluster_refused_total{listener="http",reason="credential"} 2`) {
		t.Errorf("node 0's metrics do not count the 2 refused requests to /_cluster/:\n%s", grepLines(string(metrics), "tandem_cluster"))
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestServeClusterFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cluster", "--data", "d"}, "--cluster needs --node and --peers"},
		{[]string{"--cluster", "--data", "d", "--node", "n0", "--peers", "n0=127.0.0.1:1"}, `entry 1 "n0=127.0.0.1:1": want ID=RAFT_ADDR/HTTP_ADDR`},
		{[]string{"--cluster", "--data", "d", "--node", "n0", "--peers", "n0=127.0.0.1:1/localhost"}, `address "localhost"`},
	} {
		if _, err := parseServe(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestServeClusterCredentials: a node with a non-loopback address is
// refused unless the cluster is protected, and the credentials' flags are
// checked before anything starts.
func TestServeClusterCredentials(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "an-admin-key")
	t.Setenv("TANDEM_READ_KEYS", "")
	t.Setenv("TANDEM_CLUSTER_KEY", "")
	dir := t.TempDir()
	key, short := filepath.Join(dir, "cluster.key"), filepath.Join(dir, "short.key")
	os.WriteFile(key, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(short, []byte("hunter2\n"), 0o600)
	open := []string{"--cluster", "--data", "d", "--node", "n0", "--peers", "n0=0.0.0.0:7811/10.1.2.3:7711,n1=10.1.2.4:7811/10.1.2.4:7711"}
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{open, "", "refusing to listen on 0.0.0.0:7811 (node n0's Raft address) without cluster credentials"},
		{[]string{"--cluster", "--data", "d", "--node", "n0", "--peers", "n0=127.0.0.1:7811/10.1.2.3:7711"}, "", "refusing to listen on 10.1.2.3:7711 (node n0's HTTP address) without cluster credentials"},
		{append(open, "--cluster-key-file", short), "", "--cluster-key-file " + short + ": cluster: the cluster key has 7 bytes; it needs at least 32"},
		{open, "hunter2", "TANDEM_CLUSTER_KEY: cluster: the cluster key has 7 bytes"},
		{append(open, "--cluster-key-file", filepath.Join(dir, "absent")), "", "--cluster-key-file: open"},
		{append(open, "--cluster-key-file", key, "--cluster-ca", key), "", "not both"},
		{append(open, "--cluster-ca", key), "", "--cluster-cert is missing"},
		{append(open, "--cluster-key-file", key), "0123456789abcdef0123456789abcdef", "give the cluster key once"},
		{[]string{"--cluster", "--data", "d", "--node", "n9", "--peers", "n0=127.0.0.1:1/127.0.0.1:2"}, "", `--node "n9" is not among --peers`},
	} {
		t.Setenv("TANDEM_CLUSTER_KEY", tc.env)
		if _, err := parseServe(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (TANDEM_CLUSTER_KEY %q): %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
	for _, env := range []string{"", "0123456789abcdef0123456789abcdef"} {
		t.Setenv("TANDEM_CLUSTER_KEY", env)
		args := open
		if env == "" {
			args = append(open, "--cluster-key-file", key)
		}
		sc, err := parseServe(args, io.Discard)
		if err != nil {
			t.Fatalf("a protected node on every interface: %v", err)
		}
		if !sc.cluster.creds.Protected() || sc.addr != "10.1.2.3:7711" {
			t.Errorf("protected %v, address %s", sc.cluster.creds.Protected(), sc.addr)
		}
	}
}
