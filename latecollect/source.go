package latecollect

import (
	"fmt"

	"github.com/tandemsearch/tandem/storage"
)

// source is what both families read and are configured by: the store, the
// filled Options and the name of the token blob. It does not change after
// Open.
type source struct {
	st   *storage.Store
	opts Options
	blob string
}

// snapshotName is the storage name of the model's snapshot (storage
// refuses slashes in snapshot names).
func (s *source) snapshotName() string { return "late-" + s.opts.Model }

// docEntry is a document's stored token matrix, checked: the blob in its
// stored encoding, its header, and its CRC-32C where the reader had it
// (residual codes record it, see blobStamp).
type docEntry struct {
	blob []byte
	h    blobHeader
	crc  uint32
}

// changedEntry returns the current blob of the document a change names,
// checked, when the change is a put and the document has a usable blob
// (Store.Blob returns a copy, which the entry keeps). A blob that cannot
// be used is appended to bad; err is a failure to read the store.
func (x *source) changedEntry(c storage.Change, bad *[]error) (docEntry, bool, error) {
	if c.Op != storage.OpPut || c.Doc == nil {
		return docEntry{}, false, nil
	}
	value, crc, ok, err := x.storedBlob(c.DocNum)
	if err != nil {
		return docEntry{}, false, fmt.Errorf("latecollect: apply: read %s of document %d: %w", x.blob, c.DocNum, err)
	}
	if !ok {
		return docEntry{}, false, nil
	}
	e, err := x.entryNoCopy(c.DocNum, value)
	if err != nil {
		*bad = append(*bad, err)
		return docEntry{}, false, nil
	}
	e.crc = crc
	return e, true, nil
}

// storedBlob reads document num's current blob from the store (a copy),
// and its CRC-32C.
func (x *source) storedBlob(num uint64) ([]byte, uint32, bool, error) {
	return x.st.ReadBlobCRC(num, x.blob, nil)
}

// appendRows appends the first n decoded rows of e.
func appendRows(vecs []float32, e docEntry, n int) []float32 {
	start := len(vecs)
	vecs = append(vecs, make([]float32, n*e.h.dim)...)
	decodeRows(e.blob, e.h, 0, n, vecs[start:])
	return vecs
}

// entryNoCopy checks a stored blob without copying it.
func (x *source) entryNoCopy(num uint64, value []byte) (docEntry, error) {
	h, err := parseHeader(value)
	if err != nil {
		return docEntry{}, fmt.Errorf("document %d, blob %s: %w", num, x.blob, err)
	}
	if h.dim != x.opts.Dim {
		return docEntry{}, fmt.Errorf("document %d, blob %s: %w: dimension %d, index has %d", num, x.blob, ErrBadVector, h.dim, x.opts.Dim)
	}
	return docEntry{blob: value, h: h}, nil
}
