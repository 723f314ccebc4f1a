package soak

import (
	"fmt"
	"math/rand/v2"
	"sync"
)

// ledger records, per id, what the writer and the deleter began and
// had acknowledged, on one logical clock that searches read too. It lets
// a search's hit be judged against what was certainly true when the
// search began, whatever the writer and deleter did meanwhile.
type ledger struct {
	size int // ids 0..size-1
	mu   struct {
		sync.Mutex
		clock uint64
		ids   []idState
		live  []int // ids acknowledged upserted and not since picked for deletion
		pos   []int // index in live, or -1
	}
}

// idState is one id's history. Versions are clock values of upsert
// starts, so they grow with each upsert of an id.
type idState struct {
	upStart    uint64 // clock at the start of the last upsert (its version)
	upInflight bool   // an upsert has begun and is not acknowledged
	// The last acknowledged delete: clock at its start and its
	// acknowledgement, and whether no upsert was in flight when it began
	// (then every earlier upsert was committed before it).
	delStart, delAck uint64
	delClean         bool
	pendStart        uint64 // a delete begun and not yet acknowledged
	pendClean        bool
	acks             [4]ack // the last acknowledged upserts, a ring
	nacks            int
}

type ack struct{ clock, ver uint64 }

func newLedger(size int) *ledger {
	l := &ledger{size: size}
	l.mu.ids = make([]idState, size)
	l.mu.pos = make([]int, size)
	for i := range l.mu.pos {
		l.mu.pos[i] = -1
	}
	return l
}

func (l *ledger) now() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	return l.mu.clock
}

func (l *ledger) beginUpsert(ids []int) []uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	vers := make([]uint64, len(ids))
	for i, id := range ids {
		l.mu.clock++
		s := &l.mu.ids[id]
		s.upStart, s.upInflight, vers[i] = l.mu.clock, true, l.mu.clock
	}
	return vers
}

func (l *ledger) ackUpsert(ids []int, vers []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	for i, id := range ids {
		s := &l.mu.ids[id]
		s.upInflight = false
		s.acks[s.nacks%len(s.acks)] = ack{clock: l.mu.clock, ver: vers[i]}
		s.nacks++
		if l.mu.pos[id] < 0 {
			l.mu.pos[id] = len(l.mu.live)
			l.mu.live = append(l.mu.live, id)
		}
	}
}

func (l *ledger) beginDelete(ids []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.beginDeleteLocked(ids)
}

func (l *ledger) beginDeleteLocked(ids []int) {
	l.mu.clock++
	for _, id := range ids {
		s := &l.mu.ids[id]
		s.pendStart, s.pendClean = l.mu.clock, !s.upInflight
		l.unliveLocked(id)
	}
}

func (l *ledger) ackDelete(ids []int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.clock++
	for _, id := range ids {
		s := &l.mu.ids[id]
		s.delStart, s.delAck, s.delClean = s.pendStart, l.mu.clock, s.pendClean
	}
}

func (l *ledger) unliveLocked(id int) {
	p := l.mu.pos[id]
	if p < 0 {
		return
	}
	last := l.mu.live[len(l.mu.live)-1]
	l.mu.live[p], l.mu.pos[last] = last, p
	l.mu.live = l.mu.live[:len(l.mu.live)-1]
	l.mu.pos[id] = -1
}

// pick is the writer's next batch: distinct ids, of which created
// were not live (new, deleted, or being deleted).
type pick struct {
	all     []int
	created int
}

// pickUpserts picks n distinct ids: each a new version of a live id or,
// half the time, an id that is not live, which may be one the deleter is
// deleting at that moment.
func (l *ledger) pickUpserts(rng *rand.Rand, n int) pick {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p pick
	seen := map[int]bool{}
	for tries := 0; len(p.all) < n && tries < 8*n; tries++ {
		var id int
		if rng.IntN(2) == 0 && len(l.mu.live) > 0 {
			id = l.mu.live[rng.IntN(len(l.mu.live))]
		} else {
			id = rng.IntN(l.size)
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		p.all = append(p.all, id)
		if l.mu.pos[id] < 0 {
			p.created++
		}
	}
	return p
}

// pickDeletes picks up to n live ids to delete, none while no more than
// keep are live, and begins their deletion.
func (l *ledger) pickDeletes(rng *rand.Rand, n, keep int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []int
	for len(ids) < n && len(l.mu.live) > keep {
		id := l.mu.live[rng.IntN(len(l.mu.live))]
		l.unliveLocked(id)
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		l.beginDeleteLocked(ids)
	}
	return ids
}

// checkHit judges a hit on id at version ver, from a search that began at
// clock began. It returns the kind of violation and a message, or "".
func (l *ledger) checkHit(id int, began, ver uint64) (kind, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.mu.ids[id]
	// Deleted before the search began, with nothing upserting the id
	// when the delete began, and no upsert begun since (acknowledged or
	// not): the document was gone for the whole search.
	if s.delAck != 0 && s.delAck < began && s.delClean && s.upStart < s.delStart {
		return "deleted", fmt.Sprintf("deleted at clock %d (begun %d), search began at %d, last upsert began at %d", s.delAck, s.delStart, began, s.upStart)
	}
	if ver > s.upStart {
		return "version", fmt.Sprintf("version %d was never written (last upsert began at %d)", ver, s.upStart)
	}
	// Hits are read from storage, so a hit is at least at the last
	// version acknowledged before the search began; the ring knows it
	// unless every version it holds came after.
	var floor uint64
	known := s.nacks <= len(s.acks)
	for _, a := range s.acks[:min(s.nacks, len(s.acks))] {
		if a.clock < began {
			floor, known = max(floor, a.ver), true
		}
	}
	if known && ver < floor {
		return "stale", fmt.Sprintf("version %d, but %d was acknowledged before the search began", ver, floor)
	}
	return "", ""
}

// finalState is what storage must hold for an id once the load has
// stopped.
type finalState int

const (
	finalGone   finalState = iota
	finalLive              // at the last acknowledged version
	finalEither            // the last upsert and delete overlapped: either committed last
)

// final is id's state once the load has stopped, and its last
// acknowledged version.
func (l *ledger) final(id int) (want finalState, ver uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.mu.ids[id]
	if s.nacks == 0 {
		return finalGone, 0
	}
	last := s.acks[(s.nacks-1)%len(s.acks)]
	switch {
	case s.delAck == 0 || s.upStart > s.delAck:
		return finalLive, last.ver
	case s.delStart > last.clock:
		return finalGone, last.ver
	}
	return finalEither, last.ver
}
