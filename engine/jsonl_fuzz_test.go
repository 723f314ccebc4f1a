package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/filter"
	"github.com/tandemsearch/tandem/latecollect"
)

// fuzzModel is the external model of the fuzzed collections: small
// dimensions, so that supplied "_vectors" are cheap, and dot similarity,
// so that supplied vectors are stored as given.
var fuzzModel = tandem.Model{Name: "ext", Dense: true, Dim: 4, Late: true, TokenDim: 3, Similarity: tandem.Dot, External: true}

// fuzzEngine is one collection kept open across a fuzz worker's inputs
// (opening Badger per input would be far too slow). It is reopened in a
// fresh directory every fuzzEngineInputs inputs, so that a non-strict
// schema does not grow without bound.
type fuzzEngine struct {
	base   string
	schema func() *tandem.Schema
	e      *Engine
	dir    string
	inputs int
}

const fuzzEngineInputs = 2000

func newFuzzEngine(f *testing.F, schema func() *tandem.Schema) *fuzzEngine {
	fe := &fuzzEngine{base: f.TempDir(), schema: schema}
	f.Cleanup(func() {
		if fe.e != nil {
			fe.e.Close()
		}
	})
	return fe
}

// get returns the open engine, reopening it in a new directory when due,
// and after any input that failed: a failure can stop a check half way
// and leave documents behind, and the fuzzer minimises a failing input
// by running its variants in the same process, so they must start from a
// collection that holds nothing an earlier input left.
func (fe *fuzzEngine) get(t *testing.T) *Engine {
	fe.inputs++
	if fe.e != nil && fe.inputs%fuzzEngineInputs == 0 {
		fe.reset(t)
	}
	t.Cleanup(func() {
		if t.Failed() && fe.e != nil {
			fe.reset(t)
		}
	})
	if fe.e == nil {
		dir, err := os.MkdirTemp(fe.base, "c")
		if err != nil {
			t.Fatal(err)
		}
		e, err := Open(dir, &Options{Schema: fe.schema(), NoSync: true})
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		fe.e, fe.dir = e, dir
	}
	return fe.e
}

// reset closes the engine and removes its directory; the next get opens
// a new one.
func (fe *fuzzEngine) reset(t *testing.T) {
	if err := fe.e.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	os.RemoveAll(fe.dir)
	fe.e = nil
}

func jsonlFuzzSchema() *tandem.Schema {
	s := tandem.DefaultSchema()
	s.Models = []tandem.Model{fuzzModel}
	return s
}

// refLine is a JSONL line as the fuzz target decodes it itself, with
// encoding/json and none of the engine's code: its id, its flattened
// fields (numbers as json.Number) and its supplied vectors for fuzzModel.
type refLine struct {
	id       string
	fields   map[string]any
	dense    []float32
	tokens   [][]float32
	ambigous bool // two keys flatten to one name
}

// decodeRefLine decodes line, or reports why it is not a document the
// engine may accept.
func decodeRefLine(line []byte) (refLine, error) {
	if !json.Valid(line) {
		return refLine{}, errors.New("not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return refLine{}, fmt.Errorf("not a JSON object: %v", err)
	}
	r := refLine{fields: map[string]any{}}
	switch id := obj["_id"].(type) {
	case string:
		r.id = id
	case json.Number:
		r.id = id.String()
	default:
		return refLine{}, fmt.Errorf("id %T", id)
	}
	delete(obj, "_id")
	if v, ok := obj[tandem.VectorsKey]; ok {
		delete(obj, tandem.VectorsKey)
		m, _ := v.(map[string]any)
		ext, _ := m[fuzzModel.Name].(map[string]any)
		if len(m) != 1 || ext == nil {
			return refLine{}, errors.New("vectors are not those of the model")
		}
		var err error
		if r.dense, err = refFloats(ext["dense"]); err != nil {
			return refLine{}, err
		}
		rows, _ := ext["tokens"].([]any)
		for _, row := range rows {
			v, err := refFloats(row)
			if err != nil {
				return refLine{}, err
			}
			r.tokens = append(r.tokens, v)
		}
	}
	var flatten func(prefix string, o map[string]any)
	flatten = func(prefix string, o map[string]any) {
		for k, v := range o {
			name := k
			if prefix != "" {
				name = prefix + "." + k
			}
			if m, ok := v.(map[string]any); ok {
				flatten(name, m)
				continue
			}
			if _, dup := r.fields[name]; dup {
				r.ambigous = true
			}
			r.fields[name] = v
		}
	}
	flatten("", obj)
	return r, nil
}

func refFloats(v any) ([]float32, error) {
	l, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("vector %T", v)
	}
	out := make([]float32, len(l))
	for i, x := range l {
		n, ok := x.(json.Number)
		if !ok {
			return nil, fmt.Errorf("vector value %T", x)
		}
		f, err := strconv.ParseFloat(n.String(), 32)
		if err != nil {
			return nil, err
		}
		out[i] = float32(f)
	}
	return out, nil
}

// refValue is the stored form of raw for a field of type t, by the
// normalisations package tandem documents (after a JSON round trip:
// keyword lists as []any); absent is true when no value is stored.
func refValue(t tandem.FieldType, raw any) (v any, absent bool, err error) {
	if raw == nil {
		return nil, true, nil
	}
	switch t {
	case tandem.Text, tandem.Keyword, tandem.Bool:
		return raw, false, nil
	case tandem.Keywords:
		switch x := raw.(type) {
		case string:
			return []any{x}, false, nil
		case []any:
			return x, len(x) == 0, nil
		}
	case tandem.Number:
		if n, ok := raw.(json.Number); ok {
			f, err := strconv.ParseFloat(n.String(), 64)
			return f, false, err
		}
	case tandem.Date:
		if s, ok := raw.(string); ok {
			tm, err := tandem.ParseDate(s)
			return tandem.FormatDate(tm), false, err
		}
	}
	return nil, false, fmt.Errorf("value %#v for a %s field", raw, t)
}

// jsonlFuzzSeeds are lines of every kind the JSONL reader meets: BEIR
// lines, supplied vectors, inferred metadata of each type, nested objects,
// numeric ids, and the mistakes it must name.
var jsonlFuzzSeeds = []string{
	`{"_id":"a","title":"T","text":"river stone","_vectors":{"ext":{"dense":[1,0,0,0],"tokens":[[1,0,0],[0,1,0]]}}}`,
	`{"_id":7,"text":"cloud","lang":"en","year":2001,"open":true,"published":"2020-05-01","tags":["bio","geo"],"meta":{"source":"x","n":1.5},"_vectors":{"ext":{"dense":[0.5,-0.5,2,1e-3],"tokens":[[0.25,0.5,-1]]}}}`,
	`{"_id":"b","text":"x","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3]]}}}` + "\n" + `{"_id":"c","text":"y","_vectors":{"ext":{"dense":[4,3,2,1],"tokens":[[3,2,1],[1,1,1]]}}}`,
	`{"_id":"d","text":"z","_vectors":{"ext":{"dense":[1,2,3],"tokens":[[1,2,3]]}}}`,
	`{"_id":"e","text":"z","_vectors":{"ext":{"dense":[1,2,3,4]}}}`,
	`{"_id":"f","text":"z","_vectors":{"other":{"dense":[1,2,3,4]}}}`,
	`{"_id":"g","text":"","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3]]}}}`,
	`{"_id":"h","text":"z","year":"soon","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3]]}}}`,
	`{"_id":"i","text":"z","_x":1,"_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3e39]]}}}`,
	`{"text":"no id"}`,
	`{"_id":"j","text":"z"`,
	"\n\n" + `{"_id":"k","text":"blank lines first","_vectors":{"ext":{"dense":[0,0,0,1],"tokens":[[70000,1,0]]}}}`,
	`{"_id":"l","text":"z","list":[1,2],"_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3]]}}}`,
	`{"_id":"m","text":"z","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[]}}}`,
	`{"_id":"n","text":"z","a":{"b":"x"},"a.b":"y","_vectors":{"ext":{"dense":[1,2,3,4],"tokens":[[1,2,3]]}}}`,
}

// FuzzIndexJSONL indexes fuzzed JSONL (one to a few lines) into a
// collection with an external dense and late-interaction model, and holds
// IndexJSONL to its contract: an error is a *DocError naming a line of the
// input and classifying the fault (a field, a vector, the JSON, the
// document), and stores nothing; an accepted line is stored with its fields
// normalised as package tandem documents, its supplied vectors, and is
// found by a filter on each of its metadata fields.
func FuzzIndexJSONL(f *testing.F) {
	for _, s := range jsonlFuzzSeeds {
		f.Add([]byte(s))
	}
	fe := newFuzzEngine(f, jsonlFuzzSchema)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<16 || bytes.Count(data, []byte{'\n'}) > 8 {
			return
		}
		e := fe.get(t)
		before := e.Count()
		lines := bytes.Split(data, []byte{'\n'})
		if len(lines) > 1 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		_, err := e.IndexJSONL(ctx, bytes.NewReader(data), JSONLOptions{})
		if err != nil {
			var le *DocError
			if !errors.As(err, &le) {
				t.Fatalf("error %v is not a *DocError", err)
			}
			if le.Line < 1 || le.Line > len(lines) {
				t.Fatalf("error names line %d of %d: %v", le.Line, len(lines), err)
			}
			var fErr *tandem.FieldError
			var vErr *tandem.VectorError
			switch {
			case errors.As(err, &fErr), errors.As(err, &vErr):
			case errors.Is(err, tandem.ErrEmptyText), errors.Is(err, tandem.ErrInvalidUTF8):
			case strings.Contains(err.Error(), "malformed JSON"):
			default:
				t.Fatalf("line %d: error %v names no field, vector or JSON fault", le.Line, err)
			}
			if got := e.Count(); got != before {
				t.Fatalf("rejected input changed the count from %d to %d: %v", before, got, err)
			}
			for _, l := range lines {
				if r, err := decodeRefLine(l); err == nil {
					if _, ok, _ := e.Shard().Store().Lookup(r.id); ok {
						t.Fatalf("rejected input stored %q", r.id)
					}
				}
			}
			return
		}

		// Accepted: every non-blank line is a document; the last line of
		// an id wins.
		want := map[string]refLine{}
		var order []string
		for i, l := range lines {
			if len(bytes.TrimSpace(l)) == 0 {
				continue
			}
			r, err := decodeRefLine(l)
			if err != nil {
				t.Fatalf("line %d accepted, but %v: %q", i+1, err, l)
			}
			if _, ok := want[r.id]; !ok {
				order = append(order, r.id)
			}
			want[r.id] = r
		}
		schema := e.Schema()
		if got := e.Count(); got != before+uint64(len(want)) {
			t.Fatalf("count went from %d to %d for %d new ids", before, got, len(want))
		}
		for _, id := range order {
			checkJSONLDoc(t, ctx, e, schema, want[id])
		}
		if _, err := e.Delete(ctx, order); err != nil {
			t.Fatalf("delete: %v", err)
		}
		if got := e.Count(); got != before {
			t.Fatalf("count %d after deleting what the input stored, want %d", got, before)
		}
	})
}

// checkJSONLDoc checks that the document r describes is stored as the
// normalisations say, with its supplied vectors, and that a filter on all
// its metadata fields finds it.
func checkJSONLDoc(t *testing.T, ctx context.Context, e *Engine, schema *tandem.Schema, r refLine) {
	t.Helper()
	num, ok, err := e.Shard().Store().Lookup(r.id)
	if err != nil || !ok {
		t.Fatalf("accepted id %q: not stored (%v)", r.id, err)
	}
	doc, ok, err := e.Shard().Store().Get(num)
	if err != nil || !ok {
		t.Fatalf("accepted id %q: no document (%v)", r.id, err)
	}
	if r.ambigous {
		t.Fatalf("id %q: two keys of the line flatten to one field name, and the line was accepted", r.id)
	}
	wantFields := map[string]any{}
	for name, raw := range r.fields {
		f, ok := schema.Field(name)
		if !ok {
			t.Fatalf("id %q: field %q stored, but not in the schema", r.id, name)
		}
		v, absent, err := refValue(f.Type, raw)
		if err != nil {
			t.Fatalf("id %q: field %q accepted: %v", r.id, name, err)
		}
		if !absent {
			wantFields[name] = v
		}
	}
	gotJSON, _ := json.Marshal(doc.Fields)
	wantJSON, _ := json.Marshal(wantFields)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("id %q: stored fields %s, want %s", r.id, gotJSON, wantJSON)
	}

	blob, ok, err := e.Shard().Store().Blob(num, dense.BlobName(fuzzModel.Name))
	if err != nil || !ok {
		t.Fatalf("id %q: no dense blob (%v)", r.id, err)
	}
	vec, err := dense.DecodeVector(blob, fuzzModel.Dim)
	if err != nil || !slices.Equal(vec, r.dense) {
		t.Fatalf("id %q: stored dense vector %v (%v), supplied %v", r.id, vec, err, r.dense)
	}
	blob, ok, err = e.Shard().Store().Blob(num, latecollect.BlobName(fuzzModel.Name))
	if err != nil || !ok {
		t.Fatalf("id %q: no token blob (%v)", r.id, err)
	}
	toks, dim, err := latecollect.DecodeTokens(blob)
	if err != nil || dim != fuzzModel.TokenDim || len(toks) != len(r.tokens)*dim {
		t.Fatalf("id %q: token blob of %d values of dim %d (%v), supplied %d rows", r.id, len(toks), dim, err, len(r.tokens))
	}
	for i, row := range r.tokens {
		for j, w := range row {
			// Stored as float16: half a unit in the last of 11 bits.
			g := toks[i*dim+j]
			if math.IsInf(float64(g), 0) || math.Abs(float64(g-w)) > math.Abs(float64(w))/2048+1e-7 {
				t.Fatalf("id %q: token %d value %d stored as %v, supplied %v", r.id, i, j, g, w)
			}
		}
	}

	// A filter on every metadata field (a term on its value, or on one
	// element of a list) must find the document, in the bitmap and by
	// filter.Match.
	var terms []any
	for name, v := range doc.Fields {
		f, _ := schema.Field(name)
		switch f.Type {
		case tandem.Keyword, tandem.Number, tandem.Bool, tandem.Date:
			terms = append(terms, map[string]any{"term": map[string]any{name: v}})
		case tandem.Keywords:
			l := v.([]any)
			terms = append(terms, map[string]any{"term": map[string]any{name: l[len(l)-1]}})
		}
		terms = append(terms, map[string]any{"exists": name})
	}
	if len(terms) == 0 {
		return
	}
	fj, _ := json.Marshal(map[string]any{"and": terms})
	expr, err := filter.Parse(fj)
	if err == nil {
		err = filter.Check(expr, schema)
	}
	if err != nil {
		t.Fatalf("id %q: filter %s on its own fields: %v", r.id, fj, err)
	}
	if !filter.Match(expr, schema, doc.Fields) {
		t.Fatalf("id %q: filter.Match refuses a filter on its own fields: %s", r.id, fj)
	}
	bm, err := e.FilterBitmap(ctx, fj)
	if err != nil {
		t.Fatalf("id %q: FilterBitmap(%s): %v", r.id, fj, err)
	}
	if !bm.Contains(num) {
		t.Fatalf("id %q: a filter on its own fields does not find it: %s", r.id, fj)
	}
}
