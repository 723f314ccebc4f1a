package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/encoder"
	"github.com/tandemsearch/tandem/latecollect"
)

// vectorCorpus is animals plus sentences enough to fill several pipeline
// batches of 8.
func vectorCorpus() []tandem.Doc {
	docs := append([]tandem.Doc(nil), animals...)
	topics := []string{"volcanoes erupt lava and ash", "bees make honey in hives", "trains run on steel rails",
		"glaciers carve valleys slowly", "violins have four strings", "bread rises with yeast",
		"comets have icy tails", "owls hunt at night", "tides follow the moon", "coral reefs shelter fish"}
	for i := range 30 {
		t := topics[i%len(topics)]
		docs = append(docs, tandem.Doc{ID: fmt.Sprint("t", i), Fields: map[string]any{
			"title": fmt.Sprintf("Note %d", i), "text": fmt.Sprintf("%s; note number %d says %s again.", t, i, strings.Fields(t)[0]),
			"lang": []string{"en", "fr"}[i%2], "year": float64(2000 + i)}})
	}
	return docs
}

// storedVectors reads back the vectors Tandem stored for each document.
func storedVectors(t *testing.T, e *Engine, docs []tandem.Doc, model string) map[string]tandem.Vectors {
	t.Helper()
	out := map[string]tandem.Vectors{}
	for _, d := range docs {
		num, ok, err := e.Shard().Store().Lookup(d.ID)
		if err != nil || !ok {
			t.Fatalf("lookup %s: %v %v", d.ID, ok, err)
		}
		var v tandem.Vectors
		b, ok, err := e.Shard().Store().Blob(num, dense.BlobName(model))
		if err != nil || !ok {
			t.Fatalf("dense blob of %s: %v %v", d.ID, ok, err)
		}
		if v.Dense, err = dense.DecodeVector(b, len(b)/4); err != nil {
			t.Fatal(err)
		}
		b, ok, err = e.Shard().Store().Blob(num, latecollect.BlobName(model))
		if err != nil || !ok {
			t.Fatalf("token blob of %s: %v %v", d.ID, ok, err)
		}
		flat, dim, err := latecollect.DecodeTokens(b)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(flat); i += dim {
			v.Tokens = append(v.Tokens, flat[i:i+dim])
		}
		out[d.ID] = v
	}
	return out
}

// rankings runs every query in every mode and returns the hits as
// "id:score" lists, to compare collections exactly.
func rankings(t *testing.T, e *Engine, queries []string, vectors func(q string) map[string]tandem.Vectors, filter string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, mode := range [][]string{{"dense"}, {"late"}, {"bm25", "dense", "late"}} {
		for _, q := range queries {
			req := Request{Text: q, K: 20, Retrievers: mode, Filter: []byte(filter)}
			if vectors != nil {
				req.Vectors = vectors(q)
			}
			res, err := e.Search(context.Background(), req)
			if err != nil {
				t.Fatalf("%v %q: %v", mode, q, err)
			}
			var parts []string
			for _, h := range res.Hits {
				parts = append(parts, h.ID+":"+strconv.FormatFloat(h.Score, 'g', -1, 64))
			}
			out[strings.Join(mode, "+")+" "+q] = strings.Join(parts, " ")
		}
	}
	return out
}

// settle waits for e's late-interaction indexes to finish retraining in
// the background: until a retraining swaps its codes in, searches use the
// codes of before, so two collections of the same documents compare only
// once both have settled.
func settle(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.WaitRetrain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

var vectorQueries = []string{"kitten", "heart attack", "puppy", "sweet insects", "night birds", "musical instruments", "baking"}

// TestSuppliedVectorsRankExactly indexes a corpus twice, once encoded by
// Tandem and once with the same vectors supplied (through Index and
// through JSONL), and once more with the model declared external and the
// queries' vectors supplied too: every ranking and score must be
// identical, filtered or not.
func TestSuppliedVectorsRankExactly(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	model := encoder.DefaultModel
	docs := vectorCorpus()
	encoded := openT(t, t.TempDir(), &Options{Dense: []string{model}, Late: []string{model}, BatchSize: 8, NoSync: true})
	if _, err := encoded.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	settle(t, encoded)
	vecs := storedVectors(t, encoded, docs, model)
	withVectors := make([]tandem.Doc, len(docs))
	for i, d := range docs {
		withVectors[i] = tandem.Doc{ID: d.ID, Fields: d.Fields, Vectors: map[string]tandem.Vectors{model: vecs[d.ID]}}
	}
	const filter = `{"term":{"lang":"en"}}`
	want := rankings(t, encoded, vectorQueries, nil, "")
	wantFiltered := rankings(t, encoded, vectorQueries, nil, filter)
	for k, r := range want {
		if len(strings.Fields(r)) < 2 || !strings.Contains(wantFiltered[k], ":") {
			t.Fatalf("%s: rankings %q / %q: too few hits to compare", k, r, wantFiltered[k])
		}
	}

	t.Run("Index", func(t *testing.T) {
		e := openT(t, t.TempDir(), &Options{Dense: []string{model}, Late: []string{model}, BatchSize: 8, NoSync: true})
		p, err := e.ingest(ctx, &sliceSource{docs: withVectors}, pipelineOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Tokens != 0 {
			t.Errorf("%d tokens encoded; every document brought its vectors", p.Tokens)
		}
		settle(t, e)
		compareRankings(t, rankings(t, e, vectorQueries, nil, ""), want)
		compareRankings(t, rankings(t, e, vectorQueries, nil, filter), wantFiltered)
	})
	t.Run("JSONL", func(t *testing.T) {
		e := openT(t, t.TempDir(), &Options{Dense: []string{model}, Late: []string{model}, BatchSize: 8, NoSync: true})
		var sb strings.Builder
		for _, d := range withVectors {
			sb.WriteString(jsonlWithVectors(t, d))
			sb.WriteByte('\n')
		}
		if _, err := e.IndexJSONL(ctx, strings.NewReader(sb.String()), JSONLOptions{}); err != nil {
			t.Fatal(err)
		}
		settle(t, e)
		compareRankings(t, rankings(t, e, vectorQueries, nil, ""), want)
	})
	t.Run("External", func(t *testing.T) {
		schema := tandem.DefaultSchema()
		schema.Models = []tandem.Model{{Name: model, Dense: true, Dim: len(vecs["cat"].Dense), Late: true, TokenDim: len(vecs["cat"].Tokens[0]),
			Similarity: tandem.Cosine, External: true, LateEncoding: DefaultLateEncoding(tandem.Model{})}}
		e := openT(t, t.TempDir(), &Options{Schema: schema, BatchSize: 8, NoSync: true})
		if _, err := e.Index(ctx, withVectors); err != nil {
			t.Fatal(err)
		}
		settle(t, e)
		// The queries' vectors come from the model, as a caller's own
		// encoder would make them.
		enc, err := loadEncoder(model, &Options{EncoderThreads: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		queryVecs := func(q string) map[string]tandem.Vectors {
			b, err := enc.Encode(ctx, encoder.Request{Side: encoder.Query, Texts: []string{q}, Tokens: true})
			if err != nil {
				t.Fatal(err)
			}
			tk := b.Tokens[0]
			var rows [][]float32
			for i := range tk.Len() {
				rows = append(rows, tk.Vector(i))
			}
			return map[string]tandem.Vectors{model: {Dense: b.Vectors[0], Tokens: rows}}
		}
		compareRankings(t, rankings(t, e, vectorQueries, queryVecs, ""), want)
		compareRankings(t, rankings(t, e, vectorQueries, queryVecs, filter), wantFiltered)
		// Without query vectors an external model cannot search.
		if _, err := e.Search(ctx, Request{Text: "kitten", Retrievers: []string{"dense"}}); !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), "external model") {
			t.Errorf("search of an external model without a query vector: %v", err)
		}
		// Reopened, it still needs no encoder.
		e.Close()
		e = openT(t, e.dir, nil)
		settle(t, e)
		compareRankings(t, rankings(t, e, vectorQueries, queryVecs, ""), want)
	})
}

func compareRankings(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s:\n got %s\nwant %s", k, got[k], w)
		}
	}
}

// jsonlWithVectors renders d as a JSONL line with its vectors under
// _vectors, each float32 in its shortest exact spelling.
func jsonlWithVectors(t *testing.T, d tandem.Doc) string {
	t.Helper()
	obj := map[string]any{"_id": d.ID}
	for k, v := range d.Fields {
		obj[k] = v
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	floats := func(v []float32) string {
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = strconv.FormatFloat(float64(x), 'g', -1, 32)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	var vs []string
	for name, v := range d.Vectors {
		var rows []string
		for _, r := range v.Tokens {
			rows = append(rows, floats(r))
		}
		vs = append(vs, fmt.Sprintf("%q:{\"dense\":%s,\"tokens\":[%s]}", name, floats(v.Dense), strings.Join(rows, ",")))
	}
	return strings.TrimSuffix(string(b), "}") + `,"_vectors":{` + strings.Join(vs, ",") + "}}"
}

// TestSuppliedVectorErrors feeds each kind of bad supplied vector in the
// middle of a JSONL stream: the error names the line and the model, the
// batch before it is stored, nothing of its own batch is, and with
// SkipBad only the bad line is left out.
func TestSuppliedVectorErrors(t *testing.T) {
	ctx := context.Background()
	const dim, tokDim = 4, 3
	schema := tandem.DefaultSchema()
	schema.Models = []tandem.Model{{Name: "ext", Dense: true, Dim: dim, Late: true, TokenDim: tokDim, Similarity: tandem.Dot, External: true}}
	row := "[0.1,0.2,0.3]"
	good := func(id string) string {
		return fmt.Sprintf(`{"_id":%q,"text":"some text %s","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[%s,%s]}}}`, id, id, row, row)
	}
	manyRows := strings.TrimSuffix(strings.Repeat(row+",", tandem.MaxTokens+1), ",")
	tests := []struct {
		name, vectors string // the bad line's _vectors value ("" leaves the key out)
		want          []string
	}{
		{"wrong dimension", `{"ext":{"dense":[1,2,3],"tokens":[` + row + `]}}`, []string{"_vectors.ext.dense", "dimension 3, want 4"}},
		{"wrong token dimension", `{"ext":{"dense":[1,2,3,4],"tokens":[[1,2]]}}`, []string{"_vectors.ext.tokens[0]", "dimension 2, want 3"}},
		{"overflow", `{"ext":{"dense":[1,2,3,1e999],"tokens":[` + row + `]}}`, []string{"_vectors.ext.dense", "value 3", "out of float32 range"}},
		{"not a number", `{"ext":{"dense":[1,2,3,"x"],"tokens":[` + row + `]}}`, []string{"_vectors.ext.dense", "value 3", "want a number"}},
		{"empty token matrix", `{"ext":{"dense":[1,2,3,4],"tokens":[]}}`, []string{"_vectors.ext.tokens", "empty token matrix"}},
		{"over-long token matrix", `{"ext":{"dense":[1,2,3,4],"tokens":[` + manyRows + `]}}`, []string{"_vectors.ext.tokens", fmt.Sprintf("%d token rows, limit %d", tandem.MaxTokens+1, tandem.MaxTokens)}},
		{"unknown model", `{"ext":{"dense":[1,2,3,4],"tokens":[` + row + `]},"other":{"dense":[1]}}`, []string{"_vectors.other", `no model "other"`, "it has: ext"}},
		{"missing external vector", "", []string{"_vectors.ext", "missing dense and tokens", "external model"}},
		{"missing part", `{"ext":{"dense":[1,2,3,4]}}`, []string{"_vectors.ext", "missing tokens"}},
		{"unknown part", `{"ext":{"dense":[1,2,3,4],"tokens":[` + row + `],"sparse":[1]}}`, []string{"_vectors.ext", `unknown key "sparse"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := openT(t, t.TempDir(), &Options{Schema: schema, BatchSize: 2, NoSync: true})
			bad := `{"_id":"bad","text":"bad text"}`
			if tc.vectors != "" {
				bad = `{"_id":"bad","text":"bad text","_vectors":` + tc.vectors + `}`
			}
			// Lines 1-2 are a full batch; the bad line 4 shares its batch
			// with line 3.
			in := strings.Join([]string{good("g1"), good("g2"), good("g3"), bad, good("g5")}, "\n")
			p, err := e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{})
			var le *DocError
			if !errors.As(err, &le) || le.Line != 4 {
				t.Fatalf("err = %v, want a DocError for line 4", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if !errors.Is(err, tandem.ErrBadVectors) {
				t.Errorf("error %v is not ErrBadVectors", err)
			}
			if p.Docs != 2 || e.Count() != 2 {
				t.Errorf("stored %d (count %d), want the first batch's 2", p.Docs, e.Count())
			}
			p, err = e.IndexJSONL(ctx, strings.NewReader(in), JSONLOptions{SkipBad: true})
			if err != nil || p.Skipped != 1 || e.Count() != 4 {
				t.Errorf("SkipBad: %+v, %v, count %d", p, err, e.Count())
			}
		})
	}
	// Through the Go API: NaN and Inf, which JSON cannot spell.
	e := openT(t, t.TempDir(), &Options{Schema: schema, NoSync: true})
	for _, x := range []float32{float32(math.NaN()), float32(math.Inf(-1))} {
		docs := []tandem.Doc{{ID: "a", Fields: map[string]any{"text": "a"}, Vectors: map[string]tandem.Vectors{"ext": {Dense: []float32{1, 2, 3, 4}, Tokens: [][]float32{{1, 2, 3}}}}},
			{ID: "b", Fields: map[string]any{"text": "b"}, Vectors: map[string]tandem.Vectors{"ext": {Dense: []float32{1, 2, x, 4}, Tokens: [][]float32{{1, 2, 3}}}}}}
		res, err := e.Index(ctx, docs)
		var be *DocError
		if !errors.As(err, &be) || be.Index != 1 || be.ID != "b" || !strings.Contains(err.Error(), "_vectors.ext.dense") || !strings.Contains(err.Error(), "value 2") {
			t.Errorf("value %v: err = %v, want a DocError for document 1 naming _vectors.ext.dense", x, err)
		}
		if res.Put != 0 || e.Count() != 0 {
			t.Errorf("value %v: %d stored, want none of the batch", x, e.Count())
		}
	}
}

// TestMixedBatch indexes one batch where some documents bring vectors and
// others are encoded: both kinds are stored, and a document that brings
// only its dense vector gets its tokens encoded.
func TestMixedBatch(t *testing.T) {
	needModel(t)
	ctx := context.Background()
	model := encoder.DefaultModel
	e := openT(t, t.TempDir(), &Options{Dense: []string{model}, Late: []string{model}, NoSync: true})
	if _, err := e.Index(ctx, animals); err != nil {
		t.Fatal(err)
	}
	vecs := storedVectors(t, e, animals, model)
	// A second collection: cat and dog bring both parts, heart only its
	// dense vector, the rest nothing.
	mixed := make([]tandem.Doc, len(animals))
	copy(mixed, animals)
	mixed[0].Vectors = map[string]tandem.Vectors{model: vecs["cat"]}
	mixed[1].Vectors = map[string]tandem.Vectors{model: vecs["dog"]}
	mixed[5].Vectors = map[string]tandem.Vectors{model: {Dense: vecs["heart"].Dense}}
	e2 := openT(t, t.TempDir(), &Options{Dense: []string{model}, Late: []string{model}, NoSync: true})
	p, err := e2.ingest(ctx, &sliceSource{docs: mixed}, pipelineOptions{})
	if err != nil || p.Docs != len(animals) || p.Batches != 1 {
		t.Fatalf("mixed batch: %+v, %v", p, err)
	}
	if p.Tokens == 0 {
		t.Error("no tokens encoded, but four documents brought no vectors")
	}
	got := storedVectors(t, e2, animals, model)
	for _, d := range animals {
		// Supplied and encoded vectors alike equal the first collection's,
		// bit for bit: a text's vector does not depend on the texts
		// encoded beside it.
		if !slices.Equal(got[d.ID].Dense, vecs[d.ID].Dense) {
			t.Errorf("%s: dense vector differs from the encoded collection's (cosine %.6f)", d.ID, cosine(got[d.ID].Dense, vecs[d.ID].Dense))
		}
		if len(got[d.ID].Tokens) != len(vecs[d.ID].Tokens) {
			t.Errorf("%s: %d token rows, want %d", d.ID, len(got[d.ID].Tokens), len(vecs[d.ID].Tokens))
		}
	}
	for _, id := range []string{"cat", "dog", "heart"} {
		if fmt.Sprint(got[id].Dense) != fmt.Sprint(vecs[id].Dense) {
			t.Errorf("%s: the supplied dense vector was not stored as given", id)
		}
	}
	res, err := e2.Search(ctx, Request{Text: "kitten", Retrievers: []string{"bm25", "dense", "late"}})
	if err != nil || len(res.Hits) == 0 || res.Hits[0].ID != "cat" {
		t.Errorf("hybrid search over the mixed collection: %v, %v", res, err)
	}
}

func cosine(a, b []float32) float64 {
	var ab, aa, bb float64
	for i := range a {
		ab += float64(a[i]) * float64(b[i])
		aa += float64(a[i]) * float64(a[i])
		bb += float64(b[i]) * float64(b[i])
	}
	return ab / math.Sqrt(aa*bb)
}

// TestIndexStream feeds a stream through the pipeline: a bad document
// stops it with its stream position, after the batches before its batch;
// an error of the stream itself stops it too; SkipBad goes on.
func TestIndexStream(t *testing.T) {
	ctx := context.Background()
	stream := func(n, bad int, fail error) func() (tandem.Doc, error) {
		i := 0
		return func() (tandem.Doc, error) {
			if i == n {
				return tandem.Doc{}, io.EOF
			}
			i++
			if fail != nil && i == n {
				return tandem.Doc{}, fail
			}
			d := tandem.Doc{ID: fmt.Sprint("s", i-1), Fields: map[string]any{"text": fmt.Sprint("doc number ", i-1)}}
			if i-1 == bad {
				d.Fields["text"] = 12.0
			}
			return d, nil
		}
	}
	e := openT(t, t.TempDir(), &Options{BatchSize: 5, NoSync: true})
	var seen []int
	p, err := e.IndexStream(ctx, stream(25, 17, nil), StreamOptions{Progress: func(p Progress) { seen = append(seen, p.Docs) }})
	var be *DocError
	if !errors.As(err, &be) || be.Index != 17 || be.ID != "s17" || !errors.Is(err, tandem.ErrWrongType) {
		t.Fatalf("err = %v, want a DocError for stream position 17", err)
	}
	if p.Docs != 15 || e.Count() != 15 || fmt.Sprint(seen) != "[5 10 15]" {
		t.Errorf("stored %d (count %d, progress %v), want the 3 batches before position 17", p.Docs, e.Count(), seen)
	}
	boom := errors.New("source broke")
	if _, err := e.IndexStream(ctx, stream(9, -1, boom), StreamOptions{}); !errors.Is(err, boom) {
		t.Errorf("stream error: %v", err)
	}
	var skipped []error
	p, err = e.IndexStream(ctx, stream(25, 17, nil), StreamOptions{SkipBad: true, OnSkip: func(err error) { skipped = append(skipped, err) }})
	if err != nil || p.Docs != 24 || p.Skipped != 1 || p.Lines != 25 || len(skipped) != 1 {
		t.Errorf("SkipBad: %+v, %v, skipped %v", p, err, skipped)
	}
}

// TestFieldTypeFixedByEarlierBatch: a field's type is fixed by the first
// batch that commits it; a later line of another type is refused by the
// read stage or, when that batch was not yet committed, by the commit
// stage. Either way the error names the line, and SkipBad skips it alone.
func TestFieldTypeFixedByEarlierBatch(t *testing.T) {
	ctx := context.Background()
	var sb strings.Builder
	for i := range 40 {
		year := fmt.Sprint(2000 + i)
		if i == 25 {
			year = `"not a year"`
		}
		fmt.Fprintf(&sb, `{"_id":"y%d","text":"doc %d","year":%s}`+"\n", i, i, year)
	}
	for _, skip := range []bool{false, true} {
		e := openT(t, t.TempDir(), &Options{BatchSize: 1, NoSync: true})
		p, err := e.IndexJSONL(ctx, strings.NewReader(sb.String()), JSONLOptions{SkipBad: skip})
		if skip {
			if err != nil || p.Docs != 39 || p.Skipped != 1 || e.Count() != 39 {
				t.Errorf("SkipBad: %+v, %v, count %d", p, err, e.Count())
			}
			continue
		}
		var le *DocError
		if !errors.As(err, &le) || le.Line != 26 || !errors.Is(err, tandem.ErrWrongType) {
			t.Fatalf("err = %v, want a DocError for line 26", err)
		}
		if p.Docs != 25 || e.Count() != 25 {
			t.Errorf("stored %d (count %d), want the 25 lines before", p.Docs, e.Count())
		}
	}
}

// An external model's late-interaction index is checked before the
// collection is created: a bad one is refused, naming the model and the
// index, and leaves no directory.
func TestExternalLateIndexRefusedBeforeCreate(t *testing.T) {
	for _, tc := range []struct {
		index  string
		tokDim int
	}{{"NoSuchIndex", 16}, {"Residual", 12}, {"Residual3", 16}} {
		schema := tandem.DefaultSchema()
		schema.Models = []tandem.Model{{Name: "ext", Late: true, TokenDim: tc.tokDim, LateIndex: tc.index, Similarity: tandem.Dot, External: true}}
		dir := filepath.Join(t.TempDir(), "c")
		_, err := Open(dir, &Options{Schema: schema})
		if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"ext"`) || !strings.Contains(err.Error(), tc.index) {
			t.Errorf("late_index %q at %d-d: %v, want a bad request naming the model and the index", tc.index, tc.tokDim, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("late_index %q: the collection directory was created", tc.index)
		}
	}
}
