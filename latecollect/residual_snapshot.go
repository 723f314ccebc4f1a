package latecollect

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"

	"github.com/tandemsearch/tandem/storage"
)

// residualMagic opens the residual-code snapshot, residualEnd closes it.
//
// Format version 2, little endian: magic, version (u32), dim (u32), the
// configured description (u16 length, bytes), centroids (u32; 0 when no
// document has tokens, and nothing follows but the document count), mean
// training residual norm (f32), tokens when trained (i64; the top bit
// marks a provisional codebook, provisionalBit, the next one a settled
// provisional codebook, settledBit), centroids
// (centroids × dim f32), cut-offs, low and high values (dim f32 each),
// document count (u64), then per document in docnum order: docnum (u64),
// token count (u32), residual norm sum (f32), the length (u32) and
// CRC-32C (u32) of the blob it was coded from (blobStamp); then per
// centroid in id order its code list: entries (u32), their docnums (u32
// each), their residual codes (dim/8 bytes each); then residualEnd.
//
// Versions:
//
//	1: the index kept a copy of every blob in a token file of its own
//	   (derived/late-<model>.tokens). After the codebook came the file's
//	   id (u64) and length (u64), and each document's location in it,
//	   offset (u64), length (u32) and CRC-32C (u32), in place of the
//	   stamp. Read as version 2 with the offsets and the file ignored
//	   (the length and CRC are the coded blob's: the file held it byte
//	   for byte; a zero length, a document the file lacked, is an unknown
//	   stamp); the file is removed (removeTokenFiles).
//	2: no token file: the exact stage reads the store, and each document
//	   records the stamp of the blob it was coded from. Later, without a
//	   new version: settledBit (below); a provisional codebook saved
//	   before it loads as unsettled. After each document's stamp came its
//	   centroid ids (u16 each) and residual codes (dim/8 bytes each), and
//	   no code lists followed. Read by putting each document.
//	3: the code lists, grouped by centroid as the index holds them.
//
// provisionalBit, set in the snapshot's count of tokens when trained,
// marks a provisional codebook (one trained on the first part of a run,
// retrained where the next run starts): a reopened index keeps retraining
// it as the index that was never closed would, not in the background.
// Snapshots without it read as before.
//
// settledBit, set beside provisionalBit, marks a provisional codebook
// trained on every document the snapshot holds (settled: save settles
// first). A provisional codebook saved without it, before settledBit
// existed or when settling failed, loads unsettled: the first search,
// snapshot or WaitRetrain retrains it (settleLocked).
const (
	provisionalBit = 1 << 63
	settledBit     = 1 << 62
)

const (
	residualMagic   = "TLCR"
	residualEnd     = "TLCE"
	residualVersion = 3
)

// save writes the residual-code snapshot (format residualVersion), settled
// first (settleLocked) so that it holds the codes the documents call for.
// A settling that fails for another reason than ctx leaves the codes in
// use, which are saved as unsettled.
func (f *residualFamily) save(ctx context.Context, seq uint64) error {
	if err := f.settleLocked(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return f.st.SaveSnapshot(ctx, f.snapshotName(), seq, func(w io.Writer) error {
		bw := bufio.NewWriterSize(w, 1<<20)
		le := binary.LittleEndian
		var b []byte
		b = append(b, residualMagic...)
		b = le.AppendUint32(b, residualVersion)
		b = le.AppendUint32(b, uint32(f.opts.Dim))
		b = le.AppendUint16(b, uint16(len(f.opts.Description)))
		b = append(b, f.opts.Description...)
		r := f.rc
		if r == nil {
			b = le.AppendUint32(b, 0)
			b = le.AppendUint64(b, 0)
			b = append(b, residualEnd...)
			_, err := bw.Write(b)
			if err == nil {
				err = bw.Flush()
			}
			return err
		}
		cb := r.cb
		b = le.AppendUint32(b, uint32(cb.nlist))
		b = le.AppendUint32(b, math.Float32bits(cb.meanRes))
		trained := uint64(cb.trained)
		if cb.provisional {
			trained |= provisionalBit
			if !f.unsettled {
				trained |= settledBit
			}
		}
		b = le.AppendUint64(b, trained)
		for _, v := range [][]float32{cb.cent, cb.cutoff, cb.lo, cb.hi} {
			b = appendF32s(b, v)
		}
		b = le.AppendUint64(b, uint64(len(r.docs)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		for _, num := range slices.Sorted(maps.Keys(r.docs)) {
			if err := ctx.Err(); err != nil {
				return err
			}
			d := r.docs[num]
			b = le.AppendUint64(b[:0], num)
			b = le.AppendUint32(b, uint32(d.count))
			b = le.AppendUint32(b, math.Float32bits(d.normSum))
			b = le.AppendUint32(b, d.blob.size)
			b = le.AppendUint32(b, d.blob.crc)
			if _, err := bw.Write(b); err != nil {
				return err
			}
		}
		for c := range r.clists {
			if err := ctx.Err(); err != nil {
				return err
			}
			l := &r.clists[c]
			b = le.AppendUint32(b[:0], uint32(len(l.docs)))
			for _, num := range l.docs {
				b = le.AppendUint32(b, num)
			}
			if _, err := bw.Write(b); err != nil {
				return err
			}
			if _, err := bw.Write(l.codes); err != nil {
				return err
			}
		}
		if _, err := bw.Write([]byte(residualEnd)); err != nil {
			return err
		}
		return bw.Flush()
	})
}

func appendF32s(b []byte, v []float32) []byte {
	for _, f := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
	}
	return b
}

// load loads the saved residual codes (format 1, 2 or 3; see residualMagic).
func (f *residualFamily) load() (bool, uint64, error) {
	rc, seq, err := f.st.OpenSnapshot(f.snapshotName())
	if errors.Is(err, storage.ErrNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("snapshot %s: %w", f.snapshotName(), err)
	}
	defer rc.Close()
	r := bufio.NewReaderSize(rc, 1<<20)
	corrupt := func(what string, err error) error {
		return fmt.Errorf("%w: snapshot %s: %s: %w", ErrCorruption, f.snapshotName(), what, err)
	}
	rd := snapReader{r: r}
	magic, version := string(rd.bytes(4)), rd.u32()
	if magic != residualMagic || version < 1 || version > residualVersion {
		return false, 0, nil // another format: rebuild
	}
	if rd.err != nil {
		return false, 0, corrupt("header", rd.err)
	}
	if int(rd.u32()) != f.opts.Dim || string(rd.bytes(int(rd.u16()))) != f.opts.Description {
		return false, 0, rd.err
	}
	dim := f.opts.Dim
	nlist := int(rd.u32())
	if rd.err != nil || nlist > maxCentroids {
		return false, 0, corrupt("centroids", fmt.Errorf("%d centroids: %v", nlist, rd.err))
	}
	if nlist == 0 {
		if n := rd.u64(); n != 0 || string(rd.bytes(4)) != residualEnd || rd.err != nil {
			return false, 0, corrupt("empty index", fmt.Errorf("%d documents: %v", n, rd.err))
		}
		f.rc, f.unsettled = nil, false
		return true, seq, nil
	}
	cb := &codebook{dim: dim, nlist: nlist}
	cb.meanRes = math.Float32frombits(rd.u32())
	trained := rd.u64()
	cb.trained, cb.provisional = int64(trained&^(provisionalBit|settledBit)), trained&provisionalBit != 0
	unsettled := cb.provisional && trained&settledBit == 0
	cb.cent = rd.f32s(nlist * dim)
	cb.cutoff, cb.lo, cb.hi = rd.f32s(dim), rd.f32s(dim), rd.f32s(dim)
	if version == 1 {
		rd.u64() // the token file's id
		rd.u64() // and length
	}
	ndocs := rd.u64()
	if rd.err != nil {
		return false, 0, corrupt("codebook", rd.err)
	}
	if version >= 3 {
		idx, err := loadLists(&rd, cb, ndocs)
		if err != nil {
			return false, 0, corrupt("code lists", err)
		}
		if string(rd.bytes(4)) != residualEnd || rd.err != nil {
			idx.close()
			return false, 0, corrupt("end", fmt.Errorf("no end mark: %v", rd.err))
		}
		f.rc, f.unsettled = idx, unsettled
		return true, seq, nil
	}
	idx := newResidualIndex(cb)
	cbytes := cb.codeBytes()
	var prev uint64
	for i := range ndocs {
		num, n := rd.u64(), int(rd.u32())
		norm := math.Float32frombits(rd.u32())
		if version == 1 {
			rd.u64() // offset in the token file
		}
		stamp := blobStamp{size: rd.u32(), crc: rd.u32()}
		if rd.err != nil || n > 1<<24 || (i > 0 && num <= prev) || num > maxResidualDoc {
			idx.close()
			return false, 0, corrupt("document list", fmt.Errorf("document %d (%d tokens) after %d: %v", num, n, prev, rd.err))
		}
		prev = num
		d := docCodes{cids: make([]uint16, n), normSum: norm, blob: stamp}
		raw := rd.bytes(2 * n)
		if rd.err != nil {
			idx.close()
			return false, 0, corrupt("document list", fmt.Errorf("document %d: %v", num, rd.err))
		}
		for t := range n {
			c := binary.LittleEndian.Uint16(raw[2*t:])
			if int(c) >= nlist {
				idx.close()
				return false, 0, corrupt("document list", fmt.Errorf("document %d: centroid %d of %d", num, c, nlist))
			}
			d.cids[t] = c
		}
		d.codes = rd.bytes(n * cbytes)
		if rd.err != nil {
			idx.close()
			return false, 0, corrupt("codes", rd.err)
		}
		idx.put(num, d)
	}
	idx.compact()
	if string(rd.bytes(4)) != residualEnd || rd.err != nil {
		idx.close()
		return false, 0, corrupt("end", fmt.Errorf("no end mark: %v", rd.err))
	}
	f.rc, f.unsettled = idx, unsettled
	return true, seq, nil
}

// loadLists reads format 3's documents (ndocs of them) and code lists
// into a new index over cb, checking the index's invariants: docnums
// ascending, each listed document known, its entries in a list
// contiguous and, over all lists, as many as its token count.
func loadLists(rd *snapReader, cb *codebook, ndocs uint64) (*residualIndex, error) {
	idx := newResidualIndex(cb)
	fail := func(err error) (*residualIndex, error) {
		idx.close()
		return nil, err
	}
	if ndocs > maxResidualDoc+1 {
		return fail(fmt.Errorf("%d documents", ndocs))
	}
	// Grown as the records are read: ndocs is what the snapshot says.
	nums := make([]uint64, 0, min(ndocs, 1<<16))
	metas := make([]docMeta, 0, min(ndocs, 1<<16))
	var prev uint64
	for i := range ndocs {
		num, n := rd.u64(), rd.u32()
		m := docMeta{count: int32(n), normSum: math.Float32frombits(rd.u32()), blob: blobStamp{size: rd.u32(), crc: rd.u32()}}
		if rd.err != nil || n > 1<<24 || (i > 0 && num <= prev) || num > maxResidualDoc {
			return fail(fmt.Errorf("document %d (%d tokens) after %d: %v", num, n, prev, rd.err))
		}
		prev = num
		nums, metas = append(nums, num), append(metas, m)
	}
	// at maps a docnum to its index in nums, densely when docnums are.
	var dense []int32
	var sparse map[uint64]int32
	if len(nums) > 0 && nums[len(nums)-1] <= 4*ndocs+4096 {
		dense = make([]int32, nums[len(nums)-1]+1)
		for i := range dense {
			dense[i] = -1
		}
		for i, num := range nums {
			dense[num] = int32(i)
		}
	} else {
		sparse = make(map[uint64]int32, len(nums))
		for i, num := range nums {
			sparse[num] = int32(i)
		}
	}
	at := func(num uint32) int32 {
		if dense != nil {
			if int(num) < len(dense) {
				return dense[num]
			}
			return -1
		}
		if i, ok := sparse[uint64(num)]; ok {
			return i
		}
		return -1
	}
	seen := make([]int32, len(nums)) // tokens listed so far
	lastList := make([]int32, len(nums))
	for i := range lastList {
		lastList[i] = -1
	}
	cbytes := cb.codeBytes()
	var total int64
	for c := range cb.nlist {
		n := rd.u32()
		if rd.err != nil || int64(n) > int64(1<<24)*int64(len(nums)) {
			return fail(fmt.Errorf("centroid %d: %d entries: %v", c, n, rd.err))
		}
		raw := rd.bytes(4 * int(n))
		codes := rd.bytes(int(n) * cbytes)
		if rd.err != nil {
			return fail(fmt.Errorf("centroid %d: %v", c, rd.err))
		}
		docs := make([]uint32, n)
		prevDoc := int32(-1)
		for e := range docs {
			num := binary.LittleEndian.Uint32(raw[4*e:])
			i := at(num)
			if i < 0 {
				return fail(fmt.Errorf("centroid %d: entry %d: document %d is not in the document list", c, e, num))
			}
			if i != prevDoc {
				if lastList[i] == int32(c) {
					return fail(fmt.Errorf("centroid %d: entry %d: document %d's entries are not contiguous", c, e, num))
				}
				lastList[i] = int32(c)
				metas[i].cents = append(metas[i].cents, uint16(c))
				prevDoc = i
			}
			seen[i]++
			docs[e] = num
		}
		idx.clists[c] = codeList{docs: docs, codes: codes}
		// Snapshots before lists were kept in docnum order.
		idx.clists[c].sortByDoc(cbytes)
		total += int64(n)
	}
	for i, num := range nums {
		m := metas[i]
		if seen[i] != m.count {
			return fail(fmt.Errorf("document %d: %d tokens listed, %d recorded", num, seen[i], m.count))
		}
		m.cents = slices.Clip(m.cents)
		idx.docs[num] = m
		idx.tokens += int64(m.count)
		idx.normSum += float64(m.normSum)
		idx.cents += int64(len(m.cents))
		idx.maxNum = max(idx.maxNum, uint32(num))
	}
	return idx, nil
}

// snapReader reads little-endian values, keeping the first error.
type snapReader struct {
	r   io.Reader
	err error
	buf [8]byte
}

// snapChunk is the most snapReader.bytes allocates before it has read
// that much: a corrupt count must not allocate what the snapshot does
// not hold.
const snapChunk = 1 << 20

// bytes reads n bytes. Up to snapChunk it always returns n bytes (zeros
// past an error); beyond, it reads in growing chunks, and returns nil on
// an error.
func (s *snapReader) bytes(n int) []byte {
	if n <= snapChunk {
		b := make([]byte, n)
		if s.err == nil {
			_, s.err = io.ReadFull(s.r, b)
		}
		return b
	}
	if s.err != nil {
		return nil
	}
	var b []byte
	for len(b) < n {
		k := min(n-len(b), max(snapChunk, len(b)))
		b = slices.Grow(b, k)
		if _, s.err = io.ReadFull(s.r, b[len(b):len(b)+k]); s.err != nil {
			return nil
		}
		b = b[:len(b)+k]
	}
	return b
}

func (s *snapReader) u16() uint16 {
	if s.err == nil {
		_, s.err = io.ReadFull(s.r, s.buf[:2])
	}
	return binary.LittleEndian.Uint16(s.buf[:2])
}

func (s *snapReader) u32() uint32 {
	if s.err == nil {
		_, s.err = io.ReadFull(s.r, s.buf[:4])
	}
	return binary.LittleEndian.Uint32(s.buf[:4])
}

func (s *snapReader) u64() uint64 {
	if s.err == nil {
		_, s.err = io.ReadFull(s.r, s.buf[:8])
	}
	return binary.LittleEndian.Uint64(s.buf[:8])
}

func (s *snapReader) f32s(n int) []float32 {
	raw := s.bytes(4 * n)
	if s.err != nil {
		return nil
	}
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
