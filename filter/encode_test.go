package filter

import (
	"testing"
)

// TestEncodeRoundTrip: every kind of node, parsed, checked, encoded and
// parsed again, is the same filter, and matches alike.
func TestEncodeRoundTrip(t *testing.T) {
	s := testSchema()
	for _, in := range []string{
		`{"term":{"lang":"en"}}`,
		`{"term":{"open":false}}`,
		`{"term":{"year":-0.1}}`,
		`{"terms":{"tags":["a","b\"c"]}}`,
		`{"range":{"year":{"gt":1.5e300,"lte":2e300}}}`,
		`{"range":{"published":{"gte":"2020-01-02","lt":"2021-03-04T05:06:07.123456789+02:00"}}}`,
		`{"prefix":{"lang":"ü"}}`,
		`{"exists":"tags"}`,
		`{"and":[]}`,
		`{"or":[]}`,
		`{"and":[{"not":{"or":[{"term":{"lang":"en"}},{"exists":"year"}]}},{"range":{"year":{"lt":3}}}]}`,
	} {
		e, err := Parse([]byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(e, s); err != nil {
			t.Fatal(err)
		}
		b, err := Encode(e)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		again, err := Parse(b)
		if err != nil {
			t.Fatalf("%s encoded as %s, which does not parse: %v", in, b, err)
		}
		if err := Check(again, s); err != nil {
			t.Fatalf("%s encoded as %s, which does not check: %v", in, b, err)
		}
		if again.String() != e.String() {
			t.Errorf("%s encoded as %s: %s, want %s", in, b, again, e)
		}
		for _, doc := range []map[string]any{
			{"lang": "en", "year": 2.0}, {"tags": []string{"a"}, "open": false}, {"published": "2020-06-01T00:00:00Z", "year": 1.6e300},
		} {
			if Match(again, s, doc) != Match(e, s, doc) {
				t.Errorf("%s encoded as %s matches %v differently", in, b, doc)
			}
		}
	}
}
