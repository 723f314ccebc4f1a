package cluster

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/tandemsearch/tandem/engine"
)

// A node backup (Node.Backup) holds, for each replica the node holds, a
// backup of the replica's store in engine.Backup's format (with its own
// length and SHA-256), and the node's founders; never Raft state. A node
// restored from one (RestoreNode) must rejoin through a member (Config
// .Join): it re-enters every group as a non-voter, follows the log from
// where its stores are, and votes again once it has caught up. A node
// that came back as a voter with Raft state older than what it had
// acknowledged could vote twice in a term, or for a leader without a
// committed entry.
//
// Format: nodeBackupMagic; a uint32 length and a JSON nodeManifest; then
// each replica's engine backup, of the length the manifest gives, in the
// manifest's order. Integers are big-endian.
const nodeBackupMagic = "TNDMNOD1"

// restoredFile, in a node's Dir, marks a node restored from a backup that
// has not yet rejoined: Start refuses it without Config.Join.
const restoredFile = "restored.json"

type nodeManifest struct {
	Node     Peer            `json:"node"`
	Founders []Peer          `json:"founders"`
	Replicas []replicaBackup `json:"replicas"`
}

type replicaBackup struct {
	Collection string `json:"collection"`
	UID        string `json:"uid,omitempty"`
	Shard      int    `json:"shard"`
	Bytes      int64  `json:"bytes"`
}

// Backup writes a backup of the node to w: each replica's store, each as
// of one committed entry, while writes and searches go on. The replicas'
// backups are written to temporary files in the node's Dir first, for
// their lengths.
func (n *Node) Backup(ctx context.Context, w io.Writer) error {
	tmp, err := os.MkdirTemp(n.cfg.Dir, ".backup-")
	if err != nil {
		return fmt.Errorf("cluster: backup: %w", err)
	}
	defer os.RemoveAll(tmp)
	m := nodeManifest{Node: n.self, Founders: n.fsm.founders}
	var files []string
	for _, spec := range n.Collections() {
		c, err := n.collection(spec.Name)
		if err != nil {
			continue // dropped meanwhile
		}
		n.mu.RLock()
		shards := make([]int, 0, len(c.replicas))
		for s := range c.replicas {
			shards = append(shards, s)
		}
		n.mu.RUnlock()
		slices.Sort(shards)
		for _, s := range shards {
			n.mu.RLock()
			r := c.replicas[s]
			n.mu.RUnlock()
			if r == nil {
				continue
			}
			eng, err := r.engine()
			if err != nil {
				return fmt.Errorf("cluster: backup %s shard %d: %w", c.name, s, err)
			}
			path := filepath.Join(tmp, fmt.Sprintf("%d", len(files)))
			_, err = eng.BackupFile(ctx, path)
			r.mu.RUnlock()
			if err != nil {
				return fmt.Errorf("cluster: backup %s shard %d: %w", c.name, s, err)
			}
			st, err := os.Stat(path)
			if err != nil {
				return fmt.Errorf("cluster: backup %s shard %d: %w", c.name, s, err)
			}
			m.Replicas = append(m.Replicas, replicaBackup{Collection: c.name, UID: c.uid, Shard: s, Bytes: st.Size()})
			files = append(files, path)
		}
	}
	js, err := json.Marshal(m)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString(nodeBackupMagic)
	binary.Write(bw, binary.BigEndian, uint32(len(js)))
	bw.Write(js)
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("cluster: backup: %w", err)
		}
		_, err = io.Copy(bw, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("cluster: backup: %w", err)
		}
	}
	return bw.Flush()
}

// IsNodeBackup reports whether the file at path starts as a node backup.
func IsNodeBackup(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head := make([]byte, len(nodeBackupMagic))
	_, err = io.ReadFull(f, head)
	return err == nil && string(head) == nodeBackupMagic
}

// RestoreNode lays out a node's directory dir, which must not exist or
// must be empty, from a node backup at path: each replica's store
// (engine.Restore checks each before it uses a byte) and the founders.
// Start the node with Config.Join: it rejoins its groups as a non-voter
// and catches up from its peers. On failure dir is removed again.
func RestoreNode(path, dir string) (err error) {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("cluster: restore from %s: %w", path, err)
	}
	defer f.Close()
	head := make([]byte, len(nodeBackupMagic)+4)
	if _, err := io.ReadFull(f, head); err != nil || string(head[:len(nodeBackupMagic)]) != nodeBackupMagic {
		return fmt.Errorf("%w: %s is not a node backup", engine.ErrBadBackup, path)
	}
	js := make([]byte, binary.BigEndian.Uint32(head[len(nodeBackupMagic):]))
	if len(js) > 64<<20 {
		return fmt.Errorf("%w: %s: a manifest of %d bytes", engine.ErrBadBackup, path, len(js))
	}
	if _, err := io.ReadFull(f, js); err != nil {
		return fmt.Errorf("%w: %s: its manifest is cut short", engine.ErrBadBackup, path)
	}
	var m nodeManifest
	if err := json.Unmarshal(js, &m); err != nil {
		return fmt.Errorf("%w: %s: manifest: %v", engine.ErrBadBackup, path, err)
	}
	switch entries, err := os.ReadDir(dir); {
	case err == nil && len(entries) > 0:
		return fmt.Errorf("cluster: restore into %s: the directory is not empty", dir)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("cluster: restore into %s: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cluster: restore into %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	off := int64(len(head) + len(js))
	for _, rb := range m.Replicas {
		if err := restoreReplica(f, off, rb, dir); err != nil {
			return fmt.Errorf("cluster: restore %s shard %d from %s: %w", rb.Collection, rb.Shard, path, err)
		}
		off += rb.Bytes
	}
	if err := writeFounders(dir, m.Founders); err != nil {
		return err
	}
	b, _ := json.Marshal(m.Node)
	return os.WriteFile(filepath.Join(dir, restoredFile), b, 0o644)
}

// restoreReplica restores one replica's store from its section of a node
// backup.
func restoreReplica(f *os.File, off int64, rb replicaBackup, dir string) error {
	if rb.Bytes <= 0 || rb.Shard < 0 || rb.Collection == "" || filepath.Base(rb.Collection) != rb.Collection {
		return fmt.Errorf("%w: replica %+v", engine.ErrBadBackup, rb)
	}
	tmp, err := os.CreateTemp(dir, ".replica-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.NewSectionReader(f, off, rb.Bytes))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != rb.Bytes {
		return fmt.Errorf("%w: %d of %d bytes", engine.ErrBadBackup, n, rb.Bytes)
	}
	if _, err := engine.Restore(tmp.Name(), shardDir(dir, rb.Collection, rb.Shard)); err != nil {
		return err
	}
	if rb.UID != "" {
		return os.WriteFile(filepath.Join(dir, "collections", rb.Collection, uidFile), []byte(rb.UID+"\n"), 0o644)
	}
	return nil
}
