package latecollect

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

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

// unmarshalIndex reads a snapshot's FAISS index. FAISS's reader trusts
// its input (a forged header makes it read out of bounds), so it is only
// given bytes whose length and CRC-32C storage checked: what this code
// wrote. The fuzz test replaces it to keep forged bytes from FAISS.
var unmarshalIndex = faiss.Unmarshal

// loadSnapshot loads the saved token index. It reports false, with no
// error, when there is no snapshot or it was built with other options; an
// error means the snapshot is corrupt (wrapping ErrCorruption). Either way
// the caller rebuilds.
func (x *Index) loadSnapshot() (bool, error) {
	rc, seq, err := x.st.OpenSnapshot(x.snapshotName())
	if errors.Is(err, storage.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("snapshot %s: %w", x.snapshotName(), err)
	}
	defer rc.Close()
	r := bufio.NewReader(rc)
	le := binary.LittleEndian
	corrupt := func(what string, err error) error {
		return fmt.Errorf("%w: snapshot %s: %s: %w", ErrCorruption, x.snapshotName(), what, err)
	}
	var head [12]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return false, corrupt("header", err)
	}
	if string(head[:4]) != snapshotMagic || le.Uint32(head[4:]) != snapshotVersion {
		return false, nil // another format: rebuild
	}
	if int(le.Uint32(head[8:])) != x.opts.Dim {
		return false, nil
	}
	var descs [2]string
	for i := range descs {
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return false, corrupt("description", err)
		}
		s := make([]byte, le.Uint16(l[:]))
		if _, err := io.ReadFull(r, s); err != nil {
			return false, corrupt("description", err)
		}
		descs[i] = string(s)
	}
	if descs[0] != x.opts.Description {
		return false, nil
	}
	var n8 [8]byte
	if _, err := io.ReadFull(r, n8[:]); err != nil {
		return false, corrupt("document count", err)
	}
	ndocs := le.Uint64(n8[:])
	keys := make(map[uint64]int)
	var rec [12]byte
	for range ndocs {
		if _, err := io.ReadFull(r, rec[:]); err != nil {
			return false, corrupt("document list", err)
		}
		n := int(le.Uint32(rec[8:]))
		if n <= 0 || n > maxKeysPerDoc {
			return false, corrupt("document list", fmt.Errorf("key count %d", n))
		}
		keys[le.Uint64(rec[:])] = n
	}
	if _, err := io.ReadFull(r, n8[:]); err != nil {
		return false, corrupt("index size", err)
	}
	size := le.Uint64(n8[:])
	if size == 0 || size > 1<<40 {
		return false, corrupt("index size", fmt.Errorf("%d bytes", size))
	}
	// Read, not allocated up front: a damaged size must not take memory
	// the file does not hold.
	buf, err := io.ReadAll(io.LimitReader(r, int64(size)))
	if err == nil && uint64(len(buf)) != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return false, corrupt("index", err)
	}
	fx, err := unmarshalIndex(buf, descs[1], faiss.InnerProduct)
	if err != nil {
		return false, corrupt("index", err)
	}
	var total int64
	for _, n := range keys {
		total += int64(n)
	}
	if fx.Len() != total || fx.D() != x.opts.Dim {
		fx.Close()
		return false, corrupt("index", fmt.Errorf("%d keys of dim %d, document list says %d of dim %d", fx.Len(), fx.D(), total, x.opts.Dim))
	}
	x.mu.fx, x.mu.desc, x.mu.keys, x.mu.applied = fx, descs[1], keys, seq
	return true, nil
}
