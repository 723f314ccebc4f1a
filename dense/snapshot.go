package dense

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"

	"github.com/RoaringBitmap/roaring/v2/roaring64"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// snapshotMagic starts every snapshot file.
const snapshotMagic = "TDNSDENS"

// snapshotVersion is the snapshot format version. A snapshot of another
// version is ignored (the index is rebuilt), never migrated.
//
//	1: magic, version, dim, requested description, description in use,
//	   IVF lists, vectors at build, docnum bitmap, FAISS index, CRC-32C.
const snapshotVersion = 1

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Snapshot saves the index to storage so that the next Open loads it and
// only catches up the changes after AppliedSeq. Writers wait while the
// FAISS index is serialised and written; searches go on.
func (x *Index) Snapshot(ctx context.Context) error {
	x.wmu.Lock()
	defer x.wmu.Unlock()
	return x.snapshotShared(ctx)
}

// snapshotShared saves a snapshot holding wmu (no writer changes the
// index) and, while it serialises and writes, only the read lock.
func (x *Index) snapshotShared(ctx context.Context) error {
	x.mu.RLock()
	if x.mu.closed {
		x.mu.RUnlock()
		return ErrClosed
	}
	seq, err := x.writeSnapshotRLocked(ctx)
	x.mu.RUnlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mu.snapErr = err
	if err == nil {
		x.mu.snapSeq = seq
		x.mu.sinceSnap = 0
	}
	return err
}

// writeSnapshotRLocked serialises the index and saves it, returning the
// sequence it reflects. The FAISS index streams to the file: its length,
// which the header gives first, comes from a pass that only counts.
func (x *Index) writeSnapshotRLocked(ctx context.Context) (uint64, error) {
	if x.mu.fx == nil {
		return 0, fmt.Errorf("dense %s: snapshot: %w", x.opts.Model, errUnbuilt)
	}
	size, err := x.mu.fx.WriteTo(io.Discard)
	if err != nil {
		return 0, fmt.Errorf("dense %s: snapshot: %w", x.opts.Model, err)
	}
	var hdr bytes.Buffer
	hdr.WriteString(snapshotMagic)
	putU64 := func(v uint64) { _ = binary.Write(&hdr, binary.LittleEndian, v) }
	putStr := func(s string) { putU64(uint64(len(s))); hdr.WriteString(s) }
	putU64(snapshotVersion)
	putU64(uint64(x.opts.Dim))
	putStr(x.opts.Description)
	putStr(x.mu.desc)
	putU64(uint64(x.mu.nlist))
	putU64(uint64(x.mu.builtN))
	var ids bytes.Buffer
	if _, err := x.mu.ids.WriteTo(&ids); err != nil {
		return 0, fmt.Errorf("dense %s: snapshot: docnums: %w", x.opts.Model, err)
	}
	putU64(uint64(ids.Len()))
	hdr.Write(ids.Bytes())
	putU64(uint64(size))
	seq := x.mu.applied
	err = x.st.SaveSnapshot(ctx, SnapshotName(x.opts.Model), seq, func(w io.Writer) error {
		crc := crc32.New(crcTable)
		bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 1<<20)
		if _, err := bw.Write(hdr.Bytes()); err != nil {
			return err
		}
		n, err := x.mu.fx.WriteTo(bw)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("index serialised to %d bytes, then to %d", size, n)
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return binary.Write(w, binary.LittleEndian, crc.Sum32())
	})
	if err != nil {
		return 0, fmt.Errorf("dense %s: snapshot: %w", x.opts.Model, err)
	}
	return seq, nil
}

// errStale marks a snapshot that cannot be used; Open then rebuilds.
var errStale = errors.New("dense: snapshot unusable")

// readIndex reads a snapshot's FAISS index. FAISS's reader trusts its
// input (a forged header can make it read out of bounds), so it is only
// given bytes whose CRC-32C matched: what this code wrote. The fuzz test
// replaces it to keep forged bytes from FAISS.
var readIndex = faiss.Read

// loadSnapshot installs the stored snapshot if it is present and
// consistent with the options and with storage. A snapshot is only an
// optimisation: any mismatch, damage or read error means rebuild (false,
// nil); only a failure to read its record from Badger is an error.
func (x *Index) loadSnapshot() (bool, error) {
	rc, seq, err := x.st.OpenSnapshot(SnapshotName(x.opts.Model))
	if errors.Is(err, storage.ErrNotFound) || errors.Is(err, storage.ErrCorruption) {
		return false, nil // none, or its file is gone: rebuild
	}
	if err != nil {
		return false, fmt.Errorf("dense %s: open snapshot: %w", x.opts.Model, err)
	}
	defer rc.Close()
	if seq < x.st.LogStats().Floor {
		// The changes after it are gone from the log (a snapshot put back
		// from elsewhere): the stored vectors hold the state they led to.
		return false, nil
	}
	if seq > x.st.LastSeq() {
		return false, nil // storage is older than the snapshot
	}
	// The file is read twice, to check its CRC and then to decode it, and
	// never held whole: at ten million vectors it is 3.9 GB.
	f, ok := rc.(interface {
		io.ReadSeeker
		Stat() (fs.FileInfo, error)
	})
	if !ok {
		return false, nil
	}
	fi, err := f.Stat()
	if err != nil {
		return false, nil
	}
	s, err := x.decodeSnapshot(f, fi.Size())
	if err != nil {
		return false, nil
	}
	var loc *faiss.Locations
	if plainIVF(s.desc) && s.fx.IsIVF() {
		// Locations are not saved: reading them off the lists costs a
		// few milliseconds a million vectors.
		loc = &faiss.Locations{}
		err := s.fx.Locate(func(id int64, lo uint64) { loc.Set(uint64(id), lo) })
		if err != nil || uint64(loc.Len()) != s.ids.GetCardinality() {
			s.fx.Close()
			loc.Close()
			return false, nil
		}
	}
	x.mu.fx, x.mu.desc, x.mu.nlist, x.mu.builtN, x.mu.ids, x.mu.loc = s.fx, s.desc, s.nlist, s.builtN, s.ids, loc
	x.mu.applied, x.mu.snapSeq = seq, seq
	return true, nil
}

type snapshot struct {
	desc          string
	nlist, builtN int
	ids           *roaring64.Bitmap
	fx            *faiss.Index
}

// decodeSnapshot decodes the size bytes of a snapshot file from r: it
// checks their CRC-32C in one pass, then rewinds and decodes them.
func (x *Index) decodeSnapshot(r io.ReadSeeker, size int64) (snapshot, error) {
	var s snapshot
	if size < int64(len(snapshotMagic))+4 {
		return s, fmt.Errorf("%w: %d bytes", errStale, size)
	}
	crc := crc32.New(crcTable)
	br := bufio.NewReaderSize(r, 1<<20)
	if _, err := io.CopyN(crc, br, size-4); err != nil {
		return s, fmt.Errorf("%w: %v", errStale, err)
	}
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return s, fmt.Errorf("%w: %v", errStale, err)
	}
	if crc.Sum32() != binary.LittleEndian.Uint32(sum[:]) {
		return s, fmt.Errorf("%w: checksum mismatch", errStale)
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return s, fmt.Errorf("%w: %v", errStale, err)
	}
	// left is what remains of the body (the file without its CRC), which
	// no field may claim more of.
	left := size - 4
	br.Reset(io.LimitReader(r, left))
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return s, fmt.Errorf("%w: bad magic", errStale)
	}
	left -= int64(len(magic))
	u64 := func() uint64 {
		var v uint64
		if binary.Read(br, binary.LittleEndian, &v) != nil {
			return 1<<64 - 1
		}
		left -= 8
		return v
	}
	str := func() string {
		n := u64()
		if n > uint64(max(left, 0)) {
			return "\x00"
		}
		b := make([]byte, n)
		if _, err := io.ReadFull(br, b); err != nil {
			return "\x00"
		}
		left -= int64(n)
		return string(b)
	}
	if v := u64(); v != snapshotVersion {
		return s, fmt.Errorf("%w: version %d", errStale, v)
	}
	if d := u64(); d != uint64(x.opts.Dim) {
		return s, fmt.Errorf("%w: dimension %d", errStale, d)
	}
	if req := str(); req != x.opts.Description {
		return s, fmt.Errorf("%w: built for description %q", errStale, req)
	}
	s.desc = str()
	s.nlist, s.builtN = int(u64()), int(u64())
	if x.opts.Description == "" && x.opts.NList != 0 && s.nlist != 0 && s.nlist != x.opts.NList {
		return s, fmt.Errorf("%w: %d IVF lists, want %d", errStale, s.nlist, x.opts.NList)
	}
	if n := u64(); n <= uint64(max(left, 0)) {
		// roaring64 allocates by the bucket count it reads first; each
		// bucket takes at least 8 bytes (a key and a 32-bit bitmap's
		// cookie), so a larger count is damage, not an allocation.
		if n >= 8 {
			head, err := br.Peek(8)
			if err != nil {
				return s, fmt.Errorf("%w: docnums: %v", errStale, err)
			}
			if b := binary.LittleEndian.Uint64(head); b > (n-8)/8 {
				return s, fmt.Errorf("%w: docnums: %d buckets in %d bytes", errStale, b, n)
			}
		}
		s.ids = roaring64.New()
		lr := &io.LimitedReader{R: br, N: int64(n)}
		if _, err := s.ids.ReadFrom(lr); err != nil {
			return s, fmt.Errorf("%w: docnums: %v", errStale, err)
		}
		if lr.N != 0 {
			return s, fmt.Errorf("%w: docnums: %d of %d bytes unread", errStale, lr.N, n)
		}
		left -= int64(n)
	} else {
		return s, fmt.Errorf("%w: truncated", errStale)
	}
	n := u64()
	if n != uint64(max(left, 0)) {
		return s, fmt.Errorf("%w: truncated index", errStale)
	}
	fx, read, err := readIndex(br, s.desc, faiss.InnerProduct)
	if err != nil {
		return s, fmt.Errorf("%w: %v", errStale, err)
	}
	if read != int64(n) {
		fx.Close()
		return s, fmt.Errorf("%w: the index is %d bytes, its header says %d", errStale, read, n)
	}
	if fx.D() != x.opts.Dim || uint64(fx.Len()) != s.ids.GetCardinality() {
		fx.Close()
		return s, fmt.Errorf("%w: index holds %d vectors for %d docnums", errStale, fx.Len(), s.ids.GetCardinality())
	}
	s.fx = fx
	return s, nil
}
