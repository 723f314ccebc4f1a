package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/server"
)

// TestServeClusterMaxCollections runs two `serve --cluster` nodes with
// --max-collections 1: a collection created through one node counts on
// the other, whose create then answers 409 too_many_collections naming
// the flag, and no node holds anything of the refused collection.
func TestServeClusterMaxCollections(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	nodes := startServeNodes(t, 2, "--shards", "1", "--max-collections", "1")
	call := func(node int, method, path string, want int) string {
		t.Helper()
		return nodes.call("", node, method, path, "{}", want)
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
		if _, err := os.Stat(filepath.Join(nodes.root, fmt.Sprint("n", i), "collections", "b")); !os.IsNotExist(err) {
			t.Errorf("node %d holds a directory of the refused collection (stat: %v)", i, err)
		}
	}
}

// TestServeMaxRestoreFlag checks --max-restore's default, its value, and
// its check.
func TestServeMaxRestoreFlag(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	sc, err := parseServe([]string{"--data", t.TempDir()}, io.Discard)
	if err != nil || sc.cfg.MaxRestore != server.DefaultMaxRestore {
		t.Fatalf("default --max-restore: %+v, %v; want %d", sc, err, int64(server.DefaultMaxRestore))
	}
	if sc, err = parseServe([]string{"--data", t.TempDir(), "--max-restore", "1000", "--max-body", "10"}, io.Discard); err != nil || sc.cfg.MaxRestore != 1000 || sc.cfg.MaxBody != 10 {
		t.Errorf("--max-restore 1000 --max-body 10: %+v, %v", sc, err)
	}
	for _, v := range []string{"0", "-1"} {
		if code, _, errs := tandemRun(t, "serve", "--data", t.TempDir(), "--max-restore", v); code == 0 || !strings.Contains(errs, "--max-restore must be positive") {
			t.Errorf("--max-restore %s: code %d, %q", v, code, errs)
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
