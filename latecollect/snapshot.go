package latecollect

import (
	"context"
	"fmt"
)

// Snapshot saves the token index, so that the next Open loads it and only
// applies the changes after AppliedSeq instead of rebuilding.
func (x *Index) Snapshot(ctx context.Context) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.mu.closed {
		return ErrClosed
	}
	if err := x.saveSnapshotLocked(ctx); err != nil {
		return fmt.Errorf("latecollect: %w", err)
	}
	x.mu.snapErr = nil
	return nil
}

// saveSnapshotLocked saves the family's snapshot as of AppliedSeq.
func (x *Index) saveSnapshotLocked(ctx context.Context) error {
	if err := x.mu.fam.save(ctx, x.mu.applied); err != nil {
		return fmt.Errorf("snapshot %s: %w", x.snapshotName(), err)
	}
	x.mu.sinceSnap, x.mu.unsaved, x.mu.savedSeq = 0, false, x.mu.applied
	return nil
}
