package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/server"
)

// TestServeClusterMaxCollections runs two `serve --cluster` nodes with
// --max-collections 1: a collection created through one node counts on
// the other, whose create then answers 409 too_many_collections naming
// the flag, and no node holds anything of the refused collection.
func TestServeClusterMaxCollections(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	var peers, web []string
	for i := range 2 {
		h := freeAddr(t)
		web = append(web, h)
		peers = append(peers, fmt.Sprintf("n%d=%s/%s", i, freeAddr(t), h))
	}
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for i := range 2 {
		sc, err := parseServe([]string{"--cluster", "--node", fmt.Sprint("n", i), "--peers", strings.Join(peers, ","),
			"--data", filepath.Join(root, fmt.Sprint("n", i)), "--shards", "1", "--max-collections", "1"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		go func() { done <- serveCluster(ctx, sc, slog.New(slog.NewTextHandler(io.Discard, nil)), io.Discard, nil) }()
	}
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("node stopped with %v", err)
			}
		}
	}()
	// call retries while the node is starting (503).
	call := func(node int, method, path string, want int) string {
		t.Helper()
		for try := 0; ; try++ {
			req, _ := http.NewRequest(method, "http://"+web[node]+path, strings.NewReader("{}"))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				data, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == want {
					return string(data)
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
	call(0, "PUT", "/v1/collections/a", http.StatusCreated)
	body := call(1, "PUT", "/v1/collections/b", http.StatusConflict)
	for _, want := range []string{`"too_many_collections"`, "--max-collections", "limit is 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("create beyond the bound through node 1: %s, want %s", body, want)
		}
	}
	call(1, "GET", "/v1/collections/b", http.StatusNotFound)
	// An existing name is refused as such through either node, the
	// metadata leader or the one forwarding to it.
	for node := range 2 {
		if body := call(node, "PUT", "/v1/collections/a", http.StatusConflict); !strings.Contains(body, `"collection_exists"`) {
			t.Errorf("create of an existing collection through node %d: %s, want collection_exists", node, body)
		}
	}
	for i := range 2 {
		if _, err := os.Stat(filepath.Join(root, fmt.Sprint("n", i), "collections", "b")); !os.IsNotExist(err) {
			t.Errorf("node %d holds a directory of the refused collection (stat: %v)", i, err)
		}
	}
}

// TestServeMaxCollectionsFlag checks the flag's default and its check.
func TestServeMaxCollectionsFlag(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	sc, err := parseServe([]string{"--data", t.TempDir()}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if sc.cfg.MaxCollections != server.DefaultMaxCollections {
		t.Errorf("default --max-collections %d, want %d", sc.cfg.MaxCollections, server.DefaultMaxCollections)
	}
	if code, _, errs := tandemRun(t, "serve", "--data", t.TempDir(), "--max-collections", "0"); code == 0 || !strings.Contains(errs, "--max-collections must be positive") {
		t.Errorf("--max-collections 0: code %d, %q", code, errs)
	}
}
