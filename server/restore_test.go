package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
	"github.com/tandemsearch/tandem/internal/testtime"
)

// octet is the header of a backup sent as a restore's body.
var octet = []string{"Content-Type", "application/octet-stream"}

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

// backupOf makes collection name of n documents (corpus), upserted 10 at
// a time, and returns its backup as GET .../backup answers it.
func backupOf(a *apiServer, name string, n int) []byte {
	a.t.Helper()
	a.must(http.StatusCreated, "PUT", "/v1/collections/"+name, nil, nil)
	docs := corpus(n)
	for i := 0; i < n; i += 10 {
		a.upsert(name, docs[i:min(i+10, n)]...)
	}
	code, body := a.do("GET", "/v1/collections/"+name+"/backup", nil)
	if code != http.StatusOK {
		a.t.Fatalf("backup of %s: %d %s", name, code, body)
	}
	return body
}

// sealed is a backup file of body: the header, body, and the trailer of
// its length and SHA-256.
func sealed(body []byte) []byte {
	sum := sha256.Sum256(body)
	out := append([]byte("TNDMBAK1"), body...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(body)))
	return append(append(out, sum[:]...), "TNDMEND1"...)
}

// TestRestoreEndpoint backs a collection up through GET .../backup and
// restores it through POST .../restore under a new name: the same
// documents, schema and BM25 rankings (ids and scores), however far the
// backup is over --max-body. A backup with a flipped byte, cut short, or
// not one answers 400 bad_backup saying which and leaves nothing in the
// data directory; a name taken, or a directory of the data directory,
// answers 409.
func TestRestoreEndpoint(t *testing.T) {
	const maxBody = 8 << 10
	a := newAPIServer(t, &Config{MaxBody: maxBody})
	backup := backupOf(a, "c", 40)
	if len(backup) <= maxBody {
		t.Fatalf("the backup is %d bytes, within --max-body (%d): the test would not show that --max-body does not apply", len(backup), maxBody)
	}
	var ci collectionInfo
	a.must(http.StatusCreated, "POST", "/v1/collections/r/restore", backup, &ci, octet...)
	if ci.Name != "r" || ci.Docs != 40 {
		t.Fatalf("restored: %s with %d documents, want r with 40", ci.Name, ci.Docs)
	}
	var orig collectionInfo
	a.must(http.StatusOK, "GET", "/v1/collections/c", nil, &orig)
	gotSchema, _ := json.Marshal(ci.Schema)
	wantSchema, _ := json.Marshal(orig.Schema)
	if !slices.Equal(ci.Retrievers, orig.Retrievers) || !bytes.Equal(gotSchema, wantSchema) {
		t.Errorf("restored retrievers %v, schema %s; want %v, %s", ci.Retrievers, gotSchema, orig.Retrievers, wantSchema)
	}
	for i := range 40 {
		id := fmt.Sprintf("d%02d", i)
		_, want := a.do("GET", "/v1/collections/c/documents/"+id, nil)
		if code, got := a.do("GET", "/v1/collections/r/documents/"+id, nil); code != http.StatusOK || !bytes.Equal(got, want) {
			t.Errorf("document %s: %d %s, want %s", id, code, got, want)
		}
	}
	for _, q := range []string{"fox", "common", "doc 7", "fox common 12"} {
		req := map[string]any{"text": q, "k": 40, "mode": "bm25"}
		want, got := a.search("c", req), a.search("r", req)
		if len(got.Hits) != len(want.Hits) || len(got.Hits) == 0 {
			t.Fatalf("%q: %d hits, want %d (not 0)", q, len(got.Hits), len(want.Hits))
		}
		for i, h := range got.Hits {
			if h.ID != want.Hits[i].ID || h.Score != want.Hits[i].Score {
				t.Errorf("%q: hit %d is %s (%g), want %s (%g)", q, i, h.ID, h.Score, want.Hits[i].ID, want.Hits[i].Score)
			}
		}
	}

	// A damaged backup creates nothing, and the name stays free.
	flipped := bytes.Clone(backup)
	flipped[len(flipped)/2] ^= 0x40
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", flipped, "the request body is damaged", "SHA-256")
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", backup[:len(backup)/2], "the request body is truncated")
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", backup[:len(backup)-1], "truncated")
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", []byte(`{"_id":"x"}`), "not a Tandem backup")
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", nil, "not a Tandem backup")
	// Whole by its length and checksum, but no store's backup: a record
	// longer than the file, and one that is not a record.
	for _, body := range [][]byte{{100, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3}, {3, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff}} {
		a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", sealed(body), "bad backup")
	}
	if got := entries(t, a.dir); !slices.Equal(got, []string{"c", "r"}) {
		t.Errorf("after refused restores the data directory holds %v, want [c r]", got)
	}
	if eb := a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/bad/restore", flipped); strings.Contains(eb.Error.Message, a.dir) || strings.Contains(eb.Error.Message, restorePrefix) {
		t.Errorf("the error shows a path of the server: %s", eb.Error.Message)
	}

	// A name taken, by a collection or by a directory, answers 409
	// before the body is read; an invalid one 400.
	a.fails(http.StatusConflict, "collection_exists", "POST", "/v1/collections/c/restore", backup, `"c" already exists`)
	a.fails(http.StatusConflict, "collection_exists", "POST", "/v1/collections/r/restore", backup, `"r" already exists`)
	if err := os.Mkdir(filepath.Join(a.dir, "stray"), 0o755); err != nil {
		t.Fatal(err)
	}
	a.fails(http.StatusConflict, "collection_exists", "POST", "/v1/collections/stray/restore", backup, "not an open collection")
	a.fails(http.StatusBadRequest, "invalid_name", "POST", "/v1/collections/-x/restore", backup, "-x")

	// The name is free again: the backup restores under it.
	a.must(http.StatusCreated, "POST", "/v1/collections/bad/restore", backup, &ci, octet...)
	if ci.Docs != 40 {
		t.Fatalf("restored bad: %d documents", ci.Docs)
	}
}

// TestRestoreLimitsAndKeys: a restore needs the admin key (a read key is
// 403), its body is bounded by --max-restore (413 naming it), not by
// --max-body, and it counts against --max-collections as a create does;
// creating nothing when refused.
func TestRestoreLimitsAndKeys(t *testing.T) {
	src := newAPIServer(t, nil)
	backup := backupOf(src, "c", 20)

	a := newAPIServer(t, &Config{AdminKeys: []string{"admin-secret"}, ReadKeys: []string{"read-secret"},
		MaxRestore: int64(len(backup) - 1), MaxBody: 1})
	a.key = "read-secret"
	a.fails(http.StatusForbidden, "forbidden", "POST", "/v1/collections/r/restore", backup, "admin key")
	a.key = "admin-secret"
	a.fails(http.StatusRequestEntityTooLarge, "body_too_large", "POST", "/v1/collections/r/restore", backup,
		fmt.Sprintf("limit of %d bytes (--max-restore)", len(backup)-1))
	if got := entries(t, a.dir); len(got) != 0 {
		t.Errorf("after refused restores the data directory holds %v", got)
	}
	// Beyond --max-collections, as a create.
	one := newAPIServer(t, &Config{MaxCollections: 1})
	one.must(http.StatusCreated, "PUT", "/v1/collections/x", nil, nil)
	one.fails(http.StatusConflict, "too_many_collections", "POST", "/v1/collections/r/restore", backup, "--max-collections")
	if got := entries(t, one.dir); !slices.Equal(got, []string{"x"}) {
		t.Errorf("after a refused restore the data directory holds %v", got)
	}

	// Within the limit, but cut short.
	a.fails(http.StatusBadRequest, "bad_backup", "POST", "/v1/collections/r/restore", backup[:len(backup)-1], "truncated")
	if got := entries(t, a.dir); len(got) != 0 {
		t.Errorf("after refused restores the data directory holds %v", got)
	}
}

// TestRestoreCutShort: a client that stops sending midway, and a body
// shorter than its Content-Length, leave nothing in the data directory,
// and the name free.
func TestRestoreCutShort(t *testing.T) {
	var logs syncBuffer
	a := newAPIServer(t, &Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	backup := backupOf(a, "c", 20)
	conn, err := net.Dial("tcp", a.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/collections/cut/restore HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", len(backup))
	conn.Write(backup[:len(backup)/2])
	time.Sleep(100 * time.Millisecond) // the server is receiving the body
	conn.Close()
	deadline := time.Now().Add(testtime.D(10 * time.Second))
	for !slices.ContainsFunc(logs.lines(), func(l map[string]any) bool { return l["collection"] == "cut" }) {
		if time.Now().After(deadline) {
			t.Fatalf("the restore cut short was not answered within %v", testtime.D(10*time.Second))
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, l := range logs.lines() {
		if l["collection"] == "cut" && l["status"] != float64(http.StatusBadRequest) {
			t.Errorf("the restore cut short was answered %v, want 400", l["status"])
		}
	}
	if got := entries(t, a.dir); !slices.Equal(got, []string{"c"}) {
		t.Errorf("after a restore cut short the data directory holds %v, want [c]", got)
	}
	a.must(http.StatusCreated, "POST", "/v1/collections/cut/restore", backup, nil, octet...)
}

// TestRestoreLeftovers: what a restore cut short by a crash leaves (its
// working directory, even one holding a whole collection) is removed when
// the server starts, and never opened.
func TestRestoreLeftovers(t *testing.T) {
	src := newAPIServer(t, nil)
	backup := backupOf(src, "c", 5)
	dir := t.TempDir()
	work := filepath.Join(dir, restorePrefix+"x-123")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(work, "backup")
	if err := os.WriteFile(path, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := engine.Restore(path, filepath.Join(work, "collection")); err != nil {
		t.Fatal(err)
	}
	a := newAPIServer(t, &Config{DataDir: dir})
	if got := entries(t, dir); len(got) != 0 {
		t.Errorf("after a start the data directory holds %v", got)
	}
	var list struct {
		Collections []collectionSummary `json:"collections"`
	}
	a.must(http.StatusOK, "GET", "/v1/collections", nil, &list)
	if len(list.Collections) != 0 {
		t.Errorf("collections %+v", list.Collections)
	}
}

// TestRestoreModels: a backup's schema must name installed models, as a
// create's must: a model by a path, or one not installed, is 400
// bad_model; an external model is the documents' own.
func TestRestoreModels(t *testing.T) {
	for _, name := range []string{"/etc", "../x", "no-such-model"} {
		err := checkRestoredModels(&tandem.Schema{Models: []tandem.Model{{Name: name, Dense: true, Dim: 4}}})
		if ae := classify(err); ae.status != http.StatusBadRequest || ae.code != "bad_model" || !strings.Contains(ae.message, "the backup's schema.models[0].name") {
			t.Errorf("model %q: %v", name, err)
		}
	}
	if err := checkRestoredModels(&tandem.Schema{Models: []tandem.Model{{Name: "/etc", Dense: true, Dim: 4, External: true}}}); err != nil {
		t.Errorf("external model: %v", err)
	}
}

// noCatalog is a cluster's catalog holding nothing.
type noCatalog struct{}

func (noCatalog) List() []string                     { return nil }
func (noCatalog) Open(string) (Collection, error)    { return nil, fs.ErrNotExist }
func (noCatalog) Drop(context.Context, string) error { return fs.ErrNotExist }
func (noCatalog) Create(context.Context, string, engine.Options) (Collection, error) {
	return nil, fmt.Errorf("no catalog: %w", os.ErrPermission)
}

// TestRestoreCluster: a server whose collections a cluster holds answers
// a restore 501.
func TestRestoreCluster(t *testing.T) {
	a := newAPIServer(t, &Config{Catalog: noCatalog{}})
	code, body := a.do("POST", "/v1/collections/r/restore", []byte("TNDMBAK1"), octet...)
	var eb errorBody
	if json.Unmarshal(body, &eb); code != http.StatusNotImplemented || eb.Error.Code != "unsupported" || !strings.Contains(eb.Error.Message, "cluster") {
		t.Errorf("restore into a cluster: %d %s", code, body)
	}
}
