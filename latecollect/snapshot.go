package latecollect

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
)

// snapshotName is the storage name of the model's snapshot (storage
// refuses slashes in snapshot names).
func (x *Index) snapshotName() string { return "late-" + x.opts.Model }

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

func (x *Index) saveSnapshotLocked(ctx context.Context) error {
	if x.residual {
		if err := x.saveResidualSnapshotLocked(ctx); err != nil {
			return fmt.Errorf("snapshot %s: %w", x.snapshotName(), err)
		}
		x.mu.sinceSnap = 0
		return nil
	}
	buf, err := x.mu.fx.Marshal()
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", x.snapshotName(), err)
	}
	err = x.st.SaveSnapshot(ctx, x.snapshotName(), x.mu.applied, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		le := binary.LittleEndian
		var b []byte
		b = append(b, snapshotMagic...)
		b = le.AppendUint32(b, snapshotVersion)
		b = le.AppendUint32(b, uint32(x.opts.Dim))
		for _, s := range []string{x.opts.Description, x.mu.desc} {
			b = le.AppendUint16(b, uint16(len(s)))
			b = append(b, s...)
		}
		b = le.AppendUint64(b, uint64(len(x.mu.keys)))
		if _, err := bw.Write(b); err != nil {
			return err
		}
		nums := make([]uint64, 0, len(x.mu.keys))
		for num := range x.mu.keys {
			nums = append(nums, num)
		}
		slices.Sort(nums)
		var rec [12]byte
		for _, num := range nums {
			le.PutUint64(rec[:], num)
			le.PutUint32(rec[8:], uint32(x.mu.keys[num]))
			if _, err := bw.Write(rec[:]); err != nil {
				return err
			}
		}
		if _, err := bw.Write(le.AppendUint64(nil, uint64(len(buf)))); err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", x.snapshotName(), err)
	}
	x.mu.sinceSnap = 0
	return nil
}
