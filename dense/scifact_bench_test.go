package dense

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/storage"
)

// sciFactDir is the BEIR SciFact collection, outside the repository.
const sciFactDir = "../../shared/data/scifact"

// BenchmarkSciFact checks the synthetic benchmarks against real
// embeddings: SciFact's 5,183 abstracts encoded with bge-small-en-v1.5,
// indexed with IVF at FAISS's largest list count for that size (132) and
// probing about the share of lists the default probes at 100k (32 of
// 1,264 = 2.5%) and more. It reports recall@10 against exact search, with
// and without a 5% filter, and nDCG@10 on the 300 test queries (exact
// search is the Flat index). Encoding takes minutes on 2 cores.
func BenchmarkSciFact(b *testing.B) {
	if _, err := os.Stat(filepath.Join(sciFactDir, "corpus.jsonl")); err != nil {
		b.Skipf("SciFact not found at %s: %v", sciFactDir, err)
	}
	dir, err := encoder.Find(encoder.DefaultModel)
	if err != nil {
		b.Skipf("encoder %s not installed: %v", encoder.DefaultModel, err)
	}
	ctx := context.Background()
	enc, err := encoder.Load(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	ids, texts := readCorpus(b)
	queries, err := evaluate.LoadQueries(filepath.Join(sciFactDir, "queries.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	qrels, err := evaluate.LoadQrels(filepath.Join(sciFactDir, "qrels", "test.tsv"))
	if err != nil {
		b.Fatal(err)
	}
	var qtexts []string
	var qids []string
	for _, q := range queries {
		if _, ok := qrels[q.ID]; ok {
			qids, qtexts = append(qids, q.ID), append(qtexts, q.Text)
		}
	}
	start := time.Now()
	docs, err := enc.EncodeDocuments(ctx, texts)
	if err != nil {
		b.Fatal(err)
	}
	qs, err := enc.EncodeQueries(ctx, qtexts)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("encoded %d documents and %d queries in %v", len(texts), len(qtexts), time.Since(start))

	st := openStore(b, b.TempDir())
	var batch storage.Batch
	for i, id := range ids {
		batch.Put(tandem.Doc{ID: id, Fields: map[string]any{"text": "x"}},
			map[string][]byte{BlobName(testModel): EncodeVector(docs.Vectors[i])})
	}
	if _, err := st.Write(ctx, &batch); err != nil {
		b.Fatal(err)
	}
	byNum := map[uint64]string{}
	var nums []uint64
	for _, id := range ids {
		n, _, _ := st.Lookup(id)
		byNum[n] = id
		nums = append(nums, n)
	}
	filter := randomFilter(nums, 0.05, rand.New(rand.NewPCG(8, 8)))
	exact, err := Open(ctx, st, &Options{Model: testModel, Dim: enc.Dim(), Description: "Flat"})
	if err != nil {
		b.Fatal(err)
	}
	defer exact.Close()
	search := func(x *Index, allow *roaring64.Bitmap) ([][]Hit, evaluate.Run) {
		out := make([][]Hit, len(qids))
		run := evaluate.Run{}
		for i := range qids {
			hits, err := x.Search(ctx, qs.Vectors[i], 10, allow)
			if err != nil {
				b.Fatal(err)
			}
			out[i] = hits
			for _, h := range hits {
				run[qids[i]] = append(run[qids[i]], evaluate.Result{DocID: byNum[h.DocNum], Score: float64(h.Score)})
			}
		}
		return out, run
	}
	truth, truthRun := search(exact, nil)
	truthF, _ := search(exact, filter)
	rep, err := evaluate.Evaluate(qrels, truthRun)
	if err != nil {
		b.Fatal(err)
	}
	exactNDCG := rep.Mean.NDCG10
	ivf, err := Open(ctx, st, &Options{Model: testModel, Dim: enc.Dim(), Description: "IVF132,Flat", ExactFilterMax: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer ivf.Close()
	for _, np := range []int{1, 2, 4, 8, 16} {
		b.Run(fmt.Sprintf("IVF132/nprobe=%d", np), func(b *testing.B) {
			ivf.opts.NProbe = np
			var got, gotF [][]Hit
			var run evaluate.Run
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				got, run = search(ivf, nil)
				gotF, _ = search(ivf, filter)
			}
			var r, rf float64
			for i := range qids {
				r += recall(got[i], truth[i])
				rf += recall(gotF[i], truthF[i])
			}
			rep, err := evaluate.Evaluate(qrels, run)
			if err != nil {
				b.Fatal(err)
			}
			n := float64(len(qids))
			b.ReportMetric(r/n, "recall@10")
			b.ReportMetric(rf/n, "recall@10_filter5%")
			b.ReportMetric(rep.Mean.NDCG10, "ndcg@10")
			b.ReportMetric(exactNDCG, "exact_ndcg@10")
		})
	}
}

// readCorpus reads SciFact's ids and "title text" strings.
func readCorpus(b *testing.B) (ids, texts []string) {
	f, err := os.Open(filepath.Join(sciFactDir, "corpus.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var d struct {
			ID    string `json:"_id"`
			Title string `json:"title"`
			Text  string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			b.Fatal(err)
		}
		ids, texts = append(ids, d.ID), append(texts, d.Title+" "+d.Text)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return ids, texts
}
