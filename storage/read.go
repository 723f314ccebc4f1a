package storage

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/tandemsearch/tandem"
)

// Get returns the live document with internal number num.
func (s *Store) Get(num uint64) (tandem.Doc, bool, error) {
	var doc tandem.Doc
	var found bool
	err := s.view(func(txn *badger.Txn) error {
		var err error
		doc, found, err = getDoc(txn, num)
		return err
	})
	return doc, found, err
}

// GetMany returns the live documents among nums; absent ones are omitted
// from the map. It reads one consistent snapshot.
func (s *Store) GetMany(nums []uint64) (map[uint64]tandem.Doc, error) {
	out := make(map[uint64]tandem.Doc, len(nums))
	err := s.view(func(txn *badger.Txn) error {
		for _, n := range nums {
			d, ok, err := getDoc(txn, n)
			if err != nil {
				return err
			}
			if ok {
				out[n] = d
			}
		}
		return nil
	})
	return out, err
}

// IDs returns the external ids of the live documents among nums; absent
// ones are omitted. It is much cheaper than GetMany: no document is read.
func (s *Store) IDs(nums []uint64) (map[uint64]string, error) {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make(map[uint64]string, len(nums))
	s.names.RLock()
	defer s.names.RUnlock()
	for _, n := range nums {
		if n < uint64(len(s.names.ids)) && s.names.ids[n] != "" {
			out[n] = s.names.ids[n]
		}
	}
	return out, nil
}

// Lookup returns the internal number of an external id.
func (s *Store) Lookup(id string) (uint64, bool, error) {
	var n uint64
	var ok bool
	err := s.view(func(txn *badger.Txn) error {
		var err error
		n, ok, err = lookupID(txn, id)
		return err
	})
	return n, ok, err
}

func getDoc(txn *badger.Txn, num uint64) (tandem.Doc, bool, error) {
	item, err := txn.Get(docKey(num))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return tandem.Doc{}, false, nil
	}
	if err != nil {
		return tandem.Doc{}, false, err
	}
	var d tandem.Doc
	if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &d) }); err != nil {
		return tandem.Doc{}, false, fmt.Errorf("%w: doc %d: %v", ErrCorruption, num, err)
	}
	return d, true, nil
}

// ScanDocs calls fn for every live document in docnum order, from one
// consistent snapshot. The Doc is fn's to keep.
func (s *Store) ScanDocs(ctx context.Context, fn func(num uint64, doc tandem.Doc) error) error {
	return s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagDoc}, PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			num := binary.BigEndian.Uint64(item.Key()[1:])
			var d tandem.Doc
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &d) }); err != nil {
				return fmt.Errorf("%w: doc %d: %v", ErrCorruption, num, err)
			}
			if err := fn(num, d); err != nil {
				return err
			}
		}
		return nil
	})
}

// Mark returns the value a committed batch recorded under name
// (Batch.SetMark), and whether there is one.
func (s *Store) Mark(name string) ([]byte, bool, error) {
	var v []byte
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(markKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("storage: read mark %q: %w", name, err)
	}
	return v, v != nil, nil
}

// Changes returns up to limit changes with sequence numbers greater than
// after, in order, each put carrying its document if it is still live.
// When after is below the log's floor (TruncateLog) the changes after it
// are gone, and Changes returns a *TruncatedError, which wraps
// ErrTruncated, rather than the ones it still holds: what it returns
// always starts at after+1.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]Change, error) {
	var out []Change
	err := s.view(func(txn *badger.Txn) error {
		// The floor is read in the transaction that reads the entries,
		// not from memory: a truncation committing in between would
		// otherwise leave a gap no one sees.
		floor, err := getUint(txn, keyLogFloor)
		if err != nil {
			return err
		}
		if after < floor {
			return &TruncatedError{After: after, Floor: floor}
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagLog}, PrefetchValues: true})
		defer it.Close()
		for it.Seek(logKey(after + 1)); it.Valid() && len(out) < limit; it.Next() {
			if err := ctx.Err(); err != nil {
				return err
			}
			item := it.Item()
			c := Change{Seq: binary.BigEndian.Uint64(item.Key()[1:])}
			if err := item.Value(func(v []byte) error { return decodeChange(v, &c) }); err != nil {
				return err
			}
			if c.Op == OpPut {
				d, ok, err := getDoc(txn, c.DocNum)
				if err != nil {
					return err
				}
				if ok {
					c.Doc = &d
				}
			}
			out = append(out, c)
		}
		return nil
	})
	return out, err
}
