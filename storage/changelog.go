package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// ErrTruncated is wrapped by the *TruncatedError that Changes returns
// when changes it was asked for are gone: a derived index behind the
// log's floor rebuilds from the documents instead of catching up.
var ErrTruncated = errors.New("storage: change log truncated")

// TruncatedError is returned by Changes(after) when after is below the
// change log's floor: the entries After+1 .. Floor were deleted by
// TruncateLog.
type TruncatedError struct {
	After, Floor uint64
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("storage: change log truncated through %d: changes after %d are gone", e.Floor, e.After)
}

// Unwrap returns ErrTruncated.
func (e *TruncatedError) Unwrap() error { return ErrTruncated }

// LogStats describes the change log: it holds exactly the entries with
// sequences Floor+1 .. Last.
type LogStats struct {
	// Floor is the last sequence truncated (0: none ever was).
	Floor uint64 `json:"floor"`
	// Last is the last sequence committed (LastSeq).
	Last uint64 `json:"last_seq"`
	// Entries is the number of entries held, Last-Floor.
	Entries uint64 `json:"entries"`
	// Oldest is the sequence of the oldest entry held, Floor+1, or 0
	// when the log holds none.
	Oldest uint64 `json:"oldest_seq"`
}

// LogStats returns the change log's floor and length. It reads memory
// only.
func (s *Store) LogStats() LogStats {
	s.mu.Lock()
	floor, last := s.mu.logFloor, s.mu.lastSeq
	s.mu.Unlock()
	ls := LogStats{Floor: floor, Last: last, Entries: last - floor}
	if ls.Entries > 0 {
		ls.Oldest = floor + 1
	}
	return ls
}

// truncateChunk is the number of entries one truncation transaction
// deletes: far inside Badger's limit on a transaction's entries at the
// default memtable size (about 26,000 at 16 MiB), and a few hundred
// kilobytes of tombstones. A smaller memtable halves it until it fits.
const truncateChunk = 10_000

// tombstoneSize is the space one deleted log entry takes in Badger, for
// checkSpace: its 9-byte key, the entry's header and its version,
// rounded up.
const tombstoneSize = 32

// TruncateLog deletes the change-log entries with sequences up to and
// including through and returns how many it deleted. Changes(after) with
// after < through then returns a *TruncatedError. It is a no-op
// returning 0 when through is at or below the floor, and an error when
// through is past LastSeq.
//
// It deletes in chunks of truncateChunk entries. Each chunk is one
// transaction that deletes its entries and moves the floor past them, so
// the log holds exactly (floor, LastSeq] after every commit and after a
// crash at any point. The floor in memory (LogStats) follows each commit;
// ctx is checked before each chunk, and a cancelled truncation keeps the
// chunks already committed. Writes go on meanwhile: they touch neither the
// entries deleted nor the floor, so the two never conflict. Calls are
// serialised.
func (s *Store) TruncateLog(ctx context.Context, through uint64) (removed uint64, err error) {
	s.truncMu.Lock()
	defer s.truncMu.Unlock()
	s.mu.Lock()
	floor, last := s.mu.logFloor, s.mu.lastSeq
	s.mu.Unlock()
	if through <= floor {
		return 0, nil
	}
	if through > last {
		return 0, fmt.Errorf("storage: truncate the change log through %d: past its last sequence, %d", through, last)
	}
	chunk := uint64(truncateChunk)
	for floor < through {
		if err := ctx.Err(); err != nil {
			return removed, err
		}
		next := min(through, floor+chunk)
		err := s.update(func(txn *badger.Txn) error {
			if err := s.checkSpace(int64(next-floor) * tombstoneSize); err != nil {
				return err
			}
			for seq := floor + 1; seq <= next; seq++ {
				if err := txn.Delete(logKey(seq)); err != nil {
					return err
				}
			}
			return txn.Set(keyLogFloor, u64(next))
		})
		if errors.Is(err, badger.ErrTxnTooBig) && chunk > 1 {
			chunk /= 2 // a small memtable (Options.MemTableSize)
			continue
		}
		if err != nil {
			return removed, fmt.Errorf("storage: truncate the change log through %d (at %d): %w", through, floor, err)
		}
		s.mu.Lock()
		s.mu.logFloor = next
		s.mu.Unlock()
		removed += next - floor
		floor = next
	}
	return removed, nil
}
