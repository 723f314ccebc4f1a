package sparse

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// The BM25 reference fixture, testdata/bm25: a small corpus and queries;
// tokens.json, the tokens Bleve's analysers give them (regenerated with
// TANDEM_UPDATE_BM25=1); expected.json, every matching document's score
// computed from those tokens by reference.py, an independent Python
// implementation of the formula in bm25.go.
const bm25Fixture = "testdata/bm25"

type refQuery struct {
	ID     string             `json:"_id"`
	Text   string             `json:"text"`
	Fields map[string]float64 `json:"fields,omitempty"`
}

type refTokens struct {
	// Docs maps a document id to its fields' tokens, CompositeField included.
	Docs map[string]map[string][]string `json:"docs"`
	// Queries maps a query id to its tokens per searched field.
	Queries map[string]map[string][]string `json:"queries"`
	// Boosts maps a query id to its fields' boosts.
	Boosts map[string]map[string]float64 `json:"boosts"`
	K1     float64                       `json:"k1"`
	B      float64                       `json:"b"`
}

func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	return out
}

func terms(x *Index, t *testing.T, analyzer, text string) []string {
	t.Helper()
	a, err := x.analyzer(analyzer)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, tok := range a.Analyze([]byte(text)) {
		out = append(out, string(tok.Term))
	}
	return out
}

// TestBM25MatchesReference pins textbook BM25 to scores computed in
// Python from the same analysed tokens, to 1e-6, for the composite field
// and for boosted fields, on an index that reached its documents through
// replacements and deletes (so its statistics were kept up to date, not
// just summed).
func TestBM25MatchesReference(t *testing.T) {
	schema := tandem.DefaultSchema()
	schema.Fill()
	type doc struct {
		ID, Title, Text string
	}
	var docs []doc
	for _, m := range readJSONL[map[string]string](t, filepath.Join(bm25Fixture, "docs.jsonl")) {
		docs = append(docs, doc{m["_id"], m["title"], m["text"]})
	}
	queries := readJSONL[refQuery](t, filepath.Join(bm25Fixture, "queries.jsonl"))

	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	seq := uint64(0)
	put := func(num uint64, id, title, text string) storage.Change {
		seq++
		d := &tandem.Doc{ID: id, Fields: map[string]any{}}
		if title != "" {
			d.Fields["title"] = title
		}
		if text != "" {
			d.Fields["text"] = text
		}
		return storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: id, Doc: d}
	}
	del := func(num uint64, id string) storage.Change {
		seq++
		return storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: num, ID: id}
	}
	// First batch: every document, two of them in an older version, and
	// three documents that will go.
	var first []storage.Change
	for i, d := range docs {
		text := d.Text
		if i == 4 || i == 9 {
			text = "an older and much longer version of this document, zebra zebra tiger insulin sleep " + text
		}
		first = append(first, put(uint64(i), d.ID, d.Title, text))
	}
	first = append(first, put(100, "x1", "zebra", "zebra tiger cat glucose"), put(101, "x2", "", "sleep sleep sleep"), put(102, "x3", "vaccines", "measles"))
	// Second batch: the extra documents deleted, the two replaced (one
	// of them twice), one deleted and put back.
	second := []storage.Change{
		del(100, "x1"), del(101, "x2"),
		put(4, docs[4].ID, docs[4].Title, "temporary"), put(4, docs[4].ID, docs[4].Title, docs[4].Text),
		put(9, docs[9].ID, docs[9].Title, docs[9].Text),
		del(6, docs[6].ID), put(6, docs[6].ID, docs[6].Title, docs[6].Text),
	}
	third := []storage.Change{del(102, "x3")}
	for _, b := range [][]storage.Change{first, second, third} {
		if err := x.Apply(ctx, schema, b); err != nil {
			t.Fatal(err)
		}
	}

	// The tokens the fixture was computed from must be Bleve's.
	_, k1, b := schema.BM25.Params()
	got := refTokens{Docs: map[string]map[string][]string{}, Queries: map[string]map[string][]string{}, Boosts: map[string]map[string]float64{}, K1: k1, B: b}
	for _, d := range docs {
		f := map[string][]string{}
		var texts []string
		for _, v := range [][2]string{{"title", d.Title}, {"text", d.Text}} {
			if v[1] != "" {
				f[v[0]] = terms(x, t, tandem.DefaultAnalyzer, v[1])
				texts = append(texts, v[1])
			}
		}
		f[CompositeField] = terms(x, t, tandem.DefaultAnalyzer, strings.Join(texts, " "))
		got.Docs[d.ID] = f
	}
	for _, q := range queries {
		fields := q.Fields
		if len(fields) == 0 {
			fields = map[string]float64{CompositeField: 1}
		}
		got.Boosts[q.ID] = fields
		got.Queries[q.ID] = map[string][]string{}
		for name := range fields {
			got.Queries[q.ID][name] = terms(x, t, tandem.DefaultAnalyzer, q.Text)
		}
	}
	tokPath := filepath.Join(bm25Fixture, "tokens.json")
	if os.Getenv("TANDEM_UPDATE_BM25") != "" {
		out, err := json.MarshalIndent(got, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tokPath, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s; now run python3 %s/reference.py", tokPath, bm25Fixture)
	}
	var want refTokens
	raw, err := os.ReadFile(tokPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &want); err != nil {
		t.Fatal(err)
	}
	gotJSON, _ := json.Marshal(got)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Fatalf("the analysers' tokens differ from %s: regenerate it (TANDEM_UPDATE_BM25=1) and expected.json (reference.py)", tokPath)
	}

	var expected map[string]map[string]float64
	raw, err = os.ReadFile(filepath.Join(bm25Fixture, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &expected); err != nil {
		t.Fatal(err)
	}
	idOf := map[uint64]string{}
	for i, d := range docs {
		idOf[uint64(i)] = d.ID
	}
	for _, q := range queries {
		hits, err := x.Search(ctx, schema, Query{Text: q.Text, Fields: q.Fields, K: 100})
		if err != nil {
			t.Fatalf("%s: %v", q.ID, err)
		}
		ref := expected[q.ID]
		if len(hits) != len(ref) {
			t.Errorf("%s %q: %d hits, reference %d", q.ID, q.Text, len(hits), len(ref))
		}
		for i, h := range hits {
			id, ok := idOf[h.DocNum]
			if !ok {
				t.Fatalf("%s: hit of deleted document %d", q.ID, h.DocNum)
			}
			w, ok := ref[id]
			if !ok || math.Abs(h.Score-w) > 1e-6 {
				t.Errorf("%s %q: %s scores %.9f, reference %.9f (present %v)", q.ID, q.Text, id, h.Score, w, ok)
			}
			if i > 0 && h.Score > hits[i-1].Score {
				t.Errorf("%s: hits out of order at %d", q.ID, i)
			}
		}
	}
	if len(expected["q6"]) != 0 || len(expected["q1"]) == 0 {
		t.Errorf("fixture: a stopword-only query must match nothing and 'zebra' something")
	}
}

// An index of an older layout (without BM25 statistics) is rebuilt empty
// on Open, with applied sequence 0, so that the engine replays the change
// log; an index of the current layout keeps its documents.
func TestOlderLayoutRebuilt(t *testing.T) {
	schema := tandem.DefaultSchema()
	schema.Fill()
	dir := filepath.Join(t.TempDir(), "bleve")
	open := func() *Index {
		t.Helper()
		x, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	x := open()
	d := tandem.Doc{ID: "a", Fields: map[string]any{"text": "zebra"}}
	if err := x.Apply(context.Background(), schema, []storage.Change{{Seq: 1, Op: storage.OpPut, DocNum: 0, ID: "a", Doc: &d}}); err != nil {
		t.Fatal(err)
	}
	x.Close()
	x = open()
	if n, _ := x.DocCount(); n != 1 || x.AppliedSeq() != 1 {
		t.Fatalf("reopened: %d documents, applied %d; want 1 and 1", n, x.AppliedSeq())
	}
	// Make it look like an index written before the layout key existed.
	if err := x.idx.DeleteInternal(layoutKey); err != nil {
		t.Fatal(err)
	}
	x.Close()
	x = open()
	defer x.Close()
	if n, _ := x.DocCount(); n != 0 || x.AppliedSeq() != 0 {
		t.Fatalf("older layout reopened: %d documents, applied %d; want a rebuilt empty index", n, x.AppliedSeq())
	}
	if v, _ := x.idx.GetInternal(layoutKey); string(v) != layoutVersion {
		t.Fatalf("rebuilt index records layout %q, want %q", v, layoutVersion)
	}
}

// TestBM25TopKCut checks that the searcher's cut at K (it yields only the
// top K) and its own filter change no ranking: every top K, filtered or
// not, is the prefix of the full ranking
// (filtered), up to the order of equal scores (which TestTiesByDocNum
// checks). The collection has many exact ties and reaches its documents
// through several batches and deletes, so the snapshot usually has
// several segments.
func TestBM25TopKCut(t *testing.T) {
	schema := &tandem.Schema{Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "year", Type: tandem.Number},
	}}
	schema.Fill()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	ctx := context.Background()
	words := strings.Fields("zebra lion tiger cat insulin sleep glucose vaccine measles the of")
	rng := rand.New(rand.NewPCG(1, 2))
	year := map[uint64]float64{}
	seq := uint64(0)
	for batch := 0; batch < 6; batch++ {
		var changes []storage.Change
		for i := 0; i < 20; i++ {
			num := uint64(batch*20 + i)
			n := 1 + rng.IntN(6)
			if i%4 == 0 {
				n = 2 // short documents repeat, so scores tie
			}
			var text []string
			for j := 0; j < n; j++ {
				text = append(text, words[rng.IntN(len(words))])
			}
			if i%4 == 0 {
				text = []string{"zebra", "lion"}
			}
			year[num] = float64(2000 + rng.IntN(8))
			seq++
			id := fmt.Sprint("d", num)
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: id,
				Doc: &tandem.Doc{ID: id, Fields: map[string]any{"text": strings.Join(text, " "), "year": year[num]}}})
		}
		if batch > 0 {
			gone := uint64(batch*20 - 3)
			seq++
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: gone, ID: fmt.Sprint("d", gone)})
			delete(year, gone)
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
	}
	if ai, err := x.idx.Advanced(); err == nil {
		if r, err := ai.Reader(); err == nil {
			t.Logf("%d segments", len(r.(postingsSnapshot).Segments()))
			r.Close()
		}
	}
	e, err := filter.Parse([]byte(`{"range":{"year":{"gte":2004}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"zebra lion", "lion", "cat tiger sleep", "insulin glucose vaccine measles zebra"} {
		full, err := x.Search(ctx, schema, Query{Text: text, K: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(full) < 20 {
			t.Fatalf("%q: %d hits; the test needs more", text, len(full))
		}
		var filtered []Hit
		for _, h := range full {
			if _, live := year[h.DocNum]; !live {
				t.Fatalf("%q: deleted document %d", text, h.DocNum)
			}
			if year[h.DocNum] >= 2004 {
				filtered = append(filtered, h)
			}
		}
		for _, k := range []int{1, 2, 3, 5, 8, 13, 40, len(full) + 5} {
			got, err := x.Search(ctx, schema, Query{Text: text, K: k})
			if err != nil {
				t.Fatal(err)
			}
			if err := samePrefix(got, full[:min(k, len(full))], full); err != nil {
				t.Errorf("%q top %d: %v\n got %v\nwant %v", text, k, err, got, full)
			}
			got, err = x.Search(ctx, schema, Query{Text: text, K: k, Filter: e})
			if err != nil {
				t.Fatal(err)
			}
			if err := samePrefix(got, filtered[:min(k, len(filtered))], filtered); err != nil {
				t.Errorf("%q top %d filtered: %v\n got %v\nwant %v", text, k, err, got, filtered)
			}
		}
	}
}

// samePrefix reports whether got is want up to the order of equal scores:
// the same scores position by position, from distinct documents of all,
// each with its score in all. Then the documents scoring above the last
// score are exactly want's, and the rest are tied with want's last.
func samePrefix(got, want, all []Hit) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d hits, want %d", len(got), len(want))
	}
	score := map[uint64]float64{}
	for _, h := range all {
		score[h.DocNum] = h.Score
	}
	seen := map[uint64]bool{}
	for i, h := range got {
		if h.Score != want[i].Score {
			return fmt.Errorf("hit %d scores %v, want %v", i, h.Score, want[i].Score)
		}
		if s, ok := score[h.DocNum]; !ok || s != h.Score || seen[h.DocNum] {
			return fmt.Errorf("hit %d: document %d with score %v (full ranking: %v, %v; repeated %v)", i, h.DocNum, h.Score, s, ok, seen[h.DocNum])
		}
		seen[h.DocNum] = true
	}
	return nil
}

func TestCheckAnalyzers(t *testing.T) {
	ok := &tandem.Schema{Fields: []tandem.Field{{Name: "title", Type: tandem.Text}, {Name: "body", Type: tandem.Text, Analyzer: "standard"}, {Name: "tag", Type: tandem.Keyword}}}
	if err := CheckAnalyzers(ok); err != nil {
		t.Errorf("known analyzers: %v", err)
	}
	bad := &tandem.Schema{Fields: []tandem.Field{{Name: "title", Type: tandem.Text}, {Name: "body", Type: tandem.Text, Analyzer: "klingon"}}}
	if err := CheckAnalyzers(bad); err == nil || err.Error() != `schema field "body": unknown analyzer "klingon" (known: en, keyword, standard)` {
		t.Errorf("an unknown analyzer: %v", err)
	}
}
