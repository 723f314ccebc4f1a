package encoder

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
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
// and 16 queries, with the default model at 2 intra-op threads, and
// reports the cost per query as ns/query: what sharing a run saves. The
// mixed runs take the queries in file order, as the query batcher meets
// them, padded to the longest of each run (1.16 to 1.72 times their
// tokens for 2 to 16 queries); the sorted runs take them sorted by
// length, with next to no padding.
func BenchmarkQueryBatch(b *testing.B) {
	queries := readJSONL(b, filepath.Join(sharedData, "scifact", "queries.jsonl"), 256)
	e := load(b, installedModel(b, DefaultModel), &Options{IntraOpThreads: 2})
	ctx := context.Background()
	p, err := e.Prepare(Request{Side: Query, Texts: queries})
	if err != nil {
		b.Fatal(err)
	}
	sorted := make([]string, len(queries))
	for i, k := range p.order {
		sorted[i] = queries[k]
	}
	for _, order := range []struct {
		name  string
		texts []string
	}{{"mixed", queries}, {"sorted", sorted}} {
		for _, n := range []int{1, 2, 4, 8, 16} {
			if n == 1 && order.name == "sorted" {
				continue
			}
			b.Run(fmt.Sprintf("%s/batch=%d", order.name, n), func(b *testing.B) {
				b.ReportAllocs()
				done := 0
				for b.Loop() {
					i := done % len(order.texts)
					texts := order.texts[i:min(i+n, len(order.texts))]
					if _, err := e.Encode(ctx, Request{Side: Query, Texts: texts}); err != nil {
						b.Fatal(err)
					}
					done += len(texts)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/query")
			})
		}
	}
}

// BenchmarkEncodeQuery compares EncodeQuery with what it replaces, on
// distinct SciFact queries with the cache off and the default model at 2
// intra-op threads, alternating the two sides query by query (lone) or
// round by round (callers=8) so that a change in the machine's load hits
// both alike:
//   - lone: one caller, Encode of one text against EncodeQuery; reports
//     each side's p50-ms (a single searcher's latency);
//   - callers=8: 8 callers at once, rounds of 64 queries, with QueryBatch
//     1 (each query in a run of its own, as before) against the default;
//     reports each side's queries/s and the batched side's queries/run.
func BenchmarkEncodeQuery(b *testing.B) {
	queries := readJSONL(b, filepath.Join(sharedData, "scifact", "queries.jsonl"), 1<<20)
	dir := installedModel(b, DefaultModel)
	ctx := context.Background()
	p50 := func(lat []time.Duration) float64 {
		slices.Sort(lat)
		return float64(lat[len(lat)/2]) / 1e6
	}
	b.Run("lone", func(b *testing.B) {
		e := load(b, dir, &Options{IntraOpThreads: 2, QueryCacheBytes: -1})
		var encode, query []time.Duration
		i := 0
		for b.Loop() {
			q := queries[i%len(queries)]
			for k := range 2 {
				start := time.Now()
				var err error
				if (i+k)%2 == 0 {
					_, err = e.EncodeQueries(ctx, []string{q})
					encode = append(encode, time.Since(start))
				} else {
					_, err = e.EncodeQuery(ctx, q, false)
					query = append(query, time.Since(start))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
		b.ReportMetric(p50(encode), "p50-ms-Encode")
		b.ReportMetric(p50(query), "p50-ms-EncodeQuery")
	})
	b.Run("callers=8", func(b *testing.B) {
		alone := load(b, dir, &Options{IntraOpThreads: 2, QueryCacheBytes: -1, QueryBatch: 1})
		batched := load(b, dir, &Options{IntraOpThreads: 2, QueryCacheBytes: -1})
		var took [2]time.Duration
		var done [2]int
		round := 0
		for b.Loop() {
			for k := range 2 {
				side := (round + k) % 2
				e := []*Encoder{alone, batched}[side]
				var next atomic.Int64
				var wg sync.WaitGroup
				start := time.Now()
				for range 8 {
					wg.Go(func() {
						for i := int(next.Add(1) - 1); i < 64; i = int(next.Add(1) - 1) {
							if _, err := e.EncodeQuery(ctx, queries[(round*64+i)%len(queries)], false); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				took[side] += time.Since(start)
				done[side] += 64
			}
			round++
		}
		s := batched.QueryStats()
		b.ReportMetric(float64(done[0])/took[0].Seconds(), "queries/s-alone")
		b.ReportMetric(float64(done[1])/took[1].Seconds(), "queries/s-batched")
		b.ReportMetric(float64(s.Queries)/float64(s.Runs), "queries/run")
	})
}
