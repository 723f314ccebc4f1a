package encoder

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/tandemsearch/tandem/internal/native"
)

// The tiny models compute hidden = (E[id] + P[pos] + T[type]) * mask with
// the integer tables below (see scripts/models/make_tiny.py); single
// sequences have type 0 and T[0] = 0.
func tinyHidden(id, pos, dim int) []float32 {
	v := make([]float32, dim)
	for j := range v {
		v[j] = float32((id*(j+1))%7-3) + float32((pos+j)%3)
	}
	return v
}

func unit(v []float32) []float32 {
	out := slices.Clone(v)
	normalize(out)
	return out
}

func repeat(v []float32, n int) []float32 {
	var out []float32
	for range n {
		out = append(out, v...)
	}
	return out
}

func skipWithoutORT(t testing.TB) {
	t.Helper()
	lib := native.ONNXRuntimeLibrary()
	if lib == "" {
		t.Skip("skipping: ONNX Runtime not installed (run scripts/setup.sh)")
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("skipping: %s not found (run scripts/setup.sh)", lib)
	}
}

func load(t testing.TB, dir string, opts *Options) *Encoder {
	t.Helper()
	skipWithoutORT(t)
	e, err := Load(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// tinyConfig loads the committed tandem.json of a tiny model so tests can
// vary it.
func tinyConfig(t testing.TB, name string) *Config {
	t.Helper()
	c, err := ReadConfig(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func approxEqual(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Abs(float64(got[i]-want[i])) > tol {
			t.Fatalf("%s: [%d] = %v, want %v\ngot  %v\nwant %v", what, i, got[i], want[i], got, want)
		}
	}
}

func equalIDs(t *testing.T, what string, got []int32, want ...int32) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

// Vocabulary ids of the tiny BERT tokenizer.
const (
	bCLS, bSEP, bMASK, bQ, bD = 2, 3, 4, 5, 6
	bDot, bComma, bThe, bCat  = 7, 8, 11, 12
	bSat, bQuery, bS          = 13, 22, 17
)

func TestCLSPooling(t *testing.T) {
	e := load(t, "testdata/tiny-bert", nil)
	if e.Dim() != 4 || e.TokenDim() != 4 || e.Similarity() != Dot || e.Name() != "tiny-bert" {
		t.Fatalf("Dim %d TokenDim %d Similarity %s Name %s", e.Dim(), e.TokenDim(), e.Similarity(), e.Name())
	}
	b, err := e.Encode(context.Background(), Request{Side: Document, Texts: []string{"The CATS sat"}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	// [CLS] the cat ##s sat [SEP]; CLS pooling, no normalisation.
	approxEqual(t, "pooled", b.Vectors[0], tinyHidden(bCLS, 0, 4), 0)
	tok := b.Tokens[0]
	equalIDs(t, "ids", tok.IDs, bCLS, bThe, bCat, bS, bSat, bSEP)
	equalIDs(t, "positions", tok.Positions, 0, 1, 2, 3, 4, 5)
	for i, id := range tok.IDs {
		approxEqual(t, "token", tok.Vector(i), tinyHidden(int(id), i, 4), 0)
	}
	// Without Tokens, pooling models return no token output.
	b, err = e.EncodeDocuments(context.Background(), []string{"the cat"})
	if err != nil || b.Tokens != nil || len(b.Vectors) != 1 {
		t.Fatalf("EncodeDocuments: %v, tokens %v", err, b.Tokens)
	}
}

func TestMeanPoolingT5(t *testing.T) {
	// The T5-shaped model has no token_type_ids input; Unigram tokenizer,
	// "$A </s>" template.
	e := load(t, "testdata/tiny-t5", nil)
	b, err := e.Encode(context.Background(), Request{Side: Query, Texts: []string{"the cats", ""}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	// ▁the=4 ▁cat=5 s=9 </s>=1
	equalIDs(t, "ids", b.Tokens[0].IDs, 4, 5, 9, 1)
	var sum [4]float32
	for p, id := range []int{4, 5, 9, 1} {
		for j, v := range tinyHidden(id, p, 4) {
			sum[j] += v
		}
	}
	mean := []float32{sum[0] / 4, sum[1] / 4, sum[2] / 4, sum[3] / 4}
	approxEqual(t, "mean", b.Vectors[0], unit(mean), 1e-6)
	// Empty text is just </s>.
	equalIDs(t, "empty ids", b.Tokens[1].IDs, 1)
	approxEqual(t, "empty", b.Vectors[1], unit(tinyHidden(1, 0, 4)), 1e-6)
	approxEqual(t, "empty token", b.Tokens[1].Vector(0), unit(tinyHidden(1, 0, 4)), 1e-6)
}

func TestModelPooling(t *testing.T) {
	cfg := tinyConfig(t, "tiny-bert")
	cfg.Pooling, cfg.Output = PoolModel, "sentence_embedding"
	e := load(t, "testdata/tiny-bert", &Options{Config: cfg})
	b, err := e.EncodeQueries(context.Background(), []string{"the cat"})
	if err != nil {
		t.Fatal(err)
	}
	want := tinyHidden(bCLS, 0, 4)
	for j := range want {
		want[j] *= 2 // sentence_embedding = 2*hidden[:,0,:]
	}
	approxEqual(t, "pooled", b.Vectors[0], want, 0)
	if e.TokenDim() != 0 {
		t.Fatalf("TokenDim = %d for a pooled output", e.TokenDim())
	}
	if _, err := e.Encode(context.Background(), Request{Side: Query, Texts: []string{"x"}, Tokens: true}); !errors.Is(err, ErrNoTokens) {
		t.Fatalf("tokens from a pooled output: err = %v, want ErrNoTokens", err)
	}
}

func TestColBERTQueryAugmentation(t *testing.T) {
	for _, attend := range []bool{false, true} {
		cfg := tinyConfig(t, "tiny-colbert")
		cfg.Query.AttendToAugment = attend
		e := load(t, "testdata/tiny-colbert", &Options{Config: cfg})
		if e.Dim() != 0 || e.TokenDim() != 128 {
			t.Fatalf("Dim %d TokenDim %d", e.Dim(), e.TokenDim())
		}
		b, err := e.EncodeQueries(context.Background(), []string{"the cat."})
		if err != nil {
			t.Fatal(err)
		}
		if b.Vectors != nil {
			t.Fatal("pooling none returned pooled vectors")
		}
		tok := b.Tokens[0]
		// [CLS] [Q] the cat . [SEP] then [MASK] up to max_length 8; the
		// query side skips nothing.
		equalIDs(t, "ids", tok.IDs, bCLS, bQ, bThe, bCat, bDot, bSEP, bMASK, bMASK)
		equalIDs(t, "positions", tok.Positions, 0, 1, 2, 3, 4, 5, 6, 7)
		for i, id := range tok.IDs {
			// The projection repeats the 8-dim hidden vector 16 times.
			want := unit(repeat(tinyHidden(int(id), i, 8), 16))
			if id == bMASK && !attend {
				want = make([]float32, 128) // masked out by attention 0
			}
			approxEqual(t, "token", tok.Vector(i), want, 1e-6)
		}
	}
}

func TestColBERTDocumentSkiplist(t *testing.T) {
	e := load(t, "testdata/tiny-colbert", nil)
	b, err := e.EncodeDocuments(context.Background(), []string{"the cat, sat."})
	if err != nil {
		t.Fatal(err)
	}
	tok := b.Tokens[0]
	// [CLS] [D] the cat , sat . [SEP]: punctuation dropped, positions kept.
	equalIDs(t, "ids", tok.IDs, bCLS, bD, bThe, bCat, bSat, bSEP)
	equalIDs(t, "positions", tok.Positions, 0, 1, 2, 3, 5, 7)
	for i, id := range tok.IDs {
		approxEqual(t, "token", tok.Vector(i), unit(repeat(tinyHidden(int(id), int(tok.Positions[i]), 8), 16)), 1e-6)
	}
	// skip_tokens drops named tokens too.
	cfg := tinyConfig(t, "tiny-colbert")
	cfg.Document.SkipPunctuation = false
	cfg.Document.SkipTokens = []string{"the"}
	e = load(t, "testdata/tiny-colbert", &Options{Config: cfg})
	b, err = e.EncodeDocuments(context.Background(), []string{"the cat, sat."})
	if err != nil {
		t.Fatal(err)
	}
	equalIDs(t, "skip_tokens ids", b.Tokens[0].IDs, bCLS, bD, bCat, bComma, bSat, bDot, bSEP)
}

func TestTruncationAndPrefix(t *testing.T) {
	cfg := tinyConfig(t, "tiny-bert")
	cfg.Query.Prefix = "query "
	cfg.Query.Marker = "[unused0]"
	e := load(t, "testdata/tiny-bert", &Options{Config: cfg})
	long := strings.Repeat("the cat sat ", 40)
	b, err := e.Encode(context.Background(), Request{Side: Query, Texts: []string{long}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	// max_length 8: [CLS] [Q] query the cat sat the [SEP]
	equalIDs(t, "query ids", b.Tokens[0].IDs, bCLS, bQ, bQuery, bThe, bCat, bSat, bThe, bSEP)
	b, err = e.Encode(context.Background(), Request{Side: Document, Texts: []string{long}, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	ids := b.Tokens[0].IDs
	if len(ids) != 16 || ids[0] != bCLS || ids[15] != bSEP || ids[1] != bThe {
		t.Fatalf("document truncated to %v, want 16 tokens from [CLS] to [SEP]", ids)
	}
}

func TestBatchOrderAndPaddingInvariance(t *testing.T) {
	texts := []string{"the cat sat on the mat", "", "dog", "hello world, the cats sat!", "é ü 日本", "a"}
	batched := load(t, "testdata/tiny-t5", &Options{BatchSize: 4})
	got, err := batched.Encode(context.Background(), Request{Side: Document, Texts: texts, Tokens: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		one, err := batched.Encode(context.Background(), Request{Side: Document, Texts: []string{text}, Tokens: true})
		if err != nil {
			t.Fatal(err)
		}
		approxEqual(t, text, got.Vectors[i], one.Vectors[0], 0)
		equalIDs(t, text, got.Tokens[i].IDs, one.Tokens[0].IDs...)
		approxEqual(t, text+" tokens", got.Tokens[i].Vectors, one.Tokens[0].Vectors, 0)
	}
}

func TestConcurrentUse(t *testing.T) {
	e := load(t, "testdata/tiny-colbert", &Options{MaxConcurrentRuns: 2, BatchSize: 2})
	texts := []string{"the cat sat", "hello world", "the dog.", "search query", "a mat"}
	want, err := e.EncodeDocuments(context.Background(), texts)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for range 10 {
				got, err := e.EncodeDocuments(context.Background(), texts)
				if err != nil {
					errs <- err
					return
				}
				for i := range texts {
					if !slices.Equal(got.Tokens[i].Vectors, want.Tokens[i].Vectors) {
						errs <- errors.New("concurrent result differs from sequential")
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// copyTiny copies a tiny model to a temporary directory, dropping the
// named files, so tests can add or remove pieces.
func copyTiny(t *testing.T, name string, drop ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"model.onnx", "tokenizer.json", ConfigFile} {
		if slices.Contains(drop, f) {
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", name, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func writeFloats(t *testing.T, path string, v []float32) {
	t.Helper()
	buf := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(x))
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestProjection(t *testing.T) {
	dir := copyTiny(t, "tiny-bert")
	// W is 2×4 in torch.nn.Linear.weight layout.
	w := []float32{1, 0, 0, 0, 0.5, 0.5, 0, -1}
	writeFloats(t, filepath.Join(dir, "proj.f32"), w)
	cfg := tinyConfig(t, "tiny-bert")
	cfg.Projection = &Projection{File: "proj.f32", InputDim: 4, OutputDim: 2}
	cfg.Normalize = true
	e := load(t, dir, &Options{Config: cfg})
	if e.Dim() != 2 || e.TokenDim() != 2 {
		t.Fatalf("Dim %d TokenDim %d, want 2", e.Dim(), e.TokenDim())
	}
	b, err := e.EncodeQueries(context.Background(), []string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	h := tinyHidden(bCLS, 0, 4)
	approxEqual(t, "projected", b.Vectors[0], unit([]float32{h[0], 0.5*h[0] + 0.5*h[1] - h[3]}), 1e-6)

	cfg.Projection.InputDim, cfg.Projection.OutputDim = 3, 2
	writeFloats(t, filepath.Join(dir, "proj.f32"), w[:6])
	if _, err := Load(dir, &Options{Config: cfg}); !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "input_dim 3") {
		t.Fatalf("projection input_dim mismatch: err = %v", err)
	}
}

func TestAsymmetric(t *testing.T) {
	dir := copyTiny(t, "tiny-bert")
	data, err := os.ReadFile(filepath.Join("testdata", "tiny-colbert", "model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "doc.onnx"), data, 0o644)
	cfg := tinyConfig(t, "tiny-bert")
	cfg.Pooling = PoolNone
	cfg.Document.Model, cfg.Document.Output = "doc.onnx", "token_embeddings"
	// Queries: 4-dim BERT outputs; documents: 128-dim ColBERT outputs.
	if _, err := Load(dir, &Options{Config: cfg}); !errors.Is(err, ErrModelMismatch) || !strings.Contains(err.Error(), "4-dim") {
		t.Fatalf("asymmetric dimension mismatch: err = %v", err)
	}
	// A projection shared by... the query side only brings it to 128.
	w := make([]float32, 128*4)
	for k := range 128 {
		w[k*4+k%4] = 1
	}
	writeFloats(t, filepath.Join(dir, "q128.f32"), w)
	cfg.Query.Projection = &Projection{File: "q128.f32", InputDim: 4, OutputDim: 128}
	e := load(t, dir, &Options{Config: cfg})
	q, err := e.EncodeQueries(context.Background(), []string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.EncodeDocuments(context.Background(), []string{"cat"})
	if err != nil {
		t.Fatal(err)
	}
	approxEqual(t, "query token", q.Tokens[0].Vector(1), repeat(tinyHidden(bCat, 1, 4), 32), 0)
	approxEqual(t, "document token", d.Tokens[0].Vector(1), repeat(tinyHidden(bCat, 1, 8), 16), 0)
}

func TestLoadErrors(t *testing.T) {
	skipWithoutORT(t)
	cases := []struct {
		name   string
		dir    func(t *testing.T) string
		edit   func(c *Config)
		target error
		say    string
	}{
		{"missing model", func(t *testing.T) string { return copyTiny(t, "tiny-bert", "model.onnx") }, nil, ErrMissingFile, "model.onnx"},
		{"missing tokenizer", func(t *testing.T) string { return copyTiny(t, "tiny-bert", "tokenizer.json") }, nil, ErrMissingFile, "tokenizer.json"},
		{"missing config", func(t *testing.T) string { return copyTiny(t, "tiny-bert", ConfigFile) }, nil, ErrNoConfig, ConfigFile},
		{"unknown output", nil, func(c *Config) { c.Output = "pooler_output" }, ErrModelMismatch, `no output "pooler_output"`},
		{"pooled output with cls", nil, func(c *Config) { c.Output = "sentence_embedding" }, ErrModelMismatch, "[batch, sequence, dim]"},
		{"token output with model pooling", nil, func(c *Config) { c.Pooling = PoolModel }, ErrModelMismatch, "[batch, dim]"},
		{"marker not in vocabulary", nil, func(c *Config) { c.Query.Marker = "[Q]" }, ErrModelMismatch, `"query.marker"`},
		{"max_length too small", nil, func(c *Config) { c.Document.MaxLength = 1 }, ErrBadConfig, `"document.max_length"`},
		{"missing projection", nil, func(c *Config) { c.Projection = &Projection{File: "p.f32", InputDim: 4, OutputDim: 2} }, ErrMissingFile, "p.f32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := "testdata/tiny-bert"
			if tc.dir != nil {
				dir = tc.dir(t)
			}
			var opts *Options
			if tc.edit != nil {
				cfg := tinyConfig(t, "tiny-bert")
				tc.edit(cfg)
				opts = &Options{Config: cfg}
			}
			e, err := Load(dir, opts)
			if err == nil {
				e.Close()
				t.Fatal("Load succeeded")
			}
			if !errors.Is(err, tc.target) || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.target, tc.say)
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	e := load(t, "testdata/tiny-bert", &Options{MaxTextBytes: 100})
	ctx := context.Background()
	_, err := e.EncodeDocuments(ctx, []string{"fine", "bad \xff byte"})
	if !errors.Is(err, ErrBadText) || !strings.Contains(err.Error(), "text 1") || !strings.Contains(err.Error(), "byte 4") {
		t.Fatalf("invalid UTF-8: err = %v", err)
	}
	_, err = e.EncodeDocuments(ctx, []string{strings.Repeat("x", 101)})
	if !errors.Is(err, ErrBadText) || !strings.Contains(err.Error(), "text 0") {
		t.Fatalf("huge text: err = %v", err)
	}
	if err := e.CheckDim(4); err != nil {
		t.Fatal(err)
	}
	if err := e.CheckDim(384); !errors.Is(err, ErrDimMismatch) || !strings.Contains(err.Error(), "384") {
		t.Fatalf("CheckDim(384) = %v", err)
	}
	if err := e.CheckTokenDim(128); !errors.Is(err, ErrDimMismatch) {
		t.Fatalf("CheckTokenDim(128) = %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.EncodeDocuments(cancelled, []string{"x"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled ctx: err = %v", err)
	}
	b, err := e.EncodeDocuments(ctx, nil)
	if err != nil || len(b.Vectors) != 0 {
		t.Fatalf("no texts: %v %v", b, err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := e.EncodeQueries(ctx, []string{"x"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: err = %v", err)
	}
}
