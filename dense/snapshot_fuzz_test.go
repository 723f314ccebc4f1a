package dense

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"slices"
	"testing"

	"github.com/tandemsearch/tandem/internal/faiss"
)

// FuzzDecodeSnapshot decodes fuzzed dense snapshot files, with their
// CRC-32C recomputed when fixCRC is set so that damage reaches past the
// checksum to the header, the docnum bitmap and FAISS. Decoding never
// panics, an error marks the snapshot unusable (errStale: Open rebuilds),
// and a snapshot that decodes holds one vector per docnum of the index's
// dimension. The seed is a snapshot this code wrote, which decodes to the
// index that saved it (the round trip).
func FuzzDecodeSnapshot(f *testing.F) {
	ctx := context.Background()
	st := openStore(f, f.TempDir())
	nums := putVectors(f, st, 0, newSynth(8, 4, 3).many(40))
	x, err := Open(ctx, st, &Options{Model: testModel, Dim: 8})
	if err != nil {
		f.Fatal(err)
	}
	if err := x.Snapshot(ctx); err != nil {
		f.Fatal(err)
	}
	x.Close()
	rc, _, err := st.OpenSnapshot(SnapshotName(testModel))
	if err != nil {
		f.Fatal(err)
	}
	seed, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, false)
	f.Add(seed[:len(seed)/2], true)
	f.Add(seed[:60], true)
	dec := &Index{opts: Options{Model: testModel, Dim: 8}}
	// With a recomputed CRC, damage reaches FAISS's reader, which trusts
	// its input and can crash on a forged header: only the index bytes
	// this code wrote (any suffix of the seed's) are handed to it.
	real := readIndex
	readIndex = func(r io.Reader, desc string, m faiss.Metric) (*faiss.Index, int64, error) {
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, 0, err
		}
		if !bytes.HasSuffix(seed[:len(seed)-4], b) {
			return nil, 0, errors.New("index bytes not written by this code")
		}
		return real(bytes.NewReader(b), desc, m)
	}
	f.Cleanup(func() { readIndex = real })
	f.Fuzz(func(t *testing.T, data []byte, fixCRC bool) {
		if fixCRC && len(data) >= len(snapshotMagic)+4 {
			data = slices.Clone(data)
			body := data[:len(data)-4]
			binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(body, crcTable))
		}
		s, err := dec.decodeSnapshot(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			if !errors.Is(err, errStale) {
				t.Fatalf("error %v does not mark the snapshot unusable", err)
			}
			return
		}
		defer s.fx.Close()
		if s.fx.D() != 8 || uint64(s.fx.Len()) != s.ids.GetCardinality() {
			t.Fatalf("decoded %d vectors of dim %d for %d docnums", s.fx.Len(), s.fx.D(), s.ids.GetCardinality())
		}
		if string(data) == string(seed) {
			if got := s.ids.ToArray(); !slices.Equal(got, nums) {
				t.Fatalf("the written snapshot decodes to docnums %v, want %v", got, nums)
			}
		}
	})
}
