package sparse

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/storage"
)

// rowVisitor records each visited document's values as one line,
// "field=value,value;..." in field order, so that a scan can be compared
// with the documents it should have visited.
type rowVisitor struct {
	fields []string
	rows   []string
	cur    [][]string
	err    error
}

func (v *rowVisitor) flush() {
	if v.cur == nil {
		return
	}
	var b strings.Builder
	for i, vals := range v.cur {
		fmt.Fprintf(&b, "%s=%s;", v.fields[i], strings.Join(vals, ","))
	}
	v.rows = append(v.rows, b.String())
}

func (v *rowVisitor) Doc() {
	v.flush()
	v.cur = make([][]string, len(v.fields))
}
func (v *rowVisitor) Keyword(f int, b []byte) { v.cur[f] = append(v.cur[f], string(b)) }
func (v *rowVisitor) Number(f int, x float64) { v.cur[f] = append(v.cur[f], fmt.Sprint(x)) }
func (v *rowVisitor) Date(f int, n int64) {
	v.cur[f] = append(v.cur[f], tandem.FormatDate(time.Unix(0, n)))
}
func (v *rowVisitor) Bool(f int, b bool) { v.cur[f] = append(v.cur[f], fmt.Sprint(b)) }
func (v *rowVisitor) Err() error         { return v.err }

// row is what rowVisitor should record for a document's fields.
func row(fields []string, doc map[string]any) string {
	var b strings.Builder
	for _, f := range fields {
		var vals []string
		switch x := doc[f].(type) {
		case nil:
		case []string:
			vals = slices.Compact(slices.Sorted(slices.Values(x)))
		case string:
			vals = []string{x}
		default:
			vals = []string{fmt.Sprint(x)}
		}
		fmt.Fprintf(&b, "%s=%s;", f, strings.Join(vals, ","))
	}
	return b.String()
}

func scanSchema() *tandem.Schema {
	s := &tandem.Schema{Strict: true, Fields: []tandem.Field{
		{Name: "text", Type: tandem.Text},
		{Name: "lang", Type: tandem.Keyword},
		{Name: "tags", Type: tandem.Keywords},
		{Name: "year", Type: tandem.Number},
		{Name: "at", Type: tandem.Date},
		{Name: "open", Type: tandem.Bool},
	}}
	s.Fill()
	return s
}

func scanDoc(r *rand.Rand, i int) tandem.Doc {
	f := map[string]any{"text": fmt.Sprint("note ", i)}
	if r.IntN(4) > 0 {
		f["lang"] = []string{"en", "fr", "de", "ünï"}[r.IntN(4)]
	}
	if n := r.IntN(4); n > 0 {
		var tags []string
		for range n {
			tags = append(tags, []string{"a", "b", "c", "dd"}[r.IntN(4)]) // repeats included
		}
		f["tags"] = tags
	}
	if r.IntN(4) > 0 {
		f["year"] = []float64{-1.5, 0, 3, 1e300, 2001, 0.1}[r.IntN(6)]
	}
	if r.IntN(4) > 0 {
		f["at"] = tandem.FormatDate(time.Date(1700+r.IntN(500), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), 0, 0, 123456789*r.IntN(2), time.UTC))
	}
	if r.IntN(4) > 0 {
		f["open"] = r.IntN(2) == 0
	}
	return tandem.Doc{ID: fmt.Sprint("d", i), Fields: f}
}

// TestScanValues checks that ScanValues visits exactly the documents of
// its scope, each once, with exactly their values (every field type;
// keywords deduplicated; negative, zero, huge and fractional numbers;
// dates with nanoseconds from 1700 to 2199), over several segments with
// replaced and deleted documents.
func TestScanValues(t *testing.T) {
	ctx := context.Background()
	schema := scanSchema()
	x, err := Open(filepath.Join(t.TempDir(), "bleve"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	r := rand.New(rand.NewPCG(7, 8))
	live := map[uint64]tandem.Doc{}
	seq := uint64(0)
	for batch := range 6 {
		var changes []storage.Change
		for range 60 {
			seq++
			num := uint64(r.IntN(200))
			if batch > 2 && r.IntN(5) == 0 {
				changes = append(changes, storage.Change{Seq: seq, Op: storage.OpDelete, DocNum: num, ID: fmt.Sprint("d", num)})
				delete(live, num)
				continue
			}
			d := scanDoc(r, int(num))
			changes = append(changes, storage.Change{Seq: seq, Op: storage.OpPut, DocNum: num, ID: d.ID, Doc: &d})
			live[num] = d
		}
		if err := x.Apply(ctx, schema, changes); err != nil {
			t.Fatal(err)
		}
	}
	fields := []string{"lang", "tags", "year", "at", "open"}
	filters := []string{"", `{"term":{"lang":"en"}}`, `{"or":[{"range":{"year":{"lt":1}}},{"term":{"tags":"dd"}}]}`, `{"not":{"exists":"at"}}`}
	for _, fj := range filters {
		var fe filter.Expr
		if fj != "" {
			if fe, err = filter.Parse([]byte(fj)); err != nil {
				t.Fatal(err)
			}
			if err := filter.Check(fe, schema); err != nil {
				t.Fatal(err)
			}
		}
		for _, subset := range []bool{false, true} {
			scope := ScanScope{Filter: fe}
			var want []string
			in := map[uint64]bool{}
			if subset {
				scope.Docs = []uint64{}
				for num := range uint64(220) { // some never indexed, some deleted
					if num%3 == 0 {
						scope.Docs = append(scope.Docs, num)
						in[num] = true
					}
				}
			}
			for num, d := range live {
				if (fe == nil || filter.Match(fe, schema, d.Fields)) && (!subset || in[num]) {
					want = append(want, row(fields, d.Fields))
				}
			}
			v := &rowVisitor{fields: fields}
			n, err := x.ScanValues(ctx, schema, scope, fields, v)
			if err != nil {
				t.Fatalf("filter %s subset %v: %v", fj, subset, err)
			}
			v.flush()
			slices.Sort(want)
			slices.Sort(v.rows)
			if int(n) != len(want) || !slices.Equal(v.rows, want) {
				t.Errorf("filter %s subset %v: visited %d documents:\n%s\nwant %d:\n%s", fj, subset, n, strings.Join(v.rows, "\n"), len(want), strings.Join(want, "\n"))
			}
		}
	}

	// A visitor's error stops the scan; so does the context.
	stop := errors.New("enough")
	if _, err := x.ScanValues(ctx, schema, ScanScope{}, fields, &rowVisitor{fields: fields, err: stop}); !errors.Is(err, stop) {
		t.Errorf("visitor error: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := x.ScanValues(cctx, schema, ScanScope{}, fields, &rowVisitor{fields: fields}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	// Text and unknown fields have no values to scan.
	for _, f := range []string{"text", "nope"} {
		if _, err := x.ScanValues(ctx, schema, ScanScope{}, []string{f}, &rowVisitor{fields: []string{f}}); err == nil || !strings.Contains(err.Error(), f) {
			t.Errorf("scan of %q: %v, want an error naming it", f, err)
		}
	}
}
