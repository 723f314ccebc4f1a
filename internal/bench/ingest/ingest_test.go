package ingest

import (
	"context"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tandemsearch/tandem/internal/bench"
)

// TestBenchIngest runs the scale benchmark on a small synthetic collection:
// every figure of its table is reported, and every search finds hits.
func TestBenchIngest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bench")
	r, err := Run(context.Background(), Config{Dir: dir, Docs: 3000, Queries: 20, Output: bench.Output{Quiet: true}})
	if err != nil {
		t.Fatalf("bench: %v", err)
	}
	var b strings.Builder
	r.WriteMarkdown(&b)
	out := b.String()
	for _, want := range []string{"| documents | 3000 ", "documents/s", "bytes/document", "| peak RSS: ingest | ", "| peak RSS: open from snapshot | ", "| peak RSS: open with dense rebuild, then searches | ", "| open from snapshot |", "| open with dense rebuild |"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Each phase's peak is measured (Linux resets the counter between
	// phases), so none may be empty.
	peaks := regexp.MustCompile(`\| peak RSS: [^|]+\| ([0-9.]+) (B|KiB|MiB|GiB) \|`).FindAllStringSubmatch(out, -1)
	if len(peaks) != 3 {
		t.Errorf("want 3 peak RSS rows with a size, got %d:\n%s", len(peaks), out)
	}
	for _, m := range peaks {
		if m[1] == "0" || m[1] == "0.0" {
			t.Errorf("zero peak RSS: %s", m[0])
		}
	}
	rows := regexp.MustCompile(`\| (bm25|dense)(, 1% filter)?, top 10: p50 / p95 \| [0-9.]+ / [0-9.]+ ms \(([0-9.]+) hits a query\) \|`).FindAllStringSubmatch(out, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 latency rows:\n%s", out)
	}
	for _, r := range rows {
		if r[3] == "0.0" {
			t.Errorf("%s%s found nothing", r[1], r[2])
		}
	}
	if _, err := Run(context.Background(), Config{Dir: t.TempDir(), Docs: 10, Queries: 1}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("existing directory: %v", err)
	}
}
