package server

import (
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// dataEntries names what the data directory holds.
func dataEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// TestMaxCollections checks Config.MaxCollections: a create beyond it
// answers 409 too_many_collections naming the limit and its flag, and
// leaves nothing on disk; an existing name still answers
// collection_exists; a drop frees a place; collections on disk at start
// count, and a server holding more than the bound serves them all.
func TestMaxCollections(t *testing.T) {
	dir := t.TempDir()
	a := newAPIServer(t, &Config{DataDir: dir, MaxCollections: 2})
	a.must(http.StatusCreated, "PUT", "/v1/collections/one", nil, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/two", nil, nil)
	a.fails(http.StatusConflict, "too_many_collections", "PUT", "/v1/collections/three", nil, `"three"`, "holds 2", "limit is 2", "--max-collections")
	if got := dataEntries(t, dir); !slices.Equal(got, []string{"one", "two"}) {
		t.Fatalf("data directory after a refused create: %v, want one and two", got)
	}
	a.fails(http.StatusConflict, "collection_exists", "PUT", "/v1/collections/two", nil, `"two"`)
	a.must(http.StatusNoContent, "DELETE", "/v1/collections/two", nil, nil)
	a.must(http.StatusCreated, "PUT", "/v1/collections/three", nil, nil)
	a.upsert("three", corpus(2)...)
	a.ts.Close()
	if err := a.s.Close(); err != nil {
		t.Fatal(err)
	}

	// At start, the collections on disk count.
	b := newAPIServer(t, &Config{DataDir: dir, MaxCollections: 2})
	b.fails(http.StatusConflict, "too_many_collections", "PUT", "/v1/collections/four", nil, "--max-collections")
	b.ts.Close()
	if err := b.s.Close(); err != nil {
		t.Fatal(err)
	}
	// More on disk than the bound: all served, none created.
	c := newAPIServer(t, &Config{DataDir: dir, MaxCollections: 1})
	var list struct {
		Collections []collectionSummary `json:"collections"`
	}
	c.must(http.StatusOK, "GET", "/v1/collections", nil, &list)
	if len(list.Collections) != 2 || list.Collections[1].Name != "three" || list.Collections[1].Docs != 2 {
		t.Fatalf("a server over its bound lists %+v, want one and three (2 documents)", list.Collections)
	}
	c.fails(http.StatusConflict, "too_many_collections", "PUT", "/v1/collections/four", nil, "holds 2", "limit is 1")
	if got := dataEntries(t, dir); !slices.Equal(got, []string{"one", "three"}) {
		t.Fatalf("data directory: %v, want one and three", got)
	}

	if _, err := New(&Config{DataDir: t.TempDir(), MaxCollections: -1}); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("negative MaxCollections: %v", err)
	}
}
