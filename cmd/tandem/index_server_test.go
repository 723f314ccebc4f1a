package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/server"
)

// TestIndexThroughServer: tandem index --server uploads a corpus as a
// task into a collection it creates, follows it, lists the refused line
// and prints a local index's summary.
func TestIndexThroughServer(t *testing.T) {
	cfg := &server.Config{DataDir: t.TempDir(), AdminKeys: []string{"k1"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Engine.NoSync = true
	cfg.Engine.BatchSize = 40
	s, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() { ts.Close(); s.Close() })

	var corpus strings.Builder
	for i := range 200 {
		fmt.Fprintf(&corpus, `{"_id":"d%03d","title":"note %d","text":"glaciers carve valley number %d"}`+"\n", i, i, i)
		if i == 99 {
			corpus.WriteString(`{"_id":"bad","text":` + "\n") // line 101
		}
	}
	file := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(file, []byte(corpus.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	index := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := run(append([]string{"index", "--server", ts.URL, "--key", "k1"}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, errOut := index("--collection", "notes", "--corpus", file, "--models", "none")
	if code == 0 {
		t.Fatalf("a refused line without --skip-bad: exit 0\n%s%s", out, errOut)
	}
	for _, want := range []string{"created collection notes", "retrievers: bm25", "skipped: line 101", "refused 1 lines"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	if !strings.Contains(out, "indexed 200 documents (201 lines, 1 skipped) in ") {
		t.Errorf("summary: %q", out)
	}
	count := func() int {
		req, _ := http.NewRequest("GET", ts.URL+"/v1/collections/notes", nil)
		req.Header.Set("Authorization", "Bearer k1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var info struct{ Docs int }
		json.NewDecoder(resp.Body).Decode(&info)
		return info.Docs
	}
	if n := count(); n != 200 {
		t.Fatalf("the collection holds %d documents, want 200", n)
	}

	// Again into the existing collection, from stdin (chunked), with
	// --skip-bad: exit 0.
	old := os.Stdin
	f, _ := os.Open(file)
	os.Stdin = f
	code, out, errOut = index("--collection", "notes", "--corpus", "-", "--skip-bad", "--strict")
	os.Stdin = old
	f.Close()
	if code != 0 || !strings.Contains(out, "indexed 200 documents (201 lines, 1 skipped)") || !strings.Contains(errOut, "note: collection notes exists") {
		t.Fatalf("stdin with --skip-bad: exit %d\n%s%s", code, out, errOut)
	}

	// --no-wait prints the task and returns.
	code, out, _ = index("--collection", "notes", "--corpus", file, "--no-wait", "--skip-bad")
	if code != 0 || !strings.Contains(out, "enqueued: 201 documents; follow it at "+ts.URL+"/v1/tasks/") {
		t.Fatalf("--no-wait: exit %d: %s", code, out)
	}

	// Errors name their cause, never dump a body.
	var stdout, stderr bytes.Buffer
	if code := run([]string{"index", "--server", ts.URL, "--key", "wrong", "--collection", "notes", "--corpus", file}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "HTTP 401 unauthorized") {
		t.Errorf("a wrong key: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"index", "--server", "http://127.0.0.1:1", "--collection", "notes", "--corpus", file}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "127.0.0.1:1") {
		t.Errorf("no server: exit %d: %s", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{"index", "--server", ts.URL, "--dir", "x", "--collection", "notes", "--corpus", file}, &stdout, &stderr); code == 0 || !strings.Contains(stderr.String(), "not --dir") {
		t.Errorf("--server with --dir: exit %d: %s", code, stderr.String())
	}
}
