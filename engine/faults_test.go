package engine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/internal/vfs"
)

// faultCollection is a collection of supplied-vector documents under test:
// its directory, options and the documents acknowledged so far.
type faultCollection struct {
	t     *testing.T
	dir   string
	opts  Options
	next  int
	acked map[string]tandem.Doc
}

func newFaultCollection(t *testing.T, lateIndex string, fsys vfs.FS) *faultCollection {
	return &faultCollection{t: t, dir: t.TempDir(), acked: map[string]tandem.Doc{},
		opts: Options{Schema: faultSchema(lateIndex), BatchSize: 20, NoSync: true, fs: fsys}}
}

func (c *faultCollection) open() *Engine {
	c.t.Helper()
	e, err := Open(c.dir, &c.opts)
	if err != nil {
		c.t.Fatalf("open: %v", err)
	}
	return e
}

// write upserts n new documents and replaces the first upd acknowledged
// ones, recording what was committed; it returns Index's error.
func (c *faultCollection) write(e *Engine, n, upd int) error {
	c.t.Helper()
	var docs []tandem.Doc
	for i := range upd {
		d := faultDoc(1_000_000+c.next+i, 12)
		d.ID = faultDoc(i, 0).ID
		d.Fields["key"] = d.ID
		d.Fields["title"] = "doc " + d.ID
		docs = append(docs, d)
	}
	for range n {
		docs = append(docs, faultDoc(c.next, 12))
		c.next++
	}
	res, err := e.Index(context.Background(), docs)
	for _, d := range docs[:res.Put] {
		c.acked[d.ID] = d
	}
	return err
}

// lateLoaded reports whether e's late index came from its snapshot and
// whether its dense index did.
func snapshotsLoaded(e *Engine) (denseLoaded, lateLoaded bool) {
	m := e.models[0]
	return m.dense.Stats().SnapshotSeq != 0, m.late.LoadedSnapshot()
}

// TestSnapshotWriteFaults injects an I/O fault into each step of saving the
// dense and late-interaction snapshots at Close: a failed create, a write
// failing at its first byte and in its middle (EIO and ENOSPC), a failed
// fsync of the file and of its directory, and a torn write that reports
// success but leaves a short file. A failing step must surface as Close's
// error naming the snapshot, and leave the previous snapshot in use; the
// torn file must be detected on the next Open. Either way the collection
// reopens with every acknowledged document in every index, and a clean
// Close then saves snapshots that the next Open loads.
func TestSnapshotWriteFaults(t *testing.T) {
	type fault struct {
		name    string
		rule    vfs.Rule
		failing bool // Close must fail
	}
	var faults []fault
	for _, which := range []string{"dense-", "late-"} {
		m := "snapshots/" + which
		faults = append(faults,
			fault{"create " + which, vfs.Rule{Op: vfs.OpCreate, Match: m}, true},
			fault{"write at 0 " + which, vfs.Rule{Op: vfs.OpWrite, Match: m, At: 0}, true},
			fault{"ENOSPC at 1000 " + which, vfs.Rule{Op: vfs.OpWrite, Match: m, At: 1000, Err: syscall.ENOSPC}, true},
			fault{"fsync " + which, vfs.Rule{Op: vfs.OpSync, Match: m}, true},
			fault{"torn at 1000 " + which, vfs.Rule{Op: vfs.OpWrite, Match: m, At: 1000, Torn: true}, false},
		)
	}
	faults = append(faults, fault{"directory fsync", vfs.Rule{Op: vfs.OpSyncDir, Match: "snapshots"}, true})
	for _, late := range []string{"", "Residual"} {
		for _, f := range faults {
			t.Run("late="+late+"/"+f.name, func(t *testing.T) {
				fsys := &vfs.Faulty{}
				c := newFaultCollection(t, late, fsys)
				e := c.open()
				if err := c.write(e, 60, 0); err != nil {
					t.Fatal(err)
				}
				if err := e.Close(); err != nil { // the previous snapshots
					t.Fatal(err)
				}
				e = c.open()
				if err := c.write(e, 30, 10); err != nil {
					t.Fatal(err)
				}
				fsys.Inject(f.rule)
				err := e.Close()
				fsys.Clear()
				if fsys.Hits() == 0 {
					t.Fatalf("fault %v never fired", f.rule)
				}
				if f.failing != (err != nil) {
					t.Fatalf("close with fault %v: %v", f.rule, err)
				}
				if err != nil && !strings.Contains(err.Error(), "snapshot") {
					t.Errorf("close error does not name the snapshot: %v", err)
				}
				if f.rule.Err != nil && err != nil && !errors.Is(err, f.rule.Err) {
					t.Errorf("close error does not wrap %v: %v", f.rule.Err, err)
				}
				e = c.open()
				denseLoaded, lateLoaded := snapshotsLoaded(e)
				hitDense := strings.Contains(f.rule.Match, "dense-") || f.rule.Op == vfs.OpSyncDir
				hitLate := strings.Contains(f.rule.Match, "late-") || f.rule.Op == vfs.OpSyncDir
				// A failed save keeps the previous snapshot, which loads;
				// a torn one is committed, then detected and rebuilt.
				if hitDense && denseLoaded == f.rule.Torn {
					t.Errorf("dense snapshot loaded = %v after %v", denseLoaded, f.rule)
				}
				if hitLate && lateLoaded == f.rule.Torn {
					t.Errorf("late snapshot loaded = %v after %v", lateLoaded, f.rule)
				}
				checkConsistent(t, e, c.acked)
				if err := c.write(e, 10, 5); err != nil {
					t.Fatal(err)
				}
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e = c.open()
				defer e.Close()
				if d, l := snapshotsLoaded(e); !d || !l {
					t.Errorf("after a clean close: dense snapshot loaded %v, late %v", d, l)
				}
				checkConsistent(t, e, c.acked)
			})
		}
	}
}

// TestSnapshotReadFaults reopens a cleanly closed collection while reads of
// a snapshot file fail or return a flipped byte: the snapshot is detected
// as unusable and the index rebuilt from Badger, with nothing lost.
func TestSnapshotReadFaults(t *testing.T) {
	for _, late := range []string{"", "Residual"} {
		for _, which := range []string{"dense-", "late-"} {
			for _, rule := range []vfs.Rule{
				{Op: vfs.OpRead, Match: "snapshots/" + which},
				{Op: vfs.OpRead, Match: "snapshots/" + which, At: 777, Flip: true},
			} {
				t.Run("late="+late+"/"+rule.String(), func(t *testing.T) {
					fsys := &vfs.Faulty{}
					c := newFaultCollection(t, late, fsys)
					e := c.open()
					if err := c.write(e, 60, 10); err != nil {
						t.Fatal(err)
					}
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
					fsys.Inject(rule)
					e = c.open()
					defer e.Close()
					fsys.Clear()
					if fsys.Hits() == 0 {
						t.Fatalf("fault %v never fired", rule)
					}
					d, l := snapshotsLoaded(e)
					if which == "dense-" && d || which == "late-" && l {
						t.Errorf("%s snapshot loaded despite %v", which, rule)
					}
					checkConsistent(t, e, c.acked)
				})
			}
		}
	}
}

// TestBlobReadFaults injects faults into the reads of the blob segments,
// where the residual index's exact stage reads the full-precision tokens:
// a flipped byte (each read is checked: the document it falls in is scored
// from its codes, counted, and searches go on, returning only acknowledged
// documents), then an I/O error (the search fails with it, naming the
// index). Once reads are sound again, everything is consistent.
func TestBlobReadFaults(t *testing.T) {
	fsys := &vfs.Faulty{}
	c := newFaultCollection(t, "Residual", fsys)
	e := c.open()
	defer e.Close()
	if err := c.write(e, 40, 0); err != nil {
		t.Fatal(err)
	}
	var q tandem.Doc
	for _, d := range c.acked {
		q = d
		break
	}
	search := func(mode string) ([]tandem.Hit, error) {
		res, err := e.Search(context.Background(), Request{K: len(c.acked), IDsOnly: true, Retrievers: []string{mode},
			Vectors: map[string]tandem.Vectors{faultModel: q.Vectors[faultModel]}})
		if err != nil {
			return nil, err
		}
		return res.Hits, nil
	}
	fsys.Inject(vfs.Rule{Op: vfs.OpRead, Match: ".blob", At: 100, Flip: true})
	for _, mode := range []string{"late", "late-exact"} {
		hits, err := search(mode)
		if err != nil {
			t.Fatalf("%s with a flipped byte: %v", mode, err)
		}
		for _, h := range hits {
			if _, ok := c.acked[h.ID]; !ok {
				t.Errorf("%s with a flipped byte: hit %s was never acknowledged", mode, h.ID)
			}
		}
		if len(hits) != len(c.acked) {
			t.Errorf("%s with a flipped byte: %d hits, want %d", mode, len(hits), len(c.acked))
		}
	}
	fsys.Clear()
	if fsys.Hits() == 0 {
		t.Fatal("no flipped byte was read")
	}
	s, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if l := s.Late[0]; l.ExactReadErrors != 2 || !strings.Contains(l.ExactReadError, "000001.blob") {
		t.Errorf("late stats %+v: want 2 unreadable documents (one per search), the error naming the segment", l)
	}

	fsys.Inject(vfs.Rule{Op: vfs.OpRead, Match: ".blob", Err: syscall.EIO})
	_, err = search("late")
	fsys.Clear()
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "late:"+faultModel) {
		t.Errorf("late with failing reads: %v, want EIO naming the index", err)
	}
	checkConsistent(t, e, c.acked)
}

// TestDamagedSnapshots closes a collection cleanly, damages its snapshot
// files on disk (truncated to half, one byte flipped in the middle,
// replaced by zeros, deleted) and reopens it: the damage is detected, the
// index rebuilt from Badger, nothing is lost, and the exact rankings are
// those from before the damage.
func TestDamagedSnapshots(t *testing.T) {
	damages := map[string]func(path string) error{
		"truncated": func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.Truncate(p, fi.Size()/2)
		},
		"flipped": func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0x40
			return os.WriteFile(p, b, 0o644)
		},
		"zeros": func(p string) error {
			fi, err := os.Stat(p)
			if err != nil {
				return err
			}
			return os.WriteFile(p, make([]byte, fi.Size()), 0o644)
		},
		"deleted": os.Remove,
	}
	for _, late := range []string{"", "Residual"} {
		for _, target := range []string{"snapshots/dense-", "snapshots/late-"} {
			for name, damage := range damages {
				t.Run("late="+late+"/"+target+"/"+name, func(t *testing.T) {
					c := newFaultCollection(t, late, nil)
					e := c.open()
					if err := c.write(e, 80, 0); err != nil {
						t.Fatal(err)
					}
					if err := c.write(e, 0, 20); err != nil {
						t.Fatal(err)
					}
					if _, err := e.Delete(context.Background(), []string{faultDoc(30, 0).ID, faultDoc(31, 0).ID}); err != nil {
						t.Fatal(err)
					}
					delete(c.acked, faultDoc(30, 0).ID)
					delete(c.acked, faultDoc(31, 0).ID)
					before := exactRankings(t, e, c.acked)
					if err := e.Close(); err != nil {
						t.Fatal(err)
					}
					paths, _ := filepath.Glob(filepath.Join(c.dir, target+"*"))
					if len(paths) != 1 {
						t.Fatalf("%d files match %s: %v", len(paths), target, paths)
					}
					if err := damage(paths[0]); err != nil {
						t.Fatal(err)
					}
					e = c.open()
					defer e.Close()
					d, l := snapshotsLoaded(e)
					switch target {
					case "snapshots/dense-":
						if d {
							t.Error("the damaged dense snapshot was loaded")
						}
					case "snapshots/late-":
						if l {
							t.Error("the damaged late snapshot was loaded")
						}
					}
					checkConsistent(t, e, c.acked)
					compareRankings(t, exactRankings(t, e, c.acked), before)
				})
			}
		}
	}
}

// exactRankings runs the searches whose results do not depend on how a
// vector index was built (exact dense and exhaustive late interaction),
// with a few documents' own vectors as queries. (BM25 is not compared:
// Bleve's statistics after upserts and deletes may move with its merges.)
func exactRankings(t *testing.T, e *Engine, docs map[string]tandem.Doc) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range []string{faultDoc(1, 0).ID, faultDoc(7, 0).ID, faultDoc(50, 0).ID} {
		q, ok := docs[id]
		if !ok {
			t.Fatalf("no document %s", id)
		}
		for _, mode := range []string{"dense", "late-exact"} {
			res, err := e.Search(context.Background(), Request{K: 10, Retrievers: []string{mode},
				Vectors: map[string]tandem.Vectors{faultModel: q.Vectors[faultModel]}, Filter: []byte(`{"exists":"key"}`)})
			if err != nil {
				t.Fatal(err)
			}
			var parts []string
			for _, h := range res.Hits {
				parts = append(parts, h.ID+":"+strconv.FormatFloat(h.Score, 'g', -1, 64))
			}
			out[mode+" "+id] = strings.Join(parts, " ")
		}
	}
	return out
}
