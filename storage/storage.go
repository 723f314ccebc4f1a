package storage

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// keyLogFloor is the change log's floor F: every entry with a
	// sequence <= F is deleted (TruncateLog). Absent means 0.
	keyLogFloor = []byte("mlogfloor")
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
// maps, and flushing a memtable builds its table in buffers up to twice
// its size. A collection embedded in an application keeps at most three
// 16 MiB memtables, a 32 MiB block cache and 256 MiB value-log files; a
// batch too large for one transaction is split by the engine
// (ErrBatchTooLarge). docs/storage.md has what this was chosen on.
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
	// truncMu serialises TruncateLog, which reads the floor, commits
	// its chunks, then publishes each new floor.
	truncMu sync.Mutex

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
		// logFloor is the change log's floor: the log holds exactly
		// the entries (logFloor, lastSeq] (TruncateLog).
		logFloor uint64
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
// values in the tree, where every compaction rewrites them
// (docs/storage.md). Blobs of 1 KiB and more go to blob segments instead
// (blobThreshold), so only documents of this size reach the value log;
// smaller documents stay in the tree, where scans read them fastest.
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
		}{{keyNextDoc, &s.mu.nextDoc}, {keyLastSeq, &s.mu.lastSeq}, {keyLive, &s.mu.live}, {keyLogFloor, &s.mu.logFloor}} {
			v, err := getUint(txn, c.key)
			if err != nil {
				return err
			}
			*c.dst = v
		}
		if s.mu.logFloor > s.mu.lastSeq {
			return fmt.Errorf("%w: the change log is truncated through %d, past its last sequence, %d", ErrCorruption, s.mu.logFloor, s.mu.lastSeq)
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

func (s *Store) view(fn func(txn *badger.Txn) error) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return s.db.View(fn)
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
