package latecollect

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// snapshotVersion is the version of the snapshot file.
//
// Changelog:
//
//	1: magic "TLCS", version, dim, configured and built descriptions, the
//	   (docnum, key count) list, then the FAISS index in FAISS's format.
const snapshotVersion = 1

const snapshotMagic = "TLCS"

// save writes the FAISS index and its document list (format
// snapshotVersion).
func (f *faissFamily) save(ctx context.Context, seq uint64) error {
	// The index streams to the file: its length, which comes first, is
	// from a pass that only counts.
	size, err := f.fx.WriteTo(io.Discard)
	if err != nil {
		return err
	}
	return f.st.SaveSnapshot(ctx, f.snapshotName(), seq, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		le := binary.LittleEndian
		var b []byte
		b = append(b, snapshotMagic...)
		b = le.AppendUint32(b, snapshotVersion)
		b = le.AppendUint32(b, uint32(f.opts.Dim))
		for _, s := range []string{f.opts.Description, f.desc} {
			b = le.AppendUint16(b, uint16(len(s)))
			b = append(b, s...)
		}
		b = le.AppendUint64(b, uint64(len(f.keys)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		nums := make([]uint64, 0, len(f.keys))
		for num := range f.keys {
			nums = append(nums, num)
		}
		slices.Sort(nums)
		var rec [12]byte
		for _, num := range nums {
			le.PutUint64(rec[:], num)
			le.PutUint32(rec[8:], uint32(f.keys[num]))
			if _, err := bw.Write(rec[:]); err != nil {
				return err
			}
		}
		if _, err := bw.Write(le.AppendUint64(nil, uint64(size))); err != nil {
			return err
		}
		n, err := f.fx.WriteTo(bw)
		if err != nil {
			return err
		}
		if n != size {
			return fmt.Errorf("index serialised to %d bytes, then to %d", size, n)
		}
		return bw.Flush()
	})
}

// readIndex reads a snapshot's FAISS index. FAISS's reader trusts
// its input (a forged header makes it read out of bounds), so it is only
// given bytes whose length and CRC-32C storage checked: what this code
// wrote. The fuzz test replaces it to keep forged bytes from FAISS.
var readIndex = faiss.Read

// load loads the saved FAISS index (see family).
func (f *faissFamily) load() (bool, uint64, error) {
	rc, seq, err := f.st.OpenSnapshot(f.snapshotName())
	if errors.Is(err, storage.ErrNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("snapshot %s: %w", f.snapshotName(), err)
	}
	defer rc.Close()
	r := bufio.NewReader(rc)
	le := binary.LittleEndian
	corrupt := func(what string, err error) error {
		return fmt.Errorf("%w: snapshot %s: %s: %w", ErrCorruption, f.snapshotName(), what, err)
	}
	var head [12]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return false, 0, corrupt("header", err)
	}
	if string(head[:4]) != snapshotMagic || le.Uint32(head[4:]) != snapshotVersion {
		return false, 0, nil // another format: rebuild
	}
	if int(le.Uint32(head[8:])) != f.opts.Dim {
		return false, 0, nil
	}
	var descs [2]string
	for i := range descs {
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return false, 0, corrupt("description", err)
		}
		s := make([]byte, le.Uint16(l[:]))
		if _, err := io.ReadFull(r, s); err != nil {
			return false, 0, corrupt("description", err)
		}
		descs[i] = string(s)
	}
	if descs[0] != f.opts.Description {
		return false, 0, nil
	}
	var n8 [8]byte
	if _, err := io.ReadFull(r, n8[:]); err != nil {
		return false, 0, corrupt("document count", err)
	}
	ndocs := le.Uint64(n8[:])
	keys := make(map[uint64]int)
	var rec [12]byte
	for range ndocs {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			return false, 0, corrupt("document list", err)
		}
		n := int(le.Uint32(rec[8:]))
		if n <= 0 || n > maxKeysPerDoc {
			return false, 0, corrupt("document list", fmt.Errorf("key count %d", n))
		}
		keys[le.Uint64(rec[:])] = n
	}
	if _, err := io.ReadFull(r, n8[:]); err != nil {
		return false, 0, corrupt("index size", err)
	}
	size := le.Uint64(n8[:])
	if size == 0 || size > 1<<40 {
		return false, 0, corrupt("index size", fmt.Errorf("%d bytes", size))
	}
	// Streamed, not read whole: the index is never held twice.
	fx, n, err := readIndex(io.LimitReader(r, int64(size)), descs[1], faiss.InnerProduct)
	if err != nil {
		return false, 0, corrupt("index", err)
	}
	if n != int64(size) {
		fx.Close()
		return false, 0, corrupt("index", fmt.Errorf("%d bytes, the header says %d", n, size))
	}
	var total int64
	for _, n := range keys {
		total += int64(n)
	}
	if fx.Len() != total || fx.D() != f.opts.Dim {
		fx.Close()
		return false, 0, corrupt("index", fmt.Errorf("%d keys of dim %d, document list says %d of dim %d", fx.Len(), fx.D(), total, f.opts.Dim))
	}
	f.fx, f.desc, f.keys = fx, descs[1], keys
	return true, seq, nil
}
