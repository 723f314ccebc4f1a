package soak

import "testing"

// The ledger flags a hit only when the search certainly began after the
// document was gone, and reads a hit's version against what was
// acknowledged before the search.
func TestSoakLedger(t *testing.T) {
	const id = 3
	upsert := func(l *ledger) uint64 {
		v := l.beginUpsert([]int{id})
		l.ackUpsert([]int{id}, v)
		return v[0]
	}
	del := func(l *ledger) {
		l.beginDelete([]int{id})
		l.ackDelete([]int{id})
	}
	for _, tc := range []struct {
		name  string
		run   func(l *ledger) (began, ver uint64)
		kind  string
		final finalState
	}{
		{"live", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			return l.now(), v
		}, "", finalLive},
		{"deleted before the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			del(l)
			return l.now(), v
		}, "deleted", finalGone},
		{"deleted during the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			del(l)
			return began, v
		}, "", finalGone},
		{"re-created, acknowledged", func(l *ledger) (uint64, uint64) {
			upsert(l)
			del(l)
			v := upsert(l)
			return l.now(), v
		}, "", finalLive},
		{"re-creation begun after the search began, not acknowledged", func(l *ledger) (uint64, uint64) {
			upsert(l)
			del(l)
			began := l.now()
			v := l.beginUpsert([]int{id})
			return began, v[0]
		}, "", -1}, // final is asked only once nothing is in flight
		{"deleted while an upsert was in flight", func(l *ledger) (uint64, uint64) {
			upsert(l)
			v := l.beginUpsert([]int{id})
			l.beginDelete([]int{id})
			l.ackUpsert([]int{id}, v)
			l.ackDelete([]int{id})
			return l.now(), v[0]
		}, "", finalEither},
		{"upsert begun while the delete was in flight", func(l *ledger) (uint64, uint64) {
			upsert(l)
			l.beginDelete([]int{id})
			v := l.beginUpsert([]int{id})
			l.ackDelete([]int{id})
			l.ackUpsert([]int{id}, v)
			return l.now(), v[0]
		}, "", finalEither},
		{"stale version", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			upsert(l)
			return l.now(), v
		}, "stale", finalLive},
		{"older version acknowledged during the search", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			upsert(l)
			return began, v
		}, "", finalLive},
		{"history beyond the ring", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			began := l.now()
			for range 5 {
				upsert(l)
			}
			return began, v
		}, "", finalLive},
		{"version never written", func(l *ledger) (uint64, uint64) {
			v := upsert(l)
			return l.now(), v + 100
		}, "version", finalLive},
		{"never upserted", func(l *ledger) (uint64, uint64) {
			return l.now(), 0
		}, "", finalGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newLedger(10)
			began, ver := tc.run(l)
			if kind, msg := l.checkHit(id, began, ver); kind != tc.kind {
				t.Errorf("check: %q (%s), want %q", kind, msg, tc.kind)
			}
			if f, _ := l.final(id); tc.final >= 0 && f != tc.final {
				t.Errorf("final %d, want %d", f, tc.final)
			}
		})
	}
}
