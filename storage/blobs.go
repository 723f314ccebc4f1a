package storage

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// appendBlobs appends the batch's large blobs to the active segment and
// syncs it (unless NoSync). It returns their pointers by operation and
// name, and the appender, whose undo drops them again if the batch's
// transaction fails before its commit. The caller holds writeMu.
func (s *Store) appendBlobs(b *Batch) (batchPointers, *appender, error) {
	var total int64
	for i, op := range b.ops {
		if op.op != OpPut {
			continue
		}
		for name, v := range op.blobs {
			if name == "" {
				return nil, nil, &BatchError{Index: i, ID: op.doc.ID, Err: errors.New("empty blob name")}
			}
			if len(v) >= blobThreshold {
				total += int64(len(v))
			}
		}
	}
	if total == 0 || s.blobs == nil {
		return nil, nil, nil
	}
	if err := s.checkFree(total); err != nil {
		return nil, nil, fmt.Errorf("storage: write batch: %w", err)
	}
	app, err := s.blobs.appendActive()
	if err != nil {
		return nil, nil, err
	}
	ptrs := make(batchPointers, len(b.ops))
	for i, op := range b.ops {
		if op.op != OpPut {
			continue
		}
		for name, v := range op.blobs {
			if len(v) < blobThreshold {
				continue
			}
			p, err := app.add(v)
			if err != nil {
				app.undo()
				return nil, nil, err
			}
			if ptrs[i] == nil {
				ptrs[i] = map[string]blobPtr{}
			}
			ptrs[i][name] = p
		}
	}
	if err := app.sync(); err != nil {
		app.undo()
		return nil, nil, err
	}
	return ptrs, app, nil
}

// batchPointers are the pointers of a batch's large blobs, by operation
// and name.
type batchPointers []map[string]blobPtr

func (bp batchPointers) at(i int, name string) (blobPtr, bool) {
	if i >= len(bp) {
		return blobPtr{}, false
	}
	p, ok := bp[i][name]
	return p, ok
}

// Blob returns a copy of the named blob of document num.
func (s *Store) Blob(num uint64, name string) ([]byte, bool, error) {
	return s.ReadBlob(num, name, nil)
}

// ReadBlob appends the named blob of document num to dst and returns the
// extended slice, so that a caller reading many blobs reuses one buffer;
// on error or when there is no such blob it returns dst unchanged. A blob
// in a segment is read with pread (never through a memory map, so reads
// do not grow the process's resident memory) and checked against its
// CRC-32C: a mismatch, a short read or a missing segment is
// ErrCorruption, naming the segment and offset. It is safe for
// concurrent use.
func (s *Store) ReadBlob(num uint64, name string, dst []byte) ([]byte, bool, error) {
	out, _, ok, err := s.ReadBlobCRC(num, name, dst)
	return out, ok, err
}

// ReadBlobCRC is ReadBlob that also returns the blob's CRC-32C
// (Castagnoli): for a blob in a segment the one its pointer records,
// which the read has checked, for a blob held in Badger computed. A
// caller that recorded a blob's length and CRC (a derived index, of the
// blob it was built from) tells whether the blob read is still that one
// without checksumming it a second time.
func (s *Store) ReadBlobCRC(num uint64, name string, dst []byte) ([]byte, uint32, bool, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return dst, 0, false, ErrClosed
	}
	for attempt := 0; ; attempt++ {
		var out []byte
		var crc uint32
		var found bool
		err := s.db.View(func(txn *badger.Txn) error {
			var err error
			out, crc, found, err = s.readBlobTxn(txn, num, name, dst)
			return err
		})
		if errors.Is(err, errSegmentGone) && attempt < 3 {
			continue // compacted since: the pointer has moved
		}
		return out, crc, found, err
	}
}

// readBlobTxn is ReadBlobCRC in txn.
func (s *Store) readBlobTxn(txn *badger.Txn, num uint64, name string, dst []byte) ([]byte, uint32, bool, error) {
	n := len(dst)
	var p blobPtr
	item, err := txn.Get(blobKey(num, name))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return dst, 0, false, nil
	}
	if err == nil {
		if item.UserMeta() != blobPointerMeta {
			err = item.Value(func(v []byte) error {
				dst = append(dst, v...)
				return nil
			})
			if err == nil {
				return dst, crc32.Checksum(dst[n:], castagnoli), true, nil
			}
		} else {
			err = item.Value(func(v []byte) error {
				p, err = decodePtr(v)
				return err
			})
		}
	}
	if err != nil {
		return dst[:n], 0, false, fmt.Errorf("storage: blob %q of document %d: %w", name, num, err)
	}
	out, err := s.readPointer(p, dst)
	if errors.Is(err, errSegmentGone) {
		return dst[:n], 0, true, err
	}
	if err != nil {
		return dst[:n], 0, true, fmt.Errorf("storage: blob %q of document %d: %w", name, num, err)
	}
	return out, p.crc, true, nil
}

// BlobReader reads blobs as the store was when it was opened, for a
// caller that reads many in a row (a search's exact stage): one Badger
// read transaction serves them all, where ReadBlob and ReadBlobCRC open
// one per blob. It is not safe for concurrent use; each goroutine opens
// its own. Until Close, segments compacted since it opened are kept, so
// keep it for a search, not longer. It does not hold the store open:
// once the store is closed its reads return ErrClosed (and Close only
// forgets it).
type BlobReader struct {
	s   *Store
	txn *badger.Txn
}

// NewBlobReader returns a reader of the store as it is now.
func (s *Store) NewBlobReader() (*BlobReader, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	if s.blobs != nil {
		s.blobs.pinScan() // before the transaction, as ScanBlobs does
	}
	return &BlobReader{s: s, txn: s.db.NewTransaction(false)}, nil
}

// ReadBlobCRC is Store.ReadBlobCRC as of the reader's opening.
func (r *BlobReader) ReadBlobCRC(num uint64, name string, dst []byte) ([]byte, uint32, bool, error) {
	r.s.life.RLock()
	defer r.s.life.RUnlock()
	if r.txn == nil || r.s.closed {
		return dst, 0, false, ErrClosed
	}
	out, crc, ok, err := r.s.readBlobTxn(r.txn, num, name, dst)
	if errors.Is(err, errSegmentGone) {
		// Segments are pinned while the reader is open: a pointer it
		// reads cannot lead into a removed one.
		err = fmt.Errorf("%w: blob %q of document %d: %w", ErrCorruption, name, num, err)
	}
	return out, crc, ok, err
}

// Close releases the reader. It is idempotent.
func (r *BlobReader) Close() {
	r.s.life.RLock()
	defer r.s.life.RUnlock()
	if r.txn == nil {
		return
	}
	if !r.s.closed { // a closed store has let go of both
		r.txn.Discard()
		if r.s.blobs != nil {
			r.s.blobs.unpinScan()
		}
	}
	r.txn = nil
}

// readPointer appends the blob p points to to dst.
func (s *Store) readPointer(p blobPtr, dst []byte) ([]byte, error) {
	if s.blobs == nil {
		return dst, fmt.Errorf("%w: a blob pointer in an in-memory store", ErrCorruption)
	}
	return s.blobs.read(p, dst)
}

// ScanBlobs calls fn with every blob called name, in docnum order, from
// one consistent snapshot. The value is only valid during the call: blobs
// from segments are read one at a time into one buffer.
func (s *Store) ScanBlobs(ctx context.Context, name string, fn func(num uint64, value []byte) error) error {
	if s.blobs != nil {
		s.blobs.pinScan()
		defer s.blobs.unpinScan()
	}
	var buf []byte
	return s.view(func(txn *badger.Txn) error {
		// Keys are docnum-first (so a delete finds a document's blobs with
		// one prefix scan); values are read only for the wanted name.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagBlob}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			k := item.Key()
			if string(k[9:]) != name {
				continue
			}
			num := binary.BigEndian.Uint64(k[1:9])
			if item.UserMeta() != blobPointerMeta {
				if err := item.Value(func(v []byte) error { return fn(num, v) }); err != nil {
					return err
				}
				continue
			}
			var p blobPtr
			err := item.Value(func(v []byte) error {
				var err error
				p, err = decodePtr(v)
				return err
			})
			if err == nil {
				buf, err = s.readPointer(p, buf[:0])
			}
			if err != nil {
				return fmt.Errorf("storage: blob %q of document %d: %w", name, num, err)
			}
			if err := fn(num, buf); err != nil {
				return err
			}
		}
		return nil
	})
}

// BlobStats describes the store's blob segments; all zero for an
// in-memory store.
func (s *Store) BlobStats() BlobStats {
	if s.blobs == nil {
		return BlobStats{}
	}
	return s.blobs.stats()
}

// livePointers sums, by segment, the bytes the blob pointers in db refer
// to: one pass over the blob keys, whose pointer records sit in Badger's
// tree. A pointer that cannot be decoded counts nowhere; reading its blob
// reports it.
func livePointers(db *badger.DB) (map[uint32]int64, error) {
	live := map[uint32]int64{}
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagBlob}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if item.UserMeta() != blobPointerMeta {
				continue
			}
			if err := item.Value(func(v []byte) error {
				if p, err := decodePtr(v); err == nil {
					live[p.seg] += int64(p.n)
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("storage: read blob pointers: %w", err)
	}
	return live, nil
}

// blobMove is a blob a compaction copies: the key whose pointer it swaps
// from old to new.
type blobMove struct {
	key      []byte
	old, new blobPtr
}

// swapChunk is the number of pointers one compaction transaction swaps.
const swapChunk = 1000

// compactBlobs compacts the segments of which at least blobGarbageRatio
// is garbage, one at a time: it copies the segment's live blobs to a new
// segment and syncs it, swaps their pointers in Badger (a pointer is only
// swapped if it still points at the old place: a write that replaced or
// deleted the blob meanwhile wins, and the copy is garbage), syncs Badger,
// then retires the old segment, which is removed once no read or scan
// uses it. A blob that cannot be read stays where it is, with its
// segment, and the first such error is returned. A crash at any point
// leaves every blob readable: until the swap commits, the new segment is
// unreferenced (removed at Open); after, the old one is.
func (s *Store) compactBlobs() error {
	if s.blobs == nil {
		return nil
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	s.writeMu.Lock()
	victims := s.blobs.victims()
	s.blobs.seal(victims) // writes go to a new segment from now on
	s.writeMu.Unlock()
	if len(victims) == 0 {
		return nil
	}
	// Every pointer into a victim was committed before it was sealed,
	// so one read transaction from now sees them all.
	var moves []blobMove
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagBlob}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if item.UserMeta() != blobPointerMeta {
				continue
			}
			var p blobPtr
			if err := item.Value(func(v []byte) error {
				var err error
				p, err = decodePtr(v)
				return err
			}); err != nil {
				continue // left alone; reading it reports it
			}
			if victims[p.seg] {
				moves = append(moves, blobMove{key: item.KeyCopy(nil), old: p})
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: compact blob segments: %w", err)
	}
	slices.SortFunc(moves, func(a, b blobMove) int {
		return cmp.Or(cmp.Compare(a.old.seg, b.old.seg), cmp.Compare(a.old.off, b.old.off))
	})
	ids := make([]uint32, 0, len(victims))
	for id := range victims {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	app := &appender{b: s.blobs, rollover: true, durable: true}
	var firstErr error
	var buf []byte
	for _, id := range ids {
		if s.stopping() {
			return firstErr // Close: the next Open's GC goes on
		}
		lo, _ := slices.BinarySearchFunc(moves, id, func(m blobMove, id uint32) int { return cmp.Compare(m.old.seg, id) })
		hi, _ := slices.BinarySearchFunc(moves, id+1, func(m blobMove, id uint32) int { return cmp.Compare(m.old.seg, id) })
		mine := moves[lo:hi]
		var need int64
		for _, m := range mine {
			need += int64(m.old.n)
		}
		if err := s.checkFree(need); err != nil {
			return errors.Join(firstErr, fmt.Errorf("storage: compact blob segment %s: %w", segmentName(id), err))
		}
		stuck := false
		kept := mine[:0]
		for _, m := range mine {
			if s.stopping() {
				return firstErr // what was copied is garbage, nothing refers to it
			}
			buf, err = s.blobs.read(m.old, buf[:0])
			if err != nil {
				stuck = true
				if firstErr == nil {
					firstErr = fmt.Errorf("storage: compact blob segment %s: %w", segmentName(id), err)
				}
				continue
			}
			if m.new, err = app.add(buf); err != nil {
				return errors.Join(firstErr, err)
			}
			kept = append(kept, m)
		}
		if err := app.sync(); err != nil {
			return errors.Join(firstErr, err)
		}
		s.writeMu.Lock()
		err := s.swapPointers(kept)
		s.writeMu.Unlock()
		if err == nil {
			// The old segment is removed next: the swap must not be
			// lost by a machine crash, even with NoSync.
			err = s.db.Sync()
		}
		if err != nil {
			return errors.Join(firstErr, fmt.Errorf("storage: compact blob segment %s: %w", segmentName(id), err))
		}
		if !stuck {
			s.blobs.retire([]uint32{id})
		}
	}
	return firstErr
}

// stopping reports whether Close has begun.
func (s *Store) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// swapPointers points each move's key at its new place if it still points
// at its old one, swapChunk keys per transaction, and moves the live-byte
// counts. The caller holds writeMu, so no write conflicts with it.
func (s *Store) swapPointers(moves []blobMove) error {
	for len(moves) > 0 {
		chunk := moves[:min(len(moves), swapChunk)]
		moves = moves[len(chunk):]
		var added, freed []blobPtr
		err := s.db.Update(func(txn *badger.Txn) error {
			added, freed = added[:0], freed[:0]
			for _, m := range chunk {
				item, err := txn.Get(m.key)
				if errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				if item.UserMeta() != blobPointerMeta {
					continue
				}
				old := m.old.encode()
				same := false
				if err := item.Value(func(v []byte) error {
					same = bytes.Equal(v, old)
					return nil
				}); err != nil {
					return err
				}
				if !same {
					continue // replaced or deleted since: the writer wins
				}
				if err := txn.SetEntry(badger.NewEntry(m.key, m.new.encode()).WithMeta(blobPointerMeta)); err != nil {
					return err
				}
				added = append(added, m.new)
				freed = append(freed, m.old)
			}
			return nil
		})
		if err != nil {
			return err
		}
		s.blobs.account(added, freed)
	}
	return nil
}
