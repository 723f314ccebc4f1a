package storage

import (
	"fmt"
	"syscall"
)

// ErrDiskFull is returned by writes that would leave less than the disk
// reserve (Options.DiskReserve) free. It wraps syscall.ENOSPC. Nothing of
// the refused write is stored; reads and searches go on, and writes
// succeed again once space is freed.
var ErrDiskFull = fmt.Errorf("storage: disk full: %w", syscall.ENOSPC)

// DefaultDiskReserve is the free space every write leaves. Badger writes
// its memtable log, value log and tables through memory maps of sparse
// files: on a full file system a store to such a page raises SIGBUS,
// which kills the process instead of returning an error. So the store
// refuses a write before the file system fills: 128 MiB is room for a
// memtable's log (DefaultMemTableSize) to fill and then be flushed to a
// table of about the same size, several times over, each write's own
// bytes coming on top. It does not cover
// an arbitrarily large compaction, or another program filling the disk;
// a process killed that way recovers on the next Open as after any crash.
const DefaultDiskReserve = 128 << 20

// checkSpace fails with ErrDiskFull when writing need more bytes would
// leave less than the reserve free. Each byte is counted twice: Badger
// may hold it in its log and then in a table.
func (s *Store) checkSpace(need int64) error { return s.checkFree(2 * need) }

// checkFree fails with ErrDiskFull when writing need bytes would leave
// less than the reserve free. Blob segments hold each byte once.
func (s *Store) checkFree(need int64) error {
	if s.dir == "" || s.reserve < 0 {
		return nil
	}
	free, ok := freeBytes(s.dir)
	if !ok {
		return nil // unknown: let Badger try
	}
	if free < s.reserve+need {
		return fmt.Errorf("%w: %d bytes free in %s; the write needs %d and %d are kept in reserve", ErrDiskFull, free, s.dir, need, s.reserve)
	}
	return nil
}
