package encoder

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// sharedData is the test collections directory, beside the repository.
const sharedData = "../../shared/data"

// readJSONL reads the first n objects of a BEIR jsonl file as "title
// text" strings.
func readJSONL(b testing.TB, path string, n int) []string {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Skipf("skipping: %s not found (needs ../shared beside the repo)", path)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() && len(out) < n {
		var rec struct{ Title, Text string }
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			b.Fatalf("%s:%d: %v", path, len(out)+1, err)
		}
		text := rec.Text
		if rec.Title != "" {
			text = rec.Title + " " + text
		}
		out = append(out, text)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// BenchmarkEncodeSciFact encodes the first 128 SciFact documents with each
// default model at 1 and 2 intra-op threads and reports documents per
// second. Run with -benchtime=1x: one iteration is 128 documents.
func BenchmarkEncodeSciFact(b *testing.B) {
	docs := readJSONL(b, filepath.Join(sharedData, "scifact", "corpus.jsonl"), 128)
	for _, name := range defaultModels {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(b *testing.B) {
				e := load(b, installedModel(b, name), &Options{IntraOpThreads: threads})
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, err := e.EncodeDocuments(context.Background(), docs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(docs)*b.N)/b.Elapsed().Seconds(), "docs/s")
			})
		}
	}
}

// BenchmarkQueryLatency encodes 300 SciFact queries one at a time, as a
// search would, and reports the latency percentiles.
func BenchmarkQueryLatency(b *testing.B) {
	queries := readJSONL(b, filepath.Join(sharedData, "scifact", "queries.jsonl"), 300)
	for _, name := range defaultModels {
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/threads=%d", name, threads), func(b *testing.B) {
				e := load(b, installedModel(b, name), &Options{IntraOpThreads: threads})
				var lat []time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					for _, q := range queries {
						start := time.Now()
						if _, err := e.EncodeQueries(context.Background(), []string{q}); err != nil {
							b.Fatal(err)
						}
						lat = append(lat, time.Since(start))
					}
				}
				slices.Sort(lat)
				ms := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
				b.ReportMetric(ms(0.50), "p50-ms")
				b.ReportMetric(ms(0.95), "p95-ms")
				b.ReportMetric(float64(len(lat))/b.Elapsed().Seconds(), "queries/s")
			})
		}
	}
}

// BenchmarkQueryBatch encodes SciFact queries in model runs of 1, 2, 4, 8
// and 16 queries of mixed lengths, as the query batcher forms them, with
// the default model at 2 intra-op threads, and reports the CPU cost per
// query as ns/query: what sharing a run saves.
func BenchmarkQueryBatch(b *testing.B) {
	queries := readJSONL(b, filepath.Join(sharedData, "scifact", "queries.jsonl"), 256)
	e := load(b, installedModel(b, DefaultModel), &Options{IntraOpThreads: 2})
	ctx := context.Background()
	for _, n := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			done := 0
			for b.Loop() {
				i := done % len(queries)
				texts := queries[i:min(i+n, len(queries))]
				if _, err := e.Encode(ctx, Request{Side: Query, Texts: texts}); err != nil {
					b.Fatal(err)
				}
				done += len(texts)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/query")
		})
	}
}
