//go:build unix

package engine

import (
	"io/fs"
	"syscall"
)

// allocated is the space a file takes on disk: Badger preallocates and
// memory-maps its files, so their apparent size overstates it.
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return info.Size()
}
