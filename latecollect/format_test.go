package latecollect

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTokensRoundTrip(t *testing.T) {
	vecs := []float32{0.5, -0.25, 1, 0, -1, 0.1, 0.3333, 1e-6, -0.7071, 0.7071, 0, 0}
	for _, tc := range []struct {
		enc  Encoding
		size int     // bytes for 4 tokens of dim 3
		tol  float64 // worst absolute error allowed, from the encoding
	}{
		{F32, 8 + 4*3*4, 0},
		{F16, 8 + 4*3*2, 1.0 / 2048},   // half an ulp at 1: 2^-11
		{I8, 8 + 4*(4+3), 1.0 / 254.0}, // half a step of max|x|/127 with max|x| <= 1
	} {
		b, err := EncodeTokens(vecs, 3, tc.enc)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != tc.size {
			t.Errorf("%s: %d bytes, want %d", tc.enc, len(b), tc.size)
		}
		enc, dim, n, err := BlobInfo(b)
		if err != nil || enc != tc.enc || dim != 3 || n != 4 {
			t.Errorf("%s: BlobInfo = %v %d %d %v", tc.enc, enc, dim, n, err)
		}
		got, dim, err := DecodeTokens(b)
		if err != nil || dim != 3 || len(got) != len(vecs) {
			t.Fatalf("%s: decode: %d values dim %d, %v", tc.enc, len(got), dim, err)
		}
		for i := range vecs {
			if d := math.Abs(float64(got[i] - vecs[i])); d > tc.tol {
				t.Errorf("%s: value %d = %v, want %v (error %g > %g)", tc.enc, i, got[i], vecs[i], d, tc.tol)
			}
		}
	}
}

func TestEncodeTokensRejectsBadInput(t *testing.T) {
	if _, err := EncodeTokens([]float32{1, 2, 3}, 2, F16); !errors.Is(err, ErrBadVector) {
		t.Errorf("ragged: %v", err)
	}
	_, err := EncodeTokens([]float32{1, 2, 3, float32(math.NaN())}, 2, F16)
	if !errors.Is(err, ErrBadVector) || !strings.Contains(err.Error(), "token 1, dimension 1") {
		t.Errorf("NaN: %v, want ErrBadVector naming token 1, dimension 1", err)
	}
	if _, err := EncodeTokens([]float32{float32(math.Inf(1))}, 1, F32); !errors.Is(err, ErrBadVector) {
		t.Errorf("Inf: %v", err)
	}
	if _, err := EncodeTokens([]float32{1}, 1, Encoding(9)); !errors.Is(err, ErrBadOptions) {
		t.Errorf("bad encoding: %v", err)
	}
	if _, err := EncodeTokens(nil, 0, F32); !errors.Is(err, ErrBadVector) {
		t.Errorf("dim 0: %v", err)
	}
	// No tokens is a valid, empty matrix.
	b, err := EncodeTokens(nil, 4, F16)
	if err != nil || len(b) != headerSize {
		t.Errorf("empty: %d bytes, %v", len(b), err)
	}
	// The float16 range, at its edges, with the value named.
	above := math.Nextafter32(MaxF16, float32(math.Inf(1)))
	for _, tc := range []struct {
		v    float32
		fits bool
	}{
		{MaxF16, true}, {-MaxF16, true}, {0, true}, {float32(math.Copysign(0, -1)), true}, {1e-40, true},
		{above, false}, {-above, false}, {float32(math.Inf(1)), false}, {float32(math.Inf(-1)), false}, {float32(math.NaN()), false},
	} {
		row := []float32{0.5, tc.v, -0.25, 3}
		if got := FitsF16(row); got != tc.fits {
			t.Errorf("FitsF16 with %v: %v, want %v", tc.v, got, tc.fits)
		}
		_, err := EncodeTokens(row, 2, F16)
		if tc.fits != (err == nil) || err != nil && (!errors.Is(err, ErrBadVector) || !strings.Contains(err.Error(), "token 0, dimension 1")) {
			t.Errorf("EncodeTokens F16 with %v: %v, want an error naming token 0, dimension 1: %v", tc.v, err, !tc.fits)
		}
		// F32 stores any finite value.
		finite := !math.IsNaN(float64(tc.v)) && !math.IsInf(float64(tc.v), 0)
		if _, err := EncodeTokens(row, 2, F32); (err == nil) != finite {
			t.Errorf("EncodeTokens F32 with %v: %v, want an error: %v", tc.v, err, !finite)
		}
	}
}

func TestDecodeTokensRejectsCorruption(t *testing.T) {
	good, _ := EncodeTokens([]float32{1, 2, 3, 4}, 2, F16)
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":         nil,
		"short header":  good[:5],
		"truncated":     good[:len(good)-1],
		"trailing byte": append(bytes.Clone(good), 0),
		"version":       mod(func(b []byte) []byte { b[0] = 99; return b }),
		"encoding":      mod(func(b []byte) []byte { b[1] = 0; return b }),
		"dim 0":         mod(func(b []byte) []byte { b[2], b[3] = 0, 0; return b }),
		"count":         mod(func(b []byte) []byte { b[4] = 3; return b }),
	} {
		if _, _, err := DecodeTokens(b); !errors.Is(err, ErrCorruption) {
			t.Errorf("%s: err = %v, want ErrCorruption", name, err)
		}
	}
}

// Every float16 value survives float16 -> float32 -> float16, and
// rounding is to nearest even at a halfway point.
func TestFloat16(t *testing.T) {
	for h := range 1 << 16 {
		v := float16Value(uint16(h))
		if v != v { // NaN payloads are not preserved
			continue
		}
		if got := float16Bits(v); got != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, v, got)
		}
	}
	// 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1).
	if got := float16Value(float16Bits(1 + 1.0/2048)); got != 1 {
		t.Errorf("1+2^-11 -> %v, want 1", got)
	}
	// 1 + 3*2^-11 is halfway between 1+2^-10 and 1+2^-9: ties to even.
	if got := float16Value(float16Bits(1 + 3.0/2048)); got != 1+2.0/1024 {
		t.Errorf("1+3*2^-11 -> %v, want %v", got, 1+2.0/1024)
	}
	if got := float16Value(float16Bits(1e6)); !math.IsInf(float64(got), 1) {
		t.Errorf("1e6 -> %v, want +Inf", got)
	}
}

func FuzzDecodeTokens(f *testing.F) {
	for _, enc := range []Encoding{F32, F16, I8} {
		b, _ := EncodeTokens([]float32{0.1, -0.2, 0.3, 0.4}, 2, enc)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		vecs, dim, err := DecodeTokens(b)
		if err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v does not wrap ErrCorruption", err)
			}
			return
		}
		enc, _, n, _ := BlobInfo(b)
		if len(vecs) != n*dim {
			t.Fatalf("%d values for %d tokens of dim %d", len(vecs), n, dim)
		}
		// Re-encoding decoded values with the same encoding is stable.
		if enc == F32 && checkFinite(vecs, dim) == nil {
			again, err := EncodeTokens(vecs, dim, enc)
			if err != nil || !bytes.Equal(again, b) {
				t.Fatalf("f32 re-encode differs: %v", err)
			}
		}
	})
}
