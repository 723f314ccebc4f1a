package encoder

import (
	"os"
	"path/filepath"
	"testing"
)

// TestExampleConfigs keeps the documented per-family configurations
// valid.
func TestExampleConfigs(t *testing.T) {
	files, err := filepath.Glob("examples/*.json")
	if err != nil || len(files) < 4 {
		t.Fatalf("examples: %v, %d files", err, len(files))
	}
	for _, f := range append(files, "../scripts/models/bge-small-en-v1.5/tandem.json", "../scripts/models/all-MiniLM-L6-v2/tandem.json") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseConfig(data); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
