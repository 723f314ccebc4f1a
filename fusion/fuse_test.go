package fusion

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
)

const tol = 1e-12

type want struct {
	doc   uint64
	score float64
}

// two is the fixture for the hand-computed table: doc 3 is in both lists,
// docs 1 and 2 in one each; list a has weight 2.
func two() []List {
	return []List{
		{Name: "a", Weight: 2, Items: []Item{{1, 10}, {3, 6}, {7, 2}}},
		{Name: "b", Items: []Item{{3, 0.9}, {2, 0.5}, {5, 0.1}}},
	}
}

// TestHandComputed pins each method on two() to values worked out by hand.
// List a: scores 10, 6, 2 (min 2, max 10, mean 6, σ = √(32/3)).
// List b: scores 0.9, 0.5, 0.1 (min 0.1, max 0.9, mean 0.5, σ = √(0.32/3)).
func TestHandComputed(t *testing.T) {
	sa, sb := math.Sqrt(32.0/3), math.Sqrt(0.32/3)
	tests := []struct {
		m    Method
		k    float64
		want []want
	}{
		// Default K = 60; docs 5 and 7 tie and go by doc number.
		{RRF, 0, []want{{3, 1.0/62 + 1.0/61}, {1, 1.0 / 61}, {2, 1.0 / 62}, {5, 1.0 / 63}, {7, 1.0 / 63}}},
		{RRF, 1, []want{{3, 1.0/3 + 1.0/2}, {1, 0.5}, {2, 1.0 / 3}, {5, 0.25}, {7, 0.25}}},
		{WeightedRRF, 1, []want{{3, 2.0/3 + 1.0/2}, {1, 1}, {7, 0.5}, {2, 1.0 / 3}, {5, 0.25}}},
		{MinMax, 0, []want{{1, 2}, {3, 2*0.5 + 1}, // a tie: doc 1 first
			{2, 0.5}, {5, 0}, {7, 0}}},
		{Max, 0, []want{{3, 2*0.6 + 1}, {1, 2}, {2, 0.5 / 0.9}, {7, 2 * 0.2}, {5, 0.1 / 0.9}}},
		{ZScore, 0, []want{{1, 2 * 4 / sa}, {3, 0.4 / sb}, {2, 0}, {5, -0.4 / sb}, {7, 2 * -4 / sa}}},
		{DBSF, 0, []want{
			{3, 2*(3*sa)/(6*sa) + (0.4+3*sb)/(6*sb)},
			{1, 2 * (4 + 3*sa) / (6 * sa)},
			{7, 2 * (-4 + 3*sa) / (6 * sa)},
			{2, 0.5},
			{5, (-0.4 + 3*sb) / (6 * sb)},
		}},
		{CombSUM, 0, []want{{3, 1.5}, {1, 1}, {2, 0.5}, {5, 0}, {7, 0}}},
		{CombMNZ, 0, []want{{3, 3}, {1, 1}, {2, 0.5}, {5, 0}, {7, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.m.String(), func(t *testing.T) {
			hits, err := Fuse(two(), Options{Method: tt.m, K: tt.k})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) != len(tt.want) {
				t.Fatalf("%d hits, want %d", len(hits), len(tt.want))
			}
			for i, w := range tt.want {
				if hits[i].Doc != w.doc || math.Abs(hits[i].Score-w.score) > tol {
					t.Errorf("hit %d: doc %d score %.15g, want doc %d score %.15g", i, hits[i].Doc, hits[i].Score, w.doc, w.score)
				}
			}
		})
	}
}

// TestExplanation checks every field of the sources of one hit.
func TestExplanation(t *testing.T) {
	hits, err := Fuse(two(), Options{Method: CombMNZ})
	if err != nil {
		t.Fatal(err)
	}
	got := hits[0] // doc 3
	want := []Source{
		{Rank: 2, RawScore: 6, Normalised: 0.5, Contribution: 1},
		{Rank: 1, RawScore: 0.9, Normalised: 1, Contribution: 2},
	}
	if got.Doc != 3 || len(got.Sources) != 2 {
		t.Fatalf("got %+v", got)
	}
	for i, w := range want {
		s := got.Sources[i]
		if s.Rank != w.Rank || math.Abs(s.RawScore-w.RawScore) > tol ||
			math.Abs(s.Normalised-w.Normalised) > tol || math.Abs(s.Contribution-w.Contribution) > tol {
			t.Errorf("source %d: got %+v, want %+v", i, s, w)
		}
	}
	// Doc 1 is absent from list b.
	for _, h := range hits {
		if h.Doc == 1 && h.Sources[1] != (Source{}) {
			t.Errorf("absent source of doc 1 is %+v, want zero", h.Sources[1])
		}
	}
}

// TestContributionsAddUp holds for every method.
func TestContributionsAddUp(t *testing.T) {
	for m := RRF; m <= CombMNZ; m++ {
		hits, err := Fuse(two(), Options{Method: m})
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hits {
			var sum float64
			for _, s := range h.Sources {
				sum += s.Contribution
			}
			if math.Abs(sum-h.Score) > tol {
				t.Errorf("%v doc %d: contributions add to %g, score %g", m, h.Doc, sum, h.Score)
			}
		}
	}
}

func TestDepthAndLimit(t *testing.T) {
	lists := two()
	lists[0].Depth = 1 // only doc 1 from list a
	hits, err := Fuse(lists, Options{Method: CombSUM, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	// a: {1: 1} (a single item is its list's best); b: {3: 1, 2: 0.5, 5: 0}.
	got := []want{{hits[0].Doc, hits[0].Score}, {hits[1].Doc, hits[1].Score}}
	if len(hits) != 2 || got[0] != (want{1, 1}) || got[1] != (want{3, 1}) {
		t.Errorf("got %v (%d hits), want [{1 1} {3 1}]", got, len(hits))
	}
	if hits[1].Sources[0].Rank != 0 {
		t.Errorf("doc 3 is below list a's depth but has rank %d", hits[1].Sources[0].Rank)
	}
}

// TestEqualScores pins the rule for a list without spread (fusion/doc.go):
// one item, or several with equal scores, fused alone and beside a list
// that does spread.
func TestEqualScores(t *testing.T) {
	tests := []struct {
		m    Method
		want float64 // each item's normalised value
	}{
		{MinMax, 1}, {CombSUM, 1}, {CombMNZ, 1}, {DBSF, 0.5}, {ZScore, 0},
		{Max, 1}, {RRF, 1.0 / 61}, {WeightedRRF, 1.0 / 61},
	}
	for _, tc := range tests {
		for _, items := range [][]Item{{{9, 3.5}}, {{9, 0.25}, {8, 0.25}, {7, 0.25 + 1e-12}}} {
			hits, err := Fuse([]List{{Name: "one", Items: items}}, Options{Method: tc.m})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) != len(items) {
				t.Fatalf("%v: %d hits from %d items", tc.m, len(hits), len(items))
			}
			h := hits[0]
			if math.Abs(h.Score-tc.want) > 1e-12 || h.Sources[0].Contribution != h.Score {
				t.Errorf("%v over %d equal scores: first hit %+v, want score %g", tc.m, len(items), h, tc.want)
			}
		}
	}
	// Beside a spread list, the one-item list adds its weight times 1.
	lists := []List{
		{Name: "a", Weight: 2, Items: []Item{{5, 0.7}}},
		{Name: "b", Items: []Item{{5, 0.9}, {6, 0.1}}},
	}
	hits, err := Fuse(lists, Options{Method: MinMax})
	if err != nil {
		t.Fatal(err)
	}
	if hits[0].Doc != 5 || hits[0].Score != 3 || hits[1].Doc != 6 || hits[1].Score != 0 {
		t.Errorf("got %+v, want doc 5 with 2·1 + 1 = 3, then doc 6 with 0", hits)
	}
}

func TestEmpty(t *testing.T) {
	hits, err := Fuse(nil, Options{})
	if err != nil || len(hits) != 0 {
		t.Errorf("got %v, %v", hits, err)
	}
	hits, err = Fuse([]List{{Name: "a"}, {Name: "b", Items: []Item{{4, 1}}}}, Options{Method: ZScore})
	if err != nil || len(hits) != 1 || hits[0].Score != 0 {
		t.Errorf("got %+v, %v; want doc 4 with z-score 0", hits, err)
	}
}

func TestFuseRejects(t *testing.T) {
	tests := []struct {
		name  string
		lists []List
		opts  Options
		want  string
	}{
		{"dup", []List{{Name: "x", Items: []Item{{1, 2}, {1, 1}}}}, Options{}, `list 0 ("x"): doc 1 at ranks 1 and 2`},
		{"nan", []List{{}, {Name: "y", Items: []Item{{1, math.NaN()}}}}, Options{}, `list 1 ("y"): item 0 (doc 1): score NaN is not finite`},
		{"inf", []List{{Name: "y", Items: []Item{{1, math.Inf(1)}}}}, Options{}, "is not finite"},
		{"weight", []List{{Name: "w", Weight: -1}}, Options{}, `list 0 ("w"): Weight = -1`},
		{"depth", []List{{Name: "d", Depth: -5}}, Options{}, `list 0 ("d"): Depth = -5`},
		{"k", nil, Options{K: -1}, "K = -1"},
		{"limit", nil, Options{Limit: -1}, "Limit = -1"},
		{"method", nil, Options{Method: 99}, "method 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Fuse(tt.lists, tt.opts)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}

func TestParseMethod(t *testing.T) {
	for m := RRF; m <= CombMNZ; m++ {
		got, err := ParseMethod(strings.ToUpper(m.String()))
		if err != nil || got != m {
			t.Errorf("ParseMethod(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMethod("borda"); !errors.Is(err, ErrUnknownMethod) || !strings.Contains(err.Error(), "combmnz") {
		t.Errorf("got %v, want ErrUnknownMethod listing the names", err)
	}
}

// TestCrossCheck compares every method with ranx on testdata/runs.json;
// scripts/crosscheck/fusion_expected.py wrote both files.
func TestCrossCheck(t *testing.T) {
	var in struct {
		K       float64
		Queries []struct {
			ID    string
			Lists []struct {
				Name   string
				Weight float64
				Depth  int
				Items  [][2]float64
			}
		}
	}
	var expected map[string]map[string][][2]float64
	for path, v := range map[string]any{"testdata/runs.json": &in, "testdata/expected.json": &expected} {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if len(expected) != len(methodNames) {
		t.Fatalf("expected.json has %d methods, want %d", len(expected), len(methodNames))
	}
	for name, perQuery := range expected {
		m, err := ParseMethod(name)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			if len(perQuery) != len(in.Queries) {
				t.Fatalf("%d queries, want %d", len(perQuery), len(in.Queries))
			}
			for _, q := range in.Queries {
				lists := make([]List, len(q.Lists))
				for i, l := range q.Lists {
					lists[i] = List{Name: l.Name, Weight: l.Weight, Depth: l.Depth}
					for _, it := range l.Items {
						lists[i].Items = append(lists[i].Items, Item{uint64(it[0]), it[1]})
					}
				}
				hits, err := Fuse(lists, Options{Method: m, K: in.K})
				if err != nil {
					t.Fatal(err)
				}
				exp := perQuery[q.ID]
				if len(hits) != len(exp) {
					t.Fatalf("%s: %d hits, want %d", q.ID, len(hits), len(exp))
				}
				byDoc := map[uint64]float64{}
				for _, e := range exp {
					byDoc[uint64(e[0])] = e[1]
				}
				for i, h := range hits {
					s, ok := byDoc[h.Doc]
					if !ok || math.Abs(s-h.Score) > 1e-6 {
						t.Errorf("%s: doc %d score %.12g, ranx %.12g (present %v)", q.ID, h.Doc, h.Score, s, ok)
					}
					// Same order as ranx, except within ties.
					if e := exp[i]; uint64(e[0]) != h.Doc && math.Abs(e[1]-h.Score) > 1e-9 {
						t.Errorf("%s: position %d is doc %d, ranx has doc %d", q.ID, i, h.Doc, uint64(e[0]))
					}
				}
			}
		})
	}
}
