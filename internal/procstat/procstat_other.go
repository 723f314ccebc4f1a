//go:build !unix

package procstat

import "io/fs"

func allocated(info fs.FileInfo) int64 { return info.Size() }

func maxRSS() int64 { return 0 }
