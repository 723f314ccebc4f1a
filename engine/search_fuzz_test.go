package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/filter"
)

// searchFuzzDocs are FuzzSearch's documents: generated text and metadata
// with vectors for fuzzModel.
func searchFuzzDocs() []tandem.Doc {
	r := rand.New(rand.NewPCG(7, 8))
	docs := make([]tandem.Doc, 60)
	for i := range docs {
		d := propDoc(r, i)
		d.Vectors = map[string]tandem.Vectors{fuzzModel.Name: fuzzVectors(r)}
		docs[i] = d
	}
	return docs
}

func fuzzVectors(r *rand.Rand) tandem.Vectors {
	v := tandem.Vectors{Dense: make([]float32, fuzzModel.Dim)}
	for i := range v.Dense {
		v.Dense[i] = float32(r.NormFloat64())
	}
	v.Tokens = make([][]float32, 1+r.IntN(4))
	for i := range v.Tokens {
		v.Tokens[i] = make([]float32, fuzzModel.TokenDim)
		for j := range v.Tokens[i] {
			v.Tokens[i][j] = float32(r.NormFloat64())
		}
	}
	return v
}

// parseSpecs reads "name[=depth[/weight]]" entries separated by commas
// into retriever names, depths and weights.
func parseSpecs(spec string) ([]string, map[string]int, map[string]float64) {
	var names []string
	depth, weight := map[string]int{}, map[string]float64{}
	if spec == "" {
		return nil, nil, nil
	}
	for _, s := range strings.Split(spec, ",") {
		name, rest, ok := strings.Cut(s, "=")
		if strings.HasPrefix(name, "+") { // a depth or weight only
			name = name[1:]
		} else {
			names = append(names, name)
		}
		if !ok {
			continue
		}
		d, w, hasW := strings.Cut(rest, "/")
		if n, err := strconv.Atoi(d); err == nil {
			depth[name] = n
		}
		if hasW {
			if f, err := strconv.ParseFloat(w, 64); err == nil {
				weight[name] = f
			}
		}
	}
	return names, depth, weight
}

// FuzzSearch runs fuzzed search requests (retriever names, depths,
// weights, fusion, late scoring, k, offset, text, filter and query
// vectors) on a small collection with BM25 and an external dense and
// late-interaction model. A refused request is the caller's mistake
// (ErrBadRequest, ErrUnknownRetriever, a filter error or bad vectors),
// never another error; an answered one has at most k distinct hits,
// scores that do not increase, one source per retriever whose
// contributions add up to the score, hits that satisfy the filter, and
// pages that agree with the first page.
func FuzzSearch(f *testing.F) {
	f.Add("river stone", "bm25", "", "", 10, 0, "", uint8(3))
	f.Add("cloud", "bm25,dense:ext,late:ext", "minmax", "", 5, 2, "", uint8(3))
	f.Add("cloud", "bm25=20/2,dense=5/0.5,late", "rrf", "sum-max", 3, 0, `{"term":{"lang":"en"}}`, uint8(3))
	f.Add("", "dense,late-exact", "zscore", "avg-max", 7, 1, `{"range":{"year":{"gte":2000}}}`, uint8(3))
	f.Add("", "bm25", "", "", 0, 0, `{"exists":"tags"}`, uint8(0))
	f.Add("signal", "bm25,dense,+late=3", "dbsf", "", 4, 0, "", uint8(1))
	f.Add("x", "late", "", "max-sum", 1, 0, "", uint8(2))
	f.Add("x", "dense:other,bm25:x", "", "", 1, 0, "", uint8(7))
	f.Add("x", "bm25,bm25", "combmnz", "", -1, -5, "", uint8(0))
	f.Add("ocean", "bm25=0/-1,dense=100001", "wrrf", "", 99999, 2, "", uint8(11))
	f.Add("field", "bm25,dense,late", "max", "", 8, 0, `{"not":{}}`, uint8(19))
	f.Add("field", "bm25,dense,late", "combsum", "", 50, 20, "", uint8(35))

	ctx := context.Background()
	schema := propSchema()
	schema.Models = []tandem.Model{fuzzModel}
	e, err := Open(f.TempDir(), &Options{Schema: schema, NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { e.Close() })
	if _, err := e.Index(ctx, searchFuzzDocs()); err != nil {
		f.Fatal(err)
	}
	schema = e.Schema()

	f.Fuzz(func(t *testing.T, text, spec, fusionName, scoring string, k, offset int, filterJSON string, vecs uint8) {
		if len(spec) > 256 || len(text) > 1024 || len(filterJSON) > 1024 {
			return
		}
		names, depth, weight := parseSpecs(spec)
		req := Request{Text: text, Retrievers: names, Depth: depth, Weight: weight, Fusion: fusionName,
			LateScoring: scoring, K: k, Offset: offset, Filter: []byte(filterJSON)}
		// vecs: bit 0 brings a dense query vector, bit 1 a token matrix,
		// bit 2 names another model, bit 3 a wrong dimension, bit 4 a NaN,
		// bit 5 a zero vector.
		if vecs&3 != 0 {
			r := rand.New(rand.NewPCG(uint64(vecs), 1))
			v := fuzzVectors(r)
			if vecs&1 == 0 {
				v.Dense = nil
			}
			if vecs&2 == 0 {
				v.Tokens = nil
			}
			if vecs&8 != 0 && v.Dense != nil {
				v.Dense = v.Dense[1:]
			}
			if vecs&16 != 0 && v.Tokens != nil {
				v.Tokens[0][0] = float32(math.NaN())
			}
			if vecs&32 != 0 && v.Dense != nil {
				clear(v.Dense)
			}
			model := fuzzModel.Name
			if vecs&4 != 0 {
				model = "other"
			}
			req.Vectors = map[string]tandem.Vectors{model: v}
		}
		res, err := e.Search(ctx, req)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrUnknownRetriever) &&
				!errors.Is(err, filter.ErrInvalid) && !errors.Is(err, tandem.ErrBadVectors) {
				t.Fatalf("request %+v: error %v is not the caller's mistake", req, err)
			}
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if k == 0 {
			k = 10
		}
		checkResult(t, req, res, k)
		var fe filter.Expr
		if strings.TrimSpace(filterJSON) != "" {
			fe, _ = filter.Parse([]byte(filterJSON))
			_ = filter.Check(fe, schema)
		}
		for _, h := range res.Hits {
			if fe != nil && !filter.Match(fe, schema, h.Fields) {
				t.Fatalf("hit %s (%s) does not satisfy the filter %s", h.ID, fieldsJSON(h.Fields), filterJSON)
			}
		}
		// Paging: this page is the tail of the first k+offset hits.
		if offset > 0 && k+offset <= 200 && len(res.Hits) > 0 {
			whole := req
			whole.K, whole.Offset = k+offset, 0
			all, err := e.Search(ctx, whole)
			if err != nil {
				t.Fatalf("the first page of an answered request: %v", err)
			}
			if len(all.Hits) < offset+len(res.Hits) {
				t.Fatalf("page at offset %d has %d hits, the first %d hits only %d", offset, len(res.Hits), k+offset, len(all.Hits))
			}
			for i, h := range res.Hits {
				if w := all.Hits[offset+i]; w.ID != h.ID || w.Score != h.Score {
					t.Fatalf("page at offset %d, hit %d: %s (%v), the first page has %s (%v)", offset, i, h.ID, h.Score, w.ID, w.Score)
				}
			}
		}
	})
}

// checkResult checks a search result's shape: at most k distinct hits,
// scores finite and not increasing, one source per retriever, and
// contributions that add up to the score.
func checkResult(t *testing.T, req Request, res *Result, k int) {
	t.Helper()
	if len(res.Hits) > k {
		t.Fatalf("%d hits for k=%d", len(res.Hits), k)
	}
	seen := map[string]bool{}
	for i, h := range res.Hits {
		if seen[h.ID] {
			t.Fatalf("hit %s twice", h.ID)
		}
		seen[h.ID] = true
		if math.IsNaN(h.Score) || math.IsInf(h.Score, 0) {
			t.Fatalf("hit %s: score %v", h.ID, h.Score)
		}
		if i > 0 && h.Score > res.Hits[i-1].Score {
			t.Fatalf("hit %d (%s) scores %v, above hit %d's %v", i, h.ID, h.Score, i-1, res.Hits[i-1].Score)
		}
		if len(h.Sources) != len(res.Retrievers) {
			t.Fatalf("hit %s: %d sources for %d retrievers", h.ID, len(h.Sources), len(res.Retrievers))
		}
		sum := 0.0
		found := false
		for j, s := range h.Sources {
			if s.Retriever != res.Retrievers[j] {
				t.Fatalf("hit %s: source %d is %q, retriever %d is %q", h.ID, j, s.Retriever, j, res.Retrievers[j])
			}
			if s.Rank < 0 || (s.Rank == 0 && (s.Score != 0 || s.Contribution != 0)) {
				t.Fatalf("hit %s: source %+v", h.ID, s)
			}
			found = found || s.Rank > 0
			sum += s.Contribution
		}
		if !found {
			t.Fatalf("hit %s: no retriever ranked it: %+v", h.ID, h.Sources)
		}
		if math.Abs(sum-h.Score) > 1e-9*math.Max(1, math.Abs(h.Score)) {
			t.Fatalf("hit %s: contributions add up to %v, score %v (%s)", h.ID, sum, h.Score, fmt.Sprint(h.Sources))
		}
	}
}
