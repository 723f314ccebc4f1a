package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"
)

// raftStore keeps the Raft logs and stable state of every group a node
// runs in one Badger database, each group under a prefix of its own.
// Badger commits with fsync, so an entry Raft has stored survives a
// crash. It is storage, not consensus: hashicorp/raft decides what is
// stored and when.
type raftStore struct {
	db *badger.DB
}

func openRaftStore(dir string) (*raftStore, error) {
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithSyncWrites(true).
		WithMemTableSize(16 << 20).WithValueLogFileSize(64 << 20))
	if err != nil {
		return nil, fmt.Errorf("cluster: open raft store %s: %w", dir, err)
	}
	return &raftStore{db: db}, nil
}

func (s *raftStore) Close() error { return s.db.Close() }

// group is one Raft group's view of the store: raft.LogStore and
// raft.StableStore.
func (s *raftStore) group(name string) *groupStore {
	return &groupStore{db: s.db, log: append([]byte("l"+name), 0), stable: append([]byte("s"+name), 0)}
}

type groupStore struct {
	db          *badger.DB
	log, stable []byte // key prefixes
}

var (
	_ raft.LogStore    = (*groupStore)(nil)
	_ raft.StableStore = (*groupStore)(nil)
)

func (g *groupStore) logKey(i uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), g.log...), i)
}

// Log records: index, term (uint64), type (byte), appended-at (Unix
// nanoseconds, int64), then the data and the extensions, each after its
// uint32 length.
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 8+8+1+8+4+len(l.Data)+4+len(l.Extensions))
	b = binary.BigEndian.AppendUint64(b, l.Index)
	b = binary.BigEndian.AppendUint64(b, l.Term)
	b = append(b, byte(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.BigEndian.AppendUint64(b, uint64(at))
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Data)))
	b = append(b, l.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(l.Extensions)))
	return append(b, l.Extensions...)
}

var errBadLog = errors.New("cluster: damaged raft log record")

func decodeLog(b []byte, l *raft.Log) error {
	if len(b) < 8+8+1+8+4 {
		return errBadLog
	}
	l.Index = binary.BigEndian.Uint64(b)
	l.Term = binary.BigEndian.Uint64(b[8:])
	l.Type = raft.LogType(b[16])
	l.AppendedAt = time.Time{}
	if at := int64(binary.BigEndian.Uint64(b[17:])); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	b = b[25:]
	n := binary.BigEndian.Uint32(b)
	if uint64(len(b)) < 4+uint64(n)+4 {
		return errBadLog
	}
	l.Data = append([]byte(nil), b[4:4+n]...)
	b = b[4+n:]
	m := binary.BigEndian.Uint32(b)
	if uint64(len(b)) != 4+uint64(m) {
		return errBadLog
	}
	l.Extensions = nil
	if m > 0 {
		l.Extensions = append([]byte(nil), b[4:]...)
	}
	return nil
}

func (g *groupStore) edge(reverse bool) (uint64, error) {
	var idx uint64
	err := g.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: g.log, Reverse: reverse})
		defer it.Close()
		seek := g.log
		if reverse {
			seek = g.logKey(^uint64(0))
		}
		it.Seek(seek)
		if it.Valid() {
			idx = binary.BigEndian.Uint64(it.Item().Key()[len(g.log):])
		}
		return nil
	})
	return idx, err
}

func (g *groupStore) FirstIndex() (uint64, error) { return g.edge(false) }
func (g *groupStore) LastIndex() (uint64, error)  { return g.edge(true) }

func (g *groupStore) GetLog(index uint64, l *raft.Log) error {
	return g.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(g.logKey(index))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return raft.ErrLogNotFound
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return decodeLog(v, l) })
	})
}

func (g *groupStore) StoreLog(l *raft.Log) error { return g.StoreLogs([]*raft.Log{l}) }

func (g *groupStore) StoreLogs(logs []*raft.Log) error {
	// One transaction while it fits, so that a batch is one fsync.
	txn := g.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for _, l := range logs {
		k, v := g.logKey(l.Index), encodeLog(l)
		err := txn.Set(k, v)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err = txn.Commit(); err != nil {
				return fmt.Errorf("cluster: store raft logs: %w", err)
			}
			txn = g.db.NewTransaction(true)
			err = txn.Set(k, v)
		}
		if err != nil {
			return fmt.Errorf("cluster: store raft log %d: %w", l.Index, err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("cluster: store raft logs: %w", err)
	}
	return nil
}

// DeleteRange deletes the entries lo to hi in transactions; when one
// transaction cannot hold them all, it deletes from the end nearer the
// log's middle, so that a crash part-way leaves the log contiguous.
func (g *groupStore) DeleteRange(lo, hi uint64) error {
	var keys [][]byte
	err := g.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: g.log})
		defer it.Close()
		for it.Seek(g.logKey(lo)); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			if binary.BigEndian.Uint64(k[len(g.log):]) > hi {
				break
			}
			keys = append(keys, k)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("cluster: delete raft logs %d-%d: %w", lo, hi, err)
	}
	last, err := g.LastIndex()
	if err != nil {
		return err
	}
	if hi >= last { // a suffix: delete from the end
		slices.Reverse(keys)
	}
	txn := g.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	for _, k := range keys {
		err := txn.Delete(k)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err = txn.Commit(); err == nil {
				txn = g.db.NewTransaction(true)
				err = txn.Delete(k)
			}
		}
		if err != nil {
			return fmt.Errorf("cluster: delete raft logs %d-%d: %w", lo, hi, err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("cluster: delete raft logs %d-%d: %w", lo, hi, err)
	}
	return nil
}

func (g *groupStore) Set(k, v []byte) error {
	return g.db.Update(func(txn *badger.Txn) error {
		return txn.Set(append(append([]byte(nil), g.stable...), k...), v)
	})
}

func (g *groupStore) Get(k []byte) ([]byte, error) {
	var v []byte
	err := g.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(append(append([]byte(nil), g.stable...), k...))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if v == nil {
		v = []byte{}
	}
	return v, err
}

func (g *groupStore) SetUint64(k []byte, v uint64) error {
	return g.Set(k, binary.BigEndian.AppendUint64(nil, v))
}

func (g *groupStore) GetUint64(k []byte) (uint64, error) {
	v, err := g.Get(k)
	if err != nil || len(v) != 8 {
		return 0, err
	}
	return binary.BigEndian.Uint64(v), nil
}
