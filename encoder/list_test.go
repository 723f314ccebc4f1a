package encoder

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	skipWithoutORT(t)
	root := t.TempDir()
	for _, name := range []string{"tiny-bert", "tiny-colbert"} {
		src := copyTiny(t, name)
		if err := os.Rename(src, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	setPrecision(t, filepath.Join(root, "tiny-colbert"), Int8)
	broken := copyTiny(t, "tiny-t5", "model.onnx")
	if err := os.Rename(broken, filepath.Join(root, "broken")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(root, "not-a-model"), 0o755)
	infos, err := List(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 3 {
		t.Fatalf("List returned %d models, want 3: %+v", len(infos), infos)
	}
	byName := map[string]Info{}
	for _, in := range infos {
		byName[in.Name] = in
	}
	if in := byName["tiny-bert"]; in.Err != nil || in.Dim != 4 || in.Pooling != PoolCLS || in.Precision != "" {
		t.Errorf("tiny-bert: %+v", in)
	}
	if in := byName["tiny-colbert"]; in.Err != nil || in.Dim != 0 || in.TokenDim != 128 || in.Pooling != PoolNone || in.Precision != Int8 {
		t.Errorf("tiny-colbert: %+v", in)
	}
	if in := byName["tiny-t5"]; !errors.Is(in.Err, ErrMissingFile) {
		t.Errorf("model without model.onnx: Err = %v, want ErrMissingFile", in.Err)
	}
}

// setPrecision rewrites the precision of the model configuration in dir.
func setPrecision(t *testing.T, dir string, p Precision) {
	t.Helper()
	path := filepath.Join(dir, ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["precision"] = p
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFind(t *testing.T) {
	t.Setenv("TANDEM_MODELS", "testdata")
	if dir, err := Find("tiny-bert"); err != nil || dir != filepath.Join("testdata", "tiny-bert") {
		t.Fatalf("Find(tiny-bert) = %q, %v", dir, err)
	}
	if _, err := Find("no-such-model"); !errors.Is(err, ErrNotInstalled) {
		t.Fatalf("Find(no-such-model) err = %v", err)
	}
	if dir, err := Find("./testdata/tiny-t5"); err != nil || dir != "./testdata/tiny-t5" {
		t.Fatalf("Find(path) = %q, %v", dir, err)
	}
	// An installed model comes before a directory of its name in the
	// working directory; a name installed nowhere finds that directory.
	cwd := t.TempDir()
	for _, name := range []string{"tiny-bert", "local-only"} {
		if err := os.Mkdir(filepath.Join(cwd, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	models, _ := filepath.Abs("testdata")
	t.Setenv("TANDEM_MODELS", models)
	t.Chdir(cwd)
	if dir, err := Find("tiny-bert"); err != nil || dir != filepath.Join(models, "tiny-bert") {
		t.Errorf("Find(tiny-bert) beside a directory of that name = %q, %v; want the installed one", dir, err)
	}
	if dir, err := Find("local-only"); err != nil || dir != "local-only" {
		t.Errorf("Find(local-only) = %q, %v; want the working directory's", dir, err)
	}
}

// Installed names the directories of the models directory that hold a
// configuration, sorted, without loading them.
func TestInstalled(t *testing.T) {
	root := t.TempDir()
	for _, name := range []string{"b-model", "a-model"} {
		os.Mkdir(filepath.Join(root, name), 0o755)
		if err := os.WriteFile(filepath.Join(root, name, ConfigFile), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(root, "not-a-model"), 0o755)
	os.WriteFile(filepath.Join(root, "file"), nil, 0o644)
	t.Setenv("TANDEM_MODELS", root)
	got, err := Installed()
	if err != nil || !slices.Equal(got, []string{"a-model", "b-model"}) {
		t.Errorf("Installed() = %q, %v; want [a-model b-model]", got, err)
	}
	t.Setenv("TANDEM_MODELS", filepath.Join(root, "absent"))
	if _, err := Installed(); err == nil {
		t.Error("Installed() of a missing models directory: no error")
	}
}

func TestParseModels(t *testing.T) {
	tests := []struct {
		in          string
		dense, late []string
		err         string
	}{
		{"none", nil, nil, ""},
		{"a", []string{"a"}, []string{"a"}, ""},
		{"a, late:b,dense:c", []string{"a", "c"}, []string{"a", "b"}, ""},
		{"late:b", nil, []string{"b"}, ""},
		{"a,,b", nil, nil, `empty name in "a,,b"`},
		{"late:", nil, nil, "empty name"},
		{"sparse:a", nil, nil, `"sparse:a": want NAME, dense:NAME or late:NAME`},
	}
	for _, tc := range tests {
		dense, late, err := ParseModels(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseModels(%q) error = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(dense, tc.dense) || !slices.Equal(late, tc.late) {
			t.Errorf("ParseModels(%q) = %v, %v, %v; want %v, %v", tc.in, dense, late, err, tc.dense, tc.late)
		}
	}
}

// A model that is not installed is an error naming the command that
// installs it, for each model scripts/setup-models.sh knows; the two lists
// of those models agree.
func TestNotInstalledNamesTheCommand(t *testing.T) {
	script, err := os.ReadFile("../scripts/setup-models.sh")
	if err != nil {
		t.Fatal(err)
	}
	var known []string
	for line := range strings.Lines(string(script)) {
		if v, ok := strings.CutPrefix(line, "KNOWN="); ok {
			known = strings.Fields(strings.Trim(strings.TrimSpace(v), `"`))
		}
	}
	if !slices.Equal(known, Installable) {
		t.Errorf("scripts/setup-models.sh knows %q; Installable is %q", known, Installable)
	}
	models := t.TempDir()
	t.Setenv("TANDEM_MODELS", models)
	t.Chdir(t.TempDir())
	for _, name := range Installable {
		_, err := Find(name)
		if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "scripts/setup-models.sh "+name) {
			t.Errorf("Find(%q) = %v; want ErrNotInstalled naming scripts/setup-models.sh %s", name, err, name)
		}
	}
	if _, err := Find("my-model"); !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), "docs/models.md") {
		t.Errorf("Find(my-model) = %v; want ErrNotInstalled pointing to docs/models.md", err)
	}
}
