package latecollect

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/storage"
)

// BenchmarkExactStage measures the residual-code index's exact stage: one
// op rescores exactReadDocs documents, chosen at random among
// exactBenchDocs, from their full-precision tokens (Rescore, which runs
// exactScore as stage 5 does). The documents are SciFact-sized for
// MiniLM: 256 tokens of 384 dimensions in float16, 197 KB a blob, and
// the collection (200 MB) is in the page cache, as a searched one is. It
// reports the time per document read and scored, on one worker and two,
// and the process's CPU time per document (steadier than the wall time
// on a shared machine).
//
//	go test -run '^$' -bench ExactStage -benchtime 200x -count 5 ./latecollect/
func BenchmarkExactStage(b *testing.B) {
	const (
		exactBenchDocs = 1024
		exactReadDocs  = 128
		tokens, dim    = 256, 384
	)
	ctx := context.Background()
	st, err := storage.Open(b.TempDir(), &storage.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	r := rand.New(rand.NewPCG(8, 8))
	for start := 0; start < exactBenchDocs; start += 64 {
		var batch storage.Batch
		for i := start; i < start+64; i++ {
			blob, err := EncodeTokens(randomUnit(r, tokens, dim), dim, F16)
			if err != nil {
				b.Fatal(err)
			}
			batch.Put(tandem.Doc{ID: fmt.Sprintf("d%04d", i), Fields: map[string]any{"text": "x"}}, map[string][]byte{BlobName(testModel): blob})
		}
		if _, err := st.Write(ctx, &batch); err != nil {
			b.Fatal(err)
		}
	}
	nums := make([]uint64, 0, exactBenchDocs)
	for i := range exactBenchDocs {
		num, _, err := st.Lookup(fmt.Sprintf("d%04d", i))
		if err != nil {
			b.Fatal(err)
		}
		nums = append(nums, num)
	}
	query := randomUnit(r, 32, dim)
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			// Few centroids: the exact stage does not depend on them,
			// and training more would take most of the benchmark.
			x, err := Open(ctx, st, &Options{Model: testModel, Dim: dim, Description: "Residual16", SnapshotEvery: -1, Parallelism: workers})
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			pick := rand.New(rand.NewPCG(9, 9))
			docs := make([]uint64, exactReadDocs)
			warm := func() {
				for i := range docs {
					docs[i] = nums[pick.IntN(len(nums))]
				}
				slices.Sort(docs)
				if _, err := x.Rescore(ctx, query, docs, &SearchOptions{K: 10}); err != nil {
					b.Fatal(err)
				}
			}
			for range exactBenchDocs / exactReadDocs * 2 {
				warm() // every blob read once: in the page cache
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for b.Loop() {
				warm()
			}
			cpu = processCPU() - cpu
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*exactReadDocs), "µs/doc")
			if cpu > 0 {
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*exactReadDocs), "cpu-µs/doc")
			}
		})
	}
}
