package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

func TestRaftStore(t *testing.T) {
	dir := t.TempDir()
	rs, err := openRaftStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a, b := rs.group("a"), rs.group("ab") // one name a prefix of the other
	if i, err := a.LastIndex(); err != nil || i != 0 {
		t.Fatalf("empty LastIndex = %d, %v", i, err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 50; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1 + i/10, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, int(i)), AppendedAt: time.Unix(1700000000, int64(i))})
	}
	if err := a.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := b.StoreLog(&raft.Log{Index: 7, Term: 3, Type: raft.LogNoop}); err != nil {
		t.Fatal(err)
	}
	check := func(g *groupStore, first, last uint64) {
		t.Helper()
		f, err1 := g.FirstIndex()
		l, err2 := g.LastIndex()
		if err1 != nil || err2 != nil || f != first || l != last {
			t.Fatalf("first, last = %d, %d (%v %v); want %d, %d", f, l, err1, err2, first, last)
		}
	}
	check(a, 1, 50)
	check(b, 7, 7)
	var got raft.Log
	if err := a.GetLog(33, &got); err != nil || !reflect.DeepEqual(&got, logs[32]) {
		t.Fatalf("GetLog(33) = %+v, %v; want %+v", got, err, logs[32])
	}
	if err := a.GetLog(51, &got); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(51) = %v, want ErrLogNotFound", err)
	}
	// A suffix (conflicting entries) and a prefix (compaction).
	if err := a.DeleteRange(41, 50); err != nil {
		t.Fatal(err)
	}
	check(a, 1, 40)
	if err := a.DeleteRange(1, 30); err != nil {
		t.Fatal(err)
	}
	check(a, 31, 40)
	check(b, 7, 7)
	if err := a.SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	if err := a.Set([]byte("LastVoteCand"), []byte("n2")); err != nil {
		t.Fatal(err)
	}
	if err := rs.Close(); err != nil {
		t.Fatal(err)
	}
	// Everything survives a reopen.
	rs, err = openRaftStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	a, b = rs.group("a"), rs.group("ab")
	check(a, 31, 40)
	if v, err := a.GetUint64([]byte("CurrentTerm")); err != nil || v != 9 {
		t.Errorf("CurrentTerm = %d, %v", v, err)
	}
	if v, err := a.Get([]byte("LastVoteCand")); err != nil || string(v) != "n2" {
		t.Errorf("LastVoteCand = %q, %v", v, err)
	}
	if v, err := b.Get([]byte("LastVoteCand")); err != nil || len(v) != 0 {
		t.Errorf("another group's LastVoteCand = %q, %v; want empty", v, err)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	e := &entry{
		Puts: []engine.Prepared{
			{Doc: tandem.Doc{ID: "a", Fields: map[string]any{"text": "alpha", "n": 2.5, "tags": []any{"x", "y"}}}, Blobs: map[string][]byte{"vec/m": {1, 2, 3}, "tok/m": {}}},
			{Doc: tandem.Doc{ID: "b", Fields: map[string]any{"text": "beta"}}},
		},
		Deletes: []string{"c", "d"},
	}
	b, err := e.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, e) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
	}
	// Every cut and every changed byte at the start is an error, not a
	// panic or a different entry.
	for i := range b {
		if _, err := decodeEntry(b[:i]); err == nil {
			t.Fatalf("entry cut to %d of %d bytes decoded", i, len(b))
		}
	}
	if _, err := decodeEntry(append(b, 0)); err == nil {
		t.Fatal("entry with a trailing byte decoded")
	}
	bad := append([]byte{}, b...)
	bad[0] = 9
	if _, err := decodeEntry(bad); !errors.Is(err, errBadEntry) {
		t.Fatalf("unknown version: %v", err)
	}
}
