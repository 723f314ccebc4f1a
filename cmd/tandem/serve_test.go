package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/encoder"
)

// An open server (no key) on an address other machines reach is refused
// before anything is opened or created.
func TestServeRefusesOpenAddress(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	data := filepath.Join(t.TempDir(), "data")
	for _, addr := range []string{"0.0.0.0:7700", ":7700", "[::]:7700"} {
		code, _, errs := tandemRun(t, "serve", "--data", data, "--addr", addr)
		if code == 0 || !strings.Contains(errs, "refusing") || !strings.Contains(errs, addr) || !strings.Contains(errs, "--api-key") {
			t.Errorf("serve --addr %s without a key: code %d, stderr %q", addr, code, errs)
		}
	}
	if _, err := os.Stat(data); !os.IsNotExist(err) {
		t.Errorf("a refused serve created %s: %v", data, err)
	}
	if _, err := parseServe([]string{"--data", data, "--addr", "0.0.0.0:7700", "--read-key", "k"}, io.Discard); err != nil {
		t.Errorf("with a read key: %v", err)
	}
	t.Setenv("TANDEM_API_KEYS", "from-env")
	if _, err := parseServe([]string{"--data", data, "--addr", "0.0.0.0:7700"}, io.Discard); err != nil {
		t.Errorf("with a key from TANDEM_API_KEYS: %v", err)
	}
}

func TestServeFlags(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	data := t.TempDir()
	if code, _, errs := tandemRun(t, "serve", "--data", data, "--max-k", "0"); code == 0 || !strings.Contains(errs, "--max-k must be positive") {
		t.Errorf("--max-k 0: code %d, %q", code, errs)
	}
	if code, _, errs := tandemRun(t, "serve"); code == 0 || !strings.Contains(errs, "usage: tandem serve") {
		t.Errorf("no --data: code %d, %q", code, errs)
	}
	if code, _, errs := tandemRun(t, "serve", "--data", data, "--ingest-threads", "-1"); code == 0 || !strings.Contains(errs, "--ingest-threads, --query-cache-bytes and --query-batch-wait must be 0 or more") {
		t.Errorf("--ingest-threads -1: code %d, %q", code, errs)
	}
	if sc, err := parseServe([]string{"--data", data}, io.Discard); err != nil || sc.cfg.Engine.DocumentThreads < 1 || sc.cfg.Engine.QueryCacheBytes != encoder.DefaultQueryCacheBytes || sc.cfg.Engine.QueryBatch != encoder.DefaultQueryBatch {
		t.Errorf("default ingest threads and query encodings: %+v, %v; want documents encoded apart from queries, the default cache and batch", sc, err)
	}
	// --query-cache-bytes 0 turns the cache off (the engine's -1).
	if sc, err := parseServe([]string{"--data", data, "--query-cache-bytes", "0", "--query-batch", "1"}, io.Discard); err != nil || sc.cfg.Engine.QueryCacheBytes != -1 || sc.cfg.Engine.QueryBatch != 1 {
		t.Errorf("--query-cache-bytes 0 --query-batch 1: %+v, %v", sc, err)
	}
	if code, _, errs := tandemRun(t, "serve", "--data", data, "--query-batch", "0"); code == 0 || !strings.Contains(errs, "--query-batch must be 1 or more") {
		t.Errorf("--query-batch 0: code %d, %q", code, errs)
	}
	keys := filepath.Join(data, "keys")
	os.WriteFile(keys, []byte("# keys\nadmin a1\nread r1\n\nread r2\n"), 0o600)
	sc, err := parseServe([]string{"--data", data, "--keys-file", keys, "--api-key", "a0", "--max-body", "100", "--timeout", "3s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(sc.cfg.AdminKeys, ",") != "a0,a1" || strings.Join(sc.cfg.ReadKeys, ",") != "r1,r2" || sc.cfg.MaxBody != 100 || sc.cfg.Timeout != 3*time.Second || sc.addr != "127.0.0.1:7700" {
		t.Errorf("parsed %+v", sc)
	}
	os.WriteFile(keys, []byte("admin a1\nwriter w1\n"), 0o600)
	if _, err := parseServe([]string{"--data", data, "--keys-file", keys}, io.Discard); err == nil || !strings.Contains(err.Error(), "line 2") || !strings.Contains(err.Error(), `"writer"`) {
		t.Errorf("bad keys file: %v", err)
	}
}

// TestServeRuns runs the command's server on a random loopback port with
// keys from flags and the environment, and stops it as SIGTERM would.
func TestServeRuns(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "env-read")
	data := t.TempDir()
	sc, err := parseServe([]string{"--data", data, "--addr", "127.0.0.1:0", "--api-key", "admin"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- serve(ctx, sc, slog.New(slog.NewTextHandler(io.Discard, nil)), func(addr string) { addrc <- addr })
	}()
	var base string
	select {
	case base = <-addrc:
		base = "http://" + base
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	call := func(method, path, key, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := call("GET", "/healthz", "", ""); code != http.StatusOK {
		t.Fatalf("healthz: %d", code)
	}
	if code, body := call("PUT", "/v1/collections/c", "admin", ""); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	if code, body := call("POST", "/v1/collections/c/documents", "admin", `{"_id":"1","text":"hello server"}`+"\n"); code != http.StatusOK {
		t.Fatalf("upsert: %d %s", code, body)
	}
	if code, _ := call("GET", "/v1/collections", "", ""); code != http.StatusUnauthorized {
		t.Errorf("no key: %d", code)
	}
	if code, _ := call("PUT", "/v1/collections/d", "env-read", ""); code != http.StatusForbidden {
		t.Errorf("read key from TANDEM_READ_KEYS on create: %d", code)
	}
	code, body := call("GET", "/v1/collections/c/search?q=hello", "env-read", "")
	var res struct {
		Hits []struct{ ID string } `json:"hits"`
	}
	if json.Unmarshal([]byte(body), &res); code != http.StatusOK || len(res.Hits) != 1 || res.Hits[0].ID != "1" {
		t.Fatalf("search: %d %s", code, body)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("serve after stop: %v", err)
	}
	code, out, errs := tandemRun(t, "stats", "--dir", filepath.Join(data, "c"))
	if code != 0 || !strings.Contains(out, "documents   1") {
		t.Fatalf("stats of the served collection: %s %s", out, errs)
	}
}
