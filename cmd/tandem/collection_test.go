package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

func tandemRun(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

// Commands that read a collection fail on a path that holds none, naming
// it, and create nothing there.
func TestReadCommandsNeedCollection(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "nonexistent")
	q, qrels := filepath.Join(tmp, "q.jsonl"), filepath.Join(tmp, "qrels.tsv")
	os.WriteFile(q, []byte(`{"_id":"q1","text":"whale"}`+"\n"), 0o644)
	os.WriteFile(qrels, []byte("query-id\tcorpus-id\tscore\nq1\td1\t1\n"), 0o644)
	for _, args := range [][]string{
		{"search", "--dir", dir, "hello"},
		{"stats", "--dir", dir},
		{"delete", "--dir", dir, "d1"},
		{"export", "--dir", dir, "--out", filepath.Join(tmp, "out")},
		{"eval", "--dir", dir, "--queries", q, "--qrels", qrels},
		{"tune", "--dir", dir, "--queries", q, "--qrels", qrels},
	} {
		code, _, errs := tandemRun(t, args...)
		if code == 0 || !strings.Contains(errs, dir) || !strings.Contains(errs, "no collection") {
			t.Errorf("%s on a missing collection: code %d, stderr %q", args[0], code, errs)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Fatalf("%s created %s", args[0], dir)
		}
	}
}

func TestCollectionCommands(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "coll")
	corpus := filepath.Join(tmp, "corpus.jsonl")
	os.WriteFile(corpus, []byte(`{"_id":"d1","title":"Whales","text":"The blue whale is the largest animal.","year":2001}
{"_id":"d2","title":"Sharks","text":"Sharks are fish.","year":2010}
{"_id":"d3","title":"Whale song","text":"Humpback whales sing.","year":2020}
{"_id":"d4","title":"Ångström-scale whale ééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééééé","text":"Long accented title.","year":1990}
`), 0o644)
	if code, out, errs := tandemRun(t, "index", "--dir", dir, "--corpus", corpus); code != 0 || !strings.Contains(out, "indexed 4 documents") || !strings.Contains(errs, "docs/s") {
		t.Fatalf("index: code %d out %q err %q", code, out, errs)
	}

	// The human-readable output cuts long titles at 80 characters, never
	// inside a UTF-8 sequence.
	if code, out, errs := tandemRun(t, "search", "--dir", dir, "--mode", "bm25", "--filter", `{"range":{"year":{"lt":2000}}}`, "whale"); code != 0 || !utf8.ValidString(out) || !strings.Contains(out, "Ångström-scale") || !strings.Contains(out, "é...") {
		t.Errorf("search with a long accented title: code %d out %q err %q", code, out, errs)
	}

	code, out, errs := tandemRun(t, "search", "--dir", dir, "--mode", "bm25", "--filter", `{"range":{"year":{"gte":2015}}}`, "-k", "5", "--json", "whale")
	if code != 0 {
		t.Fatalf("search: %d %s", code, errs)
	}
	var res struct {
		Hits []struct {
			ID     string         `json:"id"`
			Score  float64        `json:"score"`
			Fields map[string]any `json:"fields"`
		} `json:"hits"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("search --json output %q: %v", out, err)
	}
	if len(res.Hits) != 1 || res.Hits[0].ID != "d3" || res.Hits[0].Score <= 0 || res.Hits[0].Fields["title"] != "Whale song" {
		t.Errorf("search hits = %+v", res.Hits)
	}

	// --highlight marks BM25's analysed terms in brackets, both words of
	// "whale" and "whales" (the English analyzer stems them alike).
	if code, out, errs := tandemRun(t, "search", "--dir", dir, "--mode", "bm25", "--highlight", "--filter", `{"range":{"year":{"gte":2015}}}`, "whales"); code != 0 || !strings.Contains(out, "title: [Whale] song") || !strings.Contains(out, "text: Humpback [whales] sing.") {
		t.Errorf("search --highlight: code %d out %q err %q", code, out, errs)
	}

	// --facet counts every document the filter matches, or with
	// --facet-scope results the fused hits (the three whale documents).
	if code, out, errs := tandemRun(t, "search", "--dir", dir, "--mode", "bm25", "--facet", "year:interval=10", "whale"); code != 0 || !strings.Contains(out, "facet year (4 documents, 0 without it): 1990 1, 2000 1, 2010 1, 2020 1\n") {
		t.Errorf("search --facet: code %d out %q err %q", code, out, errs)
	}
	if code, out, errs := tandemRun(t, "search", "--dir", dir, "--mode", "bm25", "--facet", "year:ranges=..2000|2000..", "--facet-scope", "results", "whale"); code != 0 || !strings.Contains(out, "facet year (3 documents, 0 without it): *-2000 1, 2000-* 2\n") {
		t.Errorf("search --facet --facet-scope results: code %d out %q err %q", code, out, errs)
	}
	if code, _, errs := tandemRun(t, "search", "--dir", dir, "--facet", "title", "whale"); code != 1 || !strings.Contains(errs, `facets[0] (field "title"): a text field has no facet`) {
		t.Errorf("a facet on a text field: code %d, stderr %q", code, errs)
	}
	if code, _, errs := tandemRun(t, "search", "--dir", dir, "--facet", "year:top=3", "whale"); code != 1 || !strings.Contains(errs, `unknown option "top"`) {
		t.Errorf("a bad --facet: code %d, stderr %q", code, errs)
	}

	if code, _, errs := tandemRun(t, "search", "--dir", dir, "--filter", `{"and":[{"term":{"yr":1}}]}`, "whale"); code != 1 || !strings.Contains(errs, `and[0].term.yr: unknown field "yr"`) {
		t.Errorf("bad filter: code %d, stderr %q", code, errs)
	}

	queries := filepath.Join(tmp, "queries.jsonl")
	qrels := filepath.Join(tmp, "qrels.tsv")
	os.WriteFile(queries, []byte(`{"_id":"q1","text":"whale"}`+"\n"+`{"_id":"q2","text":"shark fish"}`+"\n"), 0o644)
	os.WriteFile(qrels, []byte("query-id\tcorpus-id\tscore\nq1\td3\t1\nq2\td2\t1\n"), 0o644)
	code, out, errs = tandemRun(t, "eval", "--dir", dir, "--queries", queries, "--qrels", qrels, "--mode", "bm25", "--json")
	if code != 0 {
		t.Fatalf("eval: %d %s", code, errs)
	}
	var m map[string]float64
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("eval --json %q: %v", out, err)
	}
	for _, k := range []string{"ndcg@10", "mrr@10", "recall@100", "map"} {
		if _, ok := m[k]; !ok {
			t.Errorf("eval --json lacks %q: %v", k, m)
		}
	}
	if m["recall@100"] != 1 || m["mrr@10"] != 1 {
		t.Errorf("eval = %v: both relevant docs should rank first", m)
	}
	// With several rows, each carries its mode and latencies.
	code, out, errs = tandemRun(t, "eval", "--dir", dir, "--queries", queries, "--qrels", qrels, "--mode", "bm25,bm25", "--json", "--highlight")
	if !strings.Contains(errs, "bm25: page of 10 hits with fields: p50 ") || !strings.Contains(out, `"page_highlight_p50_ms":`) {
		t.Errorf("eval --highlight reports no page latencies: out %q, stderr %q", out, errs)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); code != 0 || len(lines) != 2 {
		t.Fatalf("eval of two rows: %d %q %s", code, out, errs)
	} else {
		for _, l := range lines {
			var row map[string]any
			if err := json.Unmarshal([]byte(l), &row); err != nil {
				t.Fatalf("eval --json row %q: %v", l, err)
			}
			p50, ok50 := row["p50_ms"].(float64)
			p95, ok95 := row["p95_ms"].(float64)
			if row["mode"] != "bm25" || !ok50 || !ok95 || p95 < p50 {
				t.Errorf("eval --json row %v: want mode bm25 and p50_ms <= p95_ms", row)
			}
		}
	}

	// Under a filter, only the documents it keeps are ranked: q1's
	// relevant d3 (2020) is filtered out, so recall is q2's alone.
	code, out, errs = tandemRun(t, "eval", "--dir", dir, "--queries", queries, "--qrels", qrels, "--mode", "bm25", "--json", "--filter", `{"range":{"year":{"lt":2015}}}`)
	if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil || m["recall@100"] != 0.5 {
		t.Errorf("eval --filter: code %d, %v (%v), stderr %q; want recall@100 0.5", code, m, err, errs)
	}
	if code, _, errs := tandemRun(t, "eval", "--dir", dir, "--queries", queries, "--qrels", qrels, "--filter", `{"term":{"yr":1}}`); code != 1 || !strings.Contains(errs, `term.yr: unknown field "yr"`) {
		t.Errorf("eval with a bad filter: code %d, stderr %q", code, errs)
	}

	if code, out, _ := tandemRun(t, "delete", "--dir", dir, "d3", "nope"); code != 0 || !strings.Contains(out, "deleted 1 of 2") {
		t.Errorf("delete: %d %q", code, out)
	}
	if _, out, _ := tandemRun(t, "search", "--dir", dir, "--json", "whale"); strings.Contains(out, `"d3"`) {
		t.Errorf("deleted d3 still found: %s", out)
	}

	bad := filepath.Join(tmp, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"_id":"d4","text":"fine"}`+"\n"+`{"_id":"d5","text":"x","year":"old"}`+"\n"), 0o644)
	if code, _, errs := tandemRun(t, "index", "--dir", dir, "--corpus", bad, "--quiet"); code != 1 || !strings.Contains(errs, `line 2: field "year"`) {
		t.Errorf("bad corpus: code %d stderr %q", code, errs)
	}
	if code, out, _ := tandemRun(t, "index", "--dir", dir, "--corpus", bad, "--skip-bad", "--quiet"); code != 0 || !strings.Contains(out, "1 skipped") {
		t.Errorf("--skip-bad: code %d out %q", code, out)
	}
	if code, out, _ := tandemRun(t, "stats", "--dir", dir, "--json"); code != 0 || !strings.Contains(out, `"docs": 3`) {
		t.Errorf("stats: %d %s", code, out)
	}

	// --field overrides an inferred type: year as a keyword.
	dir2 := filepath.Join(tmp, "coll2")
	if code, _, errs := tandemRun(t, "index", "--dir", dir2, "--corpus", corpus, "--field", "year=keyword", "--quiet"); code != 1 || !strings.Contains(errs, `line 1: field "year"`) {
		t.Errorf("year as keyword with numeric values: code %d stderr %q", code, errs)
	}
	strs := filepath.Join(tmp, "strs.jsonl")
	os.WriteFile(strs, []byte(`{"_id":"s1","text":"whale","year":"2001"}`+"\n"), 0o644)
	dir3 := filepath.Join(tmp, "coll3")
	if code, _, errs := tandemRun(t, "index", "--dir", dir3, "--corpus", strs, "--field", "year=keyword", "--quiet"); code != 0 {
		t.Fatalf("index with --field: %s", errs)
	}
	if code, out, errs := tandemRun(t, "search", "--dir", dir3, "--filter", `{"prefix":{"year":"20"}}`, "--json", "whale"); code != 0 || !strings.Contains(out, `"s1"`) {
		t.Errorf("prefix on overridden keyword field: %d %s %s", code, out, errs)
	}
}

func TestModelNames(t *testing.T) {
	tests := []struct {
		in          string
		dense, late []string
		err         bool
	}{
		{"none", nil, nil, false},
		{"a", []string{"a"}, []string{"a"}, false},
		{"a, late:b,dense:c", []string{"a", "c"}, []string{"a", "b"}, false},
		{"late:b", nil, []string{"b"}, false},
		{"a,,b", nil, nil, true},
		{"late:", nil, nil, true},
		{"sparse:a", nil, nil, true},
	}
	for _, tc := range tests {
		dense, late, err := modelNames(tc.in, io.Discard)
		if (err != nil) != tc.err {
			t.Errorf("modelNames(%q) error = %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if !tc.err && (fmt.Sprint(dense) != fmt.Sprint(tc.dense) || fmt.Sprint(late) != fmt.Sprint(tc.late)) {
			t.Errorf("modelNames(%q) = %v, %v; want %v, %v", tc.in, dense, late, tc.dense, tc.late)
		}
	}
}

func TestParseList(t *testing.T) {
	if got, err := parseList[float64]("--weights", "0.5, 1,2"); err != nil || fmt.Sprint(got) != "[0.5 1 2]" {
		t.Errorf("parseList[float64](0.5, 1,2) = %v, %v", got, err)
	}
	if got, err := parseList[int]("--depths", "100,200"); err != nil || fmt.Sprint(got) != "[100 200]" {
		t.Errorf("parseList[int](100,200) = %v, %v", got, err)
	}
	for _, tc := range []struct {
		int  bool
		in   string
		want string
	}{
		{false, "1,0", `--weights: "0" is not a positive number`},
		{false, "1,x", `--weights: "x" is not a positive number`},
		{true, "100,1.5", `--depths: "1.5" is not a positive integer`},
		{true, "-3", `--depths: "-3" is not a positive integer`},
	} {
		var err error
		if tc.int {
			_, err = parseList[int]("--depths", tc.in)
		} else {
			_, err = parseList[float64]("--weights", tc.in)
		}
		if err == nil || err.Error() != tc.want {
			t.Errorf("parseList(%q) error = %v, want %q", tc.in, err, tc.want)
		}
	}
}
