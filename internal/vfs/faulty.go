package vfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
)

// ErrInjected is the error Faulty returns for a fault whose Rule has no
// Err.
var ErrInjected = errors.New("vfs: injected I/O error")

// Op is a file-system operation a Rule can fail.
type Op int

const (
	OpCreate   Op = iota // CreateTemp and OpenFile with O_CREATE
	OpWrite              // Write and WriteAt
	OpSync               // File.Sync
	OpRename             // Rename
	OpSyncDir            // SyncDir
	OpRead               // Read and ReadAt
	OpTruncate           // File.Truncate
)

func (o Op) String() string {
	return [...]string{"create", "write", "sync", "rename", "syncdir", "read", "truncate"}[o]
}

// Rule is one injected fault. It applies to the operations Op on paths
// containing Match ("" matches every path).
//
//   - OpWrite fails once At bytes of the file have been written (the
//     bytes before At are written: a short write). With Torn, the write
//     reports success but nothing at or past At reaches the file, as
//     after a crash that lost the end of a file.
//   - OpRead with Flip returns the byte at offset At inverted instead of
//     failing, on every read that covers it; without Flip reads fail.
//   - Other operations fail outright.
//
// Err is the error returned (ErrInjected when nil).
type Rule struct {
	Op    Op
	Match string
	At    int64
	Torn  bool
	Flip  bool
	Err   error
}

// Faulty is an FS that passes every call to FS (OS when nil) except those
// its rules fail. It is safe for concurrent use.
type Faulty struct {
	FS FS

	mu    sync.Mutex
	rules []Rule
	hits  int
}

// Inject adds a rule; it stays until Clear.
func (f *Faulty) Inject(r Rule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, r)
}

// Clear removes every rule.
func (f *Faulty) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Hits is the number of faults injected so far.
func (f *Faulty) Hits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits
}

// rule returns the first rule for op on path.
func (f *Faulty) rule(op Op, path string) (Rule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.Op == op && strings.Contains(path, r.Match) {
			return r, true
		}
	}
	return Rule{}, false
}

func (f *Faulty) hit() {
	f.mu.Lock()
	f.hits++
	f.mu.Unlock()
}

func (f *Faulty) fail(r Rule, op Op, path string) error {
	f.hit()
	err := r.Err
	if err == nil {
		err = ErrInjected
	}
	return &fs.PathError{Op: op.String(), Path: path, Err: err}
}

func (f *Faulty) base() FS {
	if f.FS == nil {
		return OS
	}
	return f.FS
}

func (f *Faulty) CreateTemp(dir, pattern string) (File, error) {
	if r, ok := f.rule(OpCreate, dir+"/"+pattern); ok {
		return nil, f.fail(r, OpCreate, dir+"/"+pattern)
	}
	file, err := f.base().CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

func (f *Faulty) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if r, ok := f.rule(OpCreate, name); ok && flag&os.O_CREATE != 0 {
		return nil, f.fail(r, OpCreate, name)
	}
	file, err := f.base().OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultyFile{File: file, fs: f}, nil
}

func (f *Faulty) Rename(oldpath, newpath string) error {
	if r, ok := f.rule(OpRename, newpath); ok {
		return f.fail(r, OpRename, newpath)
	}
	return f.base().Rename(oldpath, newpath)
}

func (f *Faulty) Remove(name string) error { return f.base().Remove(name) }

func (f *Faulty) MkdirAll(path string, perm fs.FileMode) error {
	return f.base().MkdirAll(path, perm)
}

func (f *Faulty) SyncDir(dir string) error {
	if r, ok := f.rule(OpSyncDir, dir); ok {
		return f.fail(r, OpSyncDir, dir)
	}
	return f.base().SyncDir(dir)
}

// faultyFile applies its FS's rules to one file. pos is the offset of the
// next Read or Write, which the underlying file tracks too.
type faultyFile struct {
	File
	fs  *Faulty
	pos int64
}

func (f *faultyFile) Write(p []byte) (int, error) {
	n, err := f.WriteAt(p, f.pos)
	f.pos += int64(n)
	if _, serr := f.File.Seek(f.pos, 0); err == nil {
		err = serr
	}
	return n, err
}

func (f *faultyFile) WriteAt(p []byte, off int64) (int, error) {
	r, ok := f.fs.rule(OpWrite, f.Name())
	if !ok || off+int64(len(p)) <= r.At {
		return f.File.WriteAt(p, off)
	}
	keep := max(0, r.At-off)
	n, err := f.File.WriteAt(p[:keep], off)
	if err != nil {
		return n, err
	}
	if r.Torn {
		f.fs.hit()
		return len(p), nil // the rest is lost silently
	}
	return n, f.fs.fail(r, OpWrite, f.Name())
}

func (f *faultyFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.pos)
	f.pos += int64(n)
	if _, serr := f.File.Seek(f.pos, 0); err == nil && serr != nil {
		err = serr
	}
	if err != nil && n > 0 {
		err = nil // io.Reader: report the bytes, the error comes next
	}
	return n, err
}

func (f *faultyFile) ReadAt(p []byte, off int64) (int, error) {
	r, ok := f.fs.rule(OpRead, f.Name())
	if ok && !r.Flip {
		return 0, f.fs.fail(r, OpRead, f.Name())
	}
	n, err := f.File.ReadAt(p, off)
	if ok && r.At >= off && r.At < off+int64(n) {
		f.fs.hit()
		p[r.At-off] ^= 0xff
	}
	return n, err
}

func (f *faultyFile) Seek(offset int64, whence int) (int64, error) {
	pos, err := f.File.Seek(offset, whence)
	if err == nil {
		f.pos = pos
	}
	return pos, err
}

func (f *faultyFile) Sync() error {
	if r, ok := f.fs.rule(OpSync, f.Name()); ok {
		return f.fs.fail(r, OpSync, f.Name())
	}
	return f.File.Sync()
}

func (f *faultyFile) Truncate(size int64) error {
	if r, ok := f.fs.rule(OpTruncate, f.Name()); ok {
		return f.fs.fail(r, OpTruncate, f.Name())
	}
	return f.File.Truncate(size)
}

// String describes the rule, for test logs.
func (r Rule) String() string {
	s := fmt.Sprintf("%s on %q", r.Op, r.Match)
	switch {
	case r.Op == OpWrite && r.Torn:
		s += fmt.Sprintf(", torn at byte %d", r.At)
	case r.Op == OpWrite:
		s += fmt.Sprintf(", failing at byte %d", r.At)
	case r.Op == OpRead && r.Flip:
		s += fmt.Sprintf(", byte %d flipped", r.At)
	}
	return s
}
