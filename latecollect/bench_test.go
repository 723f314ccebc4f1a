package latecollect

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"
)

// BenchmarkSciFact reports, on SciFact with the default knobs, query
// latency p50/p95 of both modes (one query per iteration, cycling through
// the 300 test queries; run with -benchtime 300x for every query once),
// bytes per stored token, and the time to build the token index (one
// build takes tens of seconds, so run build with -benchtime 1x).
//
//	go test -run '^$' -bench 'SciFact$/(candidates|exhaustive)' -benchtime 300x ./latecollect/
//	go test -run '^$' -bench 'SciFact$/build' -benchtime 1x ./latecollect/
func BenchmarkSciFact(b *testing.B) {
	f := loadSciFact(b)
	ctx := context.Background()
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			// No snapshot exists for these options, so Open rebuilds:
			// load the blobs, train the IVF quantizer, add every key.
			x, err := Open(ctx, f.st, &Options{Model: f.x.opts.Model, Dim: f.x.opts.Dim, SnapshotEvery: -1})
			if err != nil {
				b.Fatal(err)
			}
			s, _ := x.Stats()
			b.ReportMetric(float64(s.StoredBytes)/float64(s.Tokens), "stored-bytes/token")
			b.ReportMetric(float64(s.IndexBytes)/float64(s.TokenKeys), "faiss-bytes/token")
			b.ReportMetric(float64(s.Tokens), "tokens")
			x.Close()
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/build")
	})
	for _, mode := range []Mode{Candidates, Exhaustive} {
		b.Run(mode.String(), func(b *testing.B) {
			b.ReportAllocs()
			var lat []time.Duration
			i := 0
			for b.Loop() {
				q := f.qtok[i%len(f.qtok)]
				i++
				start := time.Now()
				if _, err := f.x.Search(ctx, q, &SearchOptions{K: 10, Mode: mode}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			reportLatency(b, lat)
		})
	}
}

func reportLatency(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(percentile(lat, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 95).Microseconds())/1000, "p95-ms")
}

// BenchmarkSciFactFilter compares the two ways of applying a document
// filter: translated to token-id ranges inside FAISS (the default), or
// applied to the documents while collecting. It reports latency and
// recall@10 against filtered exhaustive search, for filters keeping 2%,
// 20% and 60% of the documents.
//
//	go test -run '^$' -bench SciFactFilter -benchtime 60x ./latecollect/
func BenchmarkSciFactFilter(b *testing.B) {
	f := loadSciFact(b)
	ctx := context.Background()
	for _, pct := range []int{2, 20, 60} {
		r := rand.New(rand.NewPCG(uint64(pct), 3))
		allow := roaring64.New()
		for num := range f.ids {
			if r.IntN(100) < pct {
				allow.Add(num)
			}
		}
		want := map[int][]Hit{}
		for _, collection := range []bool{false, true} {
			name := "token-level"
			if collection {
				name = "collection"
			}
			b.Run(fmt.Sprintf("keep%d%%/%s", pct, name), func(b *testing.B) {
				setFilterAtCollection(f.x, collection)
				defer setFilterAtCollection(f.x, false)
				var (
					lat    []time.Duration
					recall float64
				)
				i := 0
				for b.Loop() {
					qi := (i * 5) % len(f.qtok)
					i++
					start := time.Now()
					got, err := f.x.Search(ctx, f.qtok[qi], &SearchOptions{K: 10, Allow: allow})
					lat = append(lat, time.Since(start))
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					ref, ok := want[qi]
					if !ok {
						if ref, err = f.x.Search(ctx, f.qtok[qi], &SearchOptions{K: 10, Allow: allow, Mode: Exhaustive}); err != nil {
							b.Fatal(err)
						}
						want[qi] = ref
					}
					found := 0
					for _, h := range ref {
						if !allow.Contains(h.DocNum) {
							b.Fatalf("exhaustive hit %d outside the filter", h.DocNum)
						}
						if slices.ContainsFunc(got, func(g Hit) bool { return g.DocNum == h.DocNum }) {
							found++
						}
					}
					for _, h := range got {
						if !allow.Contains(h.DocNum) {
							b.Fatalf("hit %d outside the filter", h.DocNum)
						}
					}
					recall += float64(found) / float64(max(1, len(ref)))
					b.StartTimer()
				}
				reportLatency(b, lat)
				b.ReportMetric(recall/float64(b.N), "recall@10")
			})
		}
	}
}

// BenchmarkFirstRun measures what settling the first run of the log costs
// with residual codes (see settler): one run of documents (applyStride-1
// of them, sequences 1 to 255) of 300 random unit tokens of 384 values,
// applied
//
//   - in one call (no settling);
//   - in calls of 8 then searched, as a batch load is (one settling);
//   - in calls of 8, each followed by a search: the worst a writer of
//     batches of 8 can make it, and what retraining at the end of every
//     Apply call would always cost;
//   - in calls ending at sequences 1, 2, 4 ... 128, then 255, each
//     followed by a search: trainings on a doubling prefix, what training
//     on a fixed prefix of the run at those points would cost (with the
//     last settling, on all 255, instead of coding the last 127).
//
// It reports the CPU time (every thread) and the wall time of applying
// and searching, and the CPU time of the final search (with the settling
// it does, if any).
//
//	go test -run '^$' -bench FirstRun -benchtime 1x ./latecollect/
func BenchmarkFirstRun(b *testing.B) {
	const dim, tokens = 384, 300
	docs := applyStride - 1
	r := rand.New(rand.NewPCG(17, 17))
	c := &synthCorpus{dim: dim, vecs: map[string][]float32{}}
	for i := range docs {
		c.vecs[fmt.Sprintf("d%03d", i)] = randomUnit(r, tokens, dim)
	}
	query := randomUnit(r, 32, dim)
	ctx := context.Background()
	doubling := func(applied uint64) int {
		end := uint64(1)
		for end <= applied {
			end *= 2
		}
		return int(end - applied)
	}
	for _, tc := range []struct {
		name        string
		call        func(applied uint64) int // changes in the next Apply call
		searchEvery bool                     // a search after every call, not once at the end
	}{
		{"one-call", func(uint64) int { return 1 << 12 }, false},
		{"calls-of-8", func(uint64) int { return 8 }, false},
		{"calls-of-8-each-searched", func(uint64) int { return 8 }, true},
		{"doubling-each-searched", doubling, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var cpu, wall, final time.Duration
			calls := 0
			for b.Loop() {
				b.StopTimer()
				st := openStore(b, b.TempDir()) // in memory, a store refuses blobs this large
				x := openIndex(b, st, &Options{Model: testModel, Dim: dim, SnapshotEvery: -1, Description: "Residual"})
				ids := slices.Sorted(mapsKeys(c.vecs))
				for i := 0; i < len(ids); i += 8 {
					c.write(b, st, F16, ids[i:min(i+8, len(ids))]...)
				}
				search := func() {
					if _, err := x.Search(ctx, query, &SearchOptions{K: 10}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				cpu0, start := processCPU(), time.Now()
				for x.AppliedSeq() < st.LastSeq() {
					ch, err := st.Changes(ctx, x.AppliedSeq(), tc.call(x.AppliedSeq()))
					if err != nil {
						b.Fatal(err)
					}
					if err := x.Apply(ctx, ch); err != nil {
						b.Fatal(err)
					}
					calls++
					if tc.searchEvery && x.AppliedSeq() < st.LastSeq() {
						search()
					}
				}
				cpu1 := processCPU()
				search()
				cpu2 := processCPU()
				cpu, wall, final = cpu+cpu2-cpu0, wall+time.Since(start), final+cpu2-cpu1
				b.StopTimer()
				x.Close()
				st.Close()
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
			b.ReportMetric(wall.Seconds()/n, "wall-s/op")
			b.ReportMetric(final.Seconds()/n, "final-search-cpu-s/op")
			b.ReportMetric(float64(calls)/n, "calls/op")
		})
	}
}

// BenchmarkSciFactCentroidScores times the residual search at the fusion
// depth (K=100, every test query per op) with the centroids scored in
// float32 (the AVX-512 kernels) and in int8 (scoreCentroidsI8), each query
// searched both ways one after the other (in turn first), so that a drift
// of the machine's speed touches both alike. It reports both p50s and the
// median of the per-query ratios int8 / float. On a collection as built:
//
//	TANDEM_LATE_MODEL=bge-small-en-v1.5 TANDEM_LATE_COLLECTION=DIR \
//	  go test -run '^$' -bench SciFactCentroidScores -benchtime 3x ./latecollect/
func BenchmarkSciFactCentroidScores(b *testing.B) {
	if !i8Centroids(384) {
		b.Skip("skipping: no AVX-512 VNNI on this CPU")
	}
	f := loadSciFact(b)
	ctx := context.Background()
	defer func(v bool) { useI8Centroids = v }(useI8Centroids)
	var lat [2][]time.Duration
	var ratios []float64
	n := 0
	for b.Loop() {
		for _, q := range f.qtok {
			var took [2]time.Duration
			for j := range 2 {
				i8 := (j+n)%2 == 1
				useI8Centroids = i8
				start := time.Now()
				if _, err := f.x.Search(ctx, q, &SearchOptions{K: 100}); err != nil {
					b.Fatal(err)
				}
				k := 0
				if i8 {
					k = 1
				}
				took[k] = time.Since(start)
			}
			n++
			lat[0], lat[1] = append(lat[0], took[0]), append(lat[1], took[1])
			ratios = append(ratios, float64(took[1])/float64(took[0]))
		}
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(percentile(lat[0], 50).Microseconds())/1000, "float-p50-ms")
	b.ReportMetric(float64(percentile(lat[1], 50).Microseconds())/1000, "int8-p50-ms")
	b.ReportMetric(ratios[len(ratios)/2], "int8/float")
}
