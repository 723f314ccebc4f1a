//go:build unix

package procstat

import (
	"io/fs"
	"syscall"
)

// allocated is the disk space a file takes: its blocks, which for a sparse
// file are fewer than its size.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}

// maxRSS is getrusage's peak resident set in bytes (kilobytes on Linux).
func maxRSS() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return int64(ru.Maxrss) * 1024
}
