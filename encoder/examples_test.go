package encoder

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestExampleConfigs keeps the documented per-family configurations and
// those of the models the set-up installs valid.
func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("examples/*.json")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v, %d files", err, len(files))
	}
	installed, err := filepath.Glob("../scripts/models/*/" + ConfigFile)
	if err != nil || len(installed) < 3 {
		t.Fatalf("scripts/models: %v, %d files", err, len(installed))
	}
	for _, f := range append(files, installed...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := ParseConfig(data)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		// The models the set-up installs say what precision they are.
		if slices.Contains(installed, f) && cfg.Precision == "" {
			t.Errorf("%s: no precision", f)
		}
	}
}

// TestInt8Configs keeps the configuration of each int8 variant NAME-int8
// that the set-up makes the same as its float32 model NAME's, but for the
// name, the precision and the source.
func TestInt8Configs(t *testing.T) {
	dirs, err := filepath.Glob("../scripts/models/*-int8")
	if err != nil || len(dirs) < 3 {
		t.Fatalf("scripts/models: %v, %d int8 variants", err, len(dirs))
	}
	for _, dir := range dirs {
		name := filepath.Base(dir)
		q, err := ReadConfig(dir)
		if err != nil {
			t.Fatal(err)
		}
		f, err := ReadConfig(filepath.Join(filepath.Dir(dir), strings.TrimSuffix(name, "-int8")))
		if err != nil {
			t.Fatal(err)
		}
		if q.Name != name || q.Precision != Int8 || f.Precision != Float32 {
			t.Errorf("%s: name %q, precision %q (float32 model: %q)", name, q.Name, q.Precision, f.Precision)
		}
		q.Name, q.Precision, q.Source = f.Name, f.Precision, f.Source
		if !reflect.DeepEqual(q, f) {
			t.Errorf("%s: settings differ from %s's:\n%+v\n%+v", name, f.Name, *q, *f)
		}
	}
}
