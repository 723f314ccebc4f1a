package tandem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// ParseField parses a field declaration written "name=type", for example
// "year=number" (the form of `tandem index --field`). The type is checked
// when the schema is validated.
func ParseField(s string) (Field, error) {
	name, typ, ok := strings.Cut(s, "=")
	if !ok || name == "" || typ == "" {
		return Field{}, fmt.Errorf("want name=type, got %q", s)
	}
	return Field{Name: name, Type: FieldType(typ)}, nil
}

// ParseExternalModel parses an external model written
// "NAME:dense=DIM,tokens=DIM,similarity=cosine|dot", with dense or tokens
// or both (the form of `tandem index --external`). Documents and queries
// bring such a model's vectors.
func ParseExternalModel(s string) (Model, error) {
	name, spec, ok := strings.Cut(s, ":")
	if !ok || name == "" || spec == "" {
		return Model{}, fmt.Errorf("want NAME:dense=DIM,tokens=DIM,similarity=cosine|dot, got %q", s)
	}
	m := Model{Name: name, External: true}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return Model{}, fmt.Errorf("%s: %q: want key=value", name, kv)
		}
		switch k {
		case "dense", "tokens":
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return Model{}, fmt.Errorf("%s: %s=%q: want a positive dimension", name, k, v)
			}
			if k == "dense" {
				m.Dense, m.Dim = true, n
			} else {
				m.Late, m.TokenDim = true, n
			}
		case "similarity":
			m.Similarity = v
		default:
			return Model{}, fmt.Errorf("%s: unknown key %q (want dense, tokens, similarity)", name, k)
		}
	}
	if m.Similarity == "" {
		return Model{}, fmt.Errorf("%s: similarity is required (cosine or dot)", name)
	}
	return m, nil
}

// ReadSchema decodes a schema from JSON, refusing keys a Schema does not
// have.
func ReadSchema(data []byte) (*Schema, error) {
	s := &Schema{}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(s); err != nil {
		return nil, err
	}
	return s, nil
}

// SetField declares f, in the place of every field of its name, or after
// the others when there is none.
func (s *Schema) SetField(f Field) {
	replaced := false
	for i := range s.Fields {
		if s.Fields[i].Name == f.Name {
			s.Fields[i] = f
			replaced = true
		}
	}
	if !replaced {
		s.Fields = append(s.Fields, f)
	}
}
