package tandem

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseExternalModel(t *testing.T) {
	tests := []struct {
		in      string
		want    Model
		wantErr string
	}{
		{"ext:dense=3,tokens=2,similarity=dot", Model{Name: "ext", External: true, Dense: true, Dim: 3, Late: true, TokenDim: 2, Similarity: "dot"}, ""},
		{"e:dense=384, similarity=cosine", Model{Name: "e", External: true, Dense: true, Dim: 384, Similarity: "cosine"}, ""},
		{"ext:dense=3", Model{}, "ext: similarity is required"},
		{"ext:dense=0,similarity=dot", Model{}, `ext: dense="0": want a positive dimension`},
		{"ext:size=3,similarity=dot", Model{}, `ext: unknown key "size"`},
		{"ext:dense", Model{}, `ext: "dense": want key=value`},
		{"ext", Model{}, "want NAME:dense=DIM"},
		{":dense=3", Model{}, "want NAME:dense=DIM"},
	}
	for _, tc := range tests {
		got, err := ParseExternalModel(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseExternalModel(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseExternalModel(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestParseFieldAndSetField(t *testing.T) {
	for _, bad := range []string{"year", "=number", "year="} {
		if _, err := ParseField(bad); err == nil {
			t.Errorf("ParseField(%q) accepted", bad)
		}
	}
	s := DefaultSchema()
	n := len(s.Fields)
	f, err := ParseField("title=keyword")
	if err != nil {
		t.Fatal(err)
	}
	s.SetField(f)
	if got, _ := s.Field("title"); got.Type != Keyword || len(s.Fields) != n {
		t.Errorf("SetField(title=keyword): title is %+v, %d fields (want keyword, %d)", got, len(s.Fields), n)
	}
	s.SetField(Field{Name: "year", Type: Number})
	if got, ok := s.Field("year"); !ok || got.Type != Number || s.Fields[len(s.Fields)-1].Name != "year" {
		t.Errorf("SetField(year=number) did not add the field last: %+v", s.Fields)
	}
}

func TestReadSchema(t *testing.T) {
	s, err := ReadSchema([]byte(`{"id_field":"doc","fields":[{"name":"lang","type":"keyword"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s.IDField != "doc" || len(s.Fields) != 1 || s.Fields[0].Type != Keyword {
		t.Errorf("ReadSchema = %+v", s)
	}
	if _, err := ReadSchema([]byte(`{"idfield":"doc"}`)); err == nil || !strings.Contains(err.Error(), "idfield") {
		t.Errorf("ReadSchema with an unknown key: error %v, want one naming it", err)
	}
}
