package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
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
	if err := finishSwap(dir); err != nil {
		return nil, fmt.Errorf("cluster: open %s shard %d: %w", coll, shard, err)
	}
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

// finishSwap settles a restore's swap (Restore) that a crash interrupted:
// with the replica's directory gone, the one it was renamed to goes back
// (repair restores the snapshot again); a restored or replaced directory
// left beside it is removed.
func finishSwap(dir string) error {
	old := dir + ".replaced"
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(old); err == nil {
			if err := os.Rename(old, dir); err != nil {
				return err
			}
		}
	}
	if err := os.RemoveAll(dir + ".restoring"); err != nil {
		return err
	}
	return os.RemoveAll(old)
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
//
// A snapshot starts with a header (snapshotMagic, then the replica's
// applied index when the backup began, big-endian): every entry at or
// below the snapshot's Raft index that changed the store is at or below
// it, so a replica whose own mark reaches it has everything the snapshot
// holds (repair).
func (r *replica) Snapshot() (raft.FSMSnapshot, error) { return replicaSnapshot{r}, nil }

// snapshotMagic starts a shard snapshot of this format; one without it
// is a bare store backup, as written before the header.
const snapshotMagic = "TNDMSNP1"

type replicaSnapshot struct{ r *replica }

func (s replicaSnapshot) Persist(sink raft.SnapshotSink) error {
	eng, err := s.r.engine()
	if err == nil {
		hdr := binary.BigEndian.AppendUint64([]byte(snapshotMagic), s.r.applied.Load())
		if _, err = sink.Write(hdr); err == nil {
			err = eng.Shard().Store().Backup(context.Background(), sink)
		}
		s.r.mu.RUnlock()
	}
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("cluster: snapshot %s shard %d: %w", s.r.coll, s.r.shard, err)
	}
	return sink.Close()
}

func (replicaSnapshot) Release() {}

// readSnapshotHeader reads a snapshot's header and returns the mark it
// records and the store's backup after it; ok is false for a snapshot
// without one, whose backup is then the whole of it.
func readSnapshotHeader(rd io.Reader) (mark uint64, body io.Reader, ok bool, err error) {
	hdr := make([]byte, len(snapshotMagic)+8)
	n, err := io.ReadFull(rd, hdr)
	if err == nil && string(hdr[:len(snapshotMagic)]) == snapshotMagic {
		return binary.BigEndian.Uint64(hdr[len(snapshotMagic):]), rd, true, nil
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, nil, false, err
	}
	return 0, io.MultiReader(bytes.NewReader(hdr[:n]), rd), false, nil
}

// Restore is the FSM's: it replaces the replica's collection with a
// snapshot another replica took, when this one is too far behind to catch
// up from the log. The derived indexes are rebuilt from it.
//
// The snapshot is restored into a directory beside the replica's, which
// then takes the replica's place by two renames; openReplica finishes or
// undoes a swap a crash interrupted. Raft has persisted the snapshot
// before it calls Restore, and a restarted node counts its entries as
// applied, so a Restore that did not finish is done again at the next
// start (repair).
func (r *replica) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	fail := func(err error) error {
		r.breakLocked(fmt.Errorf("restore from a snapshot: %w", err))
		return fmt.Errorf("cluster: restore %s shard %d: %w", r.coll, r.shard, err)
	}
	_, body, _, err := readSnapshotHeader(rc)
	if err != nil {
		return fail(err)
	}
	next, old := r.dir+".restoring", r.dir+".replaced"
	if err := os.RemoveAll(next); err != nil {
		return fail(err)
	}
	if err := engine.RestoreStore(next, body, r.opts.NoSync); err != nil {
		os.RemoveAll(next)
		return fail(err)
	}
	if !r.opts.NoSync {
		if err := syncDir(filepath.Dir(r.dir)); err != nil {
			return fail(err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.eng.Close(); err != nil {
		return fail(fmt.Errorf("close: %w", err))
	}
	if err := os.RemoveAll(old); err != nil {
		return fail(err)
	}
	if err := os.Rename(r.dir, old); err != nil {
		return fail(err)
	}
	if err := os.Rename(next, r.dir); err != nil {
		os.Rename(old, r.dir)
		r.eng, _ = engine.Open(r.dir, &r.opts)
		return fail(err)
	}
	if !r.opts.NoSync {
		syncDir(filepath.Dir(r.dir))
	}
	r.eng, err = engine.Open(r.dir, &r.opts)
	if err != nil {
		// Back to the replica as it was; it stays out of service.
		os.RemoveAll(next)
		if rerr := os.Rename(r.dir, next); rerr == nil && os.Rename(old, r.dir) == nil {
			r.eng, _ = engine.Open(r.dir, &r.opts)
		}
		return fail(err)
	}
	os.RemoveAll(old)
	r.applied.Store(0)
	r.restores.Add(1)
	return r.loadApplied()
}

// repair restores the newest snapshot of the replica's group when the
// store has not applied everything it holds. Raft persists a snapshot it
// receives before it calls Restore, and on a restart it counts the
// snapshot's entries as applied without restoring it
// (NoSnapshotRestoreOnStart): a crash between the two, or a Restore that
// failed, would otherwise leave the replica without them for good.
func (r *replica) repair(snaps raft.SnapshotStore, log hclog.Logger) error {
	list, err := snaps.List()
	if err != nil || len(list) == 0 {
		return err
	}
	_, rc, err := snaps.Open(list[0].ID)
	if err != nil {
		return fmt.Errorf("cluster: %s shard %d: open snapshot %s: %w", r.coll, r.shard, list[0].ID, err)
	}
	mark, body, ok, err := readSnapshotHeader(rc)
	switch {
	case err != nil:
		rc.Close()
		return fmt.Errorf("cluster: %s shard %d: read snapshot %s: %w", r.coll, r.shard, list[0].ID, err)
	case !ok:
		// Written before snapshots recorded their mark: nothing tells
		// whether it was restored.
		rc.Close()
		log.Warn("snapshot without a mark: not checked", "collection", r.coll, "shard", r.shard, "snapshot", list[0].ID)
		return nil
	case mark <= r.applied.Load():
		return rc.Close()
	}
	log.Warn("restoring a snapshot the replica had not applied", "collection", r.coll, "shard", r.shard, "snapshot", list[0].ID, "mark", mark, "applied", r.applied.Load())
	return r.Restore(readCloser{io.MultiReader(bytes.NewReader(binary.BigEndian.AppendUint64([]byte(snapshotMagic), mark)), body), rc})
}

type readCloser struct {
	io.Reader
	io.Closer
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func (r *replica) close() error {
	closed := errors.New("cluster: replica closed")
	r.broken.CompareAndSwap(nil, &closed)
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
