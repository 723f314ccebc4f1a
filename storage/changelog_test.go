package storage

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/tandemsearch/tandem"
)

// putMany writes n puts in batches of size, upserting the ids
// prefix0 .. prefix<pool-1> in turn, each document's text naming the put
// (text "<prefix><i> put <k>"), and returns the text of each id's last
// put.
func putMany(t *testing.T, s *Store, prefix string, n, pool, size int) map[string]string {
	t.Helper()
	last := map[string]string{}
	for k := 0; k < n; {
		var b Batch
		for ; b.Len() < size && k < n; k++ {
			id := fmt.Sprint(prefix, k%pool)
			text := fmt.Sprint(id, " put ", k)
			b.Put(doc(id, text), nil)
			last[id] = text
		}
		if _, err := s.Write(context.Background(), &b); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// checkTexts fails unless the store's live documents are exactly want (id
// to text).
func checkTexts(t *testing.T, s *Store, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	if err := s.ScanDocs(context.Background(), func(_ uint64, d tandem.Doc) error {
		got[d.ID], _ = d.Fields["text"].(string)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || s.Count() != uint64(len(want)) {
		t.Errorf("%d documents stored, Count %d; want %d", len(got), s.Count(), len(want))
	}
	for id, text := range want {
		if got[id] != text {
			t.Errorf("document %s: text %q, want %q", id, got[id], text)
		}
	}
}

// checkLog checks invariant L on s: Badger holds the log entries
// Floor+1 .. Last and no other, the floor on disk is the one in memory,
// Changes(Floor) returns them all in order, and Changes below the floor
// is a TruncatedError. It returns the log's stats.
func checkLog(t *testing.T, s *Store) LogStats {
	t.Helper()
	ls := s.LogStats()
	want := LogStats{Floor: ls.Floor, Last: s.LastSeq(), Entries: s.LastSeq() - ls.Floor}
	if want.Entries > 0 {
		want.Oldest = ls.Floor + 1
	}
	if ls != want {
		t.Errorf("LogStats = %+v, want %+v", ls, want)
	}
	var keys []uint64
	var floor uint64
	if err := s.view(func(txn *badger.Txn) error {
		var err error
		if floor, err = getUint(txn, keyLogFloor); err != nil {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tagLog}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, binary.BigEndian.Uint64(it.Item().Key()[1:]))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if floor != ls.Floor {
		t.Errorf("floor %d on disk, %d in memory", floor, ls.Floor)
	}
	if uint64(len(keys)) != ls.Entries {
		t.Errorf("Badger holds %d log entries, want %d (%d..%d)", len(keys), ls.Entries, ls.Floor+1, ls.Last)
	}
	for i, k := range keys {
		if k != ls.Floor+1+uint64(i) {
			t.Fatalf("log entry %d is sequence %d, want %d (floor %d, last %d)", i, k, ls.Floor+1+uint64(i), ls.Floor, ls.Last)
		}
	}
	changes, err := s.Changes(context.Background(), ls.Floor, 1<<30)
	if err != nil {
		t.Fatalf("Changes(%d): %v", ls.Floor, err)
	}
	if uint64(len(changes)) != ls.Entries {
		t.Errorf("Changes(%d) returned %d changes, want %d", ls.Floor, len(changes), ls.Entries)
	}
	for i, c := range changes {
		if c.Seq != ls.Floor+1+uint64(i) {
			t.Fatalf("Changes(%d)[%d] is sequence %d, want %d", ls.Floor, i, c.Seq, ls.Floor+1+uint64(i))
		}
	}
	if ls.Floor > 0 {
		_, err := s.Changes(context.Background(), ls.Floor-1, 1)
		var te *TruncatedError
		if !errors.As(err, &te) || *te != (TruncatedError{After: ls.Floor - 1, Floor: ls.Floor}) {
			t.Errorf("Changes(%d) = %v, want a TruncatedError at floor %d", ls.Floor-1, err, ls.Floor)
		}
	}
	return ls
}

// truncate calls TruncateLog and fails unless it removed want entries.
func truncate(t *testing.T, s *Store, through, want uint64) {
	t.Helper()
	removed, err := s.TruncateLog(context.Background(), through)
	if err != nil || removed != want {
		t.Fatalf("TruncateLog(%d) = %d, %v; want %d removed", through, removed, err, want)
	}
}

func TestTruncateLog(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	if ls := s.LogStats(); ls != (LogStats{}) {
		t.Errorf("empty store: LogStats = %+v", ls)
	}
	truncate(t, s, 0, 0)
	if _, err := s.TruncateLog(ctx, 1); err == nil {
		t.Error("TruncateLog(1) of an empty log succeeded")
	}
	docs := putMany(t, s, "d", 100, 100, 10)
	truncate(t, s, 60, 60)

	changes, err := s.Changes(ctx, 60, 1000)
	if err != nil || len(changes) != 40 {
		t.Fatalf("Changes(60) = %d changes, %v; want 40", len(changes), err)
	}
	for i, c := range changes {
		if c.Seq != uint64(61+i) || c.ID != fmt.Sprint("d", 60+i) || c.Doc == nil {
			t.Errorf("change %d: seq %d id %s doc %v, want seq %d id d%d with its document", i, c.Seq, c.ID, c.Doc, 61+i, 60+i)
		}
	}
	for _, after := range []uint64{0, 10, 59} {
		changes, err := s.Changes(ctx, after, 1000)
		var te *TruncatedError
		if !errors.As(err, &te) || *te != (TruncatedError{After: after, Floor: 60}) || !errors.Is(err, ErrTruncated) || changes != nil {
			t.Errorf("Changes(%d) = %d changes, %v; want TruncatedError{%d, 60}", after, len(changes), err, after)
		}
	}
	_, err = s.Changes(ctx, 10, 1000)
	if msg := fmt.Sprint(err); !strings.Contains(msg, "truncated through 60") || !strings.Contains(msg, "after 10") {
		t.Errorf("error %q does not say the log is truncated through 60 and changes after 10 are gone", msg)
	}
	if ls := checkLog(t, s); ls != (LogStats{Floor: 60, Last: 100, Entries: 40, Oldest: 61}) {
		t.Errorf("LogStats = %+v, want {60 100 40 61}", ls)
	}

	truncate(t, s, 50, 0)
	truncate(t, s, 60, 0)
	_, err = s.TruncateLog(ctx, 101)
	if msg := fmt.Sprint(err); err == nil || !strings.Contains(msg, "101") || !strings.Contains(msg, "100") {
		t.Errorf("TruncateLog(101) = %v, want an error naming 101 and the last sequence, 100", err)
	}
	if ls := checkLog(t, s); ls.Floor != 60 {
		t.Errorf("after refused truncations, floor %d, want 60", ls.Floor)
	}
	checkTexts(t, s, docs)

	// Writes go on after the floor; the whole log can go.
	for id, text := range putMany(t, s, "e", 1, 1, 1) {
		docs[id] = text
	}
	truncate(t, s, 101, 41)
	if ls := checkLog(t, s); ls != (LogStats{Floor: 101, Last: 101}) {
		t.Errorf("log truncated whole: LogStats = %+v, want {101 101 0 0}", ls)
	}
	if changes, err := s.Changes(ctx, 101, 10); err != nil || len(changes) != 0 {
		t.Errorf("Changes(101) = %v, %v; want nothing", changes, err)
	}
	checkTexts(t, s, docs)
}

func TestTruncateLogReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	docs := putMany(t, s, "d", 100, 30, 7)
	truncate(t, s, 60, 60)
	s.Close()

	s = openTest(t, dir)
	if ls := checkLog(t, s); ls != (LogStats{Floor: 60, Last: 100, Entries: 40, Oldest: 61}) {
		t.Errorf("after reopening: LogStats = %+v, want {60 100 40 61}", ls)
	}
	checkTexts(t, s, docs)
	for id, text := range putMany(t, s, "d", 50, 40, 9) {
		docs[id] = text
	}
	truncate(t, s, 120, 60)
	s.Close()

	s = openTest(t, dir)
	if ls := checkLog(t, s); ls != (LogStats{Floor: 120, Last: 150, Entries: 30, Oldest: 121}) {
		t.Errorf("after reopening again: LogStats = %+v, want {120 150 30 121}", ls)
	}
	checkTexts(t, s, docs)
}

// TestTruncateLogChunks truncates more than one transaction's worth of
// entries, at the default memtable size and at one too small for a whole
// chunk, and a truncation whose context is cancelled.
func TestTruncateLogChunks(t *testing.T) {
	for _, mem := range []int64{0, 1 << 20} {
		t.Run(fmt.Sprint("memtable ", mem), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, &Options{NoSync: true, MemTableSize: mem})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			docs := putMany(t, s, "d", 25_000, 3_000, 200)
			truncate(t, s, 24_000, 24_000)
			if ls := checkLog(t, s); ls != (LogStats{Floor: 24_000, Last: 25_000, Entries: 1_000, Oldest: 24_001}) {
				t.Errorf("LogStats = %+v, want {24000 25000 1000 24001}", ls)
			}
			checkTexts(t, s, docs)

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if removed, err := s.TruncateLog(ctx, 25_000); !errors.Is(err, context.Canceled) || removed != 0 {
				t.Errorf("TruncateLog with a cancelled context = %d, %v; want 0, context.Canceled", removed, err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, err = Open(dir, &Options{MemTableSize: mem})
			if err != nil {
				t.Fatal(err)
			}
			if ls := checkLog(t, s); ls.Floor != 24_000 {
				t.Errorf("after reopening: LogStats = %+v, want floor 24000", ls)
			}
		})
	}
}

// TestChangesDuringTruncation reads the log while it is truncated a few
// hundred entries at a time and appended to: every Changes result starts
// at after+1, has no gap and reaches as far as the log did when it was
// called (up to its limit), or is a TruncatedError whose floor is above
// after.
func TestChangesDuringTruncation(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	putMany(t, s, "d", 20_000, 1_000, 500)

	var done atomic.Bool
	var wg sync.WaitGroup
	defer wg.Wait()
	defer done.Store(true)
	wg.Go(func() { // the writer
		for k := 0; !done.Load(); k++ {
			var b Batch
			for i := range 20 {
				b.Put(doc(fmt.Sprint("w", i), fmt.Sprint("w", k)), nil)
			}
			if _, err := s.Write(ctx, &b); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Go(func() { // the truncator
		defer done.Store(true)
		r := rand.New(rand.NewPCG(1, 2))
		for s.LogStats().Floor < 20_000 {
			through := min(s.LastSeq(), s.LogStats().Floor+1+uint64(r.IntN(600)))
			if _, err := s.TruncateLog(ctx, through); err != nil {
				t.Error(err)
				return
			}
		}
	})
	r := rand.New(rand.NewPCG(3, 4))
	var reads, truncated int
	for !done.Load() || reads < 100 || truncated < 100 {
		floor := s.LogStats().Floor
		var after uint64
		switch r.IntN(3) {
		case 0: // at the floor just read, which may move before Changes reads it
			after = floor
		case 1:
			after = floor + uint64(r.IntN(200))
		default:
			after = uint64(r.IntN(int(s.LastSeq()) + 1))
		}
		limit := 1 + r.IntN(1000)
		last := s.LastSeq()
		changes, err := s.Changes(ctx, after, limit)
		var te *TruncatedError
		switch {
		case errors.As(err, &te):
			truncated++
			if te.After != after || te.Floor <= after || changes != nil {
				t.Fatalf("Changes(%d) = %d changes, %v", after, len(changes), err)
			}
			continue
		case err != nil:
			t.Fatal(err)
		}
		reads++
		if want := min(uint64(limit), last-min(last, after)); uint64(len(changes)) < want {
			t.Fatalf("Changes(%d, %d) returned %d changes; the log held %d after it", after, limit, len(changes), last-after)
		}
		for i, c := range changes {
			if c.Seq != after+1+uint64(i) {
				t.Fatalf("Changes(%d, %d)[%d] is sequence %d, want %d: a gap", after, limit, i, c.Seq, after+1+uint64(i))
			}
		}
	}
	wg.Wait()
	t.Logf("%d reads, %d truncated; floor %d, last %d", reads, truncated, s.LogStats().Floor, s.LastSeq())
	checkLog(t, s)
}

// TestBackupKeepsLogFloor restores a backup of a truncated log: the
// restored store has the same floor, log and documents.
func TestBackupKeepsLogFloor(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, t.TempDir())
	docs := putMany(t, s, "d", 100, 40, 10)
	var b Batch
	for _, id := range []string{"d3", "d17"} {
		b.Delete(id)
		delete(docs, id)
	}
	if _, err := s.Write(ctx, &b); err != nil {
		t.Fatal(err)
	}
	truncate(t, s, 60, 60)
	var buf bytes.Buffer
	if err := s.Backup(ctx, &buf); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	if err := Restore(dir, &buf, nil); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, filepath.Join(dir))
	if got, want := checkLog(t, r), s.LogStats(); got != want || got != (LogStats{Floor: 60, Last: 102, Entries: 42, Oldest: 61}) {
		t.Errorf("restored LogStats = %+v, want %+v, {60 102 42 61}", got, want)
	}
	if _, err := r.Changes(ctx, 0, 10); !errors.Is(err, ErrTruncated) {
		t.Errorf("restored Changes(0) = %v, want ErrTruncated", err)
	}
	want, err := s.Changes(ctx, 60, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Changes(ctx, 60, 1000)
	if err != nil || len(got) != len(want) {
		t.Fatalf("restored Changes(60) = %d changes, %v; want %d", len(got), err, len(want))
	}
	for i := range want {
		if got[i].Seq != want[i].Seq || got[i].Op != want[i].Op || got[i].ID != want[i].ID || (got[i].Doc == nil) != (want[i].Doc == nil) {
			t.Errorf("restored change %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	checkTexts(t, r, docs)
}
