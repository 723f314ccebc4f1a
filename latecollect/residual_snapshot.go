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
// Format version 1, little endian: magic, version (u32), dim (u32), the
// configured description (u16 length, bytes), centroids (u32; 0 when no
// document has tokens, and nothing follows but the document count), mean
// training residual norm (f32), tokens when trained (i64; the top bit
// marks a provisional codebook, provisionalBit), centroids
// (centroids × dim f32), cut-offs, low and high values (dim f32 each),
// document count (u64), then per document in docnum order: docnum (u64),
// token count (u32), residual norm sum (f32), centroid ids (u16 each),
// residual codes (dim/8 bytes each); then residualEnd.
// provisionalBit, set in the snapshot's count of tokens when trained,
// marks a provisional codebook (one trained on the first part of a run,
// retrained where the next run starts): a reopened index keeps retraining
// it as the index that was never closed would, not in the background.
// Snapshots without it read as before.
const provisionalBit = 1 << 63

const (
	residualMagic   = "TLCR"
	residualEnd     = "TLCE"
	residualVersion = 1
)

// save writes the residual-code snapshot (format residualVersion),
// compacting the token file first when it is more than half garbage.
func (f *residualFamily) save(ctx context.Context, seq uint64) error {
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
		if r.tf != nil {
			// A retraining running reads the file: compaction waits.
			if r.tf.garbage > r.tf.size/2 && f.job == nil {
				order := slices.Sorted(maps.Keys(r.docs))
				tf, err := compactTokenFile(r.tf, r.docs, order)
				if err != nil {
					return err
				}
				r.tf = tf
			}
			if err := r.tf.sync(); err != nil {
				return err
			}
		}
		cb := r.cb
		b = le.AppendUint32(b, uint32(cb.nlist))
		b = le.AppendUint32(b, math.Float32bits(cb.meanRes))
		trained := uint64(cb.trained)
		if cb.provisional {
			trained |= provisionalBit
		}
		b = le.AppendUint64(b, trained)
		for _, v := range [][]float32{cb.cent, cb.cutoff, cb.lo, cb.hi} {
			b = appendF32s(b, v)
		}
		var tfID, tfSize uint64
		if r.tf != nil {
			tfID, tfSize = r.tf.id, uint64(r.tf.size)
		}
		b = le.AppendUint64(b, tfID)
		b = le.AppendUint64(b, tfSize)
		b = le.AppendUint64(b, uint64(len(r.docs)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		nums := make([]uint64, 0, len(r.docs))
		for num := range r.docs {
			nums = append(nums, num)
		}
		slices.Sort(nums)
		for _, num := range nums {
			if err := ctx.Err(); err != nil {
				return err
			}
			d := r.docs[num]
			b = le.AppendUint64(b[:0], num)
			b = le.AppendUint32(b, uint32(len(d.cids)))
			b = le.AppendUint32(b, math.Float32bits(d.normSum))
			b = le.AppendUint64(b, uint64(d.loc.off))
			b = le.AppendUint32(b, d.loc.size)
			b = le.AppendUint32(b, d.loc.crc)
			for _, c := range d.cids {
				b = le.AppendUint16(b, c)
			}
			b = append(b, d.codes...)
			if _, err := bw.Write(b); err != nil {
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

// load loads the saved residual codes and opens the token file they refer
// to, or recopies it from the store (see family).
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
	if string(rd.bytes(4)) != residualMagic || rd.u32() != residualVersion {
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
		f.rc = nil
		return true, seq, nil
	}
	cb := &codebook{dim: dim, nlist: nlist}
	cb.meanRes = math.Float32frombits(rd.u32())
	trained := rd.u64()
	cb.trained, cb.provisional = int64(trained&^provisionalBit), trained&provisionalBit != 0
	cb.cent = rd.f32s(nlist * dim)
	cb.cutoff, cb.lo, cb.hi = rd.f32s(dim), rd.f32s(dim), rd.f32s(dim)
	tfID, tfSize := rd.u64(), int64(rd.u64())
	ndocs := rd.u64()
	if rd.err != nil {
		return false, 0, corrupt("codebook", rd.err)
	}
	idx := newResidualIndex(cb)
	cbytes := cb.codeBytes()
	var prev uint64
	for i := range ndocs {
		num, n := rd.u64(), int(rd.u32())
		norm := math.Float32frombits(rd.u32())
		loc := tokenLoc{off: int64(rd.u64()), size: rd.u32(), crc: rd.u32()}
		if rd.err != nil || n > 1<<24 || (i > 0 && num <= prev) || num > maxResidualDoc {
			idx.close()
			return false, 0, corrupt("document list", fmt.Errorf("document %d (%d tokens) after %d: %v", num, n, prev, rd.err))
		}
		prev = num
		d := docCodes{cids: make([]uint16, n), normSum: norm, loc: loc}
		raw := rd.bytes(2 * n)
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
	if string(rd.bytes(4)) != residualEnd || rd.err != nil {
		idx.close()
		return false, 0, corrupt("end", fmt.Errorf("no end mark: %v", rd.err))
	}
	if dir := f.st.Dir(); dir != "" {
		path := tokenFilePath(dir, f.opts.Model)
		if idx.tf, err = openTokenFile(f.st.FS(), path, tfID, tfSize); err == nil && idx.tf == nil {
			err = f.recopyTokens(idx, path)
		}
		if err != nil {
			idx.close()
			return false, 0, fmt.Errorf("snapshot %s: %w", f.snapshotName(), err)
		}
		var live int64
		for _, d := range idx.docs {
			live += int64(d.loc.size)
		}
		idx.tf.garbage = idx.tf.size - tokenFileHeader - live
	}
	f.rc = idx
	return true, seq, nil
}

// recopyTokens writes a new token file at path with the current blob of
// every document of idx. A document whose blob is gone or changed since
// the snapshot keeps its codes until the change is applied; until then
// its exact score comes from its current blob.
func (f *residualFamily) recopyTokens(idx *residualIndex, path string) error {
	tf, err := createTokenFile(f.st.FS(), path)
	if err != nil {
		return err
	}
	for num, d := range idx.docs {
		d.loc = tokenLoc{} // none until copied
		idx.docs[num] = d
	}
	err = f.st.ScanBlobs(context.Background(), f.blob, func(num uint64, value []byte) error {
		d, ok := idx.docs[num]
		if !ok {
			return nil
		}
		loc, err := tf.append(value)
		d.loc = loc
		idx.docs[num] = d
		return err
	})
	if err == nil {
		err = tf.sync()
	}
	if err != nil {
		tf.close()
		return fmt.Errorf("recopy token file: %w", err)
	}
	idx.tf = tf
	return nil
}

// snapReader reads little-endian values, keeping the first error.
type snapReader struct {
	r   io.Reader
	err error
	buf [8]byte
}

func (s *snapReader) bytes(n int) []byte {
	b := make([]byte, n)
	if s.err == nil {
		_, s.err = io.ReadFull(s.r, b)
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
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}
