package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tandemsearch/tandem/internal/vfs"
)

// Large blobs live in segment files the store owns, under <dir>/blobs, as
// WiscKey keeps values apart from its LSM tree: Badger holds a pointer
// record under the blob's key, and reads go through pread. Badger's own
// value log is memory-mapped, so reading every token matrix of a
// collection through it grows the process's resident file pages with
// every blob read; a pread copies the bytes into the caller's buffer and
// leaves the pages to the kernel's cache.
//
// A segment is a 16-byte header (magic "TBLB", version u32, segment id
// u32, zero u32) followed by blob bytes, one after the other with no
// framing: the pointer says where each blob is, how long it is and its
// CRC-32C. Only Write appends to the active segment; a compaction writes
// its own segments. Segments are never rewritten in place.
const (
	// blobThreshold is the size from which a blob goes to a segment. It
	// is below Badger's value threshold, so that no blob ever reaches
	// Badger's memory-mapped value log, and below a pooled dense vector
	// (1.5 KiB at 384-d, 1 KiB at 256-d): vectors kept in Badger's tree
	// made three quarters of its tables at 1M documents, which every
	// compaction rewrote and read through memory maps, and a dense
	// search's rescoring reads them one by one anyway (docs/ingest.md).
	// Token matrices (hundreds of KiB) qualify too.
	blobThreshold = 1 << 10
	// blobGarbageRatio: a segment of which at least this share is
	// garbage (blobs no pointer refers to) is compacted.
	blobGarbageRatio = 0.5

	segmentMagic   = "TBLB"
	segmentVersion = 1
	segmentHeader  = 16

	// blobPointerMeta is the Badger user-meta byte of a blob key whose
	// value is a pointer record; an inline blob (written before segments
	// existed, or smaller than blobThreshold) has 0.
	blobPointerMeta byte = 0x42
	// pointerVersion is the first byte of a pointer record. Versions:
	// 1: segment u32, offset u64, length u32, CRC-32C u32 (little-endian).
	pointerVersion = 1
	pointerSize    = 21
)

// segmentSize is the size from which the active segment is sealed and
// the next write starts a new one. A batch is never split across
// segments, so a segment may exceed it by one batch's blobs. Compaction
// works a segment at a time; every segment holds an open file descriptor
// (a 250 GiB collection holds about 1,000). A variable so that tests can
// make segments small.
var segmentSize int64 = 256 << 20

// blobPtr is where a blob is: in segment seg, n bytes at file offset off,
// with CRC-32C crc.
type blobPtr struct {
	seg uint32
	off int64
	n   uint32
	crc uint32
}

func (p blobPtr) encode() []byte {
	b := make([]byte, 0, pointerSize)
	b = append(b, pointerVersion)
	b = binary.LittleEndian.AppendUint32(b, p.seg)
	b = binary.LittleEndian.AppendUint64(b, uint64(p.off))
	b = binary.LittleEndian.AppendUint32(b, p.n)
	return binary.LittleEndian.AppendUint32(b, p.crc)
}

func decodePtr(v []byte) (blobPtr, error) {
	if len(v) != pointerSize || v[0] != pointerVersion {
		return blobPtr{}, fmt.Errorf("%w: blob pointer of %d bytes, version %d", ErrCorruption, len(v), firstByte(v))
	}
	p := blobPtr{
		seg: binary.LittleEndian.Uint32(v[1:]),
		off: int64(binary.LittleEndian.Uint64(v[5:])),
		n:   binary.LittleEndian.Uint32(v[13:]),
		crc: binary.LittleEndian.Uint32(v[17:]),
	}
	if p.off < segmentHeader {
		return blobPtr{}, fmt.Errorf("%w: blob pointer into segment %d at offset %d, inside its header", ErrCorruption, p.seg, p.off)
	}
	return p, nil
}

func firstByte(v []byte) int {
	if len(v) == 0 {
		return -1
	}
	return int(v[0])
}

// segment is one segment file. refs counts the reads in progress; a
// retired segment (compacted: no pointer refers to it any more) is closed
// and removed once refs is 0 and no scan is in progress.
type segment struct {
	id      uint32
	name    string // "blobs/000001.blob", for errors
	f       vfs.File
	bad     error // header unreadable or wrong: every read fails with it
	size    int64 // end of the last blob appended
	live    int64 // bytes of blobs a pointer refers to
	refs    int
	retired bool
}

// blobFiles is the store's set of segments. Its mutex guards the table
// and every segment's size, live, refs and retired; reads and appends run
// outside it (pread and pwrite on files that stay open).
type blobFiles struct {
	fs   vfs.FS
	dir  string
	sync bool

	mu     sync.Mutex
	segs   map[uint32]*segment
	gone   map[uint32]bool // retired and removed by this process
	active *segment        // appended to by Write (under Store.writeMu); nil: the next write starts one
	next   uint32          // id of the next segment created
	scans  int             // ScanBlobs and Backup in progress: retired segments wait for them
	// compacted counts the segments retired since Open.
	compacted int
}

func segmentName(id uint32) string { return fmt.Sprintf("%06d.blob", id) }

// parseSegmentName is the id of a segment file name, 0 if it is not one.
func parseSegmentName(name string) uint32 {
	s, ok := strings.CutSuffix(name, ".blob")
	if !ok || len(s) < 6 {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// openBlobFiles opens the segments under dir. live maps every segment a
// pointer refers to to the bytes they refer to there: segments not in it
// are removed (a write or compaction that a crash interrupted before its
// commit); a segment in it whose file is missing is left out, and reads
// of its blobs fail with ErrCorruption. The last segment, if not full,
// becomes the active one again: whatever a crash left after its last
// committed blob is garbage that compaction reclaims.
func openBlobFiles(fsys vfs.FS, dir string, sync bool, live map[uint32]int64) (*blobFiles, error) {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("storage: open blob segments: %w", err)
	}
	b := &blobFiles{fs: fsys, dir: dir, sync: sync, segs: map[uint32]*segment{}, gone: map[uint32]bool{}, next: 1}
	for id := range live {
		b.next = max(b.next, id+1)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("storage: list blob segments: %w", err)
	}
	for _, e := range ents {
		id := parseSegmentName(e.Name())
		if id == 0 || !e.Type().IsRegular() {
			continue
		}
		b.next = max(b.next, id+1)
		path := filepath.Join(dir, e.Name())
		if _, ok := live[id]; !ok {
			if err := fsys.Remove(path); err != nil {
				b.close()
				return nil, fmt.Errorf("storage: remove unreferenced blob segment: %w", err)
			}
			continue
		}
		seg := &segment{id: id, name: "blobs/" + e.Name(), live: live[id]}
		f, err := fsys.OpenFile(path, os.O_RDWR, 0o644)
		if err != nil {
			seg.bad = fmt.Errorf("%w: blob segment %s: %w", ErrCorruption, seg.name, err)
		} else {
			seg.f = f
			seg.size, seg.bad = checkSegmentHeader(f, seg)
		}
		b.segs[id] = seg
	}
	var last *segment
	for _, seg := range b.segs {
		if last == nil || seg.id > last.id {
			last = seg
		}
	}
	if last != nil && last.bad == nil && last.size < segmentSize {
		b.active = last
	}
	return b, nil
}

// checkSegmentHeader returns the size of seg's file, or the error every
// read of it returns if its header is not the one segment seg.id has.
func checkSegmentHeader(f vfs.File, seg *segment) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("blob segment %s: %w", seg.name, err)
	}
	var h [segmentHeader]byte
	if _, err := f.ReadAt(h[:], 0); err != nil {
		return 0, fmt.Errorf("%w: blob segment %s: header: %w", ErrCorruption, seg.name, err)
	}
	if string(h[:4]) != segmentMagic || binary.LittleEndian.Uint32(h[4:]) != segmentVersion || binary.LittleEndian.Uint32(h[8:]) != seg.id {
		return 0, fmt.Errorf("%w: blob segment %s: bad header %x", ErrCorruption, seg.name, h)
	}
	return fi.Size(), nil
}

// create creates a new segment and adds it to the table; durable syncs
// its header and directory entry even if the store does not sync.
func (b *blobFiles) create(durable bool) (*segment, error) {
	b.mu.Lock()
	id := b.next
	b.next++
	b.mu.Unlock()
	name := segmentName(id)
	path := filepath.Join(b.dir, name)
	f, err := b.fs.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storage: create blob segment: %w", err)
	}
	h := make([]byte, 0, segmentHeader)
	h = append(h, segmentMagic...)
	h = binary.LittleEndian.AppendUint32(h, segmentVersion)
	h = binary.LittleEndian.AppendUint32(h, id)
	h = binary.LittleEndian.AppendUint32(h, 0)
	_, err = f.WriteAt(h, 0)
	if err == nil && (b.sync || durable) {
		err = f.Sync()
	}
	if err == nil && (b.sync || durable) {
		err = b.fs.SyncDir(b.dir)
	}
	if err != nil {
		f.Close()
		b.fs.Remove(path)
		return nil, fmt.Errorf("storage: create blob segment %s: %w", name, err)
	}
	seg := &segment{id: id, name: "blobs/" + name, f: f, size: segmentHeader}
	b.mu.Lock()
	b.segs[id] = seg
	b.mu.Unlock()
	return seg, nil
}

// appender appends blobs to segments. A Write appends to the active
// segment, and its batch stays in that one segment, which can be
// truncated back if the batch fails. A compaction or a restore appender
// (rollover) creates its own segments, a new one whenever the current
// one is full. A compaction's is durable: it syncs whether or not the
// store does, because it moves blobs that are durable already.
type appender struct {
	b        *blobFiles
	seg      *segment
	start    int64 // size of seg before the first append
	rollover bool
	durable  bool
	made     []*segment // segments a rollover appender created, in order
}

// appendActive starts appending to the active segment, starting a new one
// if there is none or it is full. The caller holds Store.writeMu.
func (b *blobFiles) appendActive() (*appender, error) {
	b.mu.Lock()
	seg := b.active
	b.mu.Unlock()
	if seg == nil || seg.size >= segmentSize {
		var err error
		if seg, err = b.create(false); err != nil {
			return nil, err
		}
		b.mu.Lock()
		b.active = seg
		b.mu.Unlock()
	}
	return &appender{b: b, seg: seg, start: seg.size}, nil
}

// add appends v and returns its pointer. The bytes are not durable until
// sync.
func (a *appender) add(v []byte) (blobPtr, error) {
	if a.rollover && (a.seg == nil || a.seg.size >= segmentSize) {
		if a.seg != nil {
			if err := a.syncSeg(a.seg); err != nil {
				return blobPtr{}, err
			}
		}
		seg, err := a.b.create(a.durable)
		if err != nil {
			return blobPtr{}, err
		}
		a.seg, a.start = seg, seg.size
		a.made = append(a.made, seg)
	}
	seg := a.seg
	if _, err := seg.f.WriteAt(v, seg.size); err != nil {
		return blobPtr{}, fmt.Errorf("storage: append to blob segment %s: %w", seg.name, err)
	}
	p := blobPtr{seg: seg.id, off: seg.size, n: uint32(len(v)), crc: crc32.Checksum(v, castagnoli)}
	a.b.mu.Lock()
	seg.size += int64(len(v))
	a.b.mu.Unlock()
	return p, nil
}

// sync makes every appended blob durable (unless the store does not
// sync and the appender is not durable).
func (a *appender) sync() error {
	if a.seg == nil {
		return nil
	}
	return a.syncSeg(a.seg)
}

func (a *appender) syncSeg(seg *segment) error {
	if !a.b.sync && !a.durable {
		return nil
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("storage: sync blob segment %s: %w", seg.name, err)
	}
	return nil
}

// undo truncates the segment back to where the appender started, for a
// batch whose transaction failed before its commit: nothing refers to the
// bytes. If truncating fails they stay, as garbage.
func (a *appender) undo() {
	if a == nil || a.seg == nil || a.seg.size == a.start {
		return
	}
	if err := a.seg.f.Truncate(a.start); err != nil {
		return
	}
	a.b.mu.Lock()
	a.seg.size = a.start
	a.b.mu.Unlock()
}

// errSegmentGone is the error of a read through a pointer into a segment
// a compaction retired and removed since the pointer was read: the
// pointer has moved, and the reader reads it again.
var errSegmentGone = errors.New("storage: blob segment compacted")

// acquire returns segment id for reading; the caller releases it.
func (b *blobFiles) acquire(id uint32) (*segment, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	seg := b.segs[id]
	switch {
	case seg == nil && b.gone[id]:
		return nil, errSegmentGone
	case seg == nil:
		return nil, fmt.Errorf("%w: blob segment blobs/%s is missing", ErrCorruption, segmentName(id))
	case seg.bad != nil:
		return nil, seg.bad
	}
	seg.refs++
	return seg, nil
}

func (b *blobFiles) release(seg *segment) {
	b.mu.Lock()
	seg.refs--
	var drop []*segment
	if seg.retired && seg.refs == 0 && b.scans == 0 {
		drop = b.dropLocked(seg)
	}
	b.mu.Unlock()
	b.remove(drop)
}

// read appends the blob p points to to dst, checking its length and
// checksum.
func (b *blobFiles) read(p blobPtr, dst []byte) ([]byte, error) {
	seg, err := b.acquire(p.seg)
	if err != nil {
		return dst, fmt.Errorf("%w (blob of %d bytes at offset %d)", err, p.n, p.off)
	}
	defer b.release(seg)
	n := len(dst)
	dst = slices.Grow(dst, int(p.n))[:n+int(p.n)]
	got, err := seg.f.ReadAt(dst[n:], p.off)
	switch {
	case errors.Is(err, io.EOF) || err == nil && got < int(p.n):
		return dst[:n], fmt.Errorf("%w: blob segment %s: %d of %d bytes at offset %d (short file)", ErrCorruption, seg.name, got, p.n, p.off)
	case err != nil:
		return dst[:n], fmt.Errorf("storage: blob segment %s: read %d bytes at offset %d: %w", seg.name, p.n, p.off, err)
	}
	if c := crc32.Checksum(dst[n:], castagnoli); c != p.crc {
		return dst[:n], fmt.Errorf("%w: blob segment %s: checksum %08x of %d bytes at offset %d, %08x written", ErrCorruption, seg.name, c, p.n, p.off, p.crc)
	}
	return dst, nil
}

// pinScan holds back the removal of retired segments until unpinScan:
// a scan reads one snapshot of the pointers, which may still refer to a
// segment compacted while it runs. Call it before opening the scan's
// transaction.
func (b *blobFiles) pinScan() {
	b.mu.Lock()
	b.scans++
	b.mu.Unlock()
}

func (b *blobFiles) unpinScan() {
	b.mu.Lock()
	b.scans--
	var drop []*segment
	if b.scans == 0 {
		for _, seg := range b.segs {
			if seg.retired && seg.refs == 0 {
				drop = append(drop, b.dropLocked(seg)...)
			}
		}
	}
	b.mu.Unlock()
	b.remove(drop)
}

// account moves the live-byte counts after a commit: added pointers count
// where they point, freed ones stop counting.
func (b *blobFiles) account(added, freed []blobPtr) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range added {
		if seg := b.segs[p.seg]; seg != nil {
			seg.live += int64(p.n)
		}
	}
	for _, p := range freed {
		if seg := b.segs[p.seg]; seg != nil {
			seg.live -= int64(p.n)
		}
	}
}

// victims are the segments of which at least blobGarbageRatio is
// garbage, the active one included.
func (b *blobFiles) victims() map[uint32]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[uint32]bool{}
	for id, seg := range b.segs {
		data := seg.size - segmentHeader
		if seg.bad != nil || seg.retired || data <= 0 {
			continue
		}
		if float64(data-seg.live) >= blobGarbageRatio*float64(data) {
			out[id] = true
		}
	}
	return out
}

// seal stops appends to the active segment if it is one of ids. The
// caller holds Store.writeMu.
func (b *blobFiles) seal(ids map[uint32]bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.active != nil && ids[b.active.id] {
		b.active = nil
	}
}

// retire marks segments that no pointer refers to any more; each is
// closed and removed once no read holds it and no scan is in progress.
func (b *blobFiles) retire(ids []uint32) {
	b.mu.Lock()
	var drop []*segment
	for _, id := range ids {
		seg := b.segs[id]
		if seg == nil {
			continue
		}
		seg.retired = true
		b.compacted++
		if seg.refs == 0 && b.scans == 0 {
			drop = append(drop, b.dropLocked(seg)...)
		}
	}
	b.mu.Unlock()
	b.remove(drop)
}

// dropLocked takes seg out of the table; the caller removes it.
func (b *blobFiles) dropLocked(seg *segment) []*segment {
	delete(b.segs, seg.id)
	b.gone[seg.id] = true
	if b.active == seg {
		b.active = nil
	}
	return []*segment{seg}
}

// remove closes and deletes segments dropped from the table. A file that
// cannot be removed is unreferenced, and the next Open removes it.
func (b *blobFiles) remove(segs []*segment) {
	for _, seg := range segs {
		if seg.f != nil {
			seg.f.Close()
		}
		b.fs.Remove(filepath.Join(b.dir, segmentName(seg.id)))
	}
}

// discard closes and removes segments a failed compaction created.
func (b *blobFiles) discard(segs []*segment) {
	b.mu.Lock()
	for _, seg := range segs {
		delete(b.segs, seg.id)
	}
	b.mu.Unlock()
	b.remove(segs)
}

// stats sums the segments' sizes and live bytes.
func (b *blobFiles) stats() BlobStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := BlobStats{Compacted: b.compacted}
	for _, seg := range b.segs {
		if seg.retired {
			continue
		}
		s.Segments++
		s.Bytes += seg.size
		s.Live += seg.live
	}
	return s
}

func (b *blobFiles) close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var first error
	for _, seg := range b.segs {
		if seg.f != nil {
			if err := seg.f.Close(); err != nil && first == nil {
				first = fmt.Errorf("storage: close blob segment %s: %w", seg.name, err)
			}
			seg.f = nil
		}
	}
	return first
}

// BlobStats describes the blob segments (Store.BlobStats).
type BlobStats struct {
	Segments int   // segment files
	Bytes    int64 // their total size, headers and garbage included
	Live     int64 // bytes of the blobs a pointer refers to
	// Compacted is the number of segments compaction has emptied and
	// retired since Open.
	Compacted int
}
