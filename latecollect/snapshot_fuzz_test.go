package latecollect

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
	"github.com/tandemsearch/tandem/storage"
)

// FuzzLoadSnapshot stores fuzzed bytes as the late-interaction snapshot
// of a small collection (through storage, so its checksum is right: the
// bytes are what a faulty writer or another version would leave) and
// opens the index, FAISS (even kind) or residual codes (odd kind). Open
// never fails or panics on such a snapshot: it loads it, or ignores it and
// rebuilds from the stored blobs, with every document. The seeds are the
// snapshots this code writes, and each of them loads and searches like
// the index that saved it (the round trip).
func FuzzLoadSnapshot(f *testing.F) {
	ctx := context.Background()
	st, err := storage.Open(f.TempDir(), &storage.Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	c := newSynth(30, 8, 41)
	c.write(f, st, F16)
	descs := []string{"", "Residual"}
	optsOf := func(kind uint8) *Options {
		return &Options{Model: testModel, Dim: 8, Description: descs[kind%2], SnapshotEvery: -1}
	}
	q := randomUnit(rand.New(rand.NewPCG(1, 1)), 3, 8)
	search := func(tb testing.TB, x *Index) []Hit {
		hits, err := x.Search(ctx, q, &SearchOptions{K: 10})
		if err != nil {
			tb.Fatal(err)
		}
		return hits
	}
	var want [2][]Hit
	written := map[string]bool{} // kind byte + the snapshot's bytes
	// With a valid checksum, damage reaches FAISS's reader, which trusts
	// its input and can crash on a forged header (SIGSEGV, found in CI):
	// only the FAISS bytes of the snapshots this code wrote, recorded as
	// they load below, are handed to it.
	real := readIndex
	faissWritten := map[string]bool{}
	recording := true
	readIndex = func(r io.Reader, desc string, m faiss.Metric) (*faiss.Index, int64, error) {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, 0, err
		}
		if recording {
			faissWritten[string(b)] = true
		} else if !faissWritten[string(b)] {
			return nil, 0, errors.New("index bytes not written by this code")
		}
		return real(bytes.NewReader(b), desc, m)
	}
	f.Cleanup(func() { readIndex = real })
	for kind := range uint8(2) {
		x, err := Open(ctx, st, optsOf(kind))
		if err != nil {
			f.Fatal(err)
		}
		want[kind] = search(f, x)
		if err := x.Snapshot(ctx); err != nil {
			f.Fatal(err)
		}
		x.Close()
		// Load what was saved, which records its FAISS bytes.
		y, err := Open(ctx, st, optsOf(kind))
		if err != nil {
			f.Fatal(err)
		}
		if !y.LoadedSnapshot() {
			f.Fatal("the snapshot just written was not loaded")
		}
		y.Close()
		rc, _, err := st.OpenSnapshot(x.snapshotName())
		if err != nil {
			f.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(kind, b)
		written[string([]byte{kind})+string(b)] = true
		if len(b) > 40 {
			f.Add(kind, b[:40])
		}
		if kind == 0 {
			// The FAISS index's length field, set to 2^39.
			off := 12
			for range 2 {
				off += 2 + int(binary.LittleEndian.Uint16(b[off:]))
			}
			off += 8 + 12*int(binary.LittleEndian.Uint64(b[off:]))
			huge := slices.Clone(b)
			binary.LittleEndian.PutUint64(huge[off:], 1<<39)
			f.Add(kind, huge)
		}
	}
	recording = false
	f.Fuzz(func(t *testing.T, kind uint8, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		kind %= 2
		name := "late-" + testModel
		if err := st.SaveSnapshot(ctx, name, st.LastSeq(), func(w io.Writer) error {
			_, err := w.Write(data)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		x, err := Open(ctx, st, optsOf(kind))
		if err != nil {
			t.Fatalf("open with a damaged snapshot: %v", err)
		}
		defer x.Close()
		s, err := x.Stats()
		if err != nil || s.Docs != len(c.vecs) {
			t.Fatalf("index holds %d documents (%v), the store %d", s.Docs, err, len(c.vecs))
		}
		if written[string([]byte{kind})+string(data)] {
			if !x.LoadedSnapshot() {
				t.Fatal("a snapshot this code wrote was not loaded")
			}
			got := search(t, x)
			if !slices.EqualFunc(got, want[kind], func(a, b Hit) bool { return a.DocNum == b.DocNum && a.Score == b.Score }) {
				t.Fatalf("loaded snapshot searches %v, the index that saved it %v", got, want[kind])
			}
		}
	})
}
