package engine

import (
	"context"
	"math"
	"sync"
	"sync/atomic"

	"github.com/tandemsearch/tandem/storage"
)

// DefaultTruncateEvery is Options.TruncateEvery's default: the log is
// truncated once the floor can move by this many sequences, so that a
// truncation deletes at least this many entries.
const DefaultTruncateEvery = 4096

// The change log is kept from the lowest sequence every derived index has
// saved: what a derived index reopens to after a crash (its SavedSeq)
// plus the log after it always rebuilds its current state, and the log
// below the lowest of them is never read again. A derived index without
// SavedSeq counts its AppliedSeq, which the DerivedIndex contract makes
// durable. An index that must rebuild from scratch (its files missing or
// damaged) scans the documents instead (rebuilder, catchUp); dense and
// late interaction rebuild from the stored vectors and tokens themselves.

// savedSeqer is a derived index whose durable state may lag what it has
// applied: BM25 (Bleve persists batches in the background) and the
// models' indexes (saved by snapshots).
type savedSeqer interface{ SavedSeq() uint64 }

// rebuilder is a derived index that can rebuild itself from the stored
// documents, without the change log.
type rebuilder interface {
	Rebuild(ctx context.Context, st *storage.Store) error
}

func savedSeq(d DerivedIndex) uint64 {
	s := d.AppliedSeq()
	if x, ok := d.(savedSeqer); ok {
		s = min(s, x.SavedSeq())
	}
	return s
}

// truncator runs the engine's background truncations.
type truncator struct {
	kick   chan struct{}
	cancel context.CancelFunc
	done   sync.WaitGroup
	count  atomic.Int64 // truncations that deleted entries
}

// logFloor returns the lowest SavedSeq among the derived indexes, the
// sequence through which the log may be deleted, and the index holding
// it.
func (e *Engine) logFloor() (uint64, string) {
	floor, held := uint64(math.MaxUint64), ""
	for _, d := range e.derivedList() {
		if s := savedSeq(d.DerivedIndex); s < floor {
			floor, held = s, d.Name()
		}
	}
	if held == "" {
		return 0, ""
	}
	return floor, held
}

// truncateLog deletes the log through the current floor.
func (e *Engine) truncateLog(ctx context.Context) error {
	floor, _ := e.logFloor()
	if floor <= e.st.LogStats().Floor {
		return nil
	}
	n, err := e.st.TruncateLog(ctx, floor)
	if n > 0 {
		e.trunc.count.Add(1)
	}
	return err
}

// startTruncator starts the goroutine that truncates when kicked
// (maybeTruncate); stopTruncator stops it and waits.
func (e *Engine) startTruncator() {
	if e.opts.TruncateEvery < 0 {
		return
	}
	if e.opts.TruncateEvery == 0 {
		e.opts.TruncateEvery = DefaultTruncateEvery
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.trunc.kick, e.trunc.cancel = make(chan struct{}, 1), cancel
	e.trunc.done.Add(1)
	go func() {
		defer e.trunc.done.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-e.trunc.kick:
			}
			// Reading the floor takes each derived index's lock, which
			// an index holds while it applies (a dense retraining, for
			// minutes): here, not on the writer's path. A failure (a full
			// disk, say) leaves the log longer until the next kick;
			// nothing is lost.
			if floor, _ := e.logFloor(); floor >= e.st.LogStats().Floor+uint64(e.opts.TruncateEvery) {
				_ = e.truncateLog(ctx)
			}
		}
	}()
}

func (e *Engine) stopTruncator() {
	if e.trunc.cancel != nil {
		e.trunc.cancel()
		e.trunc.done.Wait()
	}
}

// maybeTruncate kicks the truncator, which truncates when the floor can
// move by TruncateEvery sequences or more. It never waits, and reads no
// derived index: the writer and the ingest's commit loop call it after
// each batch.
func (e *Engine) maybeTruncate() {
	if e.trunc.kick == nil {
		return
	}
	select {
	case e.trunc.kick <- struct{}{}:
	default:
	}
}
