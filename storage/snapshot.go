package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/tandemsearch/tandem/internal/vfs"
)

// snapshotRecord is the committed pointer to a snapshot file: its name,
// the last change it includes, and its exact length and CRC-32C, which
// OpenSnapshot checks. Records written before Size and CRC existed have
// neither (Size 0), and their files are returned unchecked.
type snapshotRecord struct {
	File string `json:"file"`
	Seq  uint64 `json:"seq"`
	Size int64  `json:"size,omitempty"`
	CRC  uint32 `json:"crc32c,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SaveSnapshot stores a named snapshot of a derived index (a FAISS index,
// for example) that includes every change up to seq. write fills the file.
// The file is written under a fresh name and fsynced, its directory is
// fsynced, then its name, length and checksum are committed in Badger;
// the commit is the single point at which the new snapshot replaces the
// old one, whose file is then removed. On any error the previous snapshot
// stays current and the new file is removed.
func (s *Store) SaveSnapshot(ctx context.Context, name string, seq uint64, write func(w io.Writer) error) error {
	if s.dir == "" || name == "" || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("storage: save snapshot %q: invalid name or in-memory store", name)
	}
	dir := filepath.Join(s.dir, "snapshots")
	f, err := s.fs.CreateTemp(dir, name+"-*.snap")
	if err != nil {
		return fmt.Errorf("storage: save snapshot %q: %w", name, err)
	}
	fname := filepath.Base(f.Name())
	ok, closed := false, false
	defer func() {
		if !ok {
			if !closed {
				f.Close()
			}
			s.fs.Remove(f.Name())
		}
	}()
	cw := &checkedWriter{w: f, crc: crc32.New(castagnoli)}
	if err := write(cw); err != nil {
		return fmt.Errorf("storage: save snapshot %q: write: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage: save snapshot %q: fsync: %w", name, err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage: save snapshot %q: close: %w", name, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("storage: save snapshot %q: %w", name, err)
	}
	var old snapshotRecord
	err = s.update(func(txn *badger.Txn) error {
		if item, err := txn.Get(snapKey(name)); err == nil {
			_ = item.Value(func(v []byte) error { return json.Unmarshal(v, &old) })
		}
		b, _ := json.Marshal(snapshotRecord{File: fname, Seq: seq, Size: cw.n, CRC: cw.crc.Sum32()})
		if err := s.checkSpace(int64(len(b))); err != nil {
			return err
		}
		return txn.Set(snapKey(name), b)
	})
	if err != nil {
		return fmt.Errorf("storage: save snapshot %q: commit: %w", name, err)
	}
	ok = true
	if old.File != "" && old.File != fname {
		s.fs.Remove(filepath.Join(dir, old.File))
	}
	return nil
}

// checkedWriter counts and checksums what it writes.
type checkedWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// OpenSnapshot opens the named snapshot; seq is the last change it
// includes. It returns ErrNotFound if there is none. The file is checked
// first: a missing, unreadable, short or long file, or one whose CRC-32C
// differs from the record's, is reported as ErrCorruption, and its
// owner rebuilds from the store. The caller closes rc.
func (s *Store) OpenSnapshot(name string) (rc io.ReadCloser, seq uint64, err error) {
	rec, err := s.snapshotRecord(name)
	if err != nil {
		return nil, 0, fmt.Errorf("storage: open snapshot %q: %w", name, err)
	}
	if s.dir == "" {
		return nil, 0, fmt.Errorf("storage: open snapshot %q: %w", name, ErrNotFound)
	}
	f, err := vfs.Open(s.fs, filepath.Join(s.dir, "snapshots", rec.File))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: snapshot %q: %w", ErrCorruption, name, err)
	}
	if err := checkSnapshot(f, rec); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%w: snapshot %q (%s): %w", ErrCorruption, name, rec.File, err)
	}
	return f, rec.Seq, nil
}

// SnapshotSeq is the last change the named snapshot includes, read from
// its record alone: the file is neither opened nor checked. It returns
// ErrNotFound if there is none.
func (s *Store) SnapshotSeq(name string) (uint64, error) {
	rec, err := s.snapshotRecord(name)
	if err != nil {
		return 0, fmt.Errorf("storage: snapshot %q: %w", name, err)
	}
	return rec.Seq, nil
}

// snapshotRecord reads the named snapshot's record: ErrNotFound if none.
func (s *Store) snapshotRecord(name string) (snapshotRecord, error) {
	var rec snapshotRecord
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(snapKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return json.Unmarshal(v, &rec) })
	})
	return rec, err
}

// checkSnapshot checks f's length and checksum against rec and rewinds
// it. Checking before any decoder sees a byte keeps damaged data away
// from FAISS's reader, which trusts the sizes it reads.
func checkSnapshot(f vfs.File, rec snapshotRecord) error {
	if rec.Size == 0 && rec.CRC == 0 {
		return nil // written before records had them
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != rec.Size {
		return fmt.Errorf("%d bytes, %d written", fi.Size(), rec.Size)
	}
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.LimitReader(f, rec.Size)); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if h.Sum32() != rec.CRC {
		return fmt.Errorf("checksum %08x, %08x written", h.Sum32(), rec.CRC)
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// removeOrphanSnapshots removes the files under snapshots/ that no
// record names: those of a SaveSnapshot interrupted before its commit.
func (s *Store) removeOrphanSnapshots() error {
	if s.dir == "" {
		return nil
	}
	live := map[string]bool{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagSnapshot}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec snapshotRecord
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err == nil {
				live[rec.File] = true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: list snapshots: %w", err)
	}
	dir := filepath.Join(s.dir, "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("storage: list snapshots: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".snap") && !live[e.Name()] {
			s.fs.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}
