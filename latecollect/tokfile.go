package latecollect

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/tandemsearch/tandem/internal/vfs"
)

// tokenFile is the residual-code index's copy of every document's
// full-precision token matrix (its blob, byte for byte), for the exact
// stage. It lives in the store's directory, under derived/, and is read
// with pread: pages go through the page cache and are not mapped into the
// process, so reading them does not grow its resident memory, as reading
// Badger's memory-mapped value log would.
//
// Layout: a 16-byte header (magic "TLTF", version u32, file id u64), then
// blobs appended one after the other. Documents hold their blob's offset,
// length and CRC-32C; a blob is checked against its CRC when read. The
// snapshot records the file id and the length of the file it refers to:
// Open truncates what was appended after it (those changes are applied
// again), and recopies every blob from the store when the file does not
// match.
//
// Replaced or deleted documents leave garbage; compact rewrites the live
// blobs when the garbage exceeds the live bytes.
type tokenFile struct {
	fs      vfs.FS
	path    string
	f       vfs.File
	id      uint64
	size    int64 // end of the last blob
	garbage int64 // bytes of blobs no document refers to
}

const (
	tokenFileMagic   = "TLTF"
	tokenFileVersion = 1
	tokenFileHeader  = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// tokenLoc is where a document's blob is in the token file.
type tokenLoc struct {
	off  int64
	size uint32
	crc  uint32
}

// tokenFilePath is the file of model under the store directory dir.
func tokenFilePath(dir, model string) string {
	return filepath.Join(dir, "derived", "late-"+model+".tokens")
}

// createTokenFile creates (or empties) the file at path with a new id.
func createTokenFile(fsys vfs.FS, path string) (*tokenFile, error) {
	if err := fsys.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	f, err := fsys.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("token file: %w", err)
	}
	t := &tokenFile{fs: fsys, path: path, f: f, id: binary.LittleEndian.Uint64(idb[:]), size: tokenFileHeader}
	var h []byte
	h = append(h, tokenFileMagic...)
	h = binary.LittleEndian.AppendUint32(h, tokenFileVersion)
	h = binary.LittleEndian.AppendUint64(h, t.id)
	if _, err := f.WriteAt(h, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("token file: %w", err)
	}
	return t, nil
}

// openTokenFile opens the file at path if it has the given id and at least
// size bytes, and truncates it to size. It returns nil, nil when the file
// is missing or does not match.
func openTokenFile(fsys vfs.FS, path string, id uint64, size int64) (*tokenFile, error) {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	var h [tokenFileHeader]byte
	st, err := f.Stat()
	if err != nil || st.Size() < size || size < tokenFileHeader {
		f.Close()
		return nil, nil
	}
	if _, err := f.ReadAt(h[:], 0); err != nil || string(h[:4]) != tokenFileMagic ||
		binary.LittleEndian.Uint32(h[4:]) != tokenFileVersion || binary.LittleEndian.Uint64(h[8:]) != id {
		f.Close()
		return nil, nil
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("token file: %w", err)
	}
	return &tokenFile{fs: fsys, path: path, f: f, id: id, size: size}, nil
}

// append writes a blob at the end and returns where it is.
func (t *tokenFile) append(blob []byte) (tokenLoc, error) {
	if _, err := t.f.WriteAt(blob, t.size); err != nil {
		return tokenLoc{}, fmt.Errorf("token file: append: %w", err)
	}
	loc := tokenLoc{off: t.size, size: uint32(len(blob)), crc: crc32.Checksum(blob, castagnoli)}
	t.size += int64(len(blob))
	return loc, nil
}

// read reads the blob at loc into buf (grown as needed) and checks it.
func (t *tokenFile) read(loc tokenLoc, buf []byte) ([]byte, error) {
	if cap(buf) < int(loc.size) {
		buf = make([]byte, loc.size)
	}
	buf = buf[:loc.size]
	if _, err := t.f.ReadAt(buf, loc.off); err != nil {
		return buf, fmt.Errorf("token file: read %d bytes at %d: %w", loc.size, loc.off, err)
	}
	if crc32.Checksum(buf, castagnoli) != loc.crc {
		return buf, fmt.Errorf("%w: token file: checksum mismatch for %d bytes at %d", ErrCorruption, loc.size, loc.off)
	}
	return buf, nil
}

// sync makes the file durable up to its size.
func (t *tokenFile) sync() error {
	if err := t.f.Sync(); err != nil {
		return fmt.Errorf("token file: sync: %w", err)
	}
	return nil
}

func (t *tokenFile) close() error {
	if t == nil || t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	return err
}

// compactTokenFile rewrites the live blobs of docs (in docnum order) into
// a new file that replaces t, and updates their locations.
func compactTokenFile(t *tokenFile, docs map[uint64]docCodes, order []uint64) (*tokenFile, error) {
	tmp, err := createTokenFile(t.fs, t.path+".tmp")
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(io.NewOffsetWriter(tmp.f, tmp.size), 1<<20)
	var buf []byte
	locs := make([]tokenLoc, len(order))
	for i, num := range order {
		d := docs[num]
		if buf, err = t.read(d.loc, buf); err != nil {
			tmp.close()
			t.fs.Remove(tmp.path)
			return nil, err
		}
		if _, err := w.Write(buf); err != nil {
			tmp.close()
			t.fs.Remove(tmp.path)
			return nil, fmt.Errorf("token file: compact: %w", err)
		}
		locs[i] = d.loc
		locs[i].off = tmp.size
		tmp.size += int64(len(buf))
	}
	if err := w.Flush(); err == nil {
		err = tmp.sync()
	}
	if err == nil {
		err = t.fs.Rename(tmp.path, t.path)
	}
	if err == nil {
		err = t.fs.SyncDir(filepath.Dir(t.path))
	}
	if err != nil {
		tmp.close()
		t.fs.Remove(tmp.path)
		return nil, fmt.Errorf("token file: compact: %w", err)
	}
	tmp.path = t.path
	t.close()
	for i, num := range order {
		d := docs[num]
		d.loc = locs[i]
		docs[num] = d
	}
	return tmp, nil
}
