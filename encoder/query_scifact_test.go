package encoder

import (
	"context"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestQueryBatchSameVectors encodes SciFact queries of every length the
// queries have (up to three of each length, in the file's order, so that
// batches mix lengths: about a tenth of the 1,109) with the default model
// alone (Encode, a run of its own), in batches of 8 and 32 queries of
// mixed lengths as the query batcher runs them, through EncodeQuery from
// 8 goroutines at once (batches as they form), and from the query cache,
// and requires bit-identical pooled and token vectors from all of them.
//
// Padding a query to its batch's longest does not move a float: padded
// positions get attention weight exp(-large) = 0 exactly, and ONNX
// Runtime's kernels compute each row of a batch alone, in the same order
// whatever the other rows (the test logs the largest difference, 0). So
// the batcher mixes lengths; were this to fail on some CPU, batches would
// have to hold queries of one length.
func TestQueryBatchSameVectors(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short: encodes SciFact queries six times")
	}
	all := readJSONL(t, filepath.Join(sharedData, "scifact", "queries.jsonl"), 1<<20)
	e := load(t, installedModel(t, DefaultModel), &Options{IntraOpThreads: 2})
	ctx := context.Background()
	// Every length, each up to three times: the lengths, not the number of
	// queries, are what padding in a batch depends on.
	var queries []string
	perLength := map[int]int{}
	for _, q := range all {
		p, err := e.prepare(Query, []string{q}, true)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(p.seqs[0].ids); perLength[n] < 3 {
			perLength[n]++
			queries = append(queries, q)
		}
	}
	t.Logf("%d of %d queries: %d lengths, %d to %d tokens", len(queries), len(all), len(perLength), slices.Min(slices.Collect(maps.Keys(perLength))), slices.Max(slices.Collect(maps.Keys(perLength))))
	alone := make([]*Batch, len(queries))
	for i, q := range queries {
		b, err := e.Encode(ctx, Request{Side: Query, Texts: []string{q}, Tokens: true})
		if err != nil {
			t.Fatal(err)
		}
		alone[i] = b
	}
	same := func(how string, i int, vec []float32, tok *Tokens) float64 {
		t.Helper()
		want := alone[i]
		d := maxAbsDiff(vec, want.Vectors[0])
		if tok != nil {
			d = max(d, maxAbsDiff(tok.Vectors, want.Tokens[0].Vectors))
		}
		if d != 0 || (tok != nil && len(tok.IDs) != len(want.Tokens[0].IDs)) {
			t.Errorf("%s: query %d %q: max abs difference %g from its own run", how, i, queries[i], d)
		}
		return d
	}

	for _, run := range []struct {
		size   int
		narrow bool
	}{{8, false}, {32, false}, {8, true}} {
		size, worst := run.size, 0.0
		for start := 0; start < len(queries); start += size {
			var batch []*pendingQuery
			for i := start; i < min(start+size, len(queries)); i++ {
				p, err := e.prepare(Query, queries[i:i+1], true)
				if err != nil {
					t.Fatal(err)
				}
				batch = append(batch, &pendingQuery{ctx: ctx, seq: p.seqs[0], tokens: true, done: make(chan struct{})})
			}
			e.queries.runBatch(batch, run.narrow)
			for k, p := range batch {
				if p.err != nil {
					t.Fatal(p.err)
				}
				worst = max(worst, same("batch", start+k, p.vector, p.tok))
			}
		}
		t.Logf("batches of %d mixed lengths (one-thread session: %v): max abs difference %g over %d queries", size, run.narrow, worst, len(queries))
	}

	// EncodeQuery from 8 goroutines: batched runs, filling the cache.
	before := e.QueryStats()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(queries); i = int(next.Add(1) - 1) {
				b, err := e.EncodeQuery(ctx, queries[i], true)
				if err != nil {
					t.Error(err)
					return
				}
				same("EncodeQuery", i, b.Vectors[0], &b.Tokens[0])
			}
		})
	}
	wg.Wait()
	s := e.QueryStats()
	runs, queried := s.Runs-before.Runs, s.Queries-before.Queries
	t.Logf("EncodeQuery from 8 goroutines: %d queries in %d runs; cache %d entries, %d bytes", queried, runs, s.CacheEntries, s.CacheBytes)
	if runs >= queried {
		t.Errorf("8 concurrent callers: %d queries in %d runs, none shared", queried, runs)
	}
	for i, q := range queries {
		b, err := e.EncodeQuery(ctx, q, true)
		if err != nil {
			t.Fatal(err)
		}
		same("cache", i, b.Vectors[0], &b.Tokens[0])
	}
	if s2 := e.QueryStats(); s2.Runs != s.Runs || s2.CacheHits < int64(len(queries)) {
		t.Errorf("the second pass ran the model: %+v", s2)
	}
}

func maxAbsDiff(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	d := 0.0
	for i := range a {
		d = max(d, math.Abs(float64(a[i]-b[i])))
	}
	return d
}
