//go:build !unix

package storage

import "os"

func allocated(fi os.FileInfo) int64 { return fi.Size() }
