package storage

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tandemsearch/tandem"
)

// FuzzDecodeChange decodes fuzzed change-log values: a value that is not
// a put or delete record is ErrCorruption, never a panic, and a decoded
// one encodes back to the same bytes (the round trip).
func FuzzDecodeChange(f *testing.F) {
	f.Add(encodeChange(OpPut, 7, "doc-7"))
	f.Add(encodeChange(OpDelete, 1<<63, ""))
	f.Add([]byte{3, 0, 0})
	f.Fuzz(func(t *testing.T, v []byte) {
		c := Change{Seq: 5}
		if err := decodeChange(v, &c); err != nil {
			if !errors.Is(err, ErrCorruption) {
				t.Fatalf("error %v is not ErrCorruption", err)
			}
			return
		}
		if got := encodeChange(c.Op, c.DocNum, c.ID); string(got) != string(v) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", v, c, got)
		}
	})
}

// FuzzDecodeSchema decodes fuzzed stored schemas (the JSON of "mschema")
// as load does: never a panic, and a schema that decodes and validates
// encodes and decodes back to itself.
func FuzzDecodeSchema(f *testing.F) {
	s := tandem.DefaultSchema()
	s.Models = []tandem.Model{{Name: "m", Dense: true, Dim: 4, Late: true, TokenDim: 2, Similarity: tandem.Dot, External: true}}
	k1 := 0.9
	s.BM25 = &tandem.BM25{Scoring: tandem.BM25Textbook, K1: &k1}
	s.Fill()
	b, _ := json.Marshal(s)
	f.Add(b)
	f.Add([]byte(`{"id_field":"id","fields":[{"name":"x","type":"date"}],"strict":true}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		var sc tandem.Schema
		if json.Unmarshal(v, &sc) != nil || sc.Validate() != nil {
			return
		}
		again, err := json.Marshal(&sc)
		if err != nil {
			t.Fatalf("a valid schema does not encode: %v", err)
		}
		var back tandem.Schema
		if err := json.Unmarshal(again, &back); err != nil {
			t.Fatalf("%s does not decode: %v", again, err)
		}
		if twice, _ := json.Marshal(&back); string(twice) != string(again) {
			t.Fatalf("schema round trip: %s, then %s", again, twice)
		}
	})
}
