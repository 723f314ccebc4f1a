package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/tandemsearch/tandem/storage"
)

// A backup file is a header, the store's backup (storage.Store.Backup:
// every document, blob, mark, the schema and the change log, read in one
// transaction), and a trailer with the body's length and SHA-256:
//
//	"TNDMBAK1" | body | length (uint64, little-endian) | SHA-256 (32 bytes) | "TNDMEND1"
//
// Restore reads the whole file and checks the length and the checksum
// before it uses a byte of the body. Derived indexes are not in it: a
// restored collection rebuilds them from the documents and vectors when
// it is first opened.
const (
	backupMagic     = "TNDMBAK1"
	backupEndMagic  = "TNDMEND1"
	backupTrailer   = 8 + sha256.Size + len(backupEndMagic)
	backupOverheads = len(backupMagic) + backupTrailer
)

// ErrBadBackup marks a backup file that is not one, or is damaged:
// truncated, or its checksum does not match.
var ErrBadBackup = errors.New("engine: bad backup")

// BackupInfo describes a backup: its body's length and SHA-256 (hex).
type BackupInfo struct {
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// countingHash hashes and counts what is written through it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.h.Write(p)
	c.n += int64(len(p))
	return len(p), nil
}

// Backup writes a consistent copy of the collection, as of one committed
// batch, to w while writes and searches go on.
func (e *Engine) Backup(ctx context.Context, w io.Writer) (BackupInfo, error) {
	if err := e.enter(); err != nil {
		return BackupInfo{}, err
	}
	defer e.mu.RUnlock()
	if _, err := io.WriteString(w, backupMagic); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup: %w", err)
	}
	ch := &countingHash{h: sha256.New()}
	if err := e.st.Backup(ctx, io.MultiWriter(w, ch)); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup: %w", err)
	}
	sum := ch.h.Sum(nil)
	var tr bytes.Buffer
	binary.Write(&tr, binary.LittleEndian, uint64(ch.n))
	tr.Write(sum)
	tr.WriteString(backupEndMagic)
	if _, err := w.Write(tr.Bytes()); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup: %w", err)
	}
	return BackupInfo{Bytes: ch.n, SHA256: hex.EncodeToString(sum)}, nil
}

// BackupFile writes Backup to path: to a temporary file beside it, synced
// and renamed into place, so that path holds a whole backup or what it
// held before.
func (e *Engine) BackupFile(ctx context.Context, path string) (BackupInfo, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup to %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	info, err := e.Backup(ctx, f)
	if err != nil {
		return BackupInfo{}, err
	}
	if err := f.Sync(); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup to %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup to %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup to %s: %w", path, err)
	}
	ok = true
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return info, nil
}

// CheckBackup reads the backup file at path whole and checks its header,
// its length and its checksum; an error wraps ErrBadBackup and says what
// is wrong.
func CheckBackup(path string) (BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("engine: backup %s: %w", path, err)
	}
	defer f.Close()
	info, _, err := checkBackup(f, path)
	return info, err
}

// checkBackup checks the backup in f and returns the section holding its
// body.
func checkBackup(f *os.File, path string) (BackupInfo, *io.SectionReader, error) {
	fi, err := f.Stat()
	if err != nil {
		return BackupInfo{}, nil, fmt.Errorf("engine: backup %s: %w", path, err)
	}
	size := fi.Size()
	head := make([]byte, len(backupMagic))
	if _, err := io.ReadFull(f, head); err != nil || string(head) != backupMagic {
		return BackupInfo{}, nil, fmt.Errorf("%w: %s is not a Tandem backup (it does not start with %q)", ErrBadBackup, path, backupMagic)
	}
	if size < int64(backupOverheads) {
		return BackupInfo{}, nil, fmt.Errorf("%w: %s is truncated: %d bytes, shorter than a backup's header and trailer", ErrBadBackup, path, size)
	}
	tr := make([]byte, backupTrailer)
	if _, err := f.ReadAt(tr, size-int64(backupTrailer)); err != nil {
		return BackupInfo{}, nil, fmt.Errorf("engine: backup %s: %w", path, err)
	}
	if string(tr[8+sha256.Size:]) != backupEndMagic {
		return BackupInfo{}, nil, fmt.Errorf("%w: %s is truncated or damaged: it does not end with %q", ErrBadBackup, path, backupEndMagic)
	}
	body := size - int64(backupOverheads)
	if n := binary.LittleEndian.Uint64(tr); n != uint64(body) {
		return BackupInfo{}, nil, fmt.Errorf("%w: %s is damaged: its trailer says %d bytes of data, the file holds %d", ErrBadBackup, path, n, body)
	}
	sec := io.NewSectionReader(f, int64(len(backupMagic)), body)
	h := sha256.New()
	if _, err := io.Copy(h, sec); err != nil {
		return BackupInfo{}, nil, fmt.Errorf("engine: backup %s: %w", path, err)
	}
	sum := h.Sum(nil)
	if !bytes.Equal(sum, tr[8:8+sha256.Size]) {
		return BackupInfo{}, nil, fmt.Errorf("%w: %s is damaged: the SHA-256 of its %d bytes of data is %x, its trailer says %x",
			ErrBadBackup, path, body, sum, tr[8:8+sha256.Size])
	}
	return BackupInfo{Bytes: body, SHA256: hex.EncodeToString(sum)}, io.NewSectionReader(f, int64(len(backupMagic)), body), nil
}

// Restore creates the collection in dir, which must not exist or must be
// empty, from the backup file at path, once CheckBackup has found it
// whole. The derived indexes are rebuilt when the collection is first
// opened. If the restore fails, dir is removed again (or emptied, if it
// existed).
func Restore(path, dir string) (BackupInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return BackupInfo{}, fmt.Errorf("engine: restore from %s: %w", path, err)
	}
	defer f.Close()
	info, body, err := checkBackup(f, path)
	if err != nil {
		return BackupInfo{}, err
	}
	existed := false
	switch entries, err := os.ReadDir(dir); {
	case err == nil && len(entries) > 0:
		return BackupInfo{}, fmt.Errorf("%w: restore into %s: the directory is not empty", ErrBadRequest, dir)
	case err == nil:
		existed = true
	case !errors.Is(err, os.ErrNotExist):
		return BackupInfo{}, fmt.Errorf("engine: restore into %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return BackupInfo{}, fmt.Errorf("engine: restore into %s: %w", dir, err)
	}
	if err := storage.Restore(dir, body, nil); err != nil {
		if existed {
			entries, _ := os.ReadDir(dir)
			for _, en := range entries {
				os.RemoveAll(filepath.Join(dir, en.Name()))
			}
		} else {
			os.RemoveAll(dir)
		}
		return BackupInfo{}, fmt.Errorf("engine: restore from %s: %w", path, err)
	}
	return info, nil
}
