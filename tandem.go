// Package tandem holds the small types shared by every layer of Tandem: a
// document (Doc), a ranked hit (Hit) with what its query matched in it
// (Highlights), and the collection schema (Schema) that documents are
// checked against before they are stored.
//
// A Doc's field values are normalised by Schema.Check before storage: text
// and keyword values are strings, keyword lists are []string, numbers are
// float64, booleans are bool and dates are RFC 3339 strings in UTC. Every
// other layer (storage, sparse, filter, dense) relies on that normal form.
package tandem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Doc is one document: an external id, its field values and, optionally,
// vectors computed elsewhere.
type Doc struct {
	ID     string         `json:"id"`
	Fields map[string]any `json:"fields"`
	// Vectors brings precomputed vectors, keyed by model name, for models
	// of the collection: Tandem checks them (Model.CheckVectors) and stores
	// them instead of encoding the document with that model. An external
	// model's vectors are required. They are stored as blobs, never as
	// fields.
	Vectors map[string]Vectors `json:"vectors,omitempty"`
}

// Hit is one ranked result.
type Hit struct {
	ID     string         `json:"id"`
	DocNum uint64         `json:"-"`
	Score  float64        `json:"score"`
	Fields map[string]any `json:"fields,omitempty"`
	// Sources explains a fused hit: one entry per retriever that ran,
	// in the request's order, whether or not it found the document.
	Sources []Source `json:"sources,omitempty"`
	// Highlights shows what the query matched in the document, when the
	// search asked for it; nil otherwise.
	Highlights *Highlights `json:"highlights,omitempty"`
}

// Source is one retriever's part in a fused hit.
type Source struct {
	// Retriever names the ranking: "bm25", "dense:<model>", "late:<model>".
	Retriever string `json:"retriever"`
	// Rank is the 1-based rank in that retriever's list (cut to its
	// depth), 0 when the list does not hold the document; Score and
	// Contribution are then 0.
	Rank int `json:"rank"`
	// Score is the retriever's raw score (BM25, cosine, avg-max).
	Score float64 `json:"score"`
	// Contribution is this retriever's share of Hit.Score; the shares add
	// up to the fused score.
	Contribution float64 `json:"contribution"`
}

// Model records that a collection indexes an encoder model for dense
// retrieval, late interaction or both. It is stored in the schema when the
// collection is created, with the dimensions the collection's vectors have,
// so that a model of another dimension is refused when the collection is
// opened again.
type Model struct {
	// Name is the installed model's name (see encoder.Find).
	Name string `json:"name"`
	// Dense stores one pooled vector per document ("vec/<name>"), of Dim
	// values.
	Dense bool `json:"dense,omitempty"`
	Dim   int  `json:"dim,omitempty"`
	// Late stores every document token's vector ("tok/<name>"), of
	// TokenDim values.
	Late     bool `json:"late,omitempty"`
	TokenDim int  `json:"token_dim,omitempty"`
	// LateIndex describes the late-interaction index of the model
	// (latecollect.Options.Description): "" for the default, "Residual"
	// for residual codes with full-precision tokens on disk.
	LateIndex string `json:"late_index,omitempty"`
	// LateEncoding is how the model's token vectors are stored
	// (latecollect.ParseEncoding): "i8", which the exact stage scores in
	// int8 (a new collection's default for an installed model), or "f16"
	// (the default for an external one). "" (collections made before it
	// was recorded) means "f16". With "i8", a supplied cosine token row
	// within int8's rounding of unit length is stored as given. A blob records its own encoding, so a collection whose
	// encoding changed reads both.
	LateEncoding string `json:"late_encoding,omitempty"`
	// Similarity is how the model's vectors compare, Cosine or Dot. For
	// an installed model it is recorded from the model when the collection
	// is created; "" (collections made before it was recorded) means
	// Cosine, which every default model uses.
	Similarity string `json:"similarity,omitempty"`
	// External marks a model Tandem does not run: only its name,
	// dimensions and similarity are known. Every document brings its
	// vectors (Doc.Vectors) and every search its query vectors.
	External bool `json:"external,omitempty"`
}

// FieldType is the type of a schema field.
type FieldType string

// Field types. Text fields are analysed for BM25; the others are metadata
// that filters match exactly.
const (
	Text     FieldType = "text"
	Keyword  FieldType = "keyword"
	Keywords FieldType = "keywords" // a list of keywords
	Number   FieldType = "number"
	Date     FieldType = "date"
	Bool     FieldType = "bool"
)

func (t FieldType) valid() bool {
	switch t {
	case Text, Keyword, Keywords, Number, Date, Bool:
		return true
	}
	return false
}

// Field describes one field of a schema.
type Field struct {
	Name string    `json:"name"`
	Type FieldType `json:"type"`
	// Analyzer is the Bleve analyzer of a text field; "" means "en"
	// (English, with stopwords and Porter stemming).
	Analyzer string `json:"analyzer,omitempty"`
	// Boost multiplies the field's BM25 score when a search asks for
	// per-field scoring; 0 means 1.
	Boost float64 `json:"boost,omitempty"`
}

// maxModelDim bounds a model's dimensions: token blobs store the
// dimension in 16 bits.
const maxModelDim = 65535

// DefaultAnalyzer is the analyzer of text fields that name none.
const DefaultAnalyzer = "en"

// DefaultMaxTextBytes bounds one text field when Schema.MaxTextBytes is 0.
const DefaultMaxTextBytes = 1 << 20

// Schema is a collection's schema. It is stored in the collection when the
// collection is created, and extended (never changed) when a non-strict
// collection meets a new field.
type Schema struct {
	// IDField is the JSON key holding the external id; "" means "_id".
	IDField string  `json:"id_field"`
	Fields  []Field `json:"fields"`
	// Strict rejects documents with fields the schema does not declare.
	// Otherwise the type of a new field is inferred from its first value
	// and the field is added to the schema.
	Strict bool `json:"strict,omitempty"`
	// MaxTextBytes bounds each text field; 0 means DefaultMaxTextBytes.
	MaxTextBytes int `json:"max_text_bytes,omitempty"`
	// Models lists the encoders the collection indexes; empty means BM25
	// only. Set when the collection is created, never changed after.
	Models []Model `json:"models,omitempty"`
	// BM25 sets how the sparse retriever scores; nil means textbook BM25
	// with k1 = DefaultK1 and b = DefaultB.
	BM25 *BM25 `json:"bm25,omitempty"`
}

// Scorings of the sparse retriever (BM25.Scoring).
const (
	// BM25Textbook is Robertson's BM25 with the collection's true
	// document lengths (package sparse has the formula).
	BM25Textbook = "textbook"
	// BM25Bleve is Bleve's built-in BM25 variant: the square root of the
	// term frequency, k1 and b fixed at 1.2 and 0.75, an average length
	// from the vocabulary size, a query norm and a coordination factor.
	BM25Bleve = "bleve"
)

// Textbook BM25's parameters when the schema sets none: Robertson's usual
// values, which score better on SciFact and Cranfield than Lucene's 0.9
// and 0.4 (package sparse has the measurements).
const (
	DefaultK1 = 1.2
	DefaultB  = 0.75
)

// BM25 is the sparse retriever's scoring.
type BM25 struct {
	// Scoring is BM25Textbook (also when empty) or BM25Bleve.
	Scoring string `json:"scoring,omitempty"`
	// K1 (term-frequency saturation, ≥ 0) and B (length normalisation,
	// in [0, 1]) are textbook BM25's parameters; nil means DefaultK1 and
	// DefaultB.
	K1 *float64 `json:"k1,omitempty"`
	B  *float64 `json:"b,omitempty"`
}

// Params returns the scoring and textbook BM25's k1 and b, with defaults
// for what b (which may be nil) leaves unset.
func (b *BM25) Params() (scoring string, k1, bb float64) {
	scoring, k1, bb = BM25Textbook, DefaultK1, DefaultB
	if b == nil {
		return
	}
	if b.Scoring != "" {
		scoring = b.Scoring
	}
	if b.K1 != nil {
		k1 = *b.K1
	}
	if b.B != nil {
		bb = *b.B
	}
	return
}

func (b *BM25) validate() error {
	if b == nil {
		return nil
	}
	switch {
	case b.Scoring != "" && b.Scoring != BM25Textbook && b.Scoring != BM25Bleve:
		return fmt.Errorf("tandem: schema bm25.scoring %q (want %q or %q)", b.Scoring, BM25Textbook, BM25Bleve)
	case b.K1 != nil && (*b.K1 < 0 || math.IsNaN(*b.K1) || math.IsInf(*b.K1, 0)):
		return fmt.Errorf("tandem: schema bm25.k1 %v: want a finite value >= 0", *b.K1)
	case b.B != nil && !(*b.B >= 0 && *b.B <= 1):
		return fmt.Errorf("tandem: schema bm25.b %v: want a value in [0, 1]", *b.B)
	}
	return nil
}

// DefaultSchema is the schema of a collection created without one: a BEIR
// corpus, with `_id`, and `title` and `text` as English text fields. Other
// keys become metadata fields with inferred types.
func DefaultSchema() *Schema {
	return &Schema{
		IDField: "_id",
		Fields: []Field{
			{Name: "title", Type: Text},
			{Name: "text", Type: Text},
		},
	}
}

// Clone returns a deep copy of s.
func (s *Schema) Clone() *Schema {
	c := *s
	c.Fields = slices.Clone(s.Fields)
	c.Models = slices.Clone(s.Models)
	if s.BM25 != nil {
		b := *s.BM25
		c.BM25 = &b
	}
	return &c
}

// Fill sets defaults for zero fields.
func (s *Schema) Fill() {
	if s.IDField == "" {
		s.IDField = "_id"
	}
	if s.MaxTextBytes == 0 {
		s.MaxTextBytes = DefaultMaxTextBytes
	}
	for i := range s.Fields {
		if s.Fields[i].Type == Text && s.Fields[i].Analyzer == "" {
			s.Fields[i].Analyzer = DefaultAnalyzer
		}
		if s.Fields[i].Boost == 0 {
			s.Fields[i].Boost = 1
		}
	}
}

// Validate reports the first problem with s, naming the field.
func (s *Schema) Validate() error {
	seen := map[string]bool{}
	for i, f := range s.Fields {
		switch {
		case f.Name == "":
			return fmt.Errorf("tandem: schema field %d: empty name", i)
		case strings.HasPrefix(f.Name, "_"):
			return fmt.Errorf("tandem: schema field %q: names starting with '_' are reserved", f.Name)
		case f.Name == s.IDField:
			return fmt.Errorf("tandem: schema field %q: is the id field", f.Name)
		case seen[f.Name]:
			return fmt.Errorf("tandem: schema field %q: declared twice", f.Name)
		case !f.Type.valid():
			return fmt.Errorf("tandem: schema field %q: unknown type %q", f.Name, f.Type)
		case f.Boost < 0 || math.IsNaN(f.Boost) || math.IsInf(f.Boost, 0):
			return fmt.Errorf("tandem: schema field %q: invalid boost %v", f.Name, f.Boost)
		case f.Analyzer != "" && f.Type != Text:
			return fmt.Errorf("tandem: schema field %q: analyzer on a %s field", f.Name, f.Type)
		}
		seen[f.Name] = true
	}
	if s.MaxTextBytes < 0 {
		return fmt.Errorf("tandem: schema: negative max_text_bytes")
	}
	if err := s.BM25.validate(); err != nil {
		return err
	}
	models := map[string]bool{}
	for i, m := range s.Models {
		switch {
		case m.Name == "" || strings.ContainsAny(m.Name, "/\\:"):
			return fmt.Errorf("tandem: schema model %d: invalid name %q", i, m.Name)
		case models[m.Name]:
			return fmt.Errorf("tandem: schema model %q: listed twice", m.Name)
		case !m.Dense && !m.Late:
			return fmt.Errorf("tandem: schema model %q: neither dense nor late", m.Name)
		case m.Dense && m.Dim <= 0, m.Late && m.TokenDim <= 0:
			return fmt.Errorf("tandem: schema model %q: missing dimension", m.Name)
		case m.Dim < 0 || m.TokenDim < 0 || m.Dim > maxModelDim || m.TokenDim > maxModelDim:
			return fmt.Errorf("tandem: schema model %q: dimension out of range 1..%d", m.Name, maxModelDim)
		case m.Similarity != "" && m.Similarity != Cosine && m.Similarity != Dot:
			return fmt.Errorf("tandem: schema model %q: similarity %q (want %q or %q)", m.Name, m.Similarity, Cosine, Dot)
		case m.External && m.Similarity == "":
			return fmt.Errorf("tandem: schema model %q: an external model needs a similarity (%q or %q)", m.Name, Cosine, Dot)
		}
		models[m.Name] = true
	}
	return nil
}

// Field returns the named field.
func (s *Schema) Field(name string) (Field, bool) {
	for _, f := range s.Fields {
		if f.Name == name {
			return f, true
		}
	}
	return Field{}, false
}

// TextFields returns the text fields in schema order.
func (s *Schema) TextFields() []Field {
	var out []Field
	for _, f := range s.Fields {
		if f.Type == Text {
			out = append(out, f)
		}
	}
	return out
}

// Errors returned by document checks; FieldError wraps them.
var (
	ErrUnknownField = errors.New("tandem: unknown field")
	ErrWrongType    = errors.New("tandem: wrong type")
	ErrEmptyText    = errors.New("tandem: document has no text")
	ErrTextTooLarge = errors.New("tandem: text too large")
	ErrInvalidUTF8  = errors.New("tandem: invalid UTF-8")
	ErrMissingID    = errors.New("tandem: missing id")
	// ErrDuplicateField reports a JSON line that gives a field twice.
	ErrDuplicateField = errors.New("tandem: field given twice")
)

// FieldError names the field a document check failed on.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return fmt.Sprintf("field %q: %v", e.Field, e.Err) }
func (e *FieldError) Unwrap() error { return e.Err }

// Check validates doc against s and returns it in normal form. When s is
// not strict, fields s does not know are returned in added with inferred
// types; the caller extends the schema with them. Check does not modify s
// or doc.
func (s *Schema) Check(doc Doc) (norm Doc, added []Field, err error) {
	if doc.ID == "" {
		return Doc{}, nil, &FieldError{Field: s.IDField, Err: ErrMissingID}
	}
	if !utf8.ValidString(doc.ID) {
		return Doc{}, nil, &FieldError{Field: s.IDField, Err: ErrInvalidUTF8}
	}
	maxText := s.MaxTextBytes
	if maxText == 0 {
		maxText = DefaultMaxTextBytes
	}
	norm = Doc{ID: doc.ID, Fields: make(map[string]any, len(doc.Fields))}
	hasText := false
	for name, v := range doc.Fields {
		if v == nil {
			continue // null means absent
		}
		f, ok := s.Field(name)
		if !ok {
			for _, a := range added {
				if a.Name == name {
					f, ok = a, true
				}
			}
		}
		if !ok {
			if s.Strict {
				return Doc{}, nil, &FieldError{Field: name, Err: ErrUnknownField}
			}
			if strings.HasPrefix(name, "_") || name == "" {
				return Doc{}, nil, &FieldError{Field: name, Err: fmt.Errorf("%w: names starting with '_' are reserved", ErrUnknownField)}
			}
			t, err := inferType(v)
			if err != nil {
				return Doc{}, nil, &FieldError{Field: name, Err: err}
			}
			f = Field{Name: name, Type: t, Boost: 1}
			added = append(added, f)
		}
		nv, err := normalize(f.Type, v, maxText)
		if err != nil {
			return Doc{}, nil, &FieldError{Field: name, Err: err}
		}
		if f.Type == Text && strings.TrimSpace(nv.(string)) != "" {
			hasText = true
		}
		if l, ok := nv.([]string); ok && len(l) == 0 {
			continue // an empty list is no value, as for exists
		}
		norm.Fields[name] = nv
	}
	if !hasText && len(s.TextFields())+countText(added) > 0 {
		return Doc{}, nil, ErrEmptyText
	}
	return norm, added, nil
}

func countText(fs []Field) int {
	n := 0
	for _, f := range fs {
		if f.Type == Text {
			n++
		}
	}
	return n
}

// inferType guesses a metadata field's type from its first value. Strings
// become keywords, or dates when they parse as dates.
func inferType(v any) (FieldType, error) {
	switch x := v.(type) {
	case string:
		if _, err := ParseDate(x); err == nil {
			return Date, nil
		}
		return Keyword, nil
	case bool:
		return Bool, nil
	case float64, json.Number, int, int64:
		return Number, nil
	case []string:
		return Keywords, nil
	case []any:
		for _, e := range x {
			if _, ok := e.(string); !ok {
				return "", fmt.Errorf("%w: only lists of strings are supported, got an element of type %T", ErrWrongType, e)
			}
		}
		return Keywords, nil
	}
	return "", fmt.Errorf("%w: cannot infer a field type from %T", ErrWrongType, v)
}

func normalize(t FieldType, v any, maxText int) (any, error) {
	switch t {
	case Text, Keyword:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%w: want a string for a %s field, got %s", ErrWrongType, t, typeName(v))
		}
		if !utf8.ValidString(s) {
			return nil, ErrInvalidUTF8
		}
		if t == Text && len(s) > maxText {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTextTooLarge, len(s), maxText)
		}
		if t == Keyword && len(s) > 4096 {
			return nil, fmt.Errorf("%w: keyword of %d bytes, limit 4096", ErrTextTooLarge, len(s))
		}
		return s, nil
	case Keywords:
		switch x := v.(type) {
		case string:
			return []string{x}, nil
		case []string:
			return slices.Clone(x), nil
		case []any:
			out := make([]string, 0, len(x))
			for i, e := range x {
				s, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("%w: element %d: want a string, got %s", ErrWrongType, i, typeName(e))
				}
				if !utf8.ValidString(s) {
					return nil, fmt.Errorf("element %d: %w", i, ErrInvalidUTF8)
				}
				out = append(out, s)
			}
			return out, nil
		}
		return nil, fmt.Errorf("%w: want a list of strings, got %s", ErrWrongType, typeName(v))
	case Number:
		var f float64
		switch x := v.(type) {
		case float64:
			f = x
		case int:
			f = float64(x)
		case int64:
			f = float64(x)
		case json.Number:
			var err error
			if f, err = x.Float64(); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrWrongType, err)
			}
		default:
			return nil, fmt.Errorf("%w: want a number, got %s", ErrWrongType, typeName(v))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: not a finite number", ErrWrongType)
		}
		return f, nil
	case Bool:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%w: want a bool, got %s", ErrWrongType, typeName(v))
		}
		return b, nil
	case Date:
		switch x := v.(type) {
		case string:
			tm, err := ParseDate(x)
			if err != nil {
				return nil, fmt.Errorf("%w: %v", ErrWrongType, err)
			}
			if y := tm.Year(); y < 1678 || y > 2261 {
				// Bleve indexes dates as int64 nanoseconds since 1970.
				return nil, fmt.Errorf("%w: date %q outside the supported years 1678-2261", ErrWrongType, x)
			}
			return FormatDate(tm), nil
		case time.Time:
			return FormatDate(x), nil
		}
		return nil, fmt.Errorf("%w: want a date string, got %s", ErrWrongType, typeName(v))
	}
	return nil, fmt.Errorf("%w: unknown field type %q", ErrWrongType, t)
}

func typeName(v any) string {
	switch v.(type) {
	case string:
		return "a string"
	case bool:
		return "a bool"
	case float64, json.Number, int, int64:
		return "a number"
	case []any, []string:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

var dateLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"}

// ParseDate parses an RFC 3339 timestamp or a plain date (2006-01-02).
func ParseDate(s string) (time.Time, error) {
	for _, l := range dateLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("cannot parse %q as a date (want RFC 3339 or 2006-01-02)", s)
}

// FormatDate is the normal form of a date value.
func FormatDate(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// DecodeJSON decodes one JSON object (a JSONL line) into a Doc, taking the
// id from idField. Nested objects are flattened with dotted names
// ("meta.year"). Numeric ids are accepted and kept in their JSON spelling.
func DecodeJSON(data []byte, idField string) (Doc, error) {
	if idField == "" {
		idField = "_id"
	}
	if !utf8.Valid(data) {
		off := 0
		for off < len(data) {
			r, n := utf8.DecodeRune(data[off:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			off += n
		}
		return Doc{}, fmt.Errorf("%w at byte %d", ErrInvalidUTF8, off)
	}
	var (
		obj     map[string]any
		vectors json.RawMessage
		err     error
	)
	if bytes.Contains(data, []byte(`"`+VectorsKey+`"`)) {
		obj, vectors, err = decodeWithVectors(data)
	} else {
		obj, err = decodeObject(data)
	}
	if err != nil {
		return Doc{}, err
	}
	doc := Doc{Fields: map[string]any{}}
	switch id := obj[idField].(type) {
	case string:
		doc.ID = id
	case json.Number:
		doc.ID = id.String()
	case nil:
		return Doc{}, &FieldError{Field: idField, Err: ErrMissingID}
	default:
		return Doc{}, &FieldError{Field: idField, Err: fmt.Errorf("%w: want a string id, got %s", ErrWrongType, typeName(id))}
	}
	delete(obj, idField)
	if vectors != nil && string(bytes.TrimSpace(vectors)) != "null" {
		vs, err := decodeVectors(vectors)
		if err != nil {
			return Doc{}, err
		}
		doc.Vectors = vs
	}
	if err := flatten("", obj, doc.Fields); err != nil {
		return Doc{}, err
	}
	return doc, nil
}

// decodeObject decodes one JSON object with numbers as json.Number.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		return nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if obj == nil {
		return nil, fmt.Errorf("malformed JSON: want an object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("malformed JSON: trailing data after the object")
	}
	return obj, nil
}

// decodeWithVectors is decodeObject for a line that may carry VectorsKey:
// its value is returned raw, to be parsed as float32 without a
// json.Number per value.
func decodeWithVectors(data []byte) (map[string]any, json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, nil, fmt.Errorf("malformed JSON: %w", err)
	}
	if raw == nil {
		return nil, nil, fmt.Errorf("malformed JSON: want an object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, fmt.Errorf("malformed JSON: trailing data after the object")
	}
	vectors := raw[VectorsKey]
	delete(raw, VectorsKey)
	obj := make(map[string]any, len(raw))
	for k, v := range raw {
		vd := json.NewDecoder(bytes.NewReader(v))
		vd.UseNumber()
		var x any
		if err := vd.Decode(&x); err != nil {
			return nil, nil, fmt.Errorf("malformed JSON: %w", err)
		}
		obj[k] = x
	}
	return obj, vectors, nil
}

// flatten copies obj into out with nested objects' keys dotted. A name
// given twice ({"a": {"b": 1}, "a.b": 2}) is an error: which value won
// would depend on map order.
func flatten(prefix string, obj map[string]any, out map[string]any) error {
	for k, v := range obj {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		if m, ok := v.(map[string]any); ok {
			if err := flatten(name, m, out); err != nil {
				return err
			}
			continue
		}
		if _, dup := out[name]; dup {
			return &FieldError{Field: name, Err: fmt.Errorf("%w: once as a dotted name and once nested", ErrDuplicateField)}
		}
		out[name] = v
	}
	return nil
}

// Strings returns a keywords value as a []string: the normal form is
// []string, and a value decoded from JSON is []any.
func Strings(v any) []string {
	switch l := v.(type) {
	case []string:
		return l
	case string:
		return []string{l}
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}
