//go:build !cgo || !linux

package malloc

// Stats reports nothing where the package cannot reach glibc's malloc.
func Stats() (inUse, held uint64, ok bool) { return 0, 0, false }

// Trim does nothing where the package cannot reach glibc's malloc.
func Trim() bool { return false }

// KeepTrimmed does nothing where the package cannot reach glibc's malloc.
func KeepTrimmed() {}
