package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// serveProcessEnv makes TestServeProcess run `tandem serve` with its
// value's arguments (separated by \x1f), as a process of its own.
const serveProcessEnv = "TANDEM_TEST_SERVE_ARGS"

func TestServeProcess(t *testing.T) {
	args := os.Getenv(serveProcessEnv)
	if args == "" {
		t.Skip("a `tandem serve` process of TestServeBoundsFilterWork")
	}
	if err := runServe(strings.Split(args, "\x1f"), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(3)
	}
	os.Exit(0)
}

// rssKB reads a process's resident set size from /proc, in kB.
func rssKB(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// TestServeBoundsFilterWork runs `tandem serve --timeout 1s` as a process
// and sends it, with a read key, issue 27's filters: the 800,000 range
// clauses (28.8 MB) are refused with a 400 within 1 s, and 1000 prefix
// clauses, within the limits but many times the timeout's work over a
// collection of 50,000 distinct keywords, are answered 504 within the
// timeout plus 1 s; the server's RSS then returns to its level before.
func TestServeBoundsFilterWork(t *testing.T) {
	const (
		docs    = 50_000
		timeout = time.Second
	)
	data := t.TempDir()
	e, err := engine.Open(filepath.Join(data, "c"), &engine.Options{NoSync: true, Schema: &tandem.Schema{
		Fields: []tandem.Field{{Name: "kw", Type: tandem.Keyword}, {Name: "year", Type: tandem.Number}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for start := 0; start < docs; start += 10_000 {
		batch := make([]tandem.Doc, 10_000)
		for i := range batch {
			n := start + i
			batch[i] = tandem.Doc{ID: fmt.Sprint("d", n), Fields: map[string]any{"kw": fmt.Sprintf("k%06d", n), "year": float64(1900 + n%200)}}
		}
		if _, err := e.Index(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}

	addr := freeAddr(t)
	args := []string{"serve", "--data", data, "--addr", addr, "--timeout", timeout.String(), "--api-key", "admin", "--read-key", "reader"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), serveProcessEnv+"="+strings.Join(args[1:], "\x1f"), "TANDEM_API_KEYS=", "TANDEM_READ_KEYS=")
	var log syncBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("serve: %v", err)
		}
		if t.Failed() {
			t.Logf("server log:\n%s", log.String())
		}
	}()
	pid := cmd.Process.Pid
	client := &http.Client{Timeout: 30 * time.Second}
	search := func(body []byte) (int, string, time.Duration) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/collections/c/search", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer reader")
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out), time.Since(start)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server is not ready: %v\n%s", err, log.String())
		}
	}
	prefixes := func(n int) []byte {
		var b bytes.Buffer
		b.WriteString(`{"filter":{"or":[`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(`{"prefix":{"kw":"k"}}`)
		}
		b.WriteString(`]}}`)
		return b.Bytes()
	}
	// One clause, which reads the whole dictionary of kw, warms the index
	// up; a thousand are a thousand times its work.
	code, body, one := search(prefixes(1))
	if code != http.StatusOK {
		t.Fatalf("one prefix clause: %d %s", code, body)
	}
	if work := 1000 * one; work < 4*timeout {
		t.Fatalf("one prefix clause took %v, so a thousand take about %v: not enough to outlast the timeout of %v on this machine", one, work, timeout)
	}
	time.Sleep(200 * time.Millisecond)
	before := rssKB(t, pid)

	// Issue 27's filter: 800,000 range clauses, 28.8 MB.
	var huge bytes.Buffer
	huge.WriteString(`{"filter":{"or":[`)
	for i := range 800_000 {
		if i > 0 {
			huge.WriteByte(',')
		}
		fmt.Fprintf(&huge, `{"range":{"year":{"gte":%d}}}`, 10_000_000+i)
	}
	huge.WriteString(`]}}`)
	code, body, took := search(huge.Bytes())
	t.Logf("%d clauses (%.1f MB): %d in %v: %s", 800_000, float64(huge.Len())/1e6, code, took, strings.TrimSpace(body))
	if code != http.StatusBadRequest || !strings.Contains(body, "filter_too_large") || !strings.Contains(body, "1024 clauses") || !strings.Contains(body, "--max-filter-clauses") {
		t.Errorf("800,000 clauses: %d %s; want 400 naming the limit and --max-filter-clauses", code, body)
	}
	if took > time.Second {
		t.Errorf("800,000 clauses refused in %v; want within 1s", took)
	}

	// A thousand prefix clauses: within the limits, far past the timeout.
	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			peak.Store(max(peak.Load(), rssKB(t, pid)))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	code, body, took = search(prefixes(1000))
	close(stop)
	wg.Wait()
	t.Logf("1000 prefix clauses: %d in %v (timeout %v; one clause %v): %s", code, took, timeout, one, strings.TrimSpace(body))
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "--timeout") {
		t.Errorf("1000 prefix clauses: %d %s; want 504 naming --timeout", code, body)
	}
	if took > timeout+time.Second {
		t.Errorf("1000 prefix clauses answered in %v; want within %v", took, timeout+time.Second)
	}
	// Its memory goes back: the RSS returns to its level before the two
	// requests (within 10% and 16 MB), once the answer is out.
	limit := before + before/10 + 16<<10
	var after int64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if after = rssKB(t, pid); after <= limit || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("RSS: %d kB before, %d kB at the peak, %d kB after", before, peak.Load(), after)
	if after > limit {
		t.Errorf("RSS %d kB 5s after the 504, %d kB before it; want at most %d kB", after, before, limit)
	}
	if code, body, _ := search([]byte(`{"filter":{"prefix":{"kw":"k00001"}},"k":20}`)); code != http.StatusOK || strings.Count(body, `"id"`) != 10 {
		t.Errorf("a search after: %d %s", code, body)
	}
}

// syncBuffer is a bytes.Buffer that a process writes to while a test
// reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// In a cluster the filter limits of the node's flags hold as on one
// server: the coordinator refuses a filter over them before any shard
// works, with the same 400.
func TestServeClusterFilterLimits(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	nodes := startServeNodes(t, 1, "--shards", "2", "--max-filter-clauses", "3", "--max-filter-depth", "2")
	call := func(method, path, body string, want int) string {
		t.Helper()
		return nodes.call("", 0, method, path, body, want)
	}
	call("PUT", "/v1/collections/c", `{"schema":{"fields":[{"name":"text","type":"text"},{"name":"kind","type":"keyword"}]}}`, 201)
	var nd strings.Builder
	for i := range 20 {
		fmt.Fprintf(&nd, `{"_id":"d%d","text":"note %d","kind":"%c"}`+"\n", i, i, 'a'+i%4)
	}
	if body := call("POST", "/v1/collections/c/documents", nd.String(), 200); !strings.Contains(body, `"indexed":20`) {
		t.Fatalf("upsert: %s", body)
	}
	three := `{"terms":{"kind":["a","b","c"]}}`
	if body := call("POST", "/v1/collections/c/search", `{"filter":`+three+`,"k":20}`, 200); strings.Count(body, `"id"`) != 15 {
		t.Errorf("three clauses: %s, want 15 hits", body)
	}
	for _, tc := range []struct{ filter, want string }{
		{`{"terms":{"kind":["a","b","c","d"]}}`, "terms.kind[3]: over the limit of 3 clauses (--max-filter-clauses)"},
		{`{"not":{"not":{"term":{"kind":"a"}}}}`, "not.not: nested deeper than the limit of 2 levels (--max-filter-depth)"},
	} {
		body := call("POST", "/v1/collections/c/search", `{"text":"note","filter":`+tc.filter+`}`, 400)
		if !strings.Contains(body, "filter_too_large") || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %s, want %q", tc.filter, body, tc.want)
		}
	}
}

func TestServeFilterFlags(t *testing.T) {
	t.Setenv("TANDEM_API_KEYS", "")
	t.Setenv("TANDEM_READ_KEYS", "")
	data := t.TempDir()
	sc, err := parseServe([]string{"--data", data}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l := sc.cfg.Engine.FilterLimits; l.MaxClauses != 1024 || l.MaxDepth != 32 || !sc.cfg.ReleaseAfterTimeout {
		t.Errorf("defaults: limits %+v, release after a timeout %v", l, sc.cfg.ReleaseAfterTimeout)
	}
	for _, flag := range []string{"--max-filter-clauses", "--max-filter-depth"} {
		if code, _, errs := tandemRun(t, "serve", "--data", data, flag, "0"); code == 0 || !strings.Contains(errs, flag+" must be positive") {
			t.Errorf("%s 0: code %d, %q", flag, code, errs)
		}
	}
}
