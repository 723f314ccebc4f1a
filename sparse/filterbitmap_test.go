package sparse

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
	"github.com/blevesearch/bleve/v2/document"
	"github.com/blevesearch/bleve/v2/index/scorch"
	"github.com/blevesearch/bleve/v2/numeric"
	segment "github.com/blevesearch/scorch_segment_api/v2"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/internal/testtime"
	"github.com/tandemsearch/tandem/storage"
)

// filterBitmapBySearch is FilterBitmap as it was before the document
// number cache: a Bleve search for every matching document, unscored,
// each hit's stored id parsed. The tests hold FilterBitmap to it, and
// BenchmarkFilterBitmap measures both.
func filterBitmapBySearch(ctx context.Context, x *Index, schema *tandem.Schema, e filter.Expr) (*roaring64.Bitmap, error) {
	fq, err := Compile(ctx, e, schema)
	if err != nil {
		return nil, err
	}
	n, err := x.DocCount()
	if err != nil {
		return nil, err
	}
	bm := roaring64.New()
	if n == 0 {
		return bm, nil
	}
	hits, err := x.search(ctx, fq, int(n), "none")
	if err != nil {
		return nil, err
	}
	for _, h := range hits {
		bm.Add(h.DocNum)
	}
	return bm, nil
}

// randomFilter returns a random filter over scanSchema's fields, as JSON:
// every kind of clause, values that scanDoc gives and values it never
// gives, -0, open and closed bounds, and and, or and not nested, empty
// ones included.
func randomFilter(r *rand.Rand, depth int) any {
	pick := func(vs ...any) any { return vs[r.IntN(len(vs))] }
	year := func() any { return pick(-2.0, -1.5, -0.0, 0.0, 0.1, 3.0, 5.0, 2001.0, 1e300, -1e300) }
	date := func() any {
		if r.IntN(3) == 0 {
			return fmt.Sprintf("%04d-%02d-01", 1650+r.IntN(600), 1+r.IntN(12))
		}
		return tandem.FormatDate(time.Date(1700+r.IntN(500), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), 0, 0, 123456789*r.IntN(2), time.UTC))
	}
	value := map[string]func() any{
		"lang": func() any { return pick("en", "fr", "de", "ünï", "zz") },
		"tags": func() any { return pick("a", "b", "c", "dd", "e") },
		"year": year,
		"at":   date,
		"open": func() any { return r.IntN(2) == 0 },
	}
	fields := []string{"lang", "tags", "year", "at", "open"}
	n := 9
	if depth >= 3 {
		n = 6 // leaves only
	}
	switch r.IntN(n) {
	case 0, 1:
		f := fields[r.IntN(len(fields))]
		return map[string]any{"term": map[string]any{f: value[f]()}}
	case 2:
		f := fields[r.IntN(len(fields))]
		var vs []any
		for range 1 + r.IntN(4) {
			vs = append(vs, value[f]())
		}
		return map[string]any{"terms": map[string]any{f: vs}}
	case 3:
		f := pick("year", "at").(string)
		b := map[string]any{}
		if r.IntN(3) > 0 {
			b[pick("gt", "gte").(string)] = value[f]()
		}
		if len(b) == 0 || r.IntN(3) > 0 {
			b[pick("lt", "lte").(string)] = value[f]()
		}
		return map[string]any{"range": map[string]any{f: b}}
	case 4:
		return map[string]any{"prefix": map[string]any{pick("lang", "tags").(string): pick("", "e", "d", "ü", "x", "dd")}}
	case 5:
		return map[string]any{"exists": fields[r.IntN(len(fields))]}
	case 6:
		return map[string]any{"not": randomFilter(r, depth+1)}
	default:
		kids := []any{}
		for range r.IntN(4) {
			kids = append(kids, randomFilter(r, depth+1))
		}
		return map[string]any{pick("and", "or").(string): kids}
	}
}

func checkedFilter(t testing.TB, schema *tandem.Schema, fj []byte) filter.Expr {
	t.Helper()
	e, err := filter.Parse(fj)
	if err != nil {
		t.Fatalf("filter %s: %v", fj, err)
	}
	if err := filter.Check(e, schema); err != nil {
		t.Fatalf("filter %s: %v", fj, err)
	}
	return e
}

// TestFilterBitmapMatchesSearch holds FilterBitmap to the Bleve search
// it replaced (filterBitmapBySearch) on random filters of every kind,
// over an index growing in many batches of new, replaced and deleted
// documents, so that segments hold deleted documents, are merged and
// are persisted between the checks.
func TestFilterBitmapMatchesSearch(t *testing.T) {
	ctx := context.Background()
	schema := scanSchema()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	r := rand.New(rand.NewPCG(31, 1))
	var live []uint64
	next, seq := uint64(0), uint64(0)
	checked, deletedSeen, multiSeen := 0, false, false
	sizes := map[string]bool{} // empty, some, all: what the filters matched
	for batch := range 24 {
		var changes []storage.Change
		for range 40 {
			seq++
			switch k := r.IntN(10); {
			case k < 2 && len(live) > 0: // delete
				i := r.IntN(len(live))
				num := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				changes = append(changes, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: num, ID: fmt.Sprint("d", num)})
			case k < 5 && len(live) > 0: // replace
				num := live[r.IntN(len(live))]
				d := scanDoc(r, int(num))
				changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
			default: // add; document numbers are never reused
				num := next
				next++
				d := scanDoc(r, int(num))
				live = append(live, num)
				changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
			}
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
		if batch%3 != 2 {
			continue
		}
		rd, err := x.reader()
		if err != nil {
			t.Fatal(err)
		}
		segs := rd.(postingsSnapshot).Segments()
		multiSeen = multiSeen || len(segs) > 1
		for _, ss := range segs {
			deletedSeen = deletedSeen || (ss.Deleted() != nil && !ss.Deleted().IsEmpty())
		}
		rd.Close()
		for range 40 {
			fj, _ := json.Marshal(randomFilter(r, 0))
			e := checkedFilter(t, schema, fj)
			want, err := filterBitmapBySearch(ctx, x, schema, e)
			if err != nil {
				t.Fatalf("filter %s: search: %v", fj, err)
			}
			got, err := x.FilterBitmap(ctx, schema, e)
			if err != nil {
				t.Fatalf("filter %s: %v", fj, err)
			}
			if !got.Equals(want) {
				t.Fatalf("after batch %d, filter %s: bitmap of %d documents %v, the search's %d %v", batch, fj, got.GetCardinality(), got, want.GetCardinality(), want)
			}
			switch n := got.GetCardinality(); {
			case n == 0:
				sizes["empty"] = true
			case n == uint64(len(live)):
				sizes["all"] = true
			default:
				sizes["some"] = true
			}
			checked++
		}
	}
	if !deletedSeen || !multiSeen {
		t.Errorf("no check saw a segment with deleted documents (%v) or several segments (%v)", deletedSeen, multiSeen)
	}
	if len(sizes) != 3 {
		t.Errorf("the %d filters matched only %v: the generator misses cases", checked, sizes)
	}
}

// FilterBitmap is exact while Apply changes the index under it: each
// batch replaces documents (so their old versions are deleted in their
// segments) and Bleve merges and persists segments in the background,
// and every bitmap, from whichever snapshot, holds exactly the documents
// a filter matches in every snapshot. The cache keeps room for the
// documents of the last snapshot's segments only, and none after Close.
func TestFilterBitmapDuringApply(t *testing.T) {
	ctx := context.Background()
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "cat", Type: tandem.Keyword}, {Name: "n", Type: tandem.Number}}}
	schema.Fill()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	const docs = 600
	// Document num has n = num in every version, and a category that
	// changes.
	put := func(seq uint64, num uint64, r *rand.Rand) storage.Change {
		d := tandem.Doc{ID: fmt.Sprint("d", num), Fields: map[string]any{"cat": fmt.Sprint("c", r.IntN(5)), "n": float64(num)}}
		return storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d}
	}
	r := rand.New(rand.NewPCG(5, 6))
	seq := uint64(0)
	var changes []storage.Change
	for num := range uint64(docs) {
		seq++
		changes = append(changes, put(seq, num, r))
	}
	if err := x.Apply(ctx, schema, changes); err != nil {
		t.Fatal(err)
	}
	all := checkedFilter(t, schema, []byte(`{"terms":{"cat":["c0","c1","c2","c3","c4"]}}`))
	either := checkedFilter(t, schema, []byte(`{"or":[{"term":{"cat":"c2"}},{"not":{"term":{"cat":"c2"}}}]}`))
	span := checkedFilter(t, schema, []byte(`{"range":{"n":{"gte":100,"lt":350}}}`))
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, 3)
	for _, c := range []struct {
		e      filter.Expr
		lo, hi uint64
	}{{all, 0, docs}, {either, 0, docs}, {span, 100, 350}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want := roaring64.New()
			want.AddRange(c.lo, c.hi)
			for {
				select {
				case <-done:
					return
				default:
				}
				bm, err := x.FilterBitmap(ctx, schema, c.e)
				if err != nil {
					errs <- err
					return
				}
				if !bm.Equals(want) {
					errs <- fmt.Errorf("filter %v: %d documents, want [%d, %d)", c.e, bm.GetCardinality(), c.lo, c.hi)
					return
				}
			}
		}()
	}
	for range 40 {
		changes = changes[:0]
		for range 30 {
			seq++
			changes = append(changes, put(seq, uint64(r.IntN(docs)), r))
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// With no change under way (merges aside), the cache has room for
	// exactly the documents of the snapshot's segments. The persister
	// and merger go on replacing segments for a while, longer on a slow
	// machine: the check is of a FilterBitmap during which the snapshot
	// stayed the same, once there is one.
	for deadline := time.Now().Add(testtime.D(time.Minute)); ; {
		before, _ := segmentsOf(t, x)
		if _, err := x.FilterBitmap(ctx, schema, all); err != nil {
			t.Fatal(err)
		}
		after, n := segmentsOf(t, x)
		if !slices.Equal(before, after) {
			if time.Now().After(deadline) {
				t.Fatalf("the snapshot kept changing for %v (TANDEM_TEST_TIMESCALE %g)", testtime.D(time.Minute), testtime.Scale())
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		x.docNums.mu.Lock()
		for seg := range x.docNums.segs {
			if !slices.Contains(after, seg) {
				t.Errorf("the cache keeps a segment of %d documents the snapshot does not hold", seg.Count())
			}
		}
		x.docNums.mu.Unlock()
		if got := x.docNums.size(); got != n {
			t.Errorf("the cache has room for %d documents, the snapshot's %d segments hold %d", got, len(after), n)
		}
		break
	}
	// Close lets the segments go.
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if got := x.docNums.size(); got != 0 {
		t.Errorf("after Close the cache has room for %d documents", got)
	}
}

// segmentsOf returns the segments of x's current snapshot and the number
// of documents they hold, deleted ones included.
func segmentsOf(t *testing.T, x *Index) ([]segment.Segment, int) {
	t.Helper()
	rd, err := x.reader()
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var segs []segment.Segment
	n := 0
	for _, ss := range rd.(postingsSnapshot).Segments() {
		segs = append(segs, ss.Segment())
		n += int(ss.Segment().Count())
	}
	return segs, n
}

func TestParseDocID(t *testing.T) {
	for _, s := range []string{"", "0", "7", "42", "007", "18446744073709551615", "18446744073709551616", "99999999999999999999", "-1", "+1", "1a", " 1", "1_0"} {
		got, ok := parseDocID([]byte(s))
		var want uint64
		var err error
		if want, err = strconv.ParseUint(s, 10, 64); (err == nil) != ok || ok && got != want {
			t.Errorf("parseDocID(%q) = %d, %v; strconv: %d, %v", s, got, ok, want, err)
		}
	}
}

// BenchmarkFilterBitmap measures FilterBitmap ("new") against the Bleve
// search it replaced (filterBitmapBySearch, "old"), alternating, over
// 100,000 documents with a keyword of 100 values and a number, applied
// in batches of 1,000 and reopened: for filters keeping about 1%, 10%
// and 50% of them, of keywords (computed on the postings) and of number
// ranges (searched); "new-cold" empties FilterBitmap's cache of document
// numbers before each call. docs/ingest.md has the figures.
func BenchmarkFilterBitmap(b *testing.B) {
	ctx := context.Background()
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "cat", Type: tandem.Keyword}, {Name: "n", Type: tandem.Number}}}
	schema.Fill()
	dir := filepath.Join(b.TempDir(), "bleve")
	x, err := Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	const docs, batch = 100_000, 1000
	r := rand.New(rand.NewPCG(1, 100))
	changes := make([]storage.Change, 0, batch)
	for num := range uint64(docs) {
		d := tandem.Doc{ID: fmt.Sprint("d", num), Fields: map[string]any{"cat": fmt.Sprint("c", r.IntN(100)), "n": float64(r.IntN(docs))}}
		changes = append(changes, storage.Change{Seq: num + 1, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
		if len(changes) == batch {
			if err := x.Apply(ctx, schema, changes); err != nil {
				b.Fatal(err)
			}
			changes = changes[:0]
		}
	}
	if err := x.Close(); err != nil {
		b.Fatal(err)
	}
	if x, err = Open(dir); err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	cats := func(n int) string {
		var q []string
		for i := range n {
			q = append(q, fmt.Sprintf(`"c%d"`, i))
		}
		return `{"terms":{"cat":[` + strings.Join(q, ",") + `]}}`
	}
	for _, f := range []struct{ name, filter string }{
		{"terms-1%", cats(1)},
		{"terms-10%", cats(10)},
		{"terms-50%", cats(50)},
		{"range-1%", `{"range":{"n":{"gte":20000,"lt":21000}}}`},
		{"range-10%", `{"range":{"n":{"gte":20000,"lt":30000}}}`},
		{"range-50%", `{"range":{"n":{"gte":20000,"lt":70000}}}`},
	} {
		e := checkedFilter(b, schema, []byte(f.filter))
		for _, way := range []struct {
			name string
			run  func() (*roaring64.Bitmap, error)
		}{
			{"old", func() (*roaring64.Bitmap, error) { return filterBitmapBySearch(ctx, x, schema, e) }},
			{"new", func() (*roaring64.Bitmap, error) { return x.FilterBitmap(ctx, schema, e) }},
			// With the document number cache emptied first, as after a
			// merge that replaced every segment.
			{"new-cold", func() (*roaring64.Bitmap, error) {
				x.docNums.retain(nil)
				return x.FilterBitmap(ctx, schema, e)
			}},
		} {
			b.Run(f.name+"/"+way.name, func(b *testing.B) {
				b.ReportAllocs()
				var n uint64
				for b.Loop() {
					bm, err := way.run()
					if err != nil {
						b.Fatal(err)
					}
					n = bm.GetCardinality()
				}
				b.ReportMetric(float64(n), "docs-matched")
			})
		}
	}
}

// docNumBitmap.bitmap holds exactly the numbers added, in any order,
// whether it sets them in a bitset (dense) or sorts them (sparse, or
// past 2^32).
func TestDocNumBitmapBuild(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	for _, tc := range []struct {
		name   string
		n      int
		span   uint64
		offset uint64
	}{
		{"empty", 0, 1, 0},
		{"zero", 1, 1, 0},
		{"one far", 1, 1, 1 << 20},
		{"dense", 5000, 10_000, 0},
		{"all", 70_000, 70_000, 0},
		{"sparse", 300, 1 << 24, 0},
		{"past 2^32", 2000, 4000, 1<<32 - 1000},
		{"far past 2^32", 50, 1 << 40, 1 << 50},
	} {
		want := roaring64.New()
		var nums []uint64
		for want.GetCardinality() < uint64(tc.n) {
			v := tc.offset + r.Uint64N(tc.span)
			if want.CheckedAdd(v) {
				nums = append(nums, v)
			}
		}
		b := &docNumBitmap{}
		for _, v := range nums { // in random order
			b.nums = append(b.nums, v)
			b.max = max(b.max, v)
		}
		if got := b.bitmap(); !got.Equals(want) {
			t.Errorf("%s: bitmap of %d numbers, want %d", tc.name, got.GetCardinality(), want.GetCardinality())
		}
	}
}

// trieRanges covers exactly the values of its range: a value lies in
// [lo, hi] if and only if its term at some range's shift lies in that
// range, for ranges of every width, at the ends of int64 and across 0.
func TestTrieRanges(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	edges := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 40, -17, -1, 0, 1, 15, 16, 255, 1 << 40, math.MaxInt64 - 1, math.MaxInt64}
	random := func() int64 {
		switch r.IntN(4) {
		case 0:
			return edges[r.IntN(len(edges))]
		case 1:
			return int64(r.Uint64())
		case 2:
			return r.Int64N(1000) - 500
		default:
			return edges[r.IntN(len(edges))] + r.Int64N(64) - 32 // may wrap: fine
		}
	}
	covered := func(ranges []termRange, v int64) int {
		n := 0
		for _, tr := range ranges {
			term := numeric.MustNewPrefixCodedInt64(v, uint(tr.start[0]-numeric.ShiftStartInt64))
			if bytes.Compare(tr.start, term) <= 0 && bytes.Compare(term, tr.end) < 0 {
				n++
			}
		}
		return n
	}
	for range 3000 {
		lo, hi := random(), random()
		if r.IntN(10) == 0 {
			lo, hi = max(lo, hi), min(lo, hi) // empty
		}
		ranges := trieRanges(lo, hi)
		// At most a ragged end of each side at each shift.
		if len(ranges) > 2*64/int(document.DefaultPrecisionStep) {
			t.Fatalf("[%d, %d]: %d ranges", lo, hi, len(ranges))
		}
		for _, v := range []int64{lo, hi, lo - 1, hi + 1, lo + 1, hi - 1, random(), random(), lo + (hi-lo)/2} {
			want := 0
			if lo <= v && v <= hi {
				want = 1
			}
			if got := covered(ranges, v); got != want {
				t.Fatalf("[%d, %d]: %d covered by %d ranges, want %d", lo, hi, v, got, want)
			}
		}
	}
}

// FilterBitmap's ranges (trieRanges over the postings) match exactly
// what Bleve's numeric range searcher matches, for numbers of every
// magnitude and sign and dates with nanoseconds, with bounds at, beside
// and between the values, open or not, inclusive or not.
func TestFilterBitmapRanges(t *testing.T) {
	ctx := context.Background()
	schema := &tandem.Schema{Fields: []tandem.Field{{Name: "n", Type: tandem.Number}, {Name: "at", Type: tandem.Date}}}
	schema.Fill()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	r := rand.New(rand.NewPCG(4, 2))
	number := func() float64 {
		switch r.IntN(5) {
		case 0:
			return float64(r.IntN(200) - 100)
		case 1:
			if v := r.NormFloat64() * math.Pow(10, float64(r.IntN(600)-300)); !math.IsInf(v, 0) {
				return v
			}
			return math.MaxFloat64
		case 2:
			return []float64{0, math.Copysign(0, -1), math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64, 1, -1}[r.IntN(8)]
		default:
			return r.Float64() * 1000
		}
	}
	date := func() string {
		return tandem.FormatDate(time.Date(1680+r.IntN(580), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(1_000_000_000), time.UTC))
	}
	var numbers []float64
	var dates []string
	seq := uint64(0)
	for batch := range 5 {
		var changes []storage.Change
		for i := range 400 {
			num := uint64(batch*400 + i)
			f := map[string]any{}
			if r.IntN(10) > 0 {
				v := number()
				numbers = append(numbers, v)
				f["n"] = v
			}
			if r.IntN(10) > 0 {
				d := date()
				dates = append(dates, d)
				f["at"] = d
			}
			seq++
			d := tandem.Doc{ID: fmt.Sprint("d", num), Fields: f}
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
		}
		for range 40 {
			seq++
			num := uint64(r.IntN((batch + 1) * 400))
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: num, ID: fmt.Sprint("d", num)})
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
	}
	bound := func(field string) any {
		if field == "at" {
			if r.IntN(2) == 0 {
				return dates[r.IntN(len(dates))]
			}
			return date()
		}
		v := numbers[r.IntN(len(numbers))]
		switch r.IntN(4) {
		case 0:
			return number()
		case 1:
			v = math.Nextafter(v, math.Inf(1))
		case 2:
			v = math.Nextafter(v, math.Inf(-1))
		}
		if math.IsInf(v, 0) { // JSON has no infinities
			return numbers[0]
		}
		return v
	}
	nonEmpty := 0
	for range 400 {
		field := []string{"n", "at"}[r.IntN(2)]
		var fj []byte
		if r.IntN(5) == 0 {
			fj, _ = json.Marshal(map[string]any{"terms": map[string]any{field: []any{bound(field), bound(field)}}})
		} else {
			b := map[string]any{}
			if r.IntN(4) > 0 {
				b[[]string{"gt", "gte"}[r.IntN(2)]] = bound(field)
			}
			if len(b) == 0 || r.IntN(4) > 0 {
				b[[]string{"lt", "lte"}[r.IntN(2)]] = bound(field)
			}
			fj, _ = json.Marshal(map[string]any{"range": map[string]any{field: b}})
		}
		e := checkedFilter(t, schema, fj)
		want, err := filterBitmapBySearch(ctx, x, schema, e)
		if err != nil {
			t.Fatalf("filter %s: search: %v", fj, err)
		}
		got, err := x.FilterBitmap(ctx, schema, e)
		if err != nil {
			t.Fatalf("filter %s: %v", fj, err)
		}
		if !got.Equals(want) {
			t.Fatalf("filter %s: bitmap of %d documents, the search's %d", fj, got.GetCardinality(), want.GetCardinality())
		}
		if n := got.GetCardinality(); n > 0 && n < uint64(len(numbers)) {
			nonEmpty++
		}
	}
	if nonEmpty < 100 {
		t.Errorf("only %d of 400 ranges matched some documents but not all", nonEmpty)
	}
}

// TestFilterCacheFollowsDeletes holds FilterBitmap, whose matches per
// segment are cached, to the live matches worked out afresh, after each
// batch of a log whose last batch deletes and replaces documents held in
// segments the cache already has entries for: the documents deleted
// since an entry was made are never in the bitmap.
func TestFilterCacheFollowsDeletes(t *testing.T) {
	ctx := context.Background()
	schema := shardTestSchema()
	log := pruneLog(2000, 5)
	x := openUnmerged(t)
	t.Cleanup(func() { x.Close() })
	var exprs []filter.Expr
	for _, s := range []string{`{"term":{"group":"red"}}`, `{"not":{"term":{"group":"blue"}}}`,
		`{"or":[{"term":{"group":"grey"}},{"term":{"group":"green"}}]}`, `{"and":[]}`} {
		e, err := filter.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if err := filter.Check(e, schema); err != nil {
			t.Fatal(err)
		}
		exprs = append(exprs, e)
	}
	hits := 0
	for bi, b := range log.batches {
		if err := x.Apply(ctx, schema, b); err != nil {
			t.Fatal(err)
		}
		for fi, e := range exprs {
			before := len(x.filters.m)
			got, err := x.FilterBitmap(ctx, schema, e)
			if err != nil {
				t.Fatal(err)
			}
			if bi > 0 && before > 0 {
				hits++
			}
			bf, err := compileBitmap(ctx, e, schema)
			if err != nil {
				t.Fatal(err)
			}
			want := roaring64.New()
			err = x.withSegments("test", func(segs []*scorch.SegmentSnapshot) error {
				f := &segmentFilter{ctx: ctx}
				for _, ss := range segs {
					live, err := f.live(ss, bf)
					if err != nil {
						return err
					}
					d := &docNumBitmap{}
					if err := d.add(ctx, x.docNums.segment(ss.Segment()), live); err != nil {
						return err
					}
					want.Or(d.bitmap())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equals(want) {
				t.Fatalf("batch %d, filter %d: %d documents from FilterBitmap, %d live matches", bi, fi, got.GetCardinality(), want.GetCardinality())
			}
		}
	}
	if hits == 0 || len(x.filters.m) == 0 {
		t.Fatalf("the cache was never used: %d searches found it holding entries, %d entries", hits, len(x.filters.m))
	}
	// The last batch deleted documents of the first batch's segments.
	if got, err := x.FilterBitmap(ctx, schema, exprs[3]); err != nil || got.GetCardinality() != uint64(len(log.live)) {
		t.Fatalf("every document: %v, %v; want %d", got.GetCardinality(), err, len(log.live))
	}
}
