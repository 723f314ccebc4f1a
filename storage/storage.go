package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/vfs"
)

// Sentinel errors.
var (
	ErrClosed        = errors.New("storage: closed")
	ErrNotFound      = errors.New("storage: not found")
	ErrBatchTooLarge = errors.New("storage: batch too large for one transaction")
	ErrCorruption    = errors.New("storage: corruption")
)

// Key layout. Every key starts with a one-byte table tag; numbers are
// big-endian so that byte order is numeric order.
const (
	tagMeta     = 'm' // m<name>               -> meta value
	tagID       = 'i' // i<external id>        -> docnum
	tagDoc      = 'd' // d<docnum>             -> JSON document
	tagBlob     = 'b' // b<docnum><name>       -> blob bytes
	tagLog      = 'l' // l<seq>                -> change record
	tagSnapshot = 's' // s<name>               -> snapshot record (JSON)
	tagNum      = 'n' // n<docnum>             -> external id (cheap liveness check)
	tagMark     = 'k' // k<name>               -> a caller's mark (Batch.SetMark)
)

var (
	keySchema  = []byte("mschema")
	keyNextDoc = []byte("mnextdoc")
	keyLastSeq = []byte("mlastseq")
	keyLive    = []byte("mlive")
)

// Options configure Open. Zero fields mean defaults.
type Options struct {
	// Schema is the schema of a new collection; nil means
	// tandem.DefaultSchema. It is ignored when the collection exists.
	Schema *tandem.Schema
	// InMemory keeps everything in memory (tests); dir is ignored.
	InMemory bool
	// NoSync turns off fsync on commit. An acknowledged write may then be
	// lost by a machine crash (not by a process crash). For bulk loads that
	// can be redone.
	NoSync bool
	// DiskReserve is the free space, in bytes, that writes leave on the
	// collection's file system; 0 means DefaultDiskReserve, negative
	// turns the check off. A write that would leave less fails with
	// ErrDiskFull before Badger sees it (see DefaultDiskReserve).
	DiskReserve int64
	// FS is the file system the store writes its snapshot files and blob
	// segments to (nil is the OS's); tests inject faults through it.
	// Badger's own files always go to the OS.
	FS vfs.FS
	// MemTableSize is the size of one of Badger's memtables, in bytes;
	// 0 means DefaultMemTableSize. Badger keeps up to three (one taking
	// writes, two flushing), each in the Go heap and in a memory-mapped
	// write-ahead file. A batch must fit in about 15% of one.
	MemTableSize int64
	// BlockCacheSize is the size of Badger's cache of decompressed table
	// blocks, in bytes; 0 means DefaultBlockCacheSize, negative none.
	BlockCacheSize int64
}

// Badger's memory, as an embedded store sets it. Badger's defaults suit a
// database server that owns the machine: up to five 64 MiB memtables, a
// 256 MiB block cache and 1 GiB value-log files written through memory
// maps. Flushing a memtable builds its table in memory, in buffers that
// double up to twice its size: with 64 MiB memtables a soak's Go heap
// rose from 230 MiB to 890 MiB at a flush. A collection embedded in an application
// keeps at most three 16 MiB memtables, a 32 MiB block cache and 256 MiB
// value-log files; a batch too large for one transaction is split by the
// engine (ErrBatchTooLarge).
const (
	DefaultMemTableSize   = 16 << 20
	DefaultBlockCacheSize = 32 << 20
	numMemtables          = 3
	// valueLogFileSize bounds the value-log file Badger appends to
	// through a memory map: its written pages stay resident until the
	// file is full and the next one starts, and garbage collection
	// rewrites whole files.
	valueLogFileSize = 256 << 20
)

// Store is the source of truth of a collection. It is safe for concurrent
// use; writes are serialised.
type Store struct {
	db      *badger.DB
	dir     string
	fs      vfs.FS
	reserve int64 // see Options.DiskReserve; negative: no check
	// blobs holds the large blobs (blobfile.go); nil for an in-memory
	// store, which keeps every blob in Badger.
	blobs *blobFiles

	// stop ends the garbage-collection goroutine, which closes stopped.
	stop, stopped chan struct{}
	stopOnce      sync.Once

	// life is held for reading by every operation and for writing by
	// Close, so that reads never wait for a write's commit.
	life   sync.RWMutex
	closed bool // guarded by life

	// writeMu serialises Write, which reads the counters, commits, then
	// publishes new counters, and the pointer swaps of blob compaction.
	writeMu sync.Mutex
	// compactMu serialises blob compactions (Store.GC).
	compactMu sync.Mutex

	// names maps every live docnum to its external id in memory, as the
	// n<docnum> keys do on disk: IDs, which turns every search's hits
	// into ids, reads it instead of Badger. Open loads it; Write updates
	// it after its commit and before it returns.
	names struct {
		sync.RWMutex
		ids []string // by docnum; "" for none
	}

	mu struct {
		sync.Mutex
		schema  *tandem.Schema
		nextDoc uint64 // next docnum to assign
		lastSeq uint64 // last change-log sequence committed
		live    uint64 // number of live documents
	}
}

// Open opens or creates the store in dir.
func Open(dir string, opts *Options) (*Store, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	bo := badger.DefaultOptions(filepath.Join(dir, "badger"))
	if o.InMemory {
		bo = badger.DefaultOptions("").WithInMemory(true)
	} else {
		if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o755); err != nil {
			return nil, fmt.Errorf("storage: open %s: %w", dir, err)
		}
		if err := removeEmptyLogs(filepath.Join(dir, "badger")); err != nil {
			return nil, err
		}
	}
	db, err := badger.Open(tune(bo, &o))
	if err != nil {
		return nil, fmt.Errorf("storage: open badger in %s: %w", dir, err)
	}
	if o.InMemory {
		dir = "" // nothing of it is on disk
	}
	s := &Store{db: db, dir: dir, fs: o.FS, reserve: o.DiskReserve, stop: make(chan struct{}), stopped: make(chan struct{})}
	if s.fs == nil {
		s.fs = vfs.OS
	}
	if s.reserve == 0 {
		s.reserve = DefaultDiskReserve
	}
	if err := s.load(o.Schema); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.loadNames(); err != nil {
		db.Close()
		return nil, err
	}
	if !o.InMemory {
		live, err := livePointers(db)
		if err == nil {
			s.blobs, err = openBlobFiles(s.fs, filepath.Join(dir, "blobs"), !o.NoSync, live)
		}
		if err != nil {
			db.Close()
			return nil, err
		}
	}
	if err := s.removeOrphanSnapshots(); err != nil {
		s.closeBlobs()
		db.Close()
		return nil, err
	}
	if o.InMemory {
		close(s.stopped)
	} else {
		go s.collectGarbage()
	}
	return s, nil
}

// tune sets Tandem's Badger options from o.
func tune(bo badger.Options, o *Options) badger.Options {
	memTable, blockCache := o.MemTableSize, o.BlockCacheSize
	if memTable == 0 {
		memTable = DefaultMemTableSize
	}
	switch {
	case blockCache == 0:
		blockCache = DefaultBlockCacheSize
	case blockCache < 0:
		blockCache = 0
	}
	return bo.WithSyncWrites(!o.NoSync && !o.InMemory).WithLogger(nil).WithValueThreshold(valueThreshold).
		WithMemTableSize(memTable).WithNumMemtables(numMemtables).
		WithBlockCacheSize(blockCache).WithValueLogFileSize(valueLogFileSize)
}

// valueThreshold is the size from which Badger keeps a value in its value
// log instead of in the LSM tree. Badger's default (1 MiB) keeps large
// values in the tree, where every compaction rewrites them: indexing
// SciFact wrote its 1.3 GB of token blobs about five times over, when they
// were held in Badger. Blobs from this size go to blob segments instead
// (blobThreshold), so only documents this large reach the value log;
// smaller documents and pooled vectors (1.5 KiB at 384-d) stay in the
// tree, where scans read them fastest.
const valueThreshold = 4 << 10

// gcInterval is how often blob segments and the value log are
// garbage-collected: blobs and values that updates and deletes replaced
// stay in them until a collection rewrites their file.
const gcInterval = 5 * time.Minute

// collectGarbage runs Badger's value-log garbage collection every
// gcInterval until Close: each pass rewrites the files of which at least
// half is garbage.
func (s *Store) collectGarbage() {
	defer close(s.stopped)
	t := time.NewTicker(gcInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.GC()
		}
	}
}

// GC compacts the blob segments of which at least half is garbage (see
// compactBlobs), then rewrites the value-log files of which at least half
// is garbage (values that later writes replaced or deleted), until none
// is left. The store runs it every few minutes by itself.
func (s *Store) GC() error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	cerr := s.compactBlobs()
	for {
		err := s.db.RunValueLogGC(0.5)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return cerr
		}
		if err != nil {
			return errors.Join(cerr, fmt.Errorf("storage: value log GC: %w", err))
		}
	}
}

// load reads the counters and schema, creating them on first open.
func (s *Store) load(schema *tandem.Schema) error {
	return s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(keySchema)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
			if schema == nil {
				schema = tandem.DefaultSchema()
			}
			schema = schema.Clone()
			schema.Fill()
			if err := schema.Validate(); err != nil {
				return err
			}
			b, err := json.Marshal(schema)
			if err != nil {
				return err
			}
			if err := txn.Set(keySchema, b); err != nil {
				return err
			}
			s.mu.schema = schema
		case err != nil:
			return fmt.Errorf("storage: read schema: %w", err)
		default:
			var sc tandem.Schema
			if err := item.Value(func(v []byte) error { return json.Unmarshal(v, &sc) }); err != nil {
				return fmt.Errorf("%w: schema: %v", ErrCorruption, err)
			}
			s.mu.schema = &sc
		}
		for _, c := range []struct {
			key []byte
			dst *uint64
		}{{keyNextDoc, &s.mu.nextDoc}, {keyLastSeq, &s.mu.lastSeq}, {keyLive, &s.mu.live}} {
			v, err := getUint(txn, c.key)
			if err != nil {
				return err
			}
			*c.dst = v
		}
		return nil
	})
}

// loadNames fills the in-memory id table from the n<docnum> keys.
func (s *Store) loadNames() error {
	ids := make([]string, s.mu.nextDoc)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagNum}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.Key()
			if len(k) != 9 {
				return fmt.Errorf("%w: number key of %d bytes", ErrCorruption, len(k))
			}
			num := binary.BigEndian.Uint64(k[1:])
			if num >= uint64(len(ids)) {
				return fmt.Errorf("%w: document number %d at or past the next one, %d", ErrCorruption, num, len(ids))
			}
			if err := item.Value(func(v []byte) error {
				ids[num] = string(v)
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: load document ids: %w", err)
	}
	s.names.ids = ids
	return nil
}

// Close closes the store. It is idempotent.
func (s *Store) Close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.stopped
	s.life.Lock()
	defer s.life.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	berr := s.closeBlobs()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	return berr
}

func (s *Store) closeBlobs() error {
	if s.blobs == nil {
		return nil
	}
	return s.blobs.close()
}

// Schema returns a copy of the current schema.
func (s *Store) Schema() *tandem.Schema {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.schema.Clone()
}

// Dir is the directory the store was opened in, "" for an in-memory store.
// Derived indexes may keep files of their own under Dir()/derived: the
// store neither reads nor removes them.
func (s *Store) Dir() string { return s.dir }

// LastSeq is the sequence number of the last committed change (0 if none).
func (s *Store) LastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.lastSeq
}

// Count is the number of live documents.
func (s *Store) Count() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.live
}

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
				if err := deleteDoc(txn, op.doc.ID, num, &freed); err != nil {
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
				if err := deleteBlobs(txn, num, &freed); err != nil {
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
					continue
				}
				need += int64(len(v) + len(name))
				if err := txn.Set(blobKey(num, name), v); err != nil {
					return err
				}
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

func deleteDoc(txn *badger.Txn, id string, num uint64, freed *[]blobPtr) error {
	if err := txn.Delete(idKey(id)); err != nil {
		return err
	}
	if err := txn.Delete(docKey(num)); err != nil {
		return err
	}
	if err := txn.Delete(numKey(num)); err != nil {
		return err
	}
	return deleteBlobs(txn, num, freed)
}

// deleteBlobs deletes the blobs of document num, adding the pointers of
// those in segments to freed.
func deleteBlobs(txn *badger.Txn, num uint64, freed *[]blobPtr) error {
	prefix := blobPrefix(num)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	var keys [][]byte
	for it.Rewind(); it.Valid(); it.Next() {
		item := it.Item()
		keys = append(keys, item.KeyCopy(nil))
		if item.UserMeta() == blobPointerMeta {
			_ = item.Value(func(v []byte) error {
				if p, err := decodePtr(v); err == nil {
					*freed = append(*freed, p)
				}
				return nil
			})
		}
	}
	it.Close()
	for _, k := range keys {
		if err := txn.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

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

// Restore creates the store in dir, which must not hold one, from a
// Backup read from r. Large blobs go to blob segments, as writes put
// them, whether the backup was written before segments existed or after.
func Restore(dir string, r io.Reader, opts *Options) error {
	if _, err := os.Stat(filepath.Join(dir, "badger")); err == nil {
		return fmt.Errorf("storage: restore into %s: it holds a store already", dir)
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	o.InMemory = false
	fsys := o.FS
	if fsys == nil {
		fsys = vfs.OS
	}
	// No pointer refers to a segment yet: any left by a failed restore
	// are removed.
	bf, err := openBlobFiles(fsys, filepath.Join(dir, "blobs"), !o.NoSync, nil)
	if err != nil {
		return fmt.Errorf("storage: restore into %s: %w", dir, err)
	}
	defer bf.close()
	db, err := badger.Open(tune(badger.DefaultOptions(filepath.Join(dir, "badger")), &o))
	if err != nil {
		return fmt.Errorf("storage: restore into %s: %w", dir, err)
	}
	// Badger's loader reads the backup with its large blobs replaced by
	// pointers, through a pipe from a goroutine that appends them.
	app := &appender{b: bf, rollover: true}
	pr, pw := io.Pipe()
	converted := make(chan error, 1)
	go func() {
		err := segmentBackup(r, pw, app)
		pw.CloseWithError(err)
		converted <- err
	}()
	err = db.Load(pr, 256)
	pr.CloseWithError(errors.New("storage: restore stopped"))
	if cerr := <-converted; cerr != nil {
		err = cerr
	}
	if err == nil {
		err = app.sync()
	}
	if err == nil {
		err = db.Sync()
	}
	if err != nil {
		db.Close()
		return fmt.Errorf("storage: restore into %s: %w", dir, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("storage: restore into %s: %w", dir, err)
	}
	return nil
}

// Changes returns up to limit changes with sequence numbers greater than
// after, in order, each put carrying its document if it is still live.
func (s *Store) Changes(ctx context.Context, after uint64, limit int) ([]Change, error) {
	var out []Change
	err := s.view(func(txn *badger.Txn) error {
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

func (s *Store) view(fn func(txn *badger.Txn) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.db.View(fn)
}

// snapshotRecord is the committed pointer to a snapshot file: its name,
// the last change it includes, and its exact length and CRC-32C, which
// OpenSnapshot checks. Records written before Size and CRC existed have
// neither (Size 0), and their files are returned unchecked.
type snapshotRecord struct {
	File string `json:"file"`
	Seq  uint64 `json:"seq"`
	Size int64  `json:"size,omitempty"`
	CRC  uint32 `json:"crc32c,omitempty"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SaveSnapshot stores a named snapshot of a derived index (a FAISS index,
// for example) that includes every change up to seq. write fills the file.
// The file is written under a fresh name and fsynced, its directory is
// fsynced, then its name, length and checksum are committed in Badger;
// the commit is the single point at which the new snapshot replaces the
// old one, whose file is then removed. On any error the previous snapshot
// stays current and the new file is removed.
func (s *Store) SaveSnapshot(ctx context.Context, name string, seq uint64, write func(w io.Writer) error) error {
	if s.dir == "" || name == "" || strings.ContainsAny(name, `/\`) {
		return fmt.Errorf("storage: save snapshot %q: invalid name or in-memory store", name)
	}
	dir := filepath.Join(s.dir, "snapshots")
	f, err := s.fs.CreateTemp(dir, name+"-*.snap")
	if err != nil {
		return fmt.Errorf("storage: save snapshot %q: %w", name, err)
	}
	fname := filepath.Base(f.Name())
	ok, closed := false, false
	defer func() {
		if !ok {
			if !closed {
				f.Close()
			}
			s.fs.Remove(f.Name())
		}
	}()
	cw := &checkedWriter{w: f, crc: crc32.New(castagnoli)}
	if err := write(cw); err != nil {
		return fmt.Errorf("storage: save snapshot %q: write: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("storage: save snapshot %q: fsync: %w", name, err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return fmt.Errorf("storage: save snapshot %q: close: %w", name, err)
	}
	if err := s.fs.SyncDir(dir); err != nil {
		return fmt.Errorf("storage: save snapshot %q: %w", name, err)
	}
	var old snapshotRecord
	err = s.update(func(txn *badger.Txn) error {
		if item, err := txn.Get(snapKey(name)); err == nil {
			_ = item.Value(func(v []byte) error { return json.Unmarshal(v, &old) })
		}
		b, _ := json.Marshal(snapshotRecord{File: fname, Seq: seq, Size: cw.n, CRC: cw.crc.Sum32()})
		if err := s.checkSpace(int64(len(b))); err != nil {
			return err
		}
		return txn.Set(snapKey(name), b)
	})
	if err != nil {
		return fmt.Errorf("storage: save snapshot %q: commit: %w", name, err)
	}
	ok = true
	if old.File != "" && old.File != fname {
		s.fs.Remove(filepath.Join(dir, old.File))
	}
	return nil
}

// checkedWriter counts and checksums what it writes.
type checkedWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
}

func (c *checkedWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.crc.Write(p[:n])
	c.n += int64(n)
	return n, err
}

// OpenSnapshot opens the named snapshot; seq is the last change it
// includes. It returns ErrNotFound if there is none. The file is checked
// first: a missing, unreadable, short or long file, or one whose CRC-32C
// differs from the record's, is reported as ErrCorruption, and its
// owner rebuilds from the store. The caller closes rc.
func (s *Store) OpenSnapshot(name string) (rc io.ReadCloser, seq uint64, err error) {
	rec, err := s.snapshotRecord(name)
	if err != nil {
		return nil, 0, fmt.Errorf("storage: open snapshot %q: %w", name, err)
	}
	if s.dir == "" {
		return nil, 0, fmt.Errorf("storage: open snapshot %q: %w", name, ErrNotFound)
	}
	f, err := vfs.Open(s.fs, filepath.Join(s.dir, "snapshots", rec.File))
	if err != nil {
		return nil, 0, fmt.Errorf("%w: snapshot %q: %w", ErrCorruption, name, err)
	}
	if err := checkSnapshot(f, rec); err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%w: snapshot %q (%s): %w", ErrCorruption, name, rec.File, err)
	}
	return f, rec.Seq, nil
}

// SnapshotSeq is the last change the named snapshot includes, read from
// its record alone: the file is neither opened nor checked. It returns
// ErrNotFound if there is none.
func (s *Store) SnapshotSeq(name string) (uint64, error) {
	rec, err := s.snapshotRecord(name)
	if err != nil {
		return 0, fmt.Errorf("storage: snapshot %q: %w", name, err)
	}
	return rec.Seq, nil
}

// snapshotRecord reads the named snapshot's record: ErrNotFound if none.
func (s *Store) snapshotRecord(name string) (snapshotRecord, error) {
	var rec snapshotRecord
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(snapKey(name))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return json.Unmarshal(v, &rec) })
	})
	return rec, err
}

// checkSnapshot checks f's length and checksum against rec and rewinds
// it. Checking before any decoder sees a byte keeps damaged data away
// from FAISS's reader, which trusts the sizes it reads.
func checkSnapshot(f vfs.File, rec snapshotRecord) error {
	if rec.Size == 0 && rec.CRC == 0 {
		return nil // written before records had them
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() != rec.Size {
		return fmt.Errorf("%d bytes, %d written", fi.Size(), rec.Size)
	}
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, io.LimitReader(f, rec.Size)); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if h.Sum32() != rec.CRC {
		return fmt.Errorf("checksum %08x, %08x written", h.Sum32(), rec.CRC)
	}
	_, err = f.Seek(0, io.SeekStart)
	return err
}

// removeOrphanSnapshots removes the files under snapshots/ that no
// record names: those of a SaveSnapshot interrupted before its commit.
func (s *Store) removeOrphanSnapshots() error {
	if s.dir == "" {
		return nil
	}
	live := map[string]bool{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagSnapshot}, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var rec snapshotRecord
			if err := it.Item().Value(func(v []byte) error { return json.Unmarshal(v, &rec) }); err == nil {
				live[rec.File] = true
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("storage: list snapshots: %w", err)
	}
	dir := filepath.Join(s.dir, "snapshots")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("storage: list snapshots: %w", err)
	}
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".snap") && !live[e.Name()] {
			s.fs.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// FS is the file system the store writes its snapshots to; derived
// indexes that keep files of their own under Dir() use it too.
func (s *Store) FS() vfs.FS { return s.fs }

func (s *Store) update(fn func(txn *badger.Txn) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.db.Update(fn)
}

func getUint(txn *badger.Txn, k []byte) (uint64, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: %s has %d bytes", ErrCorruption, k, len(v))
		}
		n = binary.BigEndian.Uint64(v)
		return nil
	})
	return n, err
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func idKey(id string) []byte     { return append([]byte{tagID}, id...) }
func docKey(n uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagDoc}, n) }
func logKey(s uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagLog}, s) }
func numKey(n uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagNum}, n) }
func snapKey(n string) []byte    { return append([]byte{tagSnapshot}, n...) }
func markKey(n string) []byte    { return append([]byte{tagMark}, n...) }
func blobPrefix(n uint64) []byte { return binary.BigEndian.AppendUint64([]byte{tagBlob}, n) }
func blobKey(n uint64, name string) []byte {
	return append(blobPrefix(n), name...)
}

// encodeChange is op, docnum (8 bytes big-endian), external id.
func encodeChange(op Op, num uint64, id string) []byte {
	b := make([]byte, 0, 9+len(id))
	b = append(b, byte(op))
	b = binary.BigEndian.AppendUint64(b, num)
	return append(b, id...)
}

func decodeChange(v []byte, c *Change) error {
	if len(v) < 9 || (Op(v[0]) != OpPut && Op(v[0]) != OpDelete) {
		return fmt.Errorf("%w: change %d: bad record", ErrCorruption, c.Seq)
	}
	c.Op = Op(v[0])
	c.DocNum = binary.BigEndian.Uint64(v[1:9])
	c.ID = string(bytes.Clone(v[9:]))
	return nil
}
