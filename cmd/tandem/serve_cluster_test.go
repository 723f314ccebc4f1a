package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestServeCluster runs three `serve --cluster` nodes in this process and
// uses the server's HTTP API on them: a collection created through one
// node is written through another and read through the third, as a
// client would use one server.
func TestServeCluster(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	var peers []string
	var web []string
	for i := range 3 {
		h := freeAddr(t)
		web = append(web, h)
		peers = append(peers, fmt.Sprintf("n%d=%s/%s", i, freeAddr(t), h))
	}
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 3)
	for i := range 3 {
		sc, err := parseServe([]string{"--cluster", "--node", fmt.Sprint("n", i), "--peers", strings.Join(peers, ","),
			"--data", filepath.Join(root, fmt.Sprint("n", i)), "--shards", "3", "--replicas", "3"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if sc.addr != web[i] {
			t.Fatalf("node %d serves on %s, want its peer HTTP address %s", i, sc.addr, web[i])
		}
		go func() { done <- serveCluster(ctx, sc, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard, nil) }()
	}
	defer func() {
		cancel()
		for range 3 {
			if err := <-done; err != nil {
				t.Errorf("node stopped with %v", err)
			}
		}
	}()
	call := func(node int, method, path, body string, want int) map[string]any {
		t.Helper()
		for try := 0; ; try++ {
			req, _ := http.NewRequest(method, "http://"+web[node]+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if strings.HasSuffix(path, "/documents") {
				req.Header.Set("Content-Type", "application/x-ndjson")
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == want {
					var out map[string]any
					json.Unmarshal(data, &out)
					return out
				}
				if resp.StatusCode != http.StatusServiceUnavailable || try > 300 {
					t.Fatalf("%s %s on node %d: %d %s, want %d", method, path, node, resp.StatusCode, data, want)
				}
			} else if try > 300 {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	call(0, "GET", "/readyz", "", 200)
	call(0, "PUT", "/v1/collections/c", `{"schema":{"strict":true,"fields":[{"name":"title","type":"text"},{"name":"text","type":"text"},{"name":"kind","type":"keyword"}]}}`, 201)
	var nd strings.Builder
	for i := range 60 {
		fmt.Fprintf(&nd, `{"_id":"d%d","title":"note %d","text":"%s","kind":"%s"}`+"\n", i, i,
			[]string{"glaciers carve valleys", "bees make honey", "trains run on rails"}[i%3], []string{"a", "b"}[i%2])
	}
	nd.WriteString(`{"_id":"bad","title":"x","colour":"red"}` + "\n") // not in the strict schema: line 61
	up := call(1, "POST", "/v1/collections/c/documents", nd.String(), 200)
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
	list := call(1, "GET", "/v1/collections", "", 200)
	if !strings.Contains(fmt.Sprint(list), "docs:58") {
		t.Errorf("list through node 1: %v, want c with 58 documents", list)
	}
	call(1, "DELETE", "/v1/collections/c", "", 501)
	call(2, "GET", "/v1/collections/nope", "", 404)
	st := call(2, "GET", "/_cluster/status", "", 200)
	if cs := st["collections"].([]any); len(cs) != 1 || len(cs[0].(map[string]any)["shards"].([]any)) != 3 {
		t.Errorf("status: %v", st)
	}
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
	sc, err := parseServe([]string{"--cluster", "--data", "d", "--node", "n9", "--peers", "n0=127.0.0.1:1/127.0.0.1:2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := serveCluster(context.Background(), sc, slog.Default(), io.Discard, nil); err == nil || !strings.Contains(err.Error(), `--node "n9" is not among --peers`) {
		t.Errorf("a node not among the peers: %v", err)
	}
}
