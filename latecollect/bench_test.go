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
