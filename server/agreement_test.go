package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/engine"
)

// Where the spec and the server disagreed, they now agree (each case also
// passes the spec client's checks).
func TestSpecAgreement(t *testing.T) {
	a := newAPIServer(t, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/docs", nil, nil)
	a.upsert("docs", corpus(12)...)

	// A GET search with neither q nor filter ranks every document.
	var res searchJSON
	a.must(http.StatusOK, "GET", "/v1/collections/docs/search?k=20", nil, &res)
	if len(res.Hits) != 12 {
		t.Errorf("GET search with no q and no filter: %d hits, want all 12", len(res.Hits))
	}
	if res = a.find("docs", map[string]any{"text": " ", "k": 5}); len(res.Hits) != 5 {
		t.Errorf("POST search with blank text: %d hits, want 5", len(res.Hits))
	}

	// No documents (an empty array, a blank NDJSON body) is refused, as the
	// spec's minItems and pattern say.
	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/docs/documents", []any{}, "no documents")
	a.fails(http.StatusBadRequest, "no_documents", "POST", "/v1/collections/docs/documents", ndjsonBody(" \n\t\r\n"), "no documents")
	// A line of other Unicode space is no blank line to JSON: it is
	// reported, and the body is answered.
	var ur upsertResult
	a.must(http.StatusOK, "POST", "/v1/collections/docs/documents", ndjsonBody("\v\n"), &ur)
	if ur.Failed != 1 || ur.Errors[0].Line != 1 {
		t.Errorf("a line of \\v: %+v, want its line reported", ur)
	}

	// A model's name is not empty, nor has '/', '\' or ':'.
	for _, name := range []string{"", "a/b", `a\b`, "a:b"} {
		a.fails(http.StatusBadRequest, "bad_schema", "PUT", "/v1/collections/m", map[string]any{"schema": map[string]any{
			"models": []map[string]any{{"name": name, "dense": true, "dim": 4, "similarity": "cosine", "external": true}},
		}}, "invalid name")
	}

	// 405 lists exactly the spec's methods for the path. The spec's
	// router takes .../documents for .../documents/{id} with an empty id,
	// so these go outside the spec client.
	for _, tc := range []struct{ method, path, allow string }{
		{"PUT", "/v1/collections/docs/documents", "POST"},
		{"GET", "/v1/collections/docs/documents", "POST"},
		{"DELETE", "/v1/collections/docs/documents", "POST"},
		{"POST", "/v1/collections/docs/documents/d01", "DELETE, GET"},
		{"PATCH", "/v1/collections/docs", "DELETE, GET, PUT"},
		{"POST", "/v1/collections/docs/search/", ""},
		{"POST", "/v1/collections", "GET"},
	} {
		req, _ := http.NewRequest(tc.method, a.ts.URL+tc.path, nil)
		resp, err := a.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb errorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		want := http.StatusMethodNotAllowed
		if tc.allow == "" {
			want = http.StatusNotFound
		}
		if resp.StatusCode != want || resp.Header.Get("Allow") != tc.allow || eb.Error.Code == "" {
			t.Errorf("%s %s: %d, Allow %q, %+v; want %d, Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), eb, want, tc.allow)
		}
	}
}

// A body that has not arrived within --timeout is answered 408 naming the
// flag, and the server serves on.
func TestSlowBody(t *testing.T) {
	s, err := New(&Config{DataDir: t.TempDir(), Timeout: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Engine: engine.Options{NoSync: true}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	for _, tc := range []struct{ method, path string }{
		{"PUT", "/v1/collections/slow"},
		{"POST", "/v1/collections/slow/search"},
	} {
		conn, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		// Half the body, then nothing.
		fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"text\":", tc.method, tc.path)
		conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		var eb errorBody
		json.NewDecoder(resp.Body).Decode(&eb)
		conn.Close()
		if resp.StatusCode != http.StatusRequestTimeout || eb.Error.Code != "request_timeout" || !strings.Contains(eb.Error.Message, "--timeout") || !strings.Contains(eb.Error.Message, "500ms") {
			t.Errorf("%s %s with a slow body: %d %+v; want 408 naming --timeout", tc.method, tc.path, resp.StatusCode, eb)
		}
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("healthz after slow bodies: %v %v", resp, err)
	}
	resp.Body.Close()
}
