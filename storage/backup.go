package storage

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"
	"github.com/tandemsearch/tandem/internal/vfs"
	"google.golang.org/protobuf/proto"
)

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

// Backup writes a copy of every document, blob, mark, the schema and the
// change log with its floor (TruncateLog) to w, read in one transaction, so it is the store as of one
// committed batch even while batches commit. Blobs in segments are
// written whole, not as pointers. Restore makes a store of it. Snapshots
// of derived indexes are not copied: a store restored from a backup
// rebuilds them. The format is Badger's (DB.Backup): length-prefixed
// protobuf KV lists, with the newest version of each live key.
func (s *Store) Backup(ctx context.Context, w io.Writer) error {
	s.life.RLock()
	defer s.life.RUnlock()
	if s.closed {
		return ErrClosed
	}
	if s.blobs != nil {
		s.blobs.pinScan()
		defer s.blobs.unpinScan()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st := s.db.NewStream()
	st.LogPrefix = "storage.Backup"
	// One producer: Badger's stream opens one read transaction per
	// producer, and a single one reads a single committed state.
	st.NumGo = 1
	st.ChooseKey = func(item *badger.Item) bool { return item.Key()[0] != tagSnapshot }
	// The stream only logs KeyToList's errors and skips the key: keep
	// the first, stop the stream, and fail the backup with it.
	var readErr error
	var buf []byte
	st.KeyToList = func(key []byte, itr *badger.Iterator) (*pb.KVList, error) {
		item := itr.Item()
		if item.IsDeletedOrExpired() {
			return nil, nil
		}
		kv := &pb.KV{Key: key, Version: item.Version()}
		err := item.Value(func(v []byte) error {
			if item.UserMeta() != blobPointerMeta {
				kv.Value = itr.Alloc.Copy(v)
				return nil
			}
			p, err := decodePtr(v)
			if err != nil {
				return err
			}
			// buf is free again by the next call: the stream copies
			// the list into its buffer before it asks for another.
			buf, err = s.readPointer(p, buf[:0])
			kv.Value = buf
			return err
		})
		if err != nil {
			if readErr == nil {
				readErr = fmt.Errorf("key %q: %w", key, err)
			}
			cancel()
			return nil, err
		}
		return &pb.KVList{Kv: []*pb.KV{kv}}, nil
	}
	st.Send = func(b *z.Buffer) error {
		list, err := badger.BufferToKVList(b)
		if err != nil {
			return err
		}
		out := list.Kv[:0]
		for _, kv := range list.Kv {
			if !kv.StreamDone {
				out = append(out, kv)
			}
		}
		list.Kv = out
		return writeKVList(w, list)
	}
	err := st.Orchestrate(ctx)
	if readErr != nil {
		return fmt.Errorf("storage: backup: %w", readErr)
	}
	if err != nil {
		return fmt.Errorf("storage: backup: %w", err)
	}
	return ctx.Err()
}

// writeKVList writes list as Badger's backups do: its length (u64,
// little-endian), then its protobuf encoding.
func writeKVList(w io.Writer, list *pb.KVList) error {
	b, err := proto.Marshal(list)
	if err != nil {
		return err
	}
	if err := binary.Write(w, binary.LittleEndian, uint64(len(b))); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// badgerBitDelete is the bit of a backed-up entry's Meta that marks a
// delete (Badger's bitDelete); backups written by Badger's own DB.Backup
// hold such entries.
const badgerBitDelete = 1

// segmentBackup copies a backup from r to w, appending each large blob to
// a segment and putting its pointer in its place.
func segmentBackup(r io.Reader, w io.Writer, app *appender) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var buf []byte
	for {
		var sz uint64
		err := binary.Read(br, binary.LittleEndian, &sz)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read backup: %w", err)
		}
		if sz > 1<<34 {
			return fmt.Errorf("%w: backup: a list of %d bytes", ErrCorruption, sz)
		}
		// The buffer grows as the bytes arrive, not to the length the
		// stream claims: a damaged or hostile length costs no more
		// memory than the data that follows it.
		bb := bytes.NewBuffer(buf[:0])
		if _, err := io.CopyN(bb, br, int64(sz)); err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w: backup: a list of %d bytes cut short at %d", ErrCorruption, sz, bb.Len())
			}
			return fmt.Errorf("read backup: %w", err)
		}
		buf = bb.Bytes()
		list := &pb.KVList{}
		if err := proto.Unmarshal(buf, list); err != nil {
			return fmt.Errorf("%w: backup: %w", ErrCorruption, err)
		}
		for _, kv := range list.Kv {
			if len(kv.Key) == 0 || kv.Key[0] != tagBlob {
				continue
			}
			if len(kv.UserMeta) > 0 && kv.UserMeta[0] == blobPointerMeta {
				return fmt.Errorf("%w: backup: key %q holds a blob pointer, not its blob", ErrCorruption, kv.Key)
			}
			if len(kv.Meta) > 0 && kv.Meta[0]&badgerBitDelete != 0 || len(kv.Value) < blobThreshold {
				continue
			}
			p, err := app.add(kv.Value)
			if err != nil {
				return err
			}
			kv.Value = p.encode()
			kv.UserMeta = []byte{blobPointerMeta}
		}
		if err := writeKVList(w, list); err != nil {
			return err
		}
	}
}
