package ingest

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem/internal/bench"
	"github.com/tandemsearch/tandem/internal/synth"
)

// TestBenchIngest runs the scale benchmark on a small synthetic collection,
// keeps it, and searches it again with SearchOnly: every figure of the
// tables is reported, every search finds hits, and the dense recall is 1:
// at 3,000 vectors the dense index is Flat, exact, so the engine's top 10
// and the brute force over the generator's vectors must agree.
func TestBenchIngest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	r, err := Run(context.Background(), Config{Dir: dir, Docs: 3000, Queries: 20, RecallQueries: 20, Keep: true, LoadRate: 200, Output: bench.Output{Quiet: true}})
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	out := markdown(r)
	// The search load beside the ingest: no failures, and no retraining at
	// 3000 vectors (Flat from the start).
	if l := r.Load; l == nil || l.Errors != 0 || l.Outside.Searches == 0 || len(l.Retrainings) != 0 || l.Outside.P99 < l.Outside.P50 {
		t.Errorf("load beside the ingest: %+v", l)
	}
	if !regexp.MustCompile(`\| outside retrainings \| \| [1-9][0-9]* \| [0-9.]+ ms \| [0-9.]+ ms \| [0-9.]+ ms \| \|\n`).MatchString(out) || !strings.Contains(out, "Search errors beside the ingest: 0;") {
		t.Errorf("no load rows:\n%s", out)
	}
	for _, want := range []string{"| documents | 3000 (20 to 130 words", "| ingest | ", " documents/s (", "| close (writes the snapshots) | ",
		"| disk after the close | ", " bytes/document (badger ", "| open from snapshot | ", "| dense index, from snapshot | Flat over 3000 vectors, ",
		"| open with the dense index rebuilt from Badger | ", "| dense index, rebuilt | Flat over 3000 vectors, ",
		"| close (writes the rebuilt dense index's snapshot) | ", "recall over the first 20 "} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	checkMemory(t, out, []string{PhaseIngest, PhaseClose, PhaseOpen, PhaseRebuild, PhaseCloseRebuilt})
	checkSearches(t, out, 2)

	// The collection was kept: SearchOnly opens it from its snapshot (the
	// rebuilt index's) and reports the same search rows.
	r, err = Run(context.Background(), Config{Dir: dir, SearchOnly: true, Queries: 20, RecallQueries: 5})
	if err != nil {
		t.Fatalf("search only: %v", err)
	}
	out = markdown(r)
	for _, want := range []string{"| documents | 3000 (an existing collection, searched only) |", "| open from snapshot | ", "| dense index, from snapshot | Flat over 3000 vectors, ", "recall over the first 5 "} {
		if !strings.Contains(out, want) {
			t.Errorf("search only: output lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"| ingest |", "| disk ", "rebuilt"} {
		if strings.Contains(out, not) {
			t.Errorf("search only: output has %q:\n%s", not, out)
		}
	}
	checkMemory(t, out, []string{PhaseOpen})
	checkSearches(t, out, 1)

	// Searched as a collection of another text (whose documents have other
	// vectors under the same ids), it is refused rather than reported with
	// a recall of 0.
	scifact := filepath.Join("..", "..", "..", "..", "shared", "data", "scifact")
	if _, err := os.Stat(filepath.Join(scifact, "corpus.jsonl")); err != nil {
		t.Skipf("SciFact is not in ../shared/data (%v): skipping the search with another --text-from", err)
	}
	_, err = Run(context.Background(), Config{Dir: dir, SearchOnly: true, TextFrom: scifact, Queries: 2, RecallQueries: 2})
	if err == nil || !strings.Contains(err.Error(), "document d00000000 is not the generator's") || !strings.Contains(err.Error(), "same --text-from") {
		t.Errorf("search only with another TextFrom: %v", err)
	}
}

func markdown(r *Report) string {
	var b strings.Builder
	r.WriteMarkdown(&b)
	return b.String()
}

// checkMemory checks that the memory table has the phases in order, each
// with nonzero peaks and bytes per document.
func checkMemory(t *testing.T, out string, phases []string) {
	t.Helper()
	size := `([0-9.]+) (?:B|KiB|MiB|GiB)`
	rows := regexp.MustCompile(`(?m)^\| ([^|]+) \| `+size+` \(([0-9,]+)\) \| `+size+` \(([0-9,]+)\) \| `+size+` \| `+size+` \(([0-9,]+)\) \|$`).FindAllStringSubmatch(out, -1)
	if len(rows) != len(phases) {
		t.Fatalf("want %d memory rows (%q), got %d:\n%s", len(phases), phases, len(rows), out)
	}
	for i, m := range rows {
		if m[1] != phases[i] {
			t.Errorf("memory row %d is %q, want %q", i, m[1], phases[i])
		}
		for _, f := range m[2:] {
			if strings.Trim(f, "0.,") == "" {
				t.Errorf("a zero figure: %s", m[0])
			}
		}
	}
}

// checkSearches checks the search table: the four configurations, with
// hits in each of the phases that searched, recall for dense only, and
// recall 1 (the index is Flat).
func checkSearches(t *testing.T, out string, phases int) {
	t.Helper()
	cell := ` ([0-9.]+) / ([0-9.]+) ms \(([0-9.]+)\) \| (–|[0-9.]+) \|`
	for _, cf := range configs {
		m := regexp.MustCompile(`(?m)^\| ` + regexp.QuoteMeta(cf.name) + ` \|` + strings.Repeat(cell, phases) + `$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no row of %d phases for %s:\n%s", phases, cf.name, out)
			continue
		}
		for p := range phases {
			hits, recall := m[4*p+3], m[4*p+4]
			if hits == "0.0" {
				t.Errorf("%s found nothing: %s", cf.name, m[0])
			}
			if want := map[bool]string{true: "1.000", false: "–"}[cf.retriever == "dense"]; recall != want {
				t.Errorf("%s: recall %s, want %s: %s", cf.name, recall, want, m[0])
			}
		}
	}
	if !regexp.MustCompile(`\| dense p50: 1% filter ÷ unfiltered \|` + strings.Repeat(` [0-9.]+ \| \|`, phases) + "\n").MatchString(out) {
		t.Errorf("no ratio row of %d phases:\n%s", phases, out)
	}
}

// TestRunRefuses checks that a bad Config is refused before anything is
// built or opened.
func TestRunRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{Dir: t.TempDir(), Docs: 10, Queries: 1}, "exists"},
		{Config{Dir: missing, Queries: 1}, "Docs is required"},
		{Config{Dir: missing, Docs: 10, Queries: 2, RecallQueries: 3}, "RecallQueries (3) must be 0 to Queries (2)"},
		{Config{Dir: missing, SearchOnly: true, Queries: 1}, "holds no collection"},
		{Config{Dir: missing, SearchOnly: true, Docs: 10, Queries: 1}, "do not apply"},
		{Config{Dir: missing, SearchOnly: true, Keep: true, Queries: 1}, "do not apply"},
	} {
		if _, err := Run(context.Background(), tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.c, err, tc.want)
		}
	}
	if _, err := os.Stat(missing); err == nil {
		t.Errorf("a refused run created %s", missing)
	}
}

// TestExactTop pins the brute force to a ranking computed here: every
// document scored, sorted, cut at 10, with and without the category.
func TestExactTop(t *testing.T) {
	corpus := synth.Default()
	gen, err := synth.New(corpus)
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	_, q := gen.Query(0)
	cat := synth.Category(3)
	all, filtered := exactTop(gen, corpus.Model, n, 10, [][]float32{q}, cat)
	var ranked, ofCat []scored
	for i := range n {
		d := gen.Doc(i)
		s := scored{doc: i, score: dot(d.Vectors[corpus.Model].Dense, q)}
		ranked = append(ranked, s)
		if d.Fields["cat"] == cat {
			ofCat = append(ofCat, s)
		}
	}
	for name, tc := range map[string]struct {
		got  []string
		from []scored
	}{"all": {all[0], ranked}, "filtered": {filtered[0], ofCat}} {
		sorted := append([]scored(nil), tc.from...)
		for i := range sorted {
			for j := i + 1; j < len(sorted); j++ {
				if sorted[j].before(sorted[i]) {
					sorted[i], sorted[j] = sorted[j], sorted[i]
				}
			}
		}
		var want []string
		for _, s := range sorted[:min(10, len(sorted))] {
			want = append(want, synth.ID(s.doc))
		}
		if strings.Join(tc.got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: exactTop %v, want %v", name, tc.got, want)
		}
	}
	if len(filtered[0]) < 2 {
		t.Errorf("category %s: %d documents of %d in the top, want several", cat, len(filtered[0]), n)
	}
}

// TestTopK checks the top k on ties and on offers in any order.
func TestTopK(t *testing.T) {
	top := topK{k: 3}
	for _, s := range []scored{{5, 0.5}, {1, 0.9}, {7, 0.5}, {2, 0.1}, {3, 0.5}, {4, 0.95}} {
		top.offer(s)
	}
	want := []scored{{4, 0.95}, {1, 0.9}, {3, 0.5}}
	for i := range want {
		if i >= len(top.list) || top.list[i] != want[i] {
			t.Fatalf("top 3 %v, want %v", top.list, want)
		}
	}
	if got := bench.Recall([]string{"a", "b", "x"}, []string{"a", "b", "c", "d"}); got != 0.5 {
		t.Errorf("overlap %v, want 0.5", got)
	}
}

// TestStallDump: a search waiting past stallAfter makes the load write
// every goroutine's stack, once per stallDumpGap; none is written while
// the searches in flight are young, or without a directory.
func TestStallDump(t *testing.T) {
	dir := t.TempDir()
	l := &searchLoad{t0: time.Now().Add(-time.Hour), dumpDir: dir, inFlight: map[int]time.Time{}}
	l.inFlight[1] = time.Now()
	l.dumpIfStalled()
	if len(l.dumps) != 0 {
		t.Fatalf("a dump with no search waiting %s: %v", stallAfter, l.dumps)
	}
	l.inFlight[2] = time.Now().Add(-stallAfter - time.Second)
	l.dumpIfStalled()
	l.dumpIfStalled() // within stallDumpGap: no second dump
	if len(l.dumps) != 1 {
		t.Fatalf("dumps %v, want one", l.dumps)
	}
	b, err := os.ReadFile(l.dumps[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "has waited") || !strings.Contains(string(b), "goroutine ") || !strings.Contains(string(b), "TestStallDump") {
		t.Errorf("the dump lacks its header or the stacks:\n%.500s", b)
	}
	none := &searchLoad{t0: time.Now(), inFlight: map[int]time.Time{0: time.Now().Add(-time.Hour)}}
	none.dumpIfStalled()
	if len(none.dumps) != 0 {
		t.Errorf("a dump without a directory: %v", none.dumps)
	}
}
