package sparse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/storage"
)

// TestPersistedSeq follows SavedSeq through Bleve's background persister:
// never above AppliedSeq and never lower than before while batches are
// applied one at a time, equal to AppliedSeq once the persister has caught
// up with no further batch, after Close's flush, and at Open.
func TestPersistedSeq(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bleve")
	schema := tandem.DefaultSchema()
	schema.Fill()
	ctx := context.Background()
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.SavedSeq() != 0 {
		t.Fatalf("new index: SavedSeq %d, want 0", x.SavedSeq())
	}
	var seq, saved uint64
	lagging := 0 // batches not yet on disk when Apply returned
	applyMany := func(n int) {
		t.Helper()
		for range n {
			seq++
			d := tandem.Doc{ID: fmt.Sprint("d", seq), Fields: map[string]any{"text": fmt.Sprint("word", seq%7, " other", seq)}}
			if err := x.Apply(ctx, schema, []storage.Change{{Seq: seq, Op: storage.OpPut, DocNum: seq, ID: d.ID, Doc: &d}}); err != nil {
				t.Fatal(err)
			}
			s, a := x.SavedSeq(), x.AppliedSeq()
			if s > a || s < saved || a != seq {
				t.Fatalf("after applying %d: SavedSeq %d, AppliedSeq %d (SavedSeq was %d)", seq, s, a, saved)
			}
			saved = s
			if s < a {
				lagging++
			}
		}
	}
	applyMany(200)
	// How far the persister lags depends on the disk, so it is only
	// reported.
	t.Logf("SavedSeq behind AppliedSeq after %d of 200 batches", lagging)
	// Nothing more is applied: the persister writes what is left.
	deadline := time.Now().Add(testtime.D(30 * time.Second))
	for x.SavedSeq() != seq {
		if time.Now().After(deadline) {
			t.Fatalf("SavedSeq %d %v after the last batch, want %d", x.SavedSeq(), testtime.D(30*time.Second), seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
	applyMany(200)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x.SavedSeq() != seq {
		t.Errorf("after Close: SavedSeq %d, want %d", x.SavedSeq(), seq)
	}
	x, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.AppliedSeq() != seq || x.SavedSeq() != seq {
		t.Errorf("reopened: AppliedSeq %d, SavedSeq %d; want %d", x.AppliedSeq(), x.SavedSeq(), seq)
	}
	if n, err := x.DocCount(); err != nil || n != seq {
		t.Errorf("reopened: %d documents (%v), want %d", n, err, seq)
	}
}

// rebuildSchema has two text fields, a keyword and a number to filter on.
func rebuildSchema() *tandem.Schema {
	s := &tandem.Schema{Fields: []tandem.Field{
		{Name: "title", Type: tandem.Text},
		{Name: "text", Type: tandem.Text},
		{Name: "group", Type: tandem.Keyword},
		{Name: "year", Type: tandem.Number},
	}}
	s.Fill()
	return s
}

// rebuildWords is the vocabulary of the rebuild tests' documents: few
// enough words that each is in many documents, which updates and deletes
// then take out of the statistics.
var rebuildWords = strings.Fields("apple banana cherry delta echo fox golf hotel india juliet kilo lima mango nectar oscar papa quartz romeo sierra tango")

// writeRandom commits n batches of size operations to st over a pool of
// ids: puts of new and existing ids, one in five a delete.
func writeRandom(t *testing.T, st *storage.Store, rng *rand.Rand, n, size, pool int) {
	t.Helper()
	text := func(words int) string {
		w := make([]string, words)
		for i := range w {
			w[i] = rebuildWords[rng.IntN(len(rebuildWords))]
		}
		return strings.Join(w, " ")
	}
	for range n {
		var b storage.Batch
		for range size {
			id := fmt.Sprint("d", rng.IntN(pool))
			if rng.IntN(5) == 0 {
				b.Delete(id)
				continue
			}
			fields := map[string]any{"text": text(3 + rng.IntN(30)), "group": fmt.Sprint("g", rng.IntN(4)), "year": float64(1990 + rng.IntN(30))}
			if rng.IntN(3) > 0 {
				fields["title"] = text(1 + rng.IntN(5))
			}
			b.Put(tandem.Doc{ID: id, Fields: fields}, nil)
		}
		if _, err := st.Write(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
}

// catchUpFromLog applies st's change log to x from x's applied sequence,
// as the engine does.
func catchUpFromLog(t *testing.T, st *storage.Store, x *Index) {
	t.Helper()
	ctx := context.Background()
	for {
		changes, err := st.Changes(ctx, x.AppliedSeq(), 500)
		if err != nil {
			t.Fatal(err)
		}
		if len(changes) == 0 {
			return
		}
		if err := x.Apply(ctx, st.Schema(), changes); err != nil {
			t.Fatal(err)
		}
	}
}

// openStore opens a store with rebuildSchema in a new directory.
func openStore(t *testing.T) *storage.Store {
	t.Helper()
	st, err := storage.Open(t.TempDir(), &storage.Options{Schema: rebuildSchema(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// openIndex opens an index in a new directory.
func openIndex(t *testing.T) *Index {
	t.Helper()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x
}

// sameIndex reports where got differs from want: document count, BM25
// statistics, and every hit's document and score for a set of searches
// with K above the number of documents, so that ties, which the two
// indexes may order differently, never decide what is cut.
func sameIndex(t *testing.T, what string, schema *tandem.Schema, want, got *Index) {
	t.Helper()
	ctx := context.Background()
	wn, err := want.DocCount()
	if err != nil {
		t.Fatal(err)
	}
	if gn, err := got.DocCount(); err != nil || gn != wn {
		t.Errorf("%s: %d documents (%v), want %d", what, gn, err, wn)
	}
	stats := func(x *Index) map[string]FieldStats {
		r, err := x.reader()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		s, err := statsOf(r)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if ws, gs := stats(want), stats(got); !reflect.DeepEqual(gs, ws) {
		t.Errorf("%s: BM25 statistics %v, want %v", what, gs, ws)
	}
	filt, err := filter.Parse([]byte(`{"and":[{"term":{"group":"g1"}},{"range":{"year":{"gte":2000}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := filter.Check(filt, schema); err != nil {
		t.Fatal(err)
	}
	queries := []Query{
		{Text: "apple"},
		{Text: "banana cherry tango"},
		{Text: "mango mango papa"},
		{Text: "sierra oscar", Fields: map[string]float64{"title": 2, "text": 1}},
		{Text: "fox hotel", Filter: filt},
		{Filter: filt},
		{},
	}
	k := int(wn) + 10
	for _, q := range queries {
		q.K = k
		hits := func(x *Index) map[uint64]float64 {
			hs, err := x.Search(ctx, schema, q)
			if err != nil {
				t.Fatal(err)
			}
			m := make(map[uint64]float64, len(hs))
			for _, h := range hs {
				m[h.DocNum] = h.Score
			}
			return m
		}
		wh, gh := hits(want), hits(got)
		if len(wh) == 0 {
			t.Fatalf("%s: query %+v matches nothing", what, q)
		}
		if len(gh) != len(wh) {
			t.Errorf("%s: query %+v: %d hits, want %d", what, q, len(gh), len(wh))
		}
		bad := 0
		for num, ws := range wh {
			if gs, ok := gh[num]; !ok || gs != ws {
				if bad++; bad <= 3 {
					t.Errorf("%s: query %+v: document %d scores %v (found %v), want %v", what, q, num, gs, ok, ws)
				}
			}
		}
	}
}

// TestRebuildFromDocs builds one index from the change log of puts,
// updates and deletes, and rebuilds another from the store's documents:
// the two hold the same documents with the same BM25 statistics, and
// every search finds the same documents with the same scores. The rebuilt
// index had applied an early part of the log, with documents deleted
// since: none survives. It then applies further changes as the other
// does.
func TestRebuildFromDocs(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	inc := openIndex(t)
	reb := openIndex(t)
	writeRandom(t, st, rng, 10, 100, 8000)
	catchUpFromLog(t, st, reb) // a stale state, rebuilt below
	for range 12 {
		writeRandom(t, st, rng, 10, 100, 8000)
		catchUpFromLog(t, st, inc)
	}
	if st.Count() <= 2*rebuildChunk {
		t.Fatalf("%d live documents: want more than two rebuild batches", st.Count())
	}
	if err := reb.Rebuild(ctx, st.Schema(), st); err != nil {
		t.Fatal(err)
	}
	if reb.AppliedSeq() != st.LastSeq() || reb.AppliedSeq() != inc.AppliedSeq() {
		t.Errorf("rebuilt: AppliedSeq %d, want LastSeq %d", reb.AppliedSeq(), st.LastSeq())
	}
	if n, _ := reb.DocCount(); n != st.Count() {
		t.Errorf("rebuilt: %d documents, store has %d", n, st.Count())
	}
	// SavedSeq reaches the rebuilt sequence once Bleve has written the
	// final batch.
	for deadline := time.Now().Add(testtime.D(30 * time.Second)); reb.SavedSeq() != reb.AppliedSeq(); {
		if s := reb.SavedSeq(); s != 0 {
			t.Fatalf("rebuilt at %d: SavedSeq %d, want 0 until the final batch is on disk", reb.AppliedSeq(), s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebuilt: SavedSeq still 0 after %v, want %d", testtime.D(30*time.Second), reb.AppliedSeq())
		}
		time.Sleep(5 * time.Millisecond)
	}
	sameIndex(t, "rebuilt", st.Schema(), inc, reb)

	// Catching up applies further changes, updates and deletes of the
	// rebuilt documents among them.
	writeRandom(t, st, rng, 5, 100, 8000)
	catchUpFromLog(t, st, inc)
	catchUpFromLog(t, st, reb)
	if reb.AppliedSeq() != st.LastSeq() {
		t.Errorf("caught up: AppliedSeq %d, want %d", reb.AppliedSeq(), st.LastSeq())
	}
	sameIndex(t, "rebuilt and caught up", st.Schema(), inc, reb)
}

// cancelAfter is a store whose ScanDocs cancels its context after n
// documents, as a rebuild interrupted midway would be.
type cancelAfter struct {
	*storage.Store
	n      int
	cancel context.CancelFunc
}

func (c cancelAfter) ScanDocs(ctx context.Context, fn func(num uint64, doc tandem.Doc) error) error {
	seen := 0
	return c.Store.ScanDocs(ctx, func(num uint64, doc tandem.Doc) error {
		if seen++; seen == c.n {
			c.cancel()
		}
		return fn(num, doc)
	})
}

// TestRebuildInterrupted cancels a rebuild after two of its batches: the
// index has no applied sequence, so it opens at 0, where a rebuild starts
// again; the next rebuild holds exactly the store's documents.
func TestRebuildInterrupted(t *testing.T) {
	st := openStore(t)
	writeRandom(t, st, rand.New(rand.NewPCG(3, 4)), 80, 100, 100_000)
	if st.Count() <= 2*rebuildChunk+rebuildChunk/2 {
		t.Fatalf("%d live documents: want more than two and a half rebuild batches", st.Count())
	}
	dir := filepath.Join(t.TempDir(), "bleve")
	x, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	catchUpFromLog(t, st, x)
	if x.AppliedSeq() != st.LastSeq() {
		t.Fatalf("caught up to %d, want %d", x.AppliedSeq(), st.LastSeq())
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = x.Rebuild(ctx, st.Schema(), cancelAfter{st, 2*rebuildChunk + rebuildChunk/2, cancel})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebuild: %v, want context.Canceled", err)
	}
	if x.AppliedSeq() != 0 || x.SavedSeq() != 0 {
		t.Errorf("interrupted rebuild: AppliedSeq %d, SavedSeq %d; want 0", x.AppliedSeq(), x.SavedSeq())
	}
	// What Bleve writes to disk, in order, is these two batches and
	// no applied sequence.
	if v, err := x.idx.GetInternal(appliedKey); err != nil || v != nil {
		t.Errorf("interrupted rebuild: applied key %x (%v), want none", v, err)
	}
	if n, err := x.DocCount(); err != nil || n != 2*rebuildChunk {
		t.Errorf("interrupted rebuild: %d documents (%v), want the %d of two batches", n, err, 2*rebuildChunk)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if x, err = Open(dir); err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.AppliedSeq() != 0 {
		t.Errorf("reopened after an interrupted rebuild: AppliedSeq %d, want 0", x.AppliedSeq())
	}
	if err := x.Rebuild(context.Background(), st.Schema(), st); err != nil {
		t.Fatal(err)
	}
	if n, err := x.DocCount(); err != nil || n != st.Count() || x.AppliedSeq() != st.LastSeq() {
		t.Errorf("rebuilt: %d documents (%v) at %d, want %d at %d", n, err, x.AppliedSeq(), st.Count(), st.LastSeq())
	}
}
