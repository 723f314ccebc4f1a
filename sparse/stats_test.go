package sparse

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// shardCount is the number of shards the sharded tests split a
// collection into.
const shardCount = 3

// shardOf assigns a document to a shard by a hash of its external id.
func shardOf(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % shardCount)
}

// shardTestSchema has two text fields and a keyword field to filter on.
func shardTestSchema() *tandem.Schema {
	s := &tandem.Schema{Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "group", Type: tandem.Keyword},
	}}
	s.Fill()
	return s
}

// changeLog builds the batches of changes the sharded tests apply, with
// increasing sequences, and keeps the live documents.
type changeLog struct {
	seq     uint64
	batches [][]storage.Change
	live    map[uint64]*tandem.Doc
}

func newChangeLog() *changeLog { return &changeLog{live: map[uint64]*tandem.Doc{}} }

// batch starts a new batch.
func (l *changeLog) batch() { l.batches = append(l.batches, nil) }

func (l *changeLog) add(c storage.Change) {
	l.seq++
	c.Seq = l.seq
	l.batches[len(l.batches)-1] = append(l.batches[len(l.batches)-1], c)
}

// put puts document num; an empty title or text leaves the field out.
func (l *changeLog) put(num uint64, id, title, text, group string) {
	d := &tandem.Doc{ID: id, Fields: map[string]any{"group": group}}
	if title != "" {
		d.Fields["title"] = title
	}
	if text != "" {
		d.Fields["text"] = text
	}
	l.add(storage.Change{Op: storage.OpPut, DocNum: num, ID: id, Doc: d})
	l.live[num] = d
}

func (l *changeLog) del(num uint64) {
	d := l.live[num]
	l.add(storage.Change{Op: storage.OpDelete, DocNum: num, ID: d.ID})
	delete(l.live, num)
}

// openUnmerged opens a new index that keeps deleted and replaced
// documents in its segments: each batch is persisted before Apply returns
// (so the persister never merges segments in memory), and no segment is
// small enough for the merger. Open's index merges in the background,
// which purges deleted documents at a time of its choosing.
func openUnmerged(t *testing.T) *Index {
	t.Helper()
	m := newMapping()
	config := map[string]any{"scorchMergePlanOptions": map[string]any{"MaxSegmentSize": 2}}
	idx, err := bleve.NewUsing(filepath.Join(t.TempDir(), "bleve"), m, bleve.Config.DefaultIndexType, bleve.Config.DefaultKVStore, config)
	if err != nil {
		t.Fatal(err)
	}
	if err := idx.SetInternal(layoutKey, []byte(layoutVersion)); err != nil {
		t.Fatal(err)
	}
	return &Index{idx: idx, mapping: m}
}

// openApplied opens a new index (unmerged: with openUnmerged, else with
// Open) and applies, batch by batch, the changes of log that keep says to.
func openApplied(t *testing.T, schema *tandem.Schema, log *changeLog, unmerged bool, keep func(storage.Change) bool) *Index {
	t.Helper()
	var x *Index
	if unmerged {
		x = openUnmerged(t)
	} else {
		var err error
		if x, err = Open(filepath.Join(t.TempDir(), "bleve")); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { x.Close() })
	for _, b := range log.batches {
		var todo []storage.Change
		for _, c := range b {
			if keep(c) {
				todo = append(todo, c)
			}
		}
		if err := x.Apply(context.Background(), schema, todo); err != nil {
			t.Fatal(err)
		}
	}
	return x
}

// shardedSetup is one index holding a collection and shardCount indexes
// holding disjoint parts of it, all reached through the same changes.
type shardedSetup struct {
	schema *tandem.Schema
	one    *Index
	shards []*Index
	live   map[uint64]*tandem.Doc
}

func newShardedSetup(t *testing.T, schema *tandem.Schema, log *changeLog, unmerged bool) *shardedSetup {
	t.Helper()
	s := &shardedSetup{schema: schema, live: log.live}
	s.one = openApplied(t, schema, log, unmerged, func(storage.Change) bool { return true })
	held := 0
	for i := range shardCount {
		x := openApplied(t, schema, log, unmerged, func(c storage.Change) bool { return shardOf(c.ID) == i })
		n, err := x.DocCount()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("shard %d holds no document", i)
		}
		held += int(n)
		s.shards = append(s.shards, x)
	}
	if n, err := s.one.DocCount(); err != nil || int(n) != len(log.live) || held != len(log.live) {
		t.Fatalf("one index holds %d documents (%v), the shards %d; %d are live", n, err, held, len(log.live))
	}
	return s
}

// shardedResult sums up a comparison of sharded and unsharded rankings.
type shardedResult struct {
	queries   int     // queries compared (text × variant)
	docs      int     // document scores compared
	maxDiff   float64 // largest score difference seen
	localDiff int     // queries whose shards, scoring alone, differ from one index
}

// shardedQueryVariants are the ways the sharded tests search each text.
func shardedQueryVariants(t *testing.T, schema *tandem.Schema, filterJSON string) map[string]Query {
	t.Helper()
	e, err := filter.Parse([]byte(filterJSON))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	boosts := map[string]float64{"title": 2, "text": 1}
	return map[string]Query{
		"composite":         {},
		"boosted":           {Fields: boosts},
		"composite+filter":  {Filter: e},
		"boosted+filter":    {Fields: boosts, Filter: e},
		"title-only+filter": {Fields: map[string]float64{"title": 1}, Filter: e},
	}
}

// all is a K above any collection's size here: every match is returned.
const all = 1 << 20

// compareSharded searches every text in every variant on the one index
// and on the shards, the shards scoring with the sum of their QueryStats,
// and fails unless every document scores the same and the merged top 100
// is the one index's top 100 up to the order of equal scores.
func (s *shardedSetup) compareSharded(t *testing.T, texts []string, variants map[string]Query) shardedResult {
	t.Helper()
	ctx := context.Background()
	var res shardedResult
	for _, name := range slices.Sorted(maps.Keys(variants)) {
		for _, text := range texts {
			q := variants[name]
			q.Text = text
			label := fmt.Sprintf("%s %q", name, text)

			// Phase 1: the shards' statistics, summed, are the one
			// index's, whatever the filter and K.
			var sum Stats
			for _, x := range s.shards {
				st, err := x.QueryStats(ctx, s.schema, q)
				if err != nil {
					t.Fatalf("%s: QueryStats: %v", label, err)
				}
				sum.Add(st)
			}
			own, err := s.one.QueryStats(ctx, s.schema, q)
			if err != nil {
				t.Fatalf("%s: QueryStats: %v", label, err)
			}
			if !reflect.DeepEqual(sum, own) {
				t.Fatalf("%s: the shards' statistics sum to %+v, the one index has %+v", label, sum, own)
			}
			unfiltered := q
			unfiltered.Filter, unfiltered.K = nil, 7
			if st, err := s.one.QueryStats(ctx, s.schema, unfiltered); err != nil || !reflect.DeepEqual(st, own) {
				t.Fatalf("%s: QueryStats depends on the filter or K: %+v, %v; want %+v", label, st, err, own)
			}

			// Every match, everywhere.
			q.K = all
			want, err := s.one.Search(ctx, s.schema, q)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			wantScore := scoresOf(t, label, want, s.live)
			withOwn := q
			withOwn.Stats = &own
			ownHits, err := s.one.Search(ctx, s.schema, withOwn)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if got := scoresOf(t, label, ownHits, s.live); !maps.Equal(got, wantScore) {
				t.Errorf("%s: the one index scores differently given its own statistics", label)
			}
			got, err := s.searchShards(q, &sum)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			gotScore := scoresOf(t, label, got, s.live)
			if len(gotScore) != len(wantScore) {
				t.Errorf("%s: the shards match %d documents, the one index %d", label, len(gotScore), len(wantScore))
			}
			for doc, w := range wantScore {
				g, ok := gotScore[doc]
				if !ok {
					t.Errorf("%s: document %d (score %v) missing from the shards' hits", label, doc, w)
					continue
				}
				d := math.Abs(g - w)
				res.maxDiff = max(res.maxDiff, d)
				switch {
				case d > 1e-9:
					t.Errorf("%s: document %d scores %v on its shard, %v in one index", label, doc, g, w)
				case d > 0:
					t.Errorf("%s: document %d scores %v on its shard, %v in one index: the same statistics should give the same bits", label, doc, g, w)
				}
				res.docs++
			}
			local, err := s.searchShards(q, nil)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			if !maps.Equal(scoresOf(t, label, local, s.live), wantScore) {
				res.localDiff++
			}

			// The top 100, as a coordinator merges the shards' top 100s.
			q.K = 100
			top, err := s.one.Search(ctx, s.schema, q)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			merged, err := s.searchShards(q, &sum)
			if err != nil {
				t.Fatalf("%s: %v", label, err)
			}
			merged = merged[:min(len(merged), q.K)]
			if err := samePrefix(merged, top, want); err != nil {
				t.Errorf("%s: merged top %d differs from the one index's: %v\n got %v\nwant %v", label, q.K, err, merged, top)
			}
			res.queries++
		}
	}
	return res
}

// searchShards searches every shard with stats (nil: the shard's own)
// and merges their hits, best first.
func (s *shardedSetup) searchShards(q Query, stats *Stats) ([]Hit, error) {
	q.Stats = stats
	var out []Hit
	for _, x := range s.shards {
		hits, err := x.Search(context.Background(), s.schema, q)
		if err != nil {
			return nil, err
		}
		out = append(out, hits...)
	}
	slices.SortStableFunc(out, func(a, b Hit) int { return cmp.Compare(b.Score, a.Score) })
	return out, nil
}

// scoresOf maps hits to their scores, failing on a repeated or deleted
// document.
func scoresOf(t *testing.T, label string, hits []Hit, live map[uint64]*tandem.Doc) map[uint64]float64 {
	t.Helper()
	out := make(map[uint64]float64, len(hits))
	for _, h := range hits {
		if _, ok := out[h.DocNum]; ok {
			t.Fatalf("%s: document %d returned twice", label, h.DocNum)
		}
		if live[h.DocNum] == nil {
			t.Fatalf("%s: deleted document %d returned", label, h.DocNum)
		}
		out[h.DocNum] = h.Score
	}
	return out
}

// deletedInSegments counts the deleted documents an index's snapshot
// still holds in its segments (Bleve's merges purge them over time).
func deletedInSegments(t *testing.T, x *Index) uint64 {
	t.Helper()
	r, err := x.reader()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := uint64(0)
	for _, ss := range r.(postingsSnapshot).Segments() {
		if d := ss.Deleted(); d != nil {
			n += d.GetCardinality()
		}
	}
	return n
}

// synthVocab is the synthetic corpus's vocabulary: few words, so that
// terms repeat and scores tie. "rareword" occurs in a few documents of
// shard 0 only; "ghostword" only in documents that end up deleted.
var synthVocab = strings.Fields("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river stone cloud forest ember harbor lantern meadow quartz")

// synthLog is a few hundred generated documents reached through several
// batches of puts, replacements (some twice in one batch) and deletes
// (some put back), so that the indexes' segments hold replaced and deleted
// documents.
func synthLog() *changeLog {
	rng := rand.New(rand.NewPCG(7, 8))
	words := func(lo, hi int) string {
		n := lo + rng.IntN(hi-lo+1)
		w := make([]string, n)
		for i := range w {
			// Skewed towards the first words, so that dfs vary.
			w[i] = synthVocab[int(float64(len(synthVocab))*rng.Float64()*rng.Float64())]
		}
		return strings.Join(w, " ")
	}
	groups := []string{"red", "green", "blue"}
	l := newChangeLog()
	id := func(num uint64) string { return fmt.Sprint("doc-", num) }
	gone := func(num uint64) bool { return num%11 == 3 && num%22 != 3 } // deleted for good
	for b := range 4 {
		l.batch()
		for i := range 90 {
			num := uint64(b*90 + i)
			title := ""
			if num%5 != 0 { // every fifth document has no title
				title = words(1, 5)
			}
			text := words(3, 40)
			if gone(num) {
				text += " ghostword"
			}
			if num%10 == 0 && shardOf(id(num)) == 0 && !gone(num) {
				text += " rareword"
			}
			if num%9 == 0 {
				text = "" // some documents have a title only
			}
			l.put(num, id(num), title, text, groups[rng.IntN(len(groups))])
		}
	}
	l.batch()
	for num := uint64(0); num < 360; num++ {
		switch {
		case num%11 == 3:
			l.del(num)
		case num%7 == 2:
			l.put(num, id(num), words(1, 4), words(3, 60), groups[rng.IntN(len(groups))])
		}
	}
	for num := uint64(360); num < 380; num++ {
		l.put(num, id(num), words(1, 5), words(3, 40), groups[rng.IntN(len(groups))])
	}
	l.batch()
	for num := uint64(0); num < 380; num++ {
		switch {
		case num%22 == 3: // put back
			l.put(num, id(num), words(1, 5), words(3, 40), groups[rng.IntN(len(groups))])
		case num%14 == 2: // replaced again, twice
			l.put(num, id(num), words(1, 5), words(3, 40), "red")
			l.put(num, id(num), words(2, 6), words(5, 30), groups[rng.IntN(len(groups))])
		case num >= 370 && num%3 == 0:
			l.del(num)
		}
	}
	return l
}

// synthTexts are the synthetic corpus's queries: random ones, and ones
// with terms held by one shard, by deleted documents only, or by none.
func synthTexts() []string {
	rng := rand.New(rand.NewPCG(9, 10))
	texts := []string{"rareword", "rareword alpha", "ghostword", "ghostword beta gamma", "nosuchword", "alpha alpha beta", "quartz meadow lantern"}
	for range 40 {
		n := 1 + rng.IntN(4)
		w := make([]string, n)
		for i := range w {
			w[i] = synthVocab[rng.IntN(len(synthVocab))]
		}
		texts = append(texts, strings.Join(w, " "))
	}
	return texts
}

// TestShardedBM25Synthetic splits a generated collection, reached through
// replacements and deletes, into shards and checks that the shards,
// scoring with their summed QueryStats, rank exactly as one index holding
// every document: the same score for every matching document, and the
// same top 100 up to the order of equal scores. It also checks QueryStats
// against statistics counted here from the live documents' tokens.
func TestShardedBM25Synthetic(t *testing.T) {
	for _, unmerged := range []bool{true, false} {
		name := "merged"
		if unmerged {
			name = "unmerged"
		}
		t.Run(name, func(t *testing.T) { testShardedSynthetic(t, unmerged) })
	}
}

// testShardedSynthetic is TestShardedBM25Synthetic on indexes from Open
// or, unmerged, on indexes whose segments are sure to hold deleted and
// replaced documents.
func testShardedSynthetic(t *testing.T, unmerged bool) {
	schema := shardTestSchema()
	log := synthLog()
	s := newShardedSetup(t, schema, log, unmerged)
	t.Logf("%d live documents; deleted documents still in segments: one index %d, shards %d %d %d",
		len(log.live), deletedInSegments(t, s.one), deletedInSegments(t, s.shards[0]), deletedInSegments(t, s.shards[1]), deletedInSegments(t, s.shards[2]))
	if unmerged {
		for i, x := range append([]*Index{s.one}, s.shards...) {
			if deletedInSegments(t, x) == 0 {
				t.Fatalf("index %d (0 is the one index) has no deleted document in its segments", i)
			}
		}
	}

	// QueryStats counts the live documents' tokens, in each field.
	ctx := context.Background()
	text := "alpha quartz rareword ghostword"
	for _, fields := range []map[string]float64{nil, {"title": 1, "text": 1}} {
		st, err := s.one.QueryStats(ctx, schema, Query{Text: text, Fields: fields})
		if err != nil {
			t.Fatal(err)
		}
		want := Stats{Fields: map[string]FieldStats{}, DF: map[string]map[string]uint64{}}
		searched := []string{CompositeField}
		if fields != nil {
			searched = []string{"title", "text"}
		}
		qterms := terms(s.one, t, tandem.DefaultAnalyzer, text)
		for _, f := range searched {
			want.Fields[f] = FieldStats{}
			want.DF[f] = map[string]uint64{}
			for _, q := range qterms {
				want.DF[f][q] = 0
			}
		}
		for _, d := range log.live {
			var parts []string
			for _, name := range []string{"title", "text"} {
				if v, ok := d.Fields[name].(string); ok && v != "" {
					parts = append(parts, v)
				}
			}
			vals := map[string]string{CompositeField: strings.Join(parts, " ")}
			vals["title"], _ = d.Fields["title"].(string)
			vals["text"], _ = d.Fields["text"].(string)
			for _, f := range searched {
				toks := terms(s.one, t, tandem.DefaultAnalyzer, vals[f])
				if len(toks) == 0 {
					continue
				}
				fs := want.Fields[f]
				fs.Docs++
				fs.Tokens += uint64(len(toks))
				want.Fields[f] = fs
				for _, q := range qterms {
					if slices.Contains(toks, q) {
						want.DF[f][q]++
					}
				}
			}
		}
		if !reflect.DeepEqual(st, want) {
			t.Errorf("fields %v: QueryStats = %+v, counted from the live documents %+v", fields, st, want)
		}
		for _, f := range searched {
			if want.DF[f]["ghostword"] != 0 || want.DF[f]["alpha"] == 0 {
				t.Errorf("corpus: ghostword must be held by deleted documents only and alpha by some: %v", want.DF[f])
			}
		}
		if fields == nil && want.DF[CompositeField]["rareword"] == 0 {
			t.Errorf("corpus: rareword must occur")
		}
	}
	for i, x := range s.shards[1:] {
		st, err := x.QueryStats(ctx, schema, Query{Text: "rareword"})
		if err != nil {
			t.Fatal(err)
		}
		if df := st.DF[CompositeField]["rareword"]; df != 0 {
			t.Errorf("shard %d holds rareword in %d documents, want none", i+1, df)
		}
	}

	variants := shardedQueryVariants(t, schema, `{"terms":{"group":["red","blue"]}}`)
	texts := synthTexts()
	res := s.compareSharded(t, texts, variants)
	t.Logf("%d queries compared (%d texts × %d variants), %d document scores, max difference %g; %d queries rank differently on shards scoring alone",
		res.queries, len(texts), len(variants), res.docs, res.maxDiff, res.localDiff)
	if res.queries != len(texts)*len(variants) || res.docs < 1000 {
		t.Errorf("compared %d queries and %d scores: the test needs more", res.queries, res.docs)
	}
	if res.localDiff == 0 {
		t.Error("shards scoring with their own statistics rank as one index: the collection does not exercise global statistics")
	}
}

// sciFactData is the shared BEIR SciFact collection, beside the
// repository.
var sciFactData = filepath.Join("..", "..", "shared", "data", "scifact")

// readBEIR reads the first n lines of a BEIR JSONL file.
func readBEIR[T any](t *testing.T, path string, n int) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<16), 1<<24)
	var out []T
	for len(out) < n && sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return out
}

// TestShardedBM25MatchesOneIndex splits SciFact's first 1500 documents
// into shards, with some documents then deleted, replaced, or deleted and
// put back, and checks on its first 50 queries that the shards, scoring
// with their summed QueryStats, rank exactly as one index holding every
// document (see compareSharded).
func TestShardedBM25MatchesOneIndex(t *testing.T) {
	if _, err := os.Stat(filepath.Join(sciFactData, "corpus.jsonl")); err != nil {
		t.Skipf("skipping: the shared SciFact data is absent (%v); it lives in ../shared/data beside the repository and is not part of it. TestShardedBM25Synthetic covers the same ground on a generated collection", err)
	}
	type beirDoc struct {
		ID    string `json:"_id"`
		Title string `json:"title"`
		Text  string `json:"text"`
	}
	docs := readBEIR[beirDoc](t, filepath.Join(sciFactData, "corpus.jsonl"), 1500)
	queries := readBEIR[beirDoc](t, filepath.Join(sciFactData, "queries.jsonl"), 50)
	if len(docs) < 1500 || len(queries) < 50 {
		t.Fatalf("SciFact: %d documents and %d queries, want 1500 and 50", len(docs), len(queries))
	}
	groups := []string{"red", "green", "blue"}
	group := func(d beirDoc) string { return groups[len(d.Title)%len(groups)] }
	l := newChangeLog()
	for b := range 5 {
		l.batch()
		for i := b * 300; i < (b+1)*300; i++ {
			l.put(uint64(i), docs[i].ID, docs[i].Title, docs[i].Text, group(docs[i]))
		}
	}
	l.batch()
	var deleted, replaced []uint64
	for i := range docs {
		num := uint64(i)
		switch {
		case i%53 == 7:
			l.del(num)
			deleted = append(deleted, num)
		case i%41 == 5: // replaced by its first half, without its title
			d := docs[i]
			l.put(num, d.ID, "", d.Text[:len(d.Text)/2], group(d))
			replaced = append(replaced, num)
		}
	}
	l.batch()
	for i := range docs {
		if i%106 == 7 { // put back
			l.put(uint64(i), docs[i].ID, docs[i].Title, docs[i].Text, group(docs[i]))
		}
	}
	schema := shardTestSchema()
	s := newShardedSetup(t, schema, l, true)
	for i, x := range append([]*Index{s.one}, s.shards...) {
		if deletedInSegments(t, x) == 0 {
			t.Fatalf("index %d (0 is the one index) has no deleted document in its segments", i)
		}
	}
	t.Logf("%d live documents (%d deleted, %d replaced); deleted documents still in segments: one index %d",
		len(l.live), len(deleted), len(replaced), deletedInSegments(t, s.one))

	// The queries, and a deleted and a replaced document's titles, whose
	// terms the index holds only in live documents now.
	var texts []string
	for _, q := range queries {
		texts = append(texts, q.Text)
	}
	gone := slices.IndexFunc(deleted, func(num uint64) bool { return l.live[num] == nil })
	if gone < 0 || l.live[replaced[0]] == nil || l.live[replaced[0]].Fields["title"] != nil {
		t.Fatal("the change log should delete a document for good and take a replaced document's title")
	}
	texts = append(texts, docs[deleted[gone]].Title, docs[replaced[0]].Title)
	variants := shardedQueryVariants(t, schema, `{"terms":{"group":["red","blue"]}}`)
	res := s.compareSharded(t, texts, variants)
	t.Logf("%d queries compared (%d texts × %d variants), %d document scores, max difference %g; %d queries rank differently on shards scoring alone",
		res.queries, len(texts), len(variants), res.docs, res.maxDiff, res.localDiff)
	if res.queries != len(texts)*len(variants) || res.docs < 10000 {
		t.Errorf("compared %d queries and %d scores: the test needs more", res.queries, res.docs)
	}
	if res.localDiff == 0 {
		t.Error("shards scoring with their own statistics rank as one index: the collection does not exercise global statistics")
	}
}

// TestOwnStatsScoreIdentically checks that an index given its own
// QueryStats scores every document bit for bit as it does without, and
// that Stats lacking a term or a field count it as absent.
func TestOwnStatsScoreIdentically(t *testing.T) {
	schema := shardTestSchema()
	x := openApplied(t, schema, synthLog(), true, func(storage.Change) bool { return true })
	ctx := context.Background()
	e, err := filter.Parse([]byte(`{"term":{"group":"green"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, text := range synthTexts() {
		for _, base := range []Query{{}, {Fields: map[string]float64{"title": 3, "text": 0.5}}, {Filter: e}} {
			q := base
			q.Text, q.K = text, all
			st, err := x.QueryStats(ctx, schema, q)
			if err != nil {
				t.Fatal(err)
			}
			want, err := x.Search(ctx, schema, q)
			if err != nil {
				t.Fatal(err)
			}
			q.Stats = &st
			got, err := x.Search(ctx, schema, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%q %v: %d hits with its own statistics, %d without", text, base.Fields, len(got), len(want))
			}
			score := map[uint64]float64{}
			for _, h := range want {
				score[h.DocNum] = h.Score
			}
			for _, h := range got {
				if w, ok := score[h.DocNum]; !ok || h.Score != w {
					t.Errorf("%q %v: document %d scores %v with its own statistics, %v (%v) without", text, base.Fields, h.DocNum, h.Score, w, ok)
				}
			}
			n += len(got)
		}
	}
	if n < 1000 {
		t.Errorf("only %d scores compared", n)
	}

	// A term or field the statistics lack is absent from the collection.
	q := Query{Text: "alpha beta", K: all}
	st, err := x.QueryStats(ctx, schema, q)
	if err != nil {
		t.Fatal(err)
	}
	both, err := x.Search(ctx, schema, q)
	if err != nil {
		t.Fatal(err)
	}
	delete(st.DF[CompositeField], "beta")
	q.Stats = &st
	alphaOnly, err := x.Search(ctx, schema, q)
	if err != nil {
		t.Fatal(err)
	}
	alpha, err := x.Search(ctx, schema, Query{Text: "alpha", K: all})
	if err != nil {
		t.Fatal(err)
	}
	if len(alpha) == 0 || len(both) <= len(alpha) || !sameScores(alphaOnly, alpha) {
		t.Errorf("without beta's df: %d hits, want alpha's %d scored alike (both terms: %d)", len(alphaOnly), len(alpha), len(both))
	}
	q.Stats = &Stats{DF: st.DF}
	if hits, err := x.Search(ctx, schema, q); err != nil || len(hits) != 0 {
		t.Errorf("without the field's statistics: %d hits, %v; want none", len(hits), err)
	}
}

// sameScores reports whether a and b score the same documents the same.
func sameScores(a, b []Hit) bool {
	m := map[uint64]float64{}
	for _, h := range a {
		m[h.DocNum] = h.Score
	}
	n := map[uint64]float64{}
	for _, h := range b {
		n[h.DocNum] = h.Score
	}
	return maps.Equal(m, n)
}

// TestStatsRefusedWithBleveScoring checks that Bleve's BM25, which keeps
// its own statistics, refuses collection statistics clearly, and that a
// filter-only search, which scores nothing, ignores them.
func TestStatsRefusedWithBleveScoring(t *testing.T) {
	schema := shardTestSchema()
	textbook := schema.Clone()
	bleveSchema := schema.Clone()
	bleveSchema.BM25 = &tandem.BM25{Scoring: tandem.BM25Bleve}
	x := testIndex(t, schema,
		tandem.Doc{ID: "a", Fields: map[string]any{"title": "zebra", "text": "lion", "group": "red"}},
		tandem.Doc{ID: "b", Fields: map[string]any{"title": "tiger", "text": "zebra zebra", "group": "blue"}},
	)
	ctx := context.Background()
	st, err := x.QueryStats(ctx, textbook, Query{Text: "zebra"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.Search(ctx, bleveSchema, Query{Text: "zebra", K: 10}); err != nil {
		t.Fatalf("Bleve's scoring without statistics: %v", err)
	}
	_, err = x.Search(ctx, bleveSchema, Query{Text: "zebra", K: 10, Stats: &st})
	if !errors.Is(err, errBleveStats) || !strings.Contains(err.Error(), "textbook") || !strings.Contains(err.Error(), `"bleve"`) {
		t.Errorf("Search with statistics under Bleve's scoring: %v; want an error naming both scorings", err)
	}
	if _, err := x.QueryStats(ctx, bleveSchema, Query{Text: "zebra"}); !errors.Is(err, errBleveStats) {
		t.Errorf("QueryStats under Bleve's scoring: %v; want %v", err, errBleveStats)
	}
	e, err := filter.Parse([]byte(`{"term":{"group":"red"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatal(err)
	}
	hits, err := x.Search(ctx, bleveSchema, Query{Filter: e, K: 10, Stats: &st})
	if err != nil || len(hits) != 1 || hits[0].DocNum != 0 {
		t.Errorf("filter-only search with statistics: %v, %v; want document 0 alone", hits, err)
	}
}

func TestStatsAdd(t *testing.T) {
	a := Stats{
		Fields: map[string]FieldStats{"title": {Docs: 2, Tokens: 7}, "text": {Docs: 3, Tokens: 40}},
		DF:     map[string]map[string]uint64{"title": {"zebra": 1, "lion": 0}, "text": {"zebra": 2}},
	}
	b := Stats{
		Fields: map[string]FieldStats{"title": {Docs: 5, Tokens: 11}, "_text": {Docs: 1, Tokens: 4}},
		DF:     map[string]map[string]uint64{"title": {"zebra": 4, "tiger": 1}, "_text": {"zebra": 1}},
	}
	var sum Stats
	sum.Add(a)
	sum.Add(Stats{}) // nothing to add
	sum.Add(b)
	want := Stats{
		Fields: map[string]FieldStats{"title": {Docs: 7, Tokens: 18}, "text": {Docs: 3, Tokens: 40}, "_text": {Docs: 1, Tokens: 4}},
		DF:     map[string]map[string]uint64{"title": {"zebra": 5, "lion": 0, "tiger": 1}, "text": {"zebra": 2}, "_text": {"zebra": 1}},
	}
	if !reflect.DeepEqual(sum, want) {
		t.Fatalf("sum = %+v, want %+v", sum, want)
	}
	// The sum shares no map with what it summed.
	sum.DF["text"]["zebra"] = 100
	if a.DF["text"]["zebra"] != 2 {
		t.Error("Add aliased an added Stats' map")
	}
	var empty Stats
	empty.Add(Stats{})
	if empty.Fields != nil || empty.DF != nil {
		t.Errorf("adding nothing allocated maps: %+v", empty)
	}
	// Stats travel between shards as JSON.
	raw, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var back Stats
	if err := json.Unmarshal(raw, &back); err != nil || !reflect.DeepEqual(back, want) {
		t.Errorf("JSON round trip: %+v, %v; want %+v (%s)", back, err, want, raw)
	}
	if !strings.Contains(string(raw), `"fields":{`) || !strings.Contains(string(raw), `"df":{`) || !strings.Contains(string(raw), `"docs":7`) {
		t.Errorf("JSON = %s", raw)
	}
}
