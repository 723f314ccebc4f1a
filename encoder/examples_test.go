package encoder

import (
	"os"
	"path/filepath"
	"slices"
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
