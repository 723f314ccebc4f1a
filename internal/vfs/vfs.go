// Package vfs is the small file-system interface through which Tandem
// writes and reads the files it manages itself, rather than through Badger
// or Bleve: the snapshots of derived indexes and the blob segments that
// hold large blobs such as token matrices (storage). OS is the real file
// system; Faulty wraps one to inject I/O errors, torn writes and flipped
// bytes in tests.
//
// # Invariant
//
// Blob segments are append-only: bytes are appended and synced before the
// Badger commit that points at them, and a segment is removed only after
// compaction has moved its live blobs and the pointer swaps are synced.
//
// A file that replaces another is written under a temporary name, synced,
// and only then made current, by a rename or by a record committed in
// Badger; the directory is synced (SyncDir) before that, so that a machine
// crash never leaves a name pointing at a file whose entry was lost.
package vfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
)

// FS is what Tandem's own file writers need of a file system.
type FS interface {
	// CreateTemp creates a new file in dir as os.CreateTemp does.
	CreateTemp(dir, pattern string) (File, error)
	// OpenFile opens a file as os.OpenFile does.
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	Rename(oldpath, newpath string) error
	Remove(name string) error
	MkdirAll(path string, perm fs.FileMode) error
	// SyncDir fsyncs a directory, making the names created, renamed or
	// removed in it durable.
	SyncDir(dir string) error
}

// File is an open file.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Seeker
	io.Closer
	Name() string
	Stat() (fs.FileInfo, error)
	Sync() error
	Truncate(size int64) error
}

// OS is the operating system's file system.
var OS FS = osFS{}

type osFS struct{}

func (osFS) CreateTemp(dir, pattern string) (File, error) { return os.CreateTemp(dir, pattern) }
func (osFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, flag, perm)
}
func (osFS) Rename(oldpath, newpath string) error         { return os.Rename(oldpath, newpath) }
func (osFS) Remove(name string) error                     { return os.Remove(name) }
func (osFS) MkdirAll(path string, perm fs.FileMode) error { return os.MkdirAll(path, perm) }

func (osFS) SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // a directory cannot be opened for syncing there
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Open opens name for reading.
func Open(fsys FS, name string) (File, error) { return fsys.OpenFile(name, os.O_RDONLY, 0) }
