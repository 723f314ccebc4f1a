package storage

import (
	"context"
	"fmt"
	"testing"

	"github.com/tandemsearch/tandem"
)

// BenchmarkUpsertBatch upserts existing documents, each with a small blob
// (as a pooled vector is) and a large one (as a token matrix is), in
// batches of 100 and of 1,000 ids; a batch that replaces a document
// deletes its old blobs first. It reports the time per upserted document:
//
//	go test ./storage -run '^$' -bench UpsertBatch
func BenchmarkUpsertBatch(b *testing.B) {
	const ids = 1000
	small, large := make([]byte, 1536), make([]byte, 6144)
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s, err := Open(b.TempDir(), &Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			put := func(first, n int) {
				var batch Batch
				for i := range n {
					id := fmt.Sprintf("d%05d", (first+i)%ids)
					batch.Put(tandem.Doc{ID: id, Fields: map[string]any{"text": "x"}}, map[string][]byte{"vec/m": small, "tok/m": large})
				}
				if _, err := s.Write(ctx, &batch); err != nil {
					b.Fatal(err)
				}
			}
			put(0, ids)
			done := 0
			b.ResetTimer()
			for b.Loop() {
				put(done, size)
				done += size
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/document")
		})
	}
}
