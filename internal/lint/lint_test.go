// Package lint holds Tandem's project rules, written as tests.
package lint

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRoot walks up from the test's directory to go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found")
		}
		dir = parent
	}
}

// goFiles lists the module's Go files, skipping hidden and generated trees.
func goFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "bin" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestCgoOnlyInInternal keeps the cgo boundary narrow: only packages under
// internal/ may import "C".
func TestCgoOnlyInInternal(t *testing.T) {
	root := moduleRoot(t)
	files := goFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		if strings.HasPrefix(rel, "internal"+string(filepath.Separator)) {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for line := 1; sc.Scan(); line++ {
			if strings.TrimSpace(sc.Text()) == `import "C"` {
				t.Errorf("%s:%d imports \"C\"; cgo belongs in internal/", rel, line)
			}
		}
		f.Close()
	}
}

// TestNoSharedDataInRepo keeps the shared test collections out of the
// repository: tests read ../shared in place.
func TestNoSharedDataInRepo(t *testing.T) {
	root := moduleRoot(t)
	for _, name := range []string{"corpus.jsonl", "bert-base-uncased-vocab.txt"} {
		err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			if d.Name() == name {
				t.Errorf("%s is in the repository; read ../shared in place instead", path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
