package latecollect

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/evaluate"
	"github.com/tandemsearch/tandem/internal/native"
	"github.com/tandemsearch/tandem/storage"
)

// sciFactDir is the shared BEIR SciFact collection, read in place.
const sciFactDir = "../../shared/data/scifact"

// sciFactModel is the token encoder of the SciFact tests. No ColBERT model
// is installed, so the contextual token vectors of a default model serve;
// MiniLM is the faster of the two (6 layers, 256 document tokens). Set
// TANDEM_LATE_MODEL to use another installed model.
func sciFactModel() string {
	if m := os.Getenv("TANDEM_LATE_MODEL"); m != "" {
		return m
	}
	return "all-MiniLM-L6-v2"
}

// sciFact is the SciFact fixture shared by the tests and benchmarks of one
// test binary: the corpus encoded and written to a store, the test
// queries encoded, and the index built over them.
type sciFact struct {
	dir     string
	st      *storage.Store
	x       *Index
	build   time.Duration // Open: load blobs, train and fill FAISS
	ids     map[uint64]string
	queries []evaluate.Query
	qtok    [][]float32
	qrels   evaluate.Qrels

	mu      sync.Mutex
	exhaust map[int][]Hit // exhaustive avg-max top 10 by query index
}

var (
	sciOnce sync.Once
	sciFix  *sciFact
	sciErr  error
	sciSkip string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sciFix != nil {
		sciFix.close()
	}
	os.Exit(code)
}

// close releases the fixture and removes its store.
func (f *sciFact) close() {
	if f.x != nil {
		f.x.Close()
	}
	if f.st != nil {
		f.st.Close()
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}

// loadSciFact returns the fixture, skipping when the data, ONNX Runtime or
// the model is absent, and under -short (encoding the corpus takes
// minutes on two cores the first time; later runs read a cache).
func loadSciFact(tb testing.TB) *sciFact {
	tb.Helper()
	if testing.Short() {
		tb.Skip("skipping SciFact late-interaction run in -short mode")
	}
	sciOnce.Do(func() {
		sciFix, sciSkip, sciErr = buildSciFact(tb)
		if sciErr != nil && sciFix != nil {
			sciFix.close()
			sciFix = nil
		}
	})
	if sciSkip != "" {
		tb.Skip(sciSkip)
	}
	if sciErr != nil {
		tb.Fatal(sciErr)
	}
	return sciFix
}

func buildSciFact(tb testing.TB) (*sciFact, string, error) {
	if _, err := os.Stat(filepath.Join(sciFactDir, "corpus.jsonl")); err != nil {
		return nil, fmt.Sprintf("skipping: SciFact not found at %s (the shared BEIR data)", sciFactDir), nil
	}
	lib := native.ONNXRuntimeLibrary()
	if _, err := os.Stat(lib); lib == "" || err != nil {
		return nil, "skipping: ONNX Runtime not installed (run scripts/setup.sh)", nil
	}
	modelDir := filepath.Join(native.ModelsDir(), sciFactModel())
	if _, err := os.Stat(filepath.Join(modelDir, "model.onnx")); err != nil {
		return nil, fmt.Sprintf("skipping: model %s not installed in %s (run scripts/setup-models.sh)", sciFactModel(), native.ModelsDir()), nil
	}
	ctx := context.Background()
	enc, err := encoder.Load(modelDir, nil)
	if err != nil {
		return nil, "", err
	}
	defer enc.Close()
	ids, texts, err := readCorpus(filepath.Join(sciFactDir, "corpus.jsonl"))
	if err != nil {
		return nil, "", err
	}
	if dir := os.Getenv("TANDEM_LATE_COLLECTION"); dir != "" {
		return openCollection(ctx, dir, enc)
	}
	tokens, err := corpusTokens(tb, ctx, enc, modelDir, ids, texts)
	if err != nil {
		return nil, "", err
	}
	f := &sciFact{ids: map[uint64]string{}, exhaust: map[int][]Hit{}}
	if f.dir, err = os.MkdirTemp("", "latecollect-scifact-"); err != nil {
		return nil, "", err
	}
	fail := func(err error) (*sciFact, string, error) { return f, "", err }
	if f.st, err = storage.Open(f.dir, &storage.Options{NoSync: true}); err != nil {
		return fail(err)
	}
	name := BlobName(enc.Name())
	for start := 0; start < len(ids); start += 50 {
		var b storage.Batch
		for i := start; i < min(start+50, len(ids)); i++ {
			blob, err := EncodeTokens(tokens[i], enc.TokenDim(), F16)
			if err != nil {
				return fail(fmt.Errorf("document %s: %w", ids[i], err))
			}
			b.Put(tandem.Doc{ID: ids[i], Fields: map[string]any{"text": texts[i]}}, map[string][]byte{name: blob})
		}
		if _, err := f.st.Write(ctx, &b); err != nil {
			return fail(err)
		}
	}
	tokens = nil
	for _, id := range ids {
		num, _, err := f.st.Lookup(id)
		if err != nil {
			return fail(err)
		}
		f.ids[num] = id
	}
	start := time.Now()
	// TANDEM_LATE_DESC chooses another token index (sweeps).
	f.x, err = Open(ctx, f.st, &Options{Model: enc.Name(), Dim: enc.TokenDim(), SnapshotEvery: -1, Description: os.Getenv("TANDEM_LATE_DESC")})
	if err != nil {
		return fail(err)
	}
	f.build = time.Since(start)
	return f.loadQueries(ctx, enc)
}

// openCollection serves the fixture from a SciFact collection that
// tandem index built with the model (TANDEM_LATE_COLLECTION), in place:
// it is opened, searched and left as it was (no snapshot is saved).
func openCollection(ctx context.Context, dir string, enc *encoder.Encoder) (*sciFact, string, error) {
	f := &sciFact{ids: map[uint64]string{}, exhaust: map[int][]Hit{}}
	var err error
	if f.st, err = storage.Open(dir, &storage.Options{NoSync: true}); err != nil {
		return nil, "", err
	}
	err = f.st.ScanDocs(ctx, func(num uint64, doc tandem.Doc) error {
		f.ids[num] = doc.ID
		return nil
	})
	if err != nil {
		return f, "", err
	}
	start := time.Now()
	if f.x, err = Open(ctx, f.st, &Options{Model: enc.Name(), Dim: enc.TokenDim(), SnapshotEvery: -1, Description: os.Getenv("TANDEM_LATE_DESC")}); err != nil {
		return f, "", err
	}
	f.build = time.Since(start)
	return f.loadQueries(ctx, enc)
}

// loadQueries reads and encodes the judged test queries.
func (f *sciFact) loadQueries(ctx context.Context, enc *encoder.Encoder) (*sciFact, string, error) {
	fail := func(err error) (*sciFact, string, error) { return f, "", err }
	var err error
	if f.qrels, err = evaluate.LoadQrels(filepath.Join(sciFactDir, "qrels", "test.tsv")); err != nil {
		return fail(err)
	}
	all, err := evaluate.LoadQueries(filepath.Join(sciFactDir, "queries.jsonl"))
	if err != nil {
		return fail(err)
	}
	var qtexts []string
	for _, q := range all {
		if _, ok := f.qrels[q.ID]; ok {
			f.queries = append(f.queries, q)
			qtexts = append(qtexts, q.Text)
		}
	}
	qb, err := enc.Encode(ctx, encoder.Request{Side: encoder.Query, Texts: qtexts, Tokens: true})
	if err != nil {
		return fail(err)
	}
	for _, t := range qb.Tokens {
		f.qtok = append(f.qtok, t.Vectors)
	}
	return f, "", nil
}

func readCorpus(path string) (ids, texts []string, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var d struct {
			ID    string `json:"_id"`
			Title string `json:"title"`
			Text  string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		ids = append(ids, d.ID)
		texts = append(texts, d.Title+" "+d.Text)
	}
	return ids, texts, sc.Err()
}

// corpusTokens encodes the corpus, or reads the result of an earlier run
// from the user cache directory (outside the repository). The cache key
// hashes the contents of the corpus and of the model files, so a change to
// either re-encodes, while a fresh clone or a reinstalled model with the
// same bytes reuses the cache. Writing a new entry removes the model's
// older ones (each is about 2 GB).
func corpusTokens(tb testing.TB, ctx context.Context, enc *encoder.Encoder, modelDir string, ids, texts []string) ([][]float32, error) {
	h := sha256.New()
	for _, p := range []string{filepath.Join(sciFactDir, "corpus.jsonl"), filepath.Join(modelDir, "model.onnx"), filepath.Join(modelDir, encoder.ConfigFile)} {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	cacheDir, err := os.UserCacheDir()
	if err != nil {
		cacheDir = os.TempDir()
	}
	prefix := filepath.Join(cacheDir, "tandem-test", "latecollect-scifact-"+enc.Name()+"-")
	cache := prefix + hex.EncodeToString(h.Sum(nil)[:8]) + ".tok"
	if tokens, err := readTokenCache(cache, len(ids), enc.TokenDim()); err == nil {
		tb.Logf("SciFact tokens read from cache %s", cache)
		return tokens, nil
	}
	start := time.Now()
	tokens := make([][]float32, 0, len(ids))
	for i := 0; i < len(texts); i += 512 {
		b, err := enc.Encode(ctx, encoder.Request{Side: encoder.Document, Texts: texts[i:min(i+512, len(texts))], Tokens: true})
		if err != nil {
			return nil, err
		}
		for _, t := range b.Tokens {
			tokens = append(tokens, t.Vectors)
		}
		tb.Logf("encoded %d/%d SciFact documents in %v", len(tokens), len(texts), time.Since(start).Round(time.Second))
	}
	if err := writeTokenCache(cache, tokens, enc.TokenDim()); err != nil {
		tb.Logf("token cache not written: %v", err)
	} else if old, _ := filepath.Glob(prefix + "*.tok"); len(old) > 1 {
		for _, o := range old {
			if o != cache {
				os.Remove(o)
			}
		}
	}
	return tokens, nil
}

func writeTokenCache(path string, tokens [][]float32, dim int) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	fh, err := os.Create(tmp)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(fh)
	for _, t := range tokens {
		blob, err := EncodeTokens(t, dim, F32)
		if err != nil {
			fh.Close()
			return err
		}
		binary.Write(w, binary.LittleEndian, uint32(len(blob)))
		w.Write(blob)
	}
	if err := errors.Join(w.Flush(), fh.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readTokenCache(path string, n, dim int) ([][]float32, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	r := bufio.NewReaderSize(fh, 1<<20)
	out := make([][]float32, 0, n)
	for range n {
		var l uint32
		if err := binary.Read(r, binary.LittleEndian, &l); err != nil {
			return nil, err
		}
		blob := make([]byte, l)
		if _, err := io.ReadFull(r, blob); err != nil {
			return nil, err
		}
		v, d, err := DecodeTokens(blob)
		if err != nil || d != dim {
			return nil, fmt.Errorf("cache entry: dim %d, %v", d, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// exhaustiveTop10 is the reference avg-max top 10 of query i, computed
// once per test binary. It is also the sum-max reference: the two scores
// differ by the positive factor of the query's token count, so their
// rankings are the same (TestSciFactScoringsRankAlike checks it).
func (f *sciFact) exhaustiveTop10(tb testing.TB, i int) []Hit {
	f.mu.Lock()
	defer f.mu.Unlock()
	if h, ok := f.exhaust[i]; ok {
		return h
	}
	h, err := f.x.Search(context.Background(), f.qtok[i], &SearchOptions{K: 10, Mode: Exhaustive})
	if err != nil {
		tb.Fatal(err)
	}
	f.exhaust[i] = h
	return h
}

// recallQueries is the subset of the 300 test queries compared with
// exhaustive scoring, which costs seconds per query on two cores: every
// tenth query, all of them with TANDEM_LATE_ALL_QUERIES=1, or every
// n-th with TANDEM_LATE_QUERY_STEP=n.
func (f *sciFact) recallQueries() []int {
	step := 10
	if os.Getenv("TANDEM_LATE_ALL_QUERIES") != "" {
		step = 1
	}
	if n, err := strconv.Atoi(os.Getenv("TANDEM_LATE_QUERY_STEP")); err == nil && n > 0 {
		step = n
	}
	var out []int
	for i := 0; i < len(f.queries); i += step {
		out = append(out, i)
	}
	return out
}

func (f *sciFact) search(tb testing.TB, i int, so SearchOptions) []Hit {
	so.K = 10
	hits, err := f.x.Search(context.Background(), f.qtok[i], &so)
	if err != nil {
		tb.Fatal(err)
	}
	return hits
}

// recallAt10 is the mean share of the exhaustive top 10 found in
// hits(i), over qs.
func (f *sciFact) recallAt10(tb testing.TB, qs []int, hits func(i int) []Hit) float64 {
	var sum float64
	for _, i := range qs {
		got := hits(i)
		want := f.exhaustiveTop10(tb, i)
		found := 0
		for _, w := range want {
			if slices.ContainsFunc(got, func(h Hit) bool { return h.DocNum == w.DocNum }) {
				found++
			}
		}
		sum += float64(found) / float64(max(1, len(want)))
	}
	return sum / float64(len(qs))
}

// searcher returns a function that runs query i with so, memoised, so
// that recall and nDCG are computed from the same runs.
func (f *sciFact) searcher(tb testing.TB, so SearchOptions) func(i int) []Hit {
	memo := map[int][]Hit{}
	return func(i int) []Hit {
		h, ok := memo[i]
		if !ok {
			h = f.search(tb, i, so)
			memo[i] = h
		}
		return h
	}
}

// ndcg10 evaluates the rankings hits(i) of queries qs against their qrels.
func (f *sciFact) ndcg10(tb testing.TB, qs []int, hits func(i int) []Hit) float64 {
	run := evaluate.Run{}
	qrels := evaluate.Qrels{}
	for _, i := range qs {
		id := f.queries[i].ID
		qrels[id] = f.qrels[id]
		for _, h := range hits(i) {
			run[id] = append(run[id], evaluate.Result{DocID: f.ids[h.DocNum], Score: float64(h.Score)})
		}
	}
	rep, err := evaluate.Evaluate(qrels, run)
	if err != nil {
		tb.Fatal(err)
	}
	return rep.Mean.NDCG10
}

// TestSciFactCandidateRecall is acceptance test 1: with the default knobs,
// candidate generation finds at least 95% of the exhaustive top 10.
func TestSciFactCandidateRecall(t *testing.T) {
	f := loadSciFact(t)
	s, _ := f.x.Stats()
	t.Logf("index: %d docs, %d tokens, %s, built in %v, %.1f stored bytes/token, FAISS %.1f bytes/token",
		s.Docs, s.Tokens, s.Description, f.build.Round(time.Millisecond), float64(s.StoredBytes)/float64(s.Tokens), float64(s.IndexBytes)/float64(s.TokenKeys))
	qs := f.recallQueries()
	exhaustive := func(i int) []Hit { return f.exhaustiveTop10(t, i) }
	for _, sc := range []Scoring{ScoreAvgMax, ScoreSumMax} {
		cands := f.searcher(t, SearchOptions{Scoring: sc})
		r := f.recallAt10(t, qs, cands)
		t.Logf("%s: recall@10 of candidates vs exhaustive %.4f; nDCG@10 candidates %.4f, exhaustive %.4f (%d queries)",
			sc, r, f.ndcg10(t, qs, cands), f.ndcg10(t, qs, exhaustive), len(qs))
		if r < 0.95 {
			t.Errorf("%s: recall@10 of candidates vs exhaustive %.4f < 0.95", sc, r)
		}
	}
}

// TestSciFactScoringsRankAlike checks on real queries that sum-max and
// avg-max rank identically, with scores in the ratio of the query length.
func TestSciFactScoringsRankAlike(t *testing.T) {
	f := loadSciFact(t)
	for _, i := range []int{0, 1, 2} {
		avg := f.exhaustiveTop10(t, i)
		sum := f.search(t, i, SearchOptions{Mode: Exhaustive, Scoring: ScoreSumMax})
		nq := float32(len(f.qtok[i]) / f.x.Dim())
		if len(avg) != len(sum) {
			t.Fatalf("query %d: %d avg-max hits, %d sum-max", i, len(avg), len(sum))
		}
		for r := range avg {
			if avg[r].DocNum != sum[r].DocNum || math.Abs(float64(avg[r].Score*nq-sum[r].Score)) > 1e-3 {
				t.Fatalf("query %d rank %d: avg-max %+v, sum-max %+v (%v tokens)", i, r, avg[r], sum[r], nq)
			}
		}
	}
}

// TestSciFactKnobSweep logs recall@10 against exhaustive for k' and the
// candidate cap (the measurements behind the defaults). It is opt-in:
// TANDEM_LATE_SWEEP=1.
func TestSciFactKnobSweep(t *testing.T) {
	if os.Getenv("TANDEM_LATE_SWEEP") == "" {
		t.Skip("skipping knob sweep; set TANDEM_LATE_SWEEP=1")
	}
	f := loadSciFact(t)
	qs := f.recallQueries()
	for _, kp := range []int{16, 32, 64} {
		for _, c := range []int{64, 128, 256, 512} {
			start := time.Now()
			r := f.recallAt10(t, qs, f.searcher(t, SearchOptions{KPrime: kp, CandidateCap: c}))
			t.Logf("k'=%d cap=%d: recall@10 %.4f, %.1f ms/query", kp, c, r, float64(time.Since(start).Microseconds())/1000/float64(len(qs)))
		}
	}
	for _, np := range []int{4, 8, 16, 32} {
		start := time.Now()
		r := f.recallAt10(t, qs, f.searcher(t, SearchOptions{NProbe: np}))
		t.Logf("nprobe=%d: recall@10 %.4f, %.1f ms/query", np, r, float64(time.Since(start).Microseconds())/1000/float64(len(qs)))
	}
}

// percentile returns the p-th percentile (nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p/100*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
