package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExternalModel indexes lines that bring their own vectors for a model
// Tandem does not run, then searches it with a query vector and a query
// token matrix from files, and checks the errors a user meets on the way.
func TestExternalModel(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "coll")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	// Dot-product vectors: d2 points along the query, d1 across it.
	os.WriteFile(corpus, []byte(`{"_id":"d1","text":"north","kind":"a","_vectors":{"ext":{"dense":[1,0,0],"tokens":[[1,0],[0.5,0.5]]}}}
{"_id":"d2","text":"east","kind":"b","_vectors":{"ext":{"dense":[0,1,0],"tokens":[[0,1]]}}}
{"_id":"d3","text":"up","kind":"b","_vectors":{"ext":{"dense":[0,0.5,0.5],"tokens":[[0,1],[1,0]]}}}
`), 0o644)
	if code, out, errs := tandemRun(t, "index", "--dir", dir, "--corpus", corpus, "--external", "ext:dense=3,tokens=2,similarity=dot"); code != 0 || !strings.Contains(out, "indexed 3 documents") {
		t.Fatalf("index: code %d out %q err %q", code, out, errs)
	}
	qv := filepath.Join(tmp, "q.json")
	os.WriteFile(qv, []byte(`[0, 1, 0.1]`), 0o644)
	qt := filepath.Join(tmp, "qt.json")
	os.WriteFile(qt, []byte(`[[0, 1]]`), 0o644)

	ranked := func(args ...string) []string {
		t.Helper()
		code, out, errs := tandemRun(t, append([]string{"search", "--dir", dir, "--json"}, args...)...)
		if code != 0 {
			t.Fatalf("search %v: code %d, stderr %q", args, code, errs)
		}
		var res struct {
			Hits []struct {
				ID string `json:"id"`
			} `json:"hits"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, h := range res.Hits {
			ids = append(ids, h.ID)
		}
		return ids
	}
	// Dense scores: d2 1.0, d3 0.55, d1 0.
	if got := strings.Join(ranked("--query-vector", qv), ","); got != "d2,d3,d1" {
		t.Errorf("dense by query vector: %s, want d2,d3,d1", got)
	}
	// Late (avg-max of one query token): d2 and d3 score 1, d1 0.5.
	if got := ranked("--query-tokens", qt, "--mode", "late"); len(got) != 3 || got[2] != "d1" {
		t.Errorf("late by query tokens: %v, want d1 last", got)
	}
	// Hybrid with text: bm25 finds "east", the vectors the rest.
	if got := ranked("--query-vector", qv, "--query-tokens", qt, "--filter", `{"term":{"kind":"b"}}`, "east"); strings.Join(got, ",") != "d2,d3" {
		t.Errorf("filtered hybrid: %v, want d2,d3", got)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--mode", "dense", "east"}, "external model"},
		{[]string{"--query-vector", qt}, "query-vector"},
		{[]string{"--query-vector", qv, "--vector-model", "nope"}, `"dense:nope"`},
	} {
		code, _, errs := tandemRun(t, append([]string{"search", "--dir", dir}, tc.args...)...)
		if code == 0 || !strings.Contains(errs, tc.want) {
			t.Errorf("search %v: code %d, stderr %q, want an error with %q", tc.args, code, errs, tc.want)
		}
	}
	// A line without the external model's vectors names its line and
	// model, and the collection keeps what it had.
	bad := filepath.Join(tmp, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"_id":"d4","text":"west"}`+"\n"), 0o644)
	if code, _, errs := tandemRun(t, "index", "--dir", dir, "--corpus", bad); code == 0 || !strings.Contains(errs, "line 1") || !strings.Contains(errs, "_vectors.ext") {
		t.Errorf("line without vectors: code %d, stderr %q", code, errs)
	}
	// Every index saved at the last close: the change log is truncated
	// through the last sequence.
	if code, out, _ := tandemRun(t, "stats", "--dir", dir); code != 0 || !strings.Contains(out, "documents   3 ") || !strings.Contains(out, "external") ||
		!strings.Contains(out, "log         empty (truncated through 3)") {
		t.Errorf("stats after the bad line: %s", out)
	}
	if code, _, errs := tandemRun(t, "index", "--dir", filepath.Join(tmp, "c2"), "--corpus", corpus, "--external", "ext:dense=3"); code == 0 || !strings.Contains(errs, "similarity is required") {
		t.Errorf("--external without similarity: code %d, stderr %q", code, errs)
	}
}
