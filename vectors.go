package tandem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unsafe"
)

// VectorsKey is the JSONL key under which a line brings precomputed
// vectors, keyed by model name:
//
//	{"_id": "d1", "text": "...",
//	 "_vectors": {"bge-small-en-v1.5": {"dense": [0.01, ...], "tokens": [[...], ...]}}}
//
// DecodeJSON moves it into Doc.Vectors; it is never a field.
const VectorsKey = "_vectors"

// MaxTokens bounds the rows of one token matrix, supplied or encoded: the
// late-interaction index addresses at most this many tokens of a document.
const MaxTokens = 4096

// Similarity names how a model's vectors are compared.
const (
	// Cosine vectors are stored and searched at unit length: supplied
	// vectors are normalised unless they already are.
	Cosine = "cosine"
	// Dot vectors are stored and searched as given.
	Dot = "dot"
)

// ErrBadVectors reports supplied vectors that a collection cannot take;
// VectorError names the model and the part.
var ErrBadVectors = errors.New("tandem: bad vectors")

// Vectors are precomputed vectors of one text (a document or a query) for
// one model: its pooled vector, its token matrix, or both.
type Vectors struct {
	// Dense is the pooled vector, Model.Dim values.
	Dense []float32 `json:"dense,omitempty"`
	// Tokens is the token matrix: one row of Model.TokenDim values per
	// token, at most MaxTokens rows.
	Tokens [][]float32 `json:"tokens,omitempty"`
}

// VectorError names the model and the part (dense, tokens) of a supplied
// vector that was refused.
type VectorError struct {
	Model string
	Part  string // "dense", "tokens", "tokens[3]", or "" for the whole entry
	Err   error
}

func (e *VectorError) Error() string {
	where := VectorsKey + "." + e.Model
	if e.Part != "" {
		where += "." + e.Part
	}
	return fmt.Sprintf("%s: %v", where, e.Err)
}

func (e *VectorError) Unwrap() error { return e.Err }

// unitTolerance is how far from 1 the squared norm of a cosine vector may
// be and still count as unit length, so that vectors a model normalised
// itself are stored bit for bit (float32 rounding leaves them about 1e-7
// from unit length) and rank exactly as when Tandem encodes them.
const unitTolerance = 1e-5

// i8Slack bounds how far int8 rounding moves a row's squared norm: each
// value moves by at most s/2, s = max|x|/127 the row's scale, so the
// squared norm by at most s*‖x‖₁ + dim*s²/4.
func i8Slack(v []float32) float64 {
	var m, l1 float64
	for _, x := range v {
		a := math.Abs(float64(x))
		m, l1 = max(m, a), l1+a
	}
	s := m / 127
	return s*l1 + float64(len(v))*s*s/4
}

// CheckVectors checks v against m and returns it ready to store: the
// parts m indexes must have m's dimensions and finite values, a token
// matrix must have 1 to MaxTokens rows, a part m does not index is an
// error, and for a cosine model every vector not already of unit length
// is normalised (into new slices: v is not modified). Missing parts are
// not an error here: the caller decides whether the model can encode them.
func (m Model) CheckVectors(v Vectors) (Vectors, error) {
	out := Vectors{}
	cosine := m.Similarity != Dot
	if v.Dense != nil {
		if !m.Dense {
			return Vectors{}, &VectorError{Model: m.Name, Part: "dense", Err: fmt.Errorf("%w: the collection does not index %s for dense retrieval", ErrBadVectors, m.Name)}
		}
		d, err := checkVector(v.Dense, m.Dim, cosine, false)
		if err != nil {
			return Vectors{}, &VectorError{Model: m.Name, Part: "dense", Err: err}
		}
		out.Dense = d
	}
	if v.Tokens != nil {
		if !m.Late {
			return Vectors{}, &VectorError{Model: m.Name, Part: "tokens", Err: fmt.Errorf("%w: the collection does not index %s for late interaction", ErrBadVectors, m.Name)}
		}
		switch n := len(v.Tokens); {
		case n == 0:
			return Vectors{}, &VectorError{Model: m.Name, Part: "tokens", Err: fmt.Errorf("%w: empty token matrix", ErrBadVectors)}
		case n > MaxTokens:
			return Vectors{}, &VectorError{Model: m.Name, Part: "tokens", Err: fmt.Errorf("%w: %d token rows, limit %d", ErrBadVectors, n, MaxTokens)}
		}
		out.Tokens = make([][]float32, len(v.Tokens))
		for i, row := range v.Tokens {
			r, err := checkVector(row, m.TokenDim, cosine, m.LateEncoding == "i8")
			if err != nil {
				return Vectors{}, &VectorError{Model: m.Name, Part: fmt.Sprintf("tokens[%d]", i), Err: err}
			}
			out.Tokens[i] = r
		}
	}
	return out, nil
}

// checkVector checks one vector's length and values and, for cosine,
// returns it at unit length. With stored8 set (a token row the collection
// stores as int8) a row is already of unit length when its squared norm
// is within what int8 rounding of a unit row could move it (i8Slack):
// such a row, a stored one read back for instance, is kept as given, so
// that it encodes again to the same bytes and ranks as before.
func checkVector(v []float32, dim int, cosine, stored8 bool) ([]float32, error) {
	if len(v) != dim {
		return nil, fmt.Errorf("%w: dimension %d, want %d", ErrBadVectors, len(v), dim)
	}
	var ss float64
	for i, x := range v {
		// Not finite: all exponent bits set (a NaN or an infinity).
		if math.Float32bits(x)&0x7f800000 == 0x7f800000 {
			return nil, fmt.Errorf("%w: value %d is %v", ErrBadVectors, i, x)
		}
		ss += float64(x) * float64(x)
	}
	tol := unitTolerance
	if stored8 {
		tol += i8Slack(v)
	}
	if !cosine || math.Abs(ss-1) <= tol {
		return v, nil
	}
	if ss == 0 {
		return nil, fmt.Errorf("%w: zero vector, which has no direction to compare by cosine", ErrBadVectors)
	}
	inv := 1 / math.Sqrt(ss)
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(float64(x) * inv)
	}
	return out, nil
}

// Flatten returns the token matrix as one row-major slice and its row
// count.
func (v Vectors) Flatten(dim int) []float32 {
	out := make([]float32, 0, len(v.Tokens)*dim)
	for _, r := range v.Tokens {
		out = append(out, r...)
	}
	return out
}

// decodeVectors parses the value of VectorsKey: an object from model
// name to {"dense": [...], "tokens": [[...], ...]}. Numbers are parsed as
// float32 directly from the JSON text, so that a vector printed with the
// shortest float32 spelling (strconv 'g', -1, 32) reads back bit for bit.
func decodeVectors(raw json.RawMessage) (map[string]Vectors, error) {
	var byModel map[string]json.RawMessage
	if err := json.Unmarshal(raw, &byModel); err != nil {
		return nil, &FieldError{Field: VectorsKey, Err: fmt.Errorf("%w: want an object from model name to vectors: %v", ErrBadVectors, err)}
	}
	if byModel == nil {
		return nil, nil
	}
	out := make(map[string]Vectors, len(byModel))
	for name, r := range byModel {
		var parts map[string]json.RawMessage
		if err := json.Unmarshal(r, &parts); err != nil || parts == nil {
			return nil, &VectorError{Model: name, Err: fmt.Errorf("%w: want an object with \"dense\" and/or \"tokens\"", ErrBadVectors)}
		}
		var v Vectors
		for part, pr := range parts {
			var err error
			switch part {
			case "dense":
				v.Dense, err = parseFloats(pr)
				if err == nil && v.Dense == nil {
					v.Dense = []float32{}
				}
			case "tokens":
				v.Tokens, err = parseMatrix(pr)
			default:
				err = fmt.Errorf("%w: unknown key %q (want \"dense\" or \"tokens\")", ErrBadVectors, part)
				part = ""
			}
			if err != nil {
				return nil, &VectorError{Model: name, Part: part, Err: err}
			}
		}
		if v.Dense == nil && v.Tokens == nil {
			return nil, &VectorError{Model: name, Err: fmt.Errorf("%w: neither \"dense\" nor \"tokens\"", ErrBadVectors)}
		}
		out[name] = v
	}
	return out, nil
}

// parseFloats parses a JSON array of numbers; null is nil.
func parseFloats(b []byte) ([]float32, error) {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		return nil, nil
	}
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' {
		return nil, fmt.Errorf("%w: want an array of numbers", ErrBadVectors)
	}
	body := bytes.TrimSpace(b[1 : len(b)-1])
	if len(body) == 0 {
		return []float32{}, nil
	}
	out := make([]float32, 0, bytes.Count(body, []byte{','})+1)
	for i := 0; len(body) > 0; i++ {
		end := bytes.IndexByte(body, ',')
		tok := body
		if end >= 0 {
			tok, body = body[:end], body[end+1:]
			if len(bytes.TrimSpace(body)) == 0 {
				return nil, fmt.Errorf("%w: trailing comma after value %d", ErrBadVectors, i)
			}
		} else {
			body = nil
		}
		tok = bytes.TrimSpace(tok)
		if !jsonNumber(tok) {
			return nil, fmt.Errorf("%w: value %d: want a number, got %.40q", ErrBadVectors, i, tok)
		}
		f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(tok), len(tok)), 32)
		if err != nil {
			return nil, fmt.Errorf("%w: value %d (%s) is out of float32 range", ErrBadVectors, i, tok)
		}
		out = append(out, float32(f))
	}
	return out, nil
}

// jsonNumber reports whether b is a number as JSON spells it, so that
// strconv's extras (Inf, NaN, hex, underscores) are refused.
func jsonNumber(b []byte) bool {
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(b) && b[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(b)
}

// parseMatrix parses a JSON array of arrays of numbers; null is nil.
func parseMatrix(b []byte) ([][]float32, error) {
	var rows []json.RawMessage
	if err := json.Unmarshal(b, &rows); err != nil {
		return nil, fmt.Errorf("%w: want an array of arrays of numbers", ErrBadVectors)
	}
	if rows == nil {
		if string(bytes.TrimSpace(b)) == "null" {
			return nil, nil
		}
		rows = []json.RawMessage{}
	}
	out := make([][]float32, len(rows))
	for i, r := range rows {
		row, err := parseFloats(r)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		if row == nil {
			return nil, fmt.Errorf("row %d: %w: null row", i, ErrBadVectors)
		}
		out[i] = row
	}
	return out, nil
}
