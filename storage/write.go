package storage

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/dgraph-io/badger/v4"
	"github.com/tandemsearch/tandem"
)

// Op is the kind of a change.
type Op uint8

// Change operations.
const (
	OpPut    Op = 1
	OpDelete Op = 2
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Change is one entry of the change log.
type Change struct {
	Seq    uint64
	Op     Op
	DocNum uint64
	ID     string
	// Doc is the document as it is now, for a put whose document is still
	// live when the log is read; nil otherwise. A derived index applying an
	// old put with the current document converges to the current state,
	// because every later change to the same docnum follows in the log.
	Doc *tandem.Doc
}

// Batch is a set of puts and deletes committed as one transaction. Later
// operations on the same id win. A Batch is not safe for concurrent use.
type Batch struct {
	ops   []batchOp
	marks map[string][]byte
}

type batchOp struct {
	op    Op
	doc   tandem.Doc
	blobs map[string][]byte
}

// Put adds or replaces a document and its blobs. The blobs (named
// per-document values such as "vec/<model>") replace all the document's
// previous blobs.
func (b *Batch) Put(doc tandem.Doc, blobs map[string][]byte) {
	b.ops = append(b.ops, batchOp{op: OpPut, doc: doc, blobs: blobs})
}

// Delete removes a document and its blobs; deleting an unknown id is a
// no-op.
func (b *Batch) Delete(id string) {
	b.ops = append(b.ops, batchOp{op: OpDelete, doc: tandem.Doc{ID: id}})
}

// SetMark records a named value in the batch's transaction, so that it
// is durable exactly when the batch is: package cluster records the
// replicated log position a batch applies. Store.Mark reads it back. A
// batch with marks and no operation still commits.
func (b *Batch) SetMark(name string, value []byte) {
	if b.marks == nil {
		b.marks = map[string][]byte{}
	}
	b.marks[name] = value
}

// Len is the number of operations in the batch.
func (b *Batch) Len() int { return len(b.ops) }

// WriteResult describes a committed batch.
type WriteResult struct {
	Put, Deleted int    // documents written and documents actually removed
	LastSeq      uint64 // last change-log sequence of the batch
}

// BatchError names the operation of a batch that was rejected.
type BatchError struct {
	Index int    // position in the batch
	ID    string // the document's external id
	Err   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("storage: document %d (id %q): %v", e.Index, e.ID, e.Err)
}
func (e *BatchError) Unwrap() error { return e.Err }

// Write checks every document against the schema and commits the batch in
// one Badger transaction, with the change-log entries of its operations.
// When Write returns nil the batch is durable (fsynced, unless NoSync); on
// error nothing of the batch is stored.
func (s *Store) Write(ctx context.Context, b *Batch) (WriteResult, error) {
	if err := ctx.Err(); err != nil {
		return WriteResult{}, err
	}
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return WriteResult{}, ErrClosed
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	s.mu.Lock()
	schema := s.mu.schema
	nextDoc, seq, live := s.mu.nextDoc, s.mu.lastSeq, s.mu.live
	s.mu.Unlock()
	var newFields []tandem.Field
	norm := make([]tandem.Doc, len(b.ops))
	for i, op := range b.ops {
		if op.op == OpDelete {
			if op.doc.ID == "" {
				return WriteResult{}, &BatchError{Index: i, Err: tandem.ErrMissingID}
			}
			continue
		}
		d, added, err := schema.Check(op.doc)
		if err != nil {
			return WriteResult{}, &BatchError{Index: i, ID: op.doc.ID, Err: err}
		}
		if len(added) > 0 {
			schema = schema.Clone()
			schema.Fields = append(schema.Fields, added...)
			newFields = append(newFields, added...)
		}
		norm[i] = d
	}

	// Large blobs go to the active segment first, and are synced before
	// the transaction that points at them commits.
	ptrs, app, err := s.appendBlobs(b)
	if err != nil {
		return WriteResult{}, err
	}
	var added, freed []blobPtr
	for _, m := range ptrs {
		for _, p := range m {
			added = append(added, p)
		}
	}

	var res WriteResult
	type named struct {
		num uint64
		id  string // "" for a delete
	}
	var names []named
	var need int64 // bytes of documents and blobs Badger stores, for checkSpace
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	// Writes are serialised (writeMu): a read-only transaction opened now
	// reads what txn reads, without its pending writes (blobEraser).
	read := s.db.NewTransaction(false)
	defer read.Discard()
	erase := &blobEraser{txn: txn, read: read, freed: &freed}
	err = func() error {
		for i, op := range b.ops {
			num, exists, err := lookupID(txn, op.doc.ID)
			if err != nil {
				return err
			}
			if op.op == OpDelete {
				if !exists {
					continue
				}
				if err := deleteDoc(txn, op.doc.ID, num, erase); err != nil {
					return err
				}
				names = append(names, named{num, ""})
				seq++
				live--
				res.Deleted++
				if err := txn.Set(logKey(seq), encodeChange(OpDelete, num, op.doc.ID)); err != nil {
					return err
				}
				continue
			}
			if exists {
				if err := erase.erase(num); err != nil {
					return err
				}
			} else {
				num = nextDoc
				nextDoc++
				live++
				if err := txn.Set(idKey(op.doc.ID), u64(num)); err != nil {
					return err
				}
				if err := txn.Set(numKey(num), []byte(op.doc.ID)); err != nil {
					return err
				}
				names = append(names, named{num, op.doc.ID})
			}
			body, err := json.Marshal(norm[i])
			if err != nil {
				return fmt.Errorf("storage: encode %q: %w", op.doc.ID, err)
			}
			if err := txn.Set(docKey(num), body); err != nil {
				return err
			}
			need += int64(len(body) + len(op.doc.ID))
			for name, v := range op.blobs {
				if p, ok := ptrs.at(i, name); ok {
					need += int64(pointerSize + len(name))
					if err := txn.SetEntry(badger.NewEntry(blobKey(num, name), p.encode()).WithMeta(blobPointerMeta)); err != nil {
						return err
					}
					erase.wrote(num, name, &p)
					continue
				}
				need += int64(len(v) + len(name))
				if err := txn.Set(blobKey(num, name), v); err != nil {
					return err
				}
				erase.wrote(num, name, nil)
			}
			seq++
			res.Put++
			if err := txn.Set(logKey(seq), encodeChange(OpPut, num, op.doc.ID)); err != nil {
				return err
			}
		}
		for name, v := range b.marks {
			if err := txn.Set(markKey(name), v); err != nil {
				return err
			}
		}
		if len(newFields) > 0 {
			sb, err := json.Marshal(schema)
			if err != nil {
				return err
			}
			if err := txn.Set(keySchema, sb); err != nil {
				return err
			}
		}
		for _, c := range []struct {
			k []byte
			v uint64
		}{{keyNextDoc, nextDoc}, {keyLastSeq, seq}, {keyLive, live}} {
			if err := txn.Set(c.k, u64(c.v)); err != nil {
				return err
			}
		}
		return s.checkSpace(need)
	}()
	if err != nil {
		// Nothing refers to the blobs the batch appended.
		app.undo()
	} else {
		// A failed commit may leave the appended blobs as garbage.
		err = txn.Commit()
	}
	if errors.Is(err, badger.ErrTxnTooBig) {
		return WriteResult{}, fmt.Errorf("%w (%d operations): split it", ErrBatchTooLarge, len(b.ops))
	}
	if err != nil {
		return WriteResult{}, fmt.Errorf("storage: write batch: %w", err)
	}
	if s.blobs != nil {
		s.blobs.account(added, freed)
	}
	s.names.Lock()
	if n := int(nextDoc); n > len(s.names.ids) {
		s.names.ids = append(s.names.ids, make([]string, n-len(s.names.ids))...)
	}
	for _, n := range names {
		s.names.ids[n.num] = n.id
	}
	s.names.Unlock()
	s.mu.Lock()
	s.mu.schema = schema
	s.mu.nextDoc, s.mu.lastSeq, s.mu.live = nextDoc, seq, live
	s.mu.Unlock()
	res.LastSeq = seq
	return res, nil
}

func lookupID(txn *badger.Txn, id string) (uint64, bool, error) {
	item, err := txn.Get(idKey(id))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	var n uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: id %q maps to %d bytes", ErrCorruption, id, len(v))
		}
		n = binary.BigEndian.Uint64(v)
		return nil
	})
	return n, true, err
}

func deleteDoc(txn *badger.Txn, id string, num uint64, erase *blobEraser) error {
	if err := txn.Delete(idKey(id)); err != nil {
		return err
	}
	if err := txn.Delete(docKey(num)); err != nil {
		return err
	}
	if err := txn.Delete(numKey(num)); err != nil {
		return err
	}
	return erase.erase(num)
}

// blobEraser deletes documents' blobs within one write transaction,
// adding the pointers of those in segments to freed. The blobs a document
// had before the batch are listed by an iterator of a read-only
// transaction: Badger's iterator over a write transaction copies and
// sorts every pending write each time one opens, which made a batch of n
// upserts of existing documents cost O(n²) (BenchmarkUpsertBatch). The
// blobs the batch itself wrote are remembered as it writes them.
type blobEraser struct {
	txn, read *badger.Txn
	freed     *[]blobPtr
	cleared   map[uint64]bool                // documents whose blobs before the batch are deleted
	written   map[uint64]map[string]*blobPtr // blobs the batch wrote, nil for one in Badger
}

// wrote records that the batch wrote document num's blob name (in a
// segment at p, or in Badger when p is nil).
func (e *blobEraser) wrote(num uint64, name string, p *blobPtr) {
	if e.written == nil {
		e.written = map[uint64]map[string]*blobPtr{}
	}
	if e.written[num] == nil {
		e.written[num] = map[string]*blobPtr{}
	}
	e.written[num][name] = p
}

// erase deletes every blob of document num.
func (e *blobEraser) erase(num uint64) error {
	if !e.cleared[num] {
		if e.cleared == nil {
			e.cleared = map[uint64]bool{}
		}
		e.cleared[num] = true
		it := e.read.NewIterator(badger.IteratorOptions{Prefix: blobPrefix(num)})
		var keys [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			keys = append(keys, item.KeyCopy(nil))
			if item.UserMeta() == blobPointerMeta {
				_ = item.Value(func(v []byte) error {
					if p, err := decodePtr(v); err == nil {
						*e.freed = append(*e.freed, p)
					}
					return nil
				})
			}
		}
		it.Close()
		for _, k := range keys {
			if err := e.txn.Delete(k); err != nil {
				return err
			}
		}
	}
	for name, p := range e.written[num] {
		if err := e.txn.Delete(blobKey(num, name)); err != nil {
			return err
		}
		if p != nil {
			*e.freed = append(*e.freed, *p)
		}
	}
	delete(e.written, num)
	return nil
}
