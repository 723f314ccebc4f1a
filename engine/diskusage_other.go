//go:build !unix

package engine

import "io/fs"

// allocated is the file's size where the allocated size is not known.
func allocated(info fs.FileInfo) int64 { return info.Size() }
