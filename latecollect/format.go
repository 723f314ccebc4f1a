package latecollect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
)

// FormatVersion is the version of the token blob format written by
// EncodeTokens. DecodeTokens refuses other versions with ErrCorruption, so a
// reader never misreads a blob written by a newer Tandem.
//
// Changelog:
//
//	1: header of 8 bytes (version, encoding, dim as uint16, count as
//	   uint32), then the rows; f32 and f16 little endian, i8 rows each led
//	   by their float32 scale.
const FormatVersion = 1

// headerSize is the fixed size of a token blob's header.
const headerSize = 8

// maxDim bounds the token dimension so that it fits the header's uint16.
const maxDim = math.MaxUint16

// BlobPrefix starts the name of the per-document blob holding a model's
// token matrix: "tok/<model>".
const BlobPrefix = "tok/"

// BlobName is the storage blob name of a model's token matrices.
func BlobName(model string) string { return BlobPrefix + model }

// Encoding is how a token matrix is stored.
type Encoding uint8

const (
	// F32 stores each value as an IEEE float32: 4 bytes per dimension,
	// exact.
	F32 Encoding = 1
	// F16 stores each value as an IEEE float16 (round to nearest even):
	// 2 bytes per dimension. For unit-length token vectors the relative
	// error is below 2^-11, which does not change rankings measurably (see
	// the README).
	F16 Encoding = 2
	// I8 stores each row as a float32 scale s followed by dim int8 values
	// q, with value = q*s and s = max|x|/127 rounded up to 16 significant
	// bits (scaleI8): 1 byte per dimension plus 4 per token. The exact
	// stage scores it in int8 (queryI8).
	I8 Encoding = 3
)

// MaxF16 is the largest magnitude F16 stores: a larger value would become
// an infinity, so EncodeTokens refuses it.
const MaxF16 = 65504

// String names the encoding as Options and the README do.
func (e Encoding) String() string {
	switch e {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case I8:
		return "i8"
	}
	return fmt.Sprintf("Encoding(%d)", uint8(e))
}

// ParseEncoding reads an encoding's name as String gives it: "f32",
// "f16" or "i8".
func ParseEncoding(s string) (Encoding, error) {
	for _, e := range []Encoding{F32, F16, I8} {
		if s == e.String() {
			return e, nil
		}
	}
	return 0, fmt.Errorf("latecollect: %w: token encoding %q is not f32, f16 or i8", ErrBadOptions, s)
}

func (e Encoding) valid() bool { return e == F32 || e == F16 || e == I8 }

// rowBytes is the size of one encoded row of dim values.
func (e Encoding) rowBytes(dim int) int {
	switch e {
	case F32:
		return 4 * dim
	case F16:
		return 2 * dim
	case I8:
		return 4 + dim
	}
	return 0
}

// Sentinel errors.
var (
	// ErrClosed is returned by every method of a closed Index.
	ErrClosed = errors.New("latecollect: closed")
	// ErrCorruption marks a token blob or snapshot that cannot be decoded;
	// the index can be rebuilt from the documents' blobs.
	ErrCorruption = errors.New("latecollect: corruption")
	// ErrBadVector marks caller input that is not a valid token matrix:
	// wrong length or dimension, NaN or infinity.
	ErrBadVector = errors.New("latecollect: bad vector")
	// ErrBadOptions marks invalid Options or SearchOptions.
	ErrBadOptions = errors.New("latecollect: bad options")
)

// EncodeTokens encodes a token matrix (rows of dim values, row after row)
// as a blob to store under BlobName(model). It rejects a length that is
// not a multiple of dim and any NaN or infinite value, or for F16 a value
// beyond MaxF16, naming the token and dimension.
func EncodeTokens(vecs []float32, dim int, enc Encoding) ([]byte, error) {
	if dim <= 0 || dim > maxDim {
		return nil, fmt.Errorf("%w: token dimension %d out of range 1..%d", ErrBadVector, dim, maxDim)
	}
	if len(vecs)%dim != 0 {
		return nil, fmt.Errorf("%w: %d values is not a whole number of %d-dimensional tokens", ErrBadVector, len(vecs), dim)
	}
	if !enc.valid() {
		return nil, fmt.Errorf("%w: unknown encoding %d", ErrBadOptions, uint8(enc))
	}
	m := maxAbsBits(vecs)
	if m >= infBits {
		if err := checkFinite(vecs, dim); err != nil {
			return nil, err
		}
	}
	if enc == F16 && m > maxF16Bits {
		for i, v := range vecs {
			if math.Abs(float64(v)) > MaxF16 {
				return nil, fmt.Errorf("%w: token %d, dimension %d is %v, beyond the float16 range (±%d) of the %s encoding", ErrBadVector, i/dim, i%dim, v, MaxF16, enc)
			}
		}
	}
	n := len(vecs) / dim
	if uint64(n) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %d tokens is too many for one document", ErrBadVector, n)
	}
	buf := make([]byte, headerSize+n*enc.rowBytes(dim))
	buf[0] = FormatVersion
	buf[1] = byte(enc)
	binary.LittleEndian.PutUint16(buf[2:], uint16(dim))
	binary.LittleEndian.PutUint32(buf[4:], uint32(n))
	p := buf[headerSize:]
	switch enc {
	case F32:
		for i, v := range vecs {
			binary.LittleEndian.PutUint32(p[4*i:], math.Float32bits(v))
		}
	case F16:
		done := 0
		if useF16C && len(vecs) >= 8 {
			// The same bits as float16Bits for every finite value
			// (TestEncodeF16F16C); non-finite ones were refused above.
			done = len(vecs) &^ 7
			encodeF16F16C(&p[0], &vecs[0], done)
		}
		for i := done; i < len(vecs); i++ {
			binary.LittleEndian.PutUint16(p[2*i:], float16Bits(vecs[i]))
		}
	case I8:
		for r := range n {
			row := vecs[r*dim : (r+1)*dim]
			scale := scaleI8(row)
			out := p[r*(4+dim):]
			binary.LittleEndian.PutUint32(out, math.Float32bits(scale))
			for j, v := range row {
				out[4+j] = byte(quantizeI8(v, scale))
			}
		}
	}
	return buf, nil
}

// infBits and maxF16Bits are the bits of +Inf and of MaxF16 as float32:
// a finite value's magnitude orders as its bits without the sign, below
// infBits, and a NaN's are above.
const (
	infBits    = 0x7f800000
	maxF16Bits = 0x477fe000
)

// maxAbsBits is the largest of the values' bits without the sign: at
// least infBits when one is not finite, above maxF16Bits when one is
// beyond F16's range. It is the fast test that EncodeTokens and FitsF16
// make of every value (an integer max, which compiles to a conditional
// move), before they look for the value to name in an error.
func maxAbsBits(v []float32) uint32 {
	var m uint32
	for _, x := range v {
		if b := math.Float32bits(x) &^ (1 << 31); b > m {
			m = b
		}
	}
	return m
}

// FitsF16 reports whether every value is finite and within ±MaxF16: a
// fast test, ahead of the check that names a value out of range.
func FitsF16(v []float32) bool { return maxAbsBits(v) <= maxF16Bits }

// checkFinite reports the first NaN or infinite value by token and dim.
func checkFinite(vecs []float32, dim int) error {
	for i, v := range vecs {
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
			return fmt.Errorf("%w: token %d, dimension %d is %v", ErrBadVector, i/dim, i%dim, v)
		}
	}
	return nil
}

// blobHeader is the decoded header of a token blob.
type blobHeader struct {
	enc   Encoding
	dim   int
	count int
}

// parseHeader checks a blob's header and its total length.
func parseHeader(b []byte) (blobHeader, error) {
	if len(b) < headerSize {
		return blobHeader{}, fmt.Errorf("%w: token blob of %d bytes is shorter than its %d-byte header", ErrCorruption, len(b), headerSize)
	}
	if b[0] != FormatVersion {
		return blobHeader{}, fmt.Errorf("%w: token blob format version %d, want %d", ErrCorruption, b[0], FormatVersion)
	}
	h := blobHeader{
		enc:   Encoding(b[1]),
		dim:   int(binary.LittleEndian.Uint16(b[2:])),
		count: int(binary.LittleEndian.Uint32(b[4:])),
	}
	if !h.enc.valid() {
		return blobHeader{}, fmt.Errorf("%w: token blob encoding %d unknown", ErrCorruption, b[1])
	}
	if h.dim == 0 {
		return blobHeader{}, fmt.Errorf("%w: token blob dimension 0", ErrCorruption)
	}
	if want := uint64(headerSize) + uint64(h.count)*uint64(h.enc.rowBytes(h.dim)); uint64(len(b)) != want {
		return blobHeader{}, fmt.Errorf("%w: token blob of %d bytes, header says %d %s tokens of dim %d (%d bytes)", ErrCorruption, len(b), h.count, h.enc, h.dim, want)
	}
	return h, nil
}

// BlobInfo returns a token blob's encoding, dimension and token count after
// checking its header and length.
func BlobInfo(b []byte) (enc Encoding, dim, count int, err error) {
	h, err := parseHeader(b)
	return h.enc, h.dim, h.count, err
}

// DecodeTokens decodes a blob written by EncodeTokens into its rows, row
// after row, and their dimension.
func DecodeTokens(b []byte) (vecs []float32, dim int, err error) {
	h, err := parseHeader(b)
	if err != nil {
		return nil, 0, err
	}
	out := make([]float32, h.count*h.dim)
	decodeRows(b, h, 0, h.count, out)
	return out, h.dim, nil
}

// decodeRows decodes rows [from, to) of a checked blob into out, which
// holds (to-from)*dim values.
func decodeRows(b []byte, h blobHeader, from, to int, out []float32) {
	p := b[headerSize:]
	dim := h.dim
	switch h.enc {
	case F32:
		p = p[from*4*dim : to*4*dim]
		out = out[:len(p)/4]
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(p[4*i:]))
		}
	case F16:
		p = p[from*2*dim : to*2*dim]
		out = out[:len(p)/2]
		done := 0
		if useF16C && len(out) >= 8 {
			// Exact, like the table, for every value but NaNs, which
			// the hardware makes quiet.
			done = len(out) &^ 7
			decodeF16F16C(&out[0], &p[0], done)
		}
		tab := f16Table()
		for i := done; i < len(out); i++ {
			out[i] = tab[uint16(p[2*i])|uint16(p[2*i+1])<<8]
		}
	case I8:
		for r := from; r < to; r++ {
			row := p[r*(4+dim) : (r+1)*(4+dim)]
			scale := math.Float32frombits(binary.LittleEndian.Uint32(row))
			o := out[(r-from)*dim : (r-from+1)*dim]
			if useAVX512 && dim > 0 && dim%16 == 0 {
				// The same bits: an exact conversion, then one rounding
				// (TestDecodeI8AVX512).
				decodeI8AVX512(&o[0], &row[4], scale, dim)
				continue
			}
			for j := range o {
				o[j] = float32(int8(row[4+j])) * scale
			}
		}
	}
}

// scaleI8 is an I8 row's scale: max|x|/127, rounded up to 16 significant
// bits. Then 127*s and q*s are exact in float32 for every |q| ≤ 127, so a
// decoded row encodes again to the same bytes (TestEncodeI8Idempotent):
// tokens read back and brought again score as they did.
func scaleI8(row []float32) float32 {
	var m float32
	for _, v := range row {
		m = max(m, float32(math.Abs(float64(v))))
	}
	return roundScaleI8(m)
}

// roundScaleI8 is scaleI8 for a row whose largest absolute value is m.
func roundScaleI8(m float32) float32 {
	const low = 1<<(23-15) - 1 // the mantissa bits past the 15 kept
	b := math.Float32bits(m / 127)
	if b&low != 0 {
		b = (b | low) + 1 // up; a carry into the exponent is still exact
	}
	return math.Float32frombits(b)
}

// quantizeI8 is v's value in an I8 row of the given scale: v/scale
// rounded half away from zero, within [-127, 127] (0 for a zero scale).
func quantizeI8(v, scale float32) int8 {
	var q float64
	if scale > 0 {
		q = math.Round(float64(v / scale))
	}
	return int8(max(-127, min(127, q)))
}

// float16Bits converts v to IEEE binary16, rounding to nearest even;
// values beyond the float16 range become infinities (token vectors are unit
// length, far inside the range).
func float16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int((b >> 23) & 0xff)
	mant := b & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal or zero in float16.
		if e < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - e)
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rem := mant & (1<<shift - 1)
		if rem > half || (rem == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which is the right rounding
	}
	return sign | uint16(r)
}

// float16Value converts IEEE binary16 bits to float32.
func float16Value(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: mant * 2^-24.
		v := float32(mant) / (1 << 24)
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp-15+127)<<23 | mant<<13)
}

// f16Table maps every float16 bit pattern to its float32 value: decoding
// is then one load per value, which keeps f16 rescoring within a few
// percent of f32 (256 KiB, built on first use).
var f16Table = sync.OnceValue(func() *[1 << 16]float32 {
	var t [1 << 16]float32
	for i := range t {
		t[i] = float16Value(uint16(i))
	}
	return &t
})
