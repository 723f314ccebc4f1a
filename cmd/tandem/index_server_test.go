package main

import (
	"bytes"
	"context"
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

	"github.com/tandemsearch/tandem/internal/testtime"
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

// TestIndexThroughServerAnswers runs tandem index --server against a
// fake server, for what a real one does not readily do: a task that is
// still running when Ctrl-C comes, a task whose last answer drops its
// rate and ETA, and a proxy's page in place of the API's answer.
func TestIndexThroughServerAnswers(t *testing.T) {
	t.Setenv("TANDEM_API_KEY", "")
	t.Setenv("TANDEM_API_KEYS", "")
	file := filepath.Join(t.TempDir(), "corpus.jsonl")
	if err := os.WriteFile(file, []byte(`{"_id":"a","text":"x"}`+"\n"+`{"_id":"b","text":"y"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// tasks are the answers to GET /v1/tasks/7, in turn, the last
	// repeated; polled is called at each.
	fake := func(tasks []string, polled func(n int)) *httptest.Server {
		n := 0
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.Method == "GET" && r.URL.Path == "/v1/collections/c":
				io.WriteString(w, `{"name":"c","retrievers":["bm25"]}`)
			case r.Method == "POST" && r.URL.Path == "/v1/collections/c/documents":
				io.Copy(io.Discard, r.Body)
				w.Header().Set("Location", "/v1/tasks/7")
				w.WriteHeader(http.StatusAccepted)
				io.WriteString(w, `{"id":7,"collection":"c","state":"enqueued","received":2}`)
			case r.Method == "GET" && r.URL.Path == "/v1/tasks/7":
				io.WriteString(w, tasks[min(n, len(tasks)-1)])
				n++
				if polled != nil {
					polled(n)
				}
			default:
				w.WriteHeader(http.StatusNotFound)
			}
		}))
		t.Cleanup(ts.Close)
		return ts
	}

	// Ctrl-C while following: the task goes on, and the command says how
	// to cancel it, naming the key's variable, never the key.
	ctx, cancel := context.WithCancel(testtime.Context(t))
	defer cancel()
	ts := fake([]string{`{"id":7,"state":"processing","received":2,"indexed":1,"docs_per_second":1,"eta_seconds":1}`}, func(int) { cancel() })
	var stdout, stderr bytes.Buffer
	up := upload{server: ts.URL, collection: "c", key: "sekrit", corpus: file}
	err := up.run(ctx, &stdout, &stderr)
	wantCurl := `cancel it with: curl -X DELETE -H "Authorization: Bearer $TANDEM_API_KEY" ` + ts.URL + "/v1/tasks/7"
	if err == nil || !strings.Contains(err.Error(), "interrupted: stopped following task 7, which goes on") || !strings.Contains(err.Error(), wantCurl) || strings.Contains(err.Error(), "sekrit") {
		t.Errorf("Ctrl-C while following: %v\nwant it to say the task goes on and %s", err, wantCurl)
	}

	// The last answer has no rate or ETA: the last line shows none,
	// rather than the previous answer's.
	ts = fake([]string{
		`{"id":7,"state":"processing","received":2,"indexed":1,"committed_lines":1,"docs_per_second":1,"eta_seconds":1}`,
		`{"id":7,"state":"succeeded","received":2,"indexed":2,"committed_lines":2}`,
	}, nil)
	stdout.Reset()
	stderr.Reset()
	up = upload{server: ts.URL, collection: "c", corpus: file}
	if err := up.run(testtime.Context(t), &stdout, &stderr); err != nil || stdout.String() == "" || !strings.HasPrefix(stdout.String(), "indexed 2 documents (2 lines, 0 skipped) in ") {
		t.Fatalf("a succeeded task: %v, stdout %q", err, stdout.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "2 docs, ") || strings.Contains(last, "ETA") || !strings.Contains(last, "100%, succeeded") {
		t.Errorf("last progress line %q: want 2 docs, 100%%, succeeded, and no ETA", last)
	}
	if n := strings.Count(stderr.String(), "succeeded"); n != 1 {
		t.Errorf("the final line is printed %d times:\n%s", n, stderr.String())
	}

	// A proxy's page is named by its status and type, never dumped.
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html><body>Bad Gateway</body></html>")
	}))
	defer proxy.Close()
	code, _, errs := tandemRun(t, "index", "--server", proxy.URL, "--collection", "c", "--corpus", file)
	if code == 0 || strings.Contains(errs, "<html") || !strings.Contains(errs, "HTTP 502 Bad Gateway") || !strings.Contains(errs, "not the Tandem API's") {
		t.Errorf("a proxy's page: code %d, stderr %q", code, errs)
	}

	// An unreachable server is named once, with the request that failed.
	code, _, errs = tandemRun(t, "index", "--server", "http://127.0.0.1:1", "--collection", "c", "--corpus", file)
	if code == 0 || !strings.Contains(errs, "tandem index: GET /v1/collections/c: dial tcp 127.0.0.1:1") || strings.Count(errs, "127.0.0.1:1") != 2 {
		t.Errorf("no server: code %d, stderr %q", code, errs)
	}

	// -h shows where the key comes from, never the key.
	t.Setenv("TANDEM_API_KEY", "sekrit")
	if _, _, errs := tandemRun(t, "index", "-h"); strings.Contains(errs, "sekrit") || !strings.Contains(errs, "$TANDEM_API_KEY") {
		t.Errorf("index -h prints the key from the environment:\n%s", errs)
	}
}
