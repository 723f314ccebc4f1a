// Package storage is Tandem's source of truth, kept in Badger v4: documents,
// metadata, vectors, token vectors, id maps, index snapshots and the change
// log from which every derived index (Bleve, FAISS) is rebuilt or caught up.
//
// The main type is Store; writes go through a Batch committed by
// Store.Write.
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
//     Changes(s, ...) until that returns nothing. The log is never
//     truncated yet, so any derived index can be rebuilt from sequence 0.
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
//     and stores nothing; snapshot commits are refused the same way. Once
//     space is freed, writes succeed again.
//   - The schema is stored in the collection. A non-strict schema grows
//     when a document has a new field (its type is inferred); the new
//     schema is committed with the batch that introduced the field.
//
// # Key layout
//
// One-byte table tags, big-endian numbers: m<name> meta (schema, counters),
// i<id> → docnum, n<docnum> → id, d<docnum> → document JSON,
// b<docnum><name> → blob, l<seq> → change, s<name> → snapshot record.
//
// # Usage
//
//	st, err := storage.Open(dir, nil)
//	var b storage.Batch
//	b.Put(tandem.Doc{ID: "a", Fields: map[string]any{"text": "hello"}}, map[string][]byte{"vec/minilm": vec})
//	b.Delete("b")
//	res, err := st.Write(ctx, &b) // durable when err == nil
//	changes, err := st.Changes(ctx, appliedSeq, 1000)
package storage
