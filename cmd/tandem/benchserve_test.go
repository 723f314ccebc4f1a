package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBenchServeFlags checks the command's usage, and that its flags reach
// the benchmark: the first request goes to --url for --collection.
func TestBenchServeFlags(t *testing.T) {
	tmp := t.TempDir()
	queries := filepath.Join(tmp, "queries.jsonl")
	os.WriteFile(queries, []byte(`{"_id":"1","text":"kitten"}`+"\n"), 0o644)
	for _, args := range [][]string{{"--queries", queries}, {"--collection", "c"}, {"--collection", "c", "--queries", queries, "--searchers", "0"},
		{"--collection", "c", "--queries", queries, "--duration", "0s"}} {
		if code, _, errs := tandemRun(t, append([]string{"bench", "serve"}, args...)...); code == 0 || !strings.Contains(errs, "usage") {
			t.Errorf("%v: code %d, stderr %q", args, code, errs)
		}
	}
	// A port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + l.Addr().String()
	l.Close()
	if code, _, errs := tandemRun(t, "bench", "serve", "--url", url, "--collection", "nope", "--queries", queries, "--duration", "1s"); code == 0 || !strings.Contains(errs, url+"/v1/collections/nope") {
		t.Errorf("no server: code %d, %q", code, errs)
	}
}
