// Package storage is Tandem's source of truth, kept in Badger v4 and in
// blob segment files beside it: documents, metadata, vectors, token
// vectors, id maps, index snapshots and the change log from which every
// derived index (Bleve, FAISS) is rebuilt or caught up.
//
// The main type is Store; writes go through a Batch committed by
// Store.Write. Store.ReadBlob reads a blob into a caller's buffer;
// Store.ReadBlobCRC also returns its CRC-32C, and a BlobReader
// (Store.NewBlobReader) reads many in one read transaction.
//
// # Invariants
//
//   - Each document has an internal document number (uint64) assigned when
//     its external id is first stored. An upsert of an existing id keeps
//     the number; a number is never reused, even after a delete (a deleted
//     id that comes back gets a new number).
//   - Every put and delete appends a change-log entry (sequence, op,
//     docnum, id) in the same Badger transaction as the write. Sequences
//     start at 1 and increase by one per operation with no gaps. A derived
//     index that has applied sequence s is up to date once it has applied
//     Changes(s, ...) until that returns nothing.
//   - Invariant L: the log has a floor F, and Badger holds its entries
//     for exactly the sequences F+1 .. LastSeq. F starts at 0 and only
//     TruncateLog raises it: each of its transactions deletes a chunk of
//     entries and moves F past them together, so L holds after every
//     commit and after a crash at any point. Documents, blobs, marks and
//     snapshots are never touched by it. Changes(after) with after < F
//     returns a *TruncatedError (errors.Is ErrTruncated) and no changes:
//     it reads F in the transaction that reads the entries, so what it
//     returns always starts at after+1 and a concurrent truncation never
//     leaves a silent gap. A derived index behind F rebuilds from the
//     documents or blobs instead of catching up. LogStats reports F and
//     the log's length. A backup carries F with the log.
//   - A Batch is one Badger transaction: all of it is stored or none of it.
//     Documents are checked against the schema before the transaction
//     starts, so a bad document rejects its whole batch and changes
//     nothing. A batch too large for one Badger transaction (about 15% of
//     a memtable, Options.MemTableSize) fails with ErrBatchTooLarge;
//     callers split input into batches (the engine commits up to 1,000
//     documents per batch and halves a batch that is too large).
//   - Durability: the store opens Badger with SyncWrites, so when Write
//     returns nil the batch is on disk and survives a process or machine
//     crash. Options.NoSync trades this for speed: a process crash still
//     loses nothing (the OS has the data), a machine crash may.
//   - Blobs ("vec/<model>", "tok/<model>") belong to a document: a put
//     replaces all of them, a delete removes them, in the same transaction.
//   - Blobs of at least 4 KiB (Badger's value threshold, so that no blob
//     reaches Badger's memory-mapped value log) are appended to blob
//     segments, files under <dir>/blobs (000001.blob, ...), and Badger
//     holds a pointer record under the blob's key: segment, offset,
//     length and CRC-32C, with Badger user-meta byte 0x42; smaller
//     blobs, and those of collections written before segments existed,
//     are held in Badger whole (user-meta 0) and read as they are. Badger
//     stays the single record of which blobs are live: a segment byte no
//     committed pointer refers to is garbage.
//   - A Write appends its batch's large blobs to the active segment and
//     fsyncs it (unless NoSync) before its transaction commits, so an
//     acknowledged write's blobs are durable; a batch whose transaction
//     fails before its commit truncates them away, and a crash before the
//     commit leaves them as unreferenced garbage. Segment files are
//     written through Options.FS and never rewritten in place.
//   - Blobs in segments are read (by Blob, ReadBlob, ReadBlobCRC,
//     BlobReader, ScanBlobs and Backup) with pread, never through a memory
//     map, and every read checks the blob's CRC-32C: a mismatch, a short
//     read, or a pointer into a segment that is missing or has a wrong
//     header is ErrCorruption naming the segment and the offset. Such
//     damage is found at read time; the rest of the collection opens and
//     reads.
//   - Open recomputes each segment's live bytes from the pointers (one
//     pass over the blob keys) and removes the segments no pointer refers
//     to. A segment of which at least half is garbage is compacted by GC
//     (and the store's own GC loop): its live blobs are copied to a new
//     segment, which is fsynced; each pointer is then swapped in a
//     transaction only if it still points at the old place (a write that
//     replaced or deleted the blob meanwhile wins); Badger is synced; the
//     old segment is removed once no read, scan or open BlobReader uses
//     it. A crash at any step leaves every live blob readable.
//   - A Backup carries every blob's bytes, never a pointer; Restore puts
//     large blobs back into segments.
//   - Snapshots of derived indexes are files under <dir>/snapshots whose
//     name, included sequence, length and CRC-32C are committed in Badger
//     after the file and its directory are fsynced; the commit is the
//     single point at which a snapshot replaces the previous one, and a
//     failed save leaves the previous one current. OpenSnapshot checks the
//     length and checksum before returning the file, so a truncated,
//     damaged, unreadable or missing file is ErrCorruption and its owner
//     rebuilds from the store. Files no record names (a save interrupted
//     by a crash) are removed at Open. Snapshot files are written through
//     Options.FS (internal/vfs), where tests inject I/O faults.
//   - Full disk: Badger writes through memory maps of sparse files, where
//     a full file system raises SIGBUS rather than an error. So a write
//     that would leave less than Options.DiskReserve (DefaultDiskReserve,
//     128 MiB) free fails with ErrDiskFull, which wraps syscall.ENOSPC,
//     and stores nothing (its large blobs are counted before any is
//     appended); snapshot commits, log truncations and blob compactions
//     are refused the same way. Once space is freed, writes succeed
//     again.
//   - The schema is stored in the collection. A non-strict schema grows
//     when a document has a new field (its type is inferred); the new
//     schema is committed with the batch that introduced the field.
//
// # Key layout
//
// One-byte table tags, big-endian numbers: m<name> meta (schema, counters,
// the log's floor mlogfloor),
// i<id> → docnum, n<docnum> → id, d<docnum> → document JSON,
// b<docnum><name> → blob, or pointer record (user-meta 0x42:
// version 1, segment u32, offset u64, length u32, CRC-32C u32,
// little-endian), l<seq> → change, s<name> → snapshot record.
// Segment files under blobs/: a 16-byte header ("TBLB", version u32,
// segment id u32, zero u32), then blob bytes back to back.
//
// # Usage
//
//	st, err := storage.Open(dir, nil)
//	var b storage.Batch
//	b.Put(tandem.Doc{ID: "a", Fields: map[string]any{"text": "hello"}}, map[string][]byte{"vec/minilm": vec})
//	b.Delete("b")
//	res, err := st.Write(ctx, &b) // durable when err == nil
//	changes, err := st.Changes(ctx, appliedSeq, 1000) // *TruncatedError if appliedSeq < LogStats().Floor
//	removed, err := st.TruncateLog(ctx, savedSeq)     // once every derived index has saved savedSeq
package storage
