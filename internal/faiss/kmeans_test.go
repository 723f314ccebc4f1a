//go:build cgo

package faiss

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKMeansQuantizer clusters points drawn around three unit directions and
// checks that the quantizer puts every point with the others of its
// direction, and that spherical centroids have unit length.
func TestKMeansQuantizer(t *testing.T) {
	const d, per = 16, 200
	rng := rand.New(rand.NewPCG(1, 2))
	var x []float32
	for c := range 3 {
		for range per {
			v := make([]float32, d)
			v[c] = 1
			for i := range v {
				v[i] += float32(rng.NormFloat64() * 0.05)
			}
			normalize(v)
			x = append(x, v...)
		}
	}
	cent, err := KMeans(x, d, 3, KMeansOptions{Spherical: true, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		var n float64
		for _, v := range cent[c*d : (c+1)*d] {
			n += float64(v) * float64(v)
		}
		if math.Abs(n-1) > 1e-4 {
			t.Errorf("centroid %d has squared norm %v, want 1", c, n)
		}
	}
	q, err := NewQuantizer(cent, d)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := make([]int32, len(x)/d)
	if err := q.Assign(x, got); err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		first := got[c*per]
		for i := c * per; i < (c+1)*per; i++ {
			if got[i] != first {
				t.Fatalf("point %d of direction %d assigned to %d, its first point to %d", i, c, got[i], first)
			}
		}
		for o := range c {
			if got[o*per] == first {
				t.Fatalf("directions %d and %d share centroid %d", o, c, first)
			}
		}
	}
	if _, err := KMeans(x[:2*d], d, 3, KMeansOptions{}); err == nil {
		t.Error("KMeans of 2 points into 3 centroids: no error")
	}
	if err := q.Assign(x[:d+1], got[:1]); err == nil {
		t.Error("Assign of a partial vector: no error")
	}
}

func normalize(v []float32) {
	var n float64
	for _, x := range v {
		n += float64(x) * float64(x)
	}
	s := float32(1 / math.Sqrt(n))
	for i := range v {
		v[i] *= s
	}
}
