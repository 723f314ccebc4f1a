//go:build !linux

package procstat

import (
	"os"
	"testing"
)

// mapAndRead is Linux's: TestSampler, its one caller, skips elsewhere.
func mapAndRead(t *testing.T, _ *os.File, _ int) func() {
	t.Skip("mapped-file memory is measured on Linux only")
	return nil
}
