package latecollect

import (
	"errors"
	"math"
	"testing"
)

// Every expected value below is worked out by hand in the comment beside
// it; dim is 2 so the dot products can be read off.
func TestScoresHandComputed(t *testing.T) {
	q := []float32{1, 0, 0, 1}            // q0=(1,0) q1=(0,1)
	d := []float32{0.5, 0.5, 1, 0, 0, -1} // d0=(.5,.5) d1=(1,0) d2=(0,-1)
	tests := []struct {
		name         string
		q, d         []float32
		qmask, dmask []bool
		sum, avg     float32
	}{
		// q0: max(.5, 1, 0) = 1; q1: max(.5, 0, -1) = .5.
		{"plain", q, d, nil, nil, 1.5, 0.75},
		// d1 masked. q0: max(.5, 0) = .5; q1: max(.5, -1) = .5.
		{"masked doc token", q, d, nil, []bool{true, false, true}, 1.0, 0.5},
		// q1 masked: only q0 counts, max 1; the mean is over 1 token.
		{"masked query token", q, d, []bool{true, false}, nil, 1.0, 1.0},
		// A padding row (0,0) masked out leaves the plain result.
		{"padded doc", q, append(append([]float32{}, d...), 0, 0), nil, []bool{true, true, true, false}, 1.5, 0.75},
		// A query padded with a zero row that is masked: same as plain.
		{"padded query", append(append([]float32{}, q...), 0, 0), d, []bool{true, true, false}, nil, 1.5, 0.75},
		// Negative maxima: q0=(1,0) against d=(-1,0) gives -1 ...
		{"negative max", []float32{1, 0}, []float32{-1, 0}, nil, nil, -1, -1},
		// ... and an unmasked zero padding row would wrongly lift it to 0,
		{"unmasked padding counts", []float32{1, 0}, []float32{-1, 0, 0, 0}, nil, nil, 0, 0},
		// which the mask prevents.
		{"masked padding ignored", []float32{1, 0}, []float32{-1, 0, 0, 0}, nil, []bool{true, false}, -1, -1},
		// Document shorter than the query: 3 query tokens, 1 doc token
		// (.6,.8). Dots: q0 .6, q1 .8, q2 (.6,.8)·(.6,.8) = 1. Sum 2.4,
		// mean .8.
		{"doc shorter than query", []float32{1, 0, 0, 1, 0.6, 0.8}, []float32{0.6, 0.8}, nil, nil, 2.4, 0.8},
		// An empty document contributes 0 per query token.
		{"empty doc", q, nil, nil, nil, 0, 0},
		// A document whose tokens are all masked is empty.
		{"all doc tokens masked", q, d, nil, []bool{false, false, false}, 0, 0},
		// A query with no token that counts scores 0.
		{"all query tokens masked", q, d, []bool{false, false}, nil, 0, 0},
		// Repeated document tokens do not add up: max, not sum, over d.
		{"duplicate doc tokens", []float32{1, 0}, []float32{1, 0, 1, 0, 1, 0}, nil, nil, 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sum, err := SumMax(tc.q, tc.d, 2, tc.qmask, tc.dmask)
			if err != nil {
				t.Fatal(err)
			}
			avg, err := AvgMax(tc.q, tc.d, 2, tc.qmask, tc.dmask)
			if err != nil {
				t.Fatal(err)
			}
			if !near(sum, tc.sum) || !near(avg, tc.avg) {
				t.Errorf("sum-max %v avg-max %v, want %v and %v", sum, avg, tc.sum, tc.avg)
			}
		})
	}
}

func TestScoresRejectBadShapes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		q, d         []float32
		dim          int
		qmask, dmask []bool
	}{
		{"zero dim", []float32{1}, []float32{1}, 0, nil, nil},
		{"ragged query", []float32{1, 2, 3}, []float32{1, 2}, 2, nil, nil},
		{"ragged doc", []float32{1, 2}, []float32{1}, 2, nil, nil},
		{"short query mask", []float32{1, 2, 3, 4}, []float32{1, 2}, 2, []bool{true}, nil},
		{"long doc mask", []float32{1, 2}, []float32{1, 2}, 2, nil, []bool{true, true}},
	} {
		if _, err := AvgMax(tc.q, tc.d, tc.dim, tc.qmask, tc.dmask); !errors.Is(err, ErrBadVector) {
			t.Errorf("%s: AvgMax err = %v, want ErrBadVector", tc.name, err)
		}
		if _, err := SumMax(tc.q, tc.d, tc.dim, tc.qmask, tc.dmask); !errors.Is(err, ErrBadVector) {
			t.Errorf("%s: SumMax err = %v, want ErrBadVector", tc.name, err)
		}
	}
}

// The unrolled dot must agree with the plain loop for every length
// around the unrolling width.
func TestDotMatchesNaive(t *testing.T) {
	for n := range 20 {
		a, b := make([]float32, n), make([]float32, n)
		var want float64
		for i := range a {
			a[i], b[i] = float32(i)+1, float32(2*i)-5
			want += float64(a[i]) * float64(b[i])
		}
		if got := dot(a, b); math.Abs(float64(got)-want) > 1e-3 {
			t.Errorf("n=%d: dot = %v, want %v", n, got, want)
		}
	}
}

func near(a, b float32) bool { return math.Abs(float64(a-b)) < 1e-6 }

// The blocked kernel must agree with one dot product per pair for every
// query and document length around the block sizes, masked or not.
func TestMaxSimMatchesPairwise(t *testing.T) {
	const dim = 5
	for nq := range 10 {
		for nd := range 6 {
			q, d := make([]float32, nq*dim), make([]float32, nd*dim)
			for i := range q {
				q[i] = float32((i*7)%11) - 5
			}
			for i := range d {
				d[i] = float32((i*5)%13) - 6
			}
			for _, mask := range [][]bool{nil, alternate(nd)} {
				got := make([]float32, nq)
				maxSim(q, d, dim, mask, got)
				for i, want := range naiveMaxSim(q, d, dim, mask, nq) {
					if got[i] != want {
						t.Fatalf("nq=%d nd=%d mask=%v: best[%d] = %v, want %v", nq, nd, mask != nil, i, got[i], want)
					}
				}
			}
		}
	}
}

func alternate(n int) []bool {
	m := make([]bool, n)
	for i := range m {
		m[i] = i%2 == 0
	}
	return m
}

// naiveMaxSim is the reference for maxSim: for each of the nq query
// tokens, the largest dot product with a counted document token, or -Inf.
func naiveMaxSim(q, d []float32, dim int, mask []bool, nq int) []float32 {
	best := make([]float32, nq)
	for i := range best {
		best[i] = float32(math.Inf(-1))
		for j := range len(d) / dim {
			if mask == nil || mask[j] {
				best[i] = max(best[i], dot(q[i*dim:(i+1)*dim], d[j*dim:(j+1)*dim]))
			}
		}
	}
	return best
}
