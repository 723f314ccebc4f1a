package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem/engine"
)

// markApplied is the storage mark (storage.Batch.SetMark) holding the
// Raft index of the last entry a shard replica applied. It is written in
// the same Badger transaction as the entry's documents, so after a crash
// the replica skips exactly the entries it had applied.
const markApplied = "cluster.applied"

// replica is one shard replica on this node: its engine and its Raft
// group, whose FSM it is.
type replica struct {
	coll  string
	shard int
	dir   string // the engine's directory
	opts  engine.Options

	mu     sync.RWMutex // read: a call using eng, Apply; write: Restore swapping it
	eng    *engine.Engine
	broken atomic.Pointer[error] // set when an entry could not be applied

	applied  atomic.Uint64
	restores atomic.Int64 // snapshots restored since the replica opened
	waitMu   sync.Mutex
	waitCh   chan struct{} // closed and replaced whenever applied grows

	raft  *raft.Raft
	trans *raft.NetworkTransport
	fail  func(*replica, error) // called once when the replica breaks
}

// applyResult is what Apply returns to the leader's caller.
type applyResult struct {
	Put, Deleted int
	// Err is the entry's own fault (a document the schema refuses, a
	// batch too large), the same on every replica, which then applied
	// nothing of it.
	Err error
}

func openReplica(coll string, shard int, dir string, opts engine.Options) (*replica, error) {
	eng, err := engine.Open(dir, &opts)
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s shard %d: %w", coll, shard, err)
	}
	r := &replica{coll: coll, shard: shard, dir: dir, opts: opts, eng: eng, waitCh: make(chan struct{})}
	if err := r.loadApplied(); err != nil {
		eng.Close()
		return nil, err
	}
	return r, nil
}

func (r *replica) loadApplied() error {
	v, ok, err := r.eng.Shard().Store().Mark(markApplied)
	if err != nil {
		return fmt.Errorf("cluster: %s shard %d: %w", r.coll, r.shard, err)
	}
	if ok && len(v) == 8 {
		r.setApplied(binary.BigEndian.Uint64(v))
	}
	return nil
}

func (r *replica) setApplied(i uint64) {
	r.applied.Store(i)
	r.waitMu.Lock()
	close(r.waitCh)
	r.waitCh = make(chan struct{})
	r.waitMu.Unlock()
}

// waitApplied returns once the replica has applied index i.
func (r *replica) waitApplied(ctx context.Context, i uint64) error {
	for {
		r.waitMu.Lock()
		ch := r.waitCh
		r.waitMu.Unlock()
		if r.applied.Load() >= i {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("cluster: %s shard %d has applied %d, waiting for %d: %w", r.coll, r.shard, r.applied.Load(), i, ctx.Err())
		}
	}
}

// engine returns the replica's engine, read-locked; the caller calls
// r.mu.RUnlock when done with it.
func (r *replica) engine() (*engine.Engine, error) {
	r.mu.RLock()
	if err := r.brokenErr(); err != nil {
		r.mu.RUnlock()
		return nil, fmt.Errorf("cluster: %s shard %d is out of service: %w", r.coll, r.shard, err)
	}
	return r.eng, nil
}

func (r *replica) brokenErr() error {
	if p := r.broken.Load(); p != nil {
		return *p
	}
	return nil
}

// Apply is the FSM's: it commits one entry through the engine's batch
// path, with its Raft index as the mark.
func (r *replica) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || l.Index <= r.applied.Load() {
		return nil
	}
	r.mu.RLock() // excludes Restore
	defer r.mu.RUnlock()
	if err := r.brokenErr(); err != nil {
		return applyResult{Err: err}
	}
	mark := binary.BigEndian.AppendUint64(nil, l.Index)
	var b engine.Batch
	e, err := decodeEntry(l.Data)
	if err == nil {
		for _, p := range e.Puts {
			b.Put(p.Doc, p.Blobs)
		}
		for _, id := range e.Deletes {
			b.Delete(id)
		}
	}
	b.SetMark(markApplied, mark)
	ctx := context.Background()
	var res engine.WriteResult
	if err == nil {
		res, err = r.eng.Shard().Write(ctx, &b)
	}
	var de *engine.DocError
	if err != nil && (errors.As(err, &de) || errors.Is(err, engine.ErrBatchTooLarge) || errors.Is(err, errBadEntry)) {
		// The entry's own fault: every replica refuses it alike. Only
		// the mark is committed.
		var m engine.Batch
		m.SetMark(markApplied, mark)
		if _, werr := r.eng.Shard().Write(ctx, &m); werr != nil {
			return r.breakLocked(fmt.Errorf("record entry %d: %w", l.Index, werr))
		}
		r.setApplied(l.Index)
		return applyResult{Err: err}
	}
	if err != nil {
		// Committed (the mark says so) with a derived index to catch up
		// later, or not committed at all: then the replica stops, and a
		// restart applies the entry again.
		if v, ok, merr := r.eng.Shard().Store().Mark(markApplied); merr != nil || !ok || string(v) != string(mark) {
			return r.breakLocked(fmt.Errorf("apply entry %d: %w", l.Index, err))
		}
	}
	r.setApplied(l.Index)
	return applyResult{Put: res.Put, Deleted: res.Deleted}
}

// breakLocked takes the replica out of service: a local fault (a full
// disk, an I/O error) must not let it skip an entry the others applied.
func (r *replica) breakLocked(err error) applyResult {
	if r.broken.CompareAndSwap(nil, &err) && r.fail != nil {
		go r.fail(r, err)
	}
	return applyResult{Err: err}
}

// Snapshot is the FSM's: the replica's store as a backup, read in one
// transaction while entries go on applying. Its mark may be past the
// index Raft records for the snapshot; a replica restored from it skips
// the entries up to its mark.
func (r *replica) Snapshot() (raft.FSMSnapshot, error) { return replicaSnapshot{r}, nil }

type replicaSnapshot struct{ r *replica }

func (s replicaSnapshot) Persist(sink raft.SnapshotSink) error {
	eng, err := s.r.engine()
	if err == nil {
		err = eng.Shard().Store().Backup(context.Background(), sink)
		s.r.mu.RUnlock()
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: snapshot %s shard %d: %w", s.r.coll, s.r.shard, err)
	}
	return sink.Close()
}

func (replicaSnapshot) Release() {}

// Restore is the FSM's: it replaces the replica's collection with a
// snapshot another replica took, when this one is too far behind to catch
// up from the log. The derived indexes are rebuilt from it.
func (r *replica) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.eng.Close(); err != nil {
		return fmt.Errorf("cluster: restore %s shard %d: close: %w", r.coll, r.shard, err)
	}
	old := r.dir + ".replaced"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(r.dir, old); err != nil {
		return fmt.Errorf("cluster: restore %s shard %d: %w", r.coll, r.shard, err)
	}
	err := engine.RestoreStore(r.dir, rc, r.opts.NoSync)
	if err == nil {
		r.eng, err = engine.Open(r.dir, &r.opts)
	}
	if err != nil {
		// Back to the replica as it was; it stays out of service.
		os.RemoveAll(r.dir)
		if rerr := os.Rename(old, r.dir); rerr == nil {
			r.eng, _ = engine.Open(r.dir, &r.opts)
		}
		r.breakLocked(fmt.Errorf("restore from a snapshot: %w", err))
		return fmt.Errorf("cluster: restore %s shard %d: %w", r.coll, r.shard, err)
	}
	os.RemoveAll(old)
	r.applied.Store(0)
	r.restores.Add(1)
	return r.loadApplied()
}

func (r *replica) close() error {
	var errs []error
	if r.raft != nil {
		errs = append(errs, r.raft.Shutdown().Error())
	}
	if r.trans != nil {
		errs = append(errs, r.trans.Close())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.eng != nil {
		errs = append(errs, r.eng.Close())
	}
	return errors.Join(errs...)
}

func shardDir(root, coll string, shard int) string {
	return filepath.Join(root, "collections", coll, fmt.Sprintf("shard-%d", shard))
}
