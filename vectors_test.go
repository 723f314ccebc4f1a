package tandem

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestDecodeVectors(t *testing.T) {
	doc, err := DecodeJSON([]byte(`{"_id":"a","text":"t","meta":{"y":1},"_vectors":{"m":{"dense":[0.1, -2e-3 ,3],"tokens":[[1,2],[ 3 ,4]]},"n":{"dense":[]}}}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if doc.ID != "a" || doc.Fields["meta.y"] == nil || doc.Fields[VectorsKey] != nil || len(doc.Fields) != 2 {
		t.Errorf("fields %v", doc.Fields)
	}
	m := doc.Vectors["m"]
	if len(m.Dense) != 3 || m.Dense[0] != float32(0.1) || m.Dense[1] != float32(-2e-3) || len(m.Tokens) != 2 || m.Tokens[1][0] != 3 {
		t.Errorf("m = %+v", m)
	}
	if n := doc.Vectors["n"]; n.Dense == nil || len(n.Dense) != 0 {
		t.Errorf("an empty dense array must stay present, to be refused by its dimension: %+v", n)
	}
	// "_vectors": null is no vectors.
	doc, err = DecodeJSON([]byte(`{"_id":"a","text":"t","_vectors":null}`), "")
	if err != nil || doc.Vectors != nil {
		t.Errorf("null vectors: %+v, %v", doc, err)
	}
	for _, bad := range []struct{ line, want string }{
		{`{"_id":"a","_vectors":[1]}`, "want an object"},
		{`{"_id":"a","_vectors":{"m":[1,2]}}`, "_vectors.m"},
		{`{"_id":"a","_vectors":{"m":{}}}`, `neither "dense" nor "tokens"`},
		{`{"_id":"a","_vectors":{"m":{"dense":[1,,2]}}}`, "malformed JSON"},
		{`{"_id":"a","_vectors":{"m":{"dense":[1,"2"]}}}`, "value 1: want a number"},
		{`{"_id":"a","_vectors":{"m":{"dense":[1,2e50]}}}`, "out of float32 range"},
		{`{"_id":"a","_vectors":{"m":{"dense":[1,true]}}}`, "want a number"},
		{`{"_id":"a","_vectors":{"m":{"tokens":[1,2]}}}`, "_vectors.m.tokens"},
		{`{"_id":"a","_vectors":{"m":{"tokens":[[1],null]}}}`, "null row"},
		{`{"_id":"a","_vectors":{"m":{"dense":[1],"sparse":{}}}}`, `unknown key "sparse"`},
	} {
		_, err := DecodeJSON([]byte(bad.line), "")
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: err %v, want %q", bad.line, err, bad.want)
		}
	}
}

// TestVectorRoundTrip checks that float32 values printed in their shortest
// spelling read back bit for bit, which exact rankings rely on.
func TestVectorRoundTrip(t *testing.T) {
	vals := []float32{0, -0.0, 1, -1, 0.1, 1e-45, -3.4028235e38, 0.33333334, 123456.79, float32(math.SmallestNonzeroFloat32), 7.006492e-45}
	var parts []string
	for _, v := range vals {
		parts = append(parts, strconv.FormatFloat(float64(v), 'g', -1, 32))
	}
	got, err := parseFloats([]byte("[" + strings.Join(parts, ",") + "]"))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if math.Float32bits(got[i]) != math.Float32bits(v) && !(v == 0 && got[i] == 0) {
			t.Errorf("%d: %v read back as %v", i, v, got[i])
		}
	}
	for _, s := range []string{"1", "-0", "0.5", "1e3", "1E+3", "-1.5e-3"} {
		if !jsonNumber([]byte(s)) {
			t.Errorf("%s is a JSON number", s)
		}
	}
	for _, s := range []string{"", "-", "01", ".5", "1.", "1e", "NaN", "Inf", "0x10", "1_0", "+1"} {
		if jsonNumber([]byte(s)) {
			t.Errorf("%q is not a JSON number", s)
		}
	}
}

func TestCheckVectors(t *testing.T) {
	m := Model{Name: "m", Dense: true, Dim: 2, Late: true, TokenDim: 2, Similarity: Cosine}
	v, err := m.CheckVectors(Vectors{Dense: []float32{3, 4}, Tokens: [][]float32{{0, 2}, {0.6, 0.8}}})
	if err != nil {
		t.Fatal(err)
	}
	if v.Dense[0] != 0.6 || v.Dense[1] != 0.8 || v.Tokens[0][1] != 1 {
		t.Errorf("cosine vectors are normalised: %+v", v)
	}
	unit := []float32{0.6, 0.8}
	if v, _ := m.CheckVectors(Vectors{Dense: unit}); &v.Dense[0] != &unit[0] {
		t.Error("a unit vector must be kept as given, bit for bit")
	}
	dot := m
	dot.Similarity = Dot
	if v, _ := dot.CheckVectors(Vectors{Dense: []float32{3, 4}}); v.Dense[0] != 3 {
		t.Errorf("dot vectors are kept: %v", v.Dense)
	}
	denseOnly := Model{Name: "d", Dense: true, Dim: 2, Similarity: Cosine}
	for _, tc := range []struct {
		m    Model
		v    Vectors
		want string
	}{
		{m, Vectors{Dense: []float32{1}}, "dense: tandem: bad vectors: dimension 1, want 2"},
		{m, Vectors{Dense: []float32{0, 0}}, "zero vector"},
		{m, Vectors{Dense: []float32{1, float32(math.NaN())}}, "value 1 is NaN"},
		{m, Vectors{Tokens: [][]float32{{1, 0}, {float32(math.Inf(1)), 0}}}, "tokens[1]: tandem: bad vectors: value 0 is +Inf"},
		{m, Vectors{Tokens: [][]float32{}}, "empty token matrix"},
		{m, Vectors{Tokens: make([][]float32, MaxTokens+1)}, "4097 token rows, limit 4096"},
		{denseOnly, Vectors{Tokens: [][]float32{{1, 0}}}, "does not index d for late interaction"},
	} {
		_, err := tc.m.CheckVectors(tc.v)
		var ve *VectorError
		if !errors.As(err, &ve) || !errors.Is(err, ErrBadVectors) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "_vectors."+tc.m.Name) {
			t.Errorf("%+v: err %v, want a VectorError with %q", tc.v, err, tc.want)
		}
	}
}

// A cosine token row rounded to int8, as a model that stores int8 tokens
// reads it back, is kept as given by that model and normalised by one that
// stores float16; a row further from unit length is normalised by both.
func TestCheckVectorsInt8Slack(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	row := make([]float32, 384)
	var ss float64
	for i := range row {
		row[i] = float32(r.NormFloat64())
		ss += float64(row[i]) * float64(row[i])
	}
	var m float32
	for i := range row {
		row[i] /= float32(math.Sqrt(ss))
		m = max(m, float32(math.Abs(float64(row[i]))))
	}
	s := m / 127
	for i := range row {
		row[i] = float32(math.Round(float64(row[i]/s))) * s
	}
	long := make([]float32, len(row))
	for i, x := range row {
		long[i] = 1.1 * x
	}
	for _, enc := range []string{"i8", "f16"} {
		mod := Model{Name: "m", Late: true, TokenDim: 384, Similarity: Cosine, LateEncoding: enc}
		got, err := mod.CheckVectors(Vectors{Tokens: [][]float32{row, long}})
		if err != nil {
			t.Fatal(err)
		}
		kept := slices.Equal(got.Tokens[0], row)
		if kept != (enc == "i8") {
			t.Errorf("%s: the int8-rounded row kept as given: %v", enc, kept)
		}
		var n float64
		for _, x := range got.Tokens[1] {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("%s: a row of norm 1.1 stored with squared norm %v, want 1", enc, n)
		}
	}
}
