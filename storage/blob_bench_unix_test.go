//go:build unix

package storage

import (
	"os"
	"syscall"
)

// allocated is the disk space fi's file takes: its blocks, which a
// sparse file (Badger preallocates its logs) has fewer of than its size.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
