package latecollect

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkMaxSim measures the exact rescoring kernel on one document of
// SciFact's average length (238 MiniLM tokens) against a 20-token query.
func BenchmarkMaxSim(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	q, d := randomUnit(r, 20, 384), randomUnit(r, 238, 384)
	blob, _ := EncodeTokens(d, 384, F16)
	h, _ := parseHeader(blob)
	best := make([]float32, 20)
	buf := make([]float32, len(d))
	b.ReportAllocs()
	for b.Loop() {
		decodeRows(blob, h, 0, h.count, buf)
		maxSim(q, buf, 384, nil, best)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(20*238), "ns/dot")
}
