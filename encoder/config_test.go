package encoder

import (
	"errors"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	cases := []struct {
		name string
		json string
		err  string // "" for valid
	}{
		{"minimal", `{"pooling":"cls","similarity":"dot"}`, ""},
		{"colbert", `{"pooling":"none","similarity":"dot","normalize":true,
			"query":{"max_length":32,"marker":"[unused0]","augment":true},
			"document":{"max_length":180,"marker":"[unused1]","skip_punctuation":true}}`, ""},
		{"no pooling", `{"similarity":"dot"}`, `"pooling" is required`},
		{"bad pooling", `{"pooling":"max","similarity":"dot"}`, `"max" is not cls`},
		{"bad similarity", `{"pooling":"cls","similarity":"l2"}`, `"l2" is not dot or cosine`},
		{"unknown field", `{"pooling":"cls","similarity":"dot","poolin":"x"}`, `unknown field "poolin"`},
		{"syntax error line", "{\n\"pooling\":\"cls\",\n\"similarity\":\"dot\",,\n}", "line 3"},
		{"type error names field", "{\"pooling\":\"cls\",\"similarity\":\"dot\",\n\"query\":{\"max_length\":\"64\"}}", `line 2: field "query.max_length"`},
		{"negative length", `{"pooling":"cls","similarity":"dot","document":{"max_length":-1}}`, `"document.max_length"`},
		{"augment needs none", `{"pooling":"mean","similarity":"dot","query":{"augment":true}}`, `"query.augment" needs pooling none`},
		{"attend without augment", `{"pooling":"none","similarity":"dot","query":{"attend_to_augment":true}}`, `without "query.augment"`},
		{"escaping model path", `{"pooling":"cls","similarity":"dot","model":"../x.onnx"}`, `inside the model directory`},
		{"projection dims", `{"pooling":"none","similarity":"dot","projection":{"file":"p.f32","input_dim":0,"output_dim":128}}`, `"projection"`},
		{"precision", `{"pooling":"cls","similarity":"dot","precision":"int8"}`, ""},
		{"bad precision", `{"pooling":"cls","similarity":"dot","precision":"int4"}`, `"int4" is not float32 or int8`},
		{"trailing data", `{"pooling":"cls","similarity":"dot"} {}`, "trailing data"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig([]byte(tc.json))
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err = %v, want ErrBadConfig mentioning %q", err, tc.err)
			}
		})
	}
}

func TestSideDefaults(t *testing.T) {
	c := &Config{Pooling: PoolCLS, Similarity: Cosine, Model: "m.onnx", Document: SideConfig{Model: "d.onnx"}}
	q, d := c.side(Query), c.side(Document)
	if q.MaxLength != DefaultQueryMaxLength || d.MaxLength != DefaultDocumentMaxLength {
		t.Fatalf("max lengths %d %d", q.MaxLength, d.MaxLength)
	}
	if q.Model != "m.onnx" || d.Model != "d.onnx" || q.MaskToken != "[MASK]" {
		t.Fatalf("sides %+v %+v", q, d)
	}
}

func TestPoolMeanAndNormalize(t *testing.T) {
	hidden := []float32{1, 2, 3, 4, 100, 100}
	got := poolMean(hidden, []int64{1, 1, 0}, 2)
	if got[0] != 2 || got[1] != 3 {
		t.Fatalf("poolMean = %v, want [2 3]", got)
	}
	v := []float32{3, 4}
	normalize(v)
	if v[0] != 0.6 || v[1] != 0.8 {
		t.Fatalf("normalize = %v", v)
	}
	z := []float32{0, 0}
	normalize(z)
	if z[0] != 0 || z[1] != 0 {
		t.Fatalf("normalize(0) = %v", z)
	}
}
