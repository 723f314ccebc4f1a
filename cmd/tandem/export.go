package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/tandemsearch/tandem/dense"
	"github.com/tandemsearch/tandem/engine"
)

// runExport writes, for each dense model of a collection, the vectors
// Tandem stored, so that another engine can search the same numbers:
// OUT/<model>.npy (float32, documents × dimension, in document-number
// order) and OUT/<model>.ids (their external ids, one per line, in the
// same order).
func runExport(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("export", stderr)
	dir := fs.String("dir", "", "collection directory")
	out := fs.String("out", "", "directory to write <model>.npy and <model>.ids into (created if absent)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *dir == "" || *out == "" {
		fmt.Fprintln(stderr, "usage: tandem export --dir DIR --out OUTDIR")
		return errUsage
	}
	e, err := engine.Open(*dir, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	n := 0
	for _, m := range e.Models() {
		if !m.Dense {
			continue
		}
		base := filepath.Join(*out, filepath.Base(m.Name))
		count, err := exportDense(context.Background(), e, m.Name, m.Dim, base)
		if err != nil {
			return fmt.Errorf("export %s: %w", m.Name, err)
		}
		fmt.Fprintf(stdout, "%s: %d vectors of %d dimensions: %s.npy, %s.ids\n", m.Name, count, m.Dim, base, base)
		n++
	}
	if n == 0 {
		return errors.New("export: the collection has no dense model")
	}
	return nil
}

// npyHeader is the size of the .npy header exportDense writes: the
// version 1.0 preamble and a dictionary padded with spaces to a 64-byte
// multiple, as the format asks, with room for any shape.
const npyHeader = 128

func exportDense(ctx context.Context, e *engine.Engine, model string, dim int, base string) (int, error) {
	vf, err := os.Create(base + ".npy")
	if err != nil {
		return 0, err
	}
	defer vf.Close()
	idf, err := os.Create(base + ".ids")
	if err != nil {
		return 0, err
	}
	defer idf.Close()
	if _, err := vf.Write(make([]byte, npyHeader)); err != nil {
		return 0, err
	}
	vw, iw := bufio.NewWriter(vf), bufio.NewWriter(idf)
	st := e.Store()
	count := 0
	buf := make([]byte, 4*dim)
	err = st.ScanBlobs(ctx, dense.BlobName(model), func(num uint64, value []byte) error {
		v, err := dense.DecodeVector(value, dim)
		if err != nil {
			return fmt.Errorf("document %d: %w", num, err)
		}
		ids, err := st.IDs([]uint64{num})
		if err != nil {
			return err
		}
		id, ok := ids[num]
		if !ok {
			return nil // deleted since the scan began
		}
		for i, f := range v {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(f))
		}
		if _, err := vw.Write(buf); err != nil {
			return err
		}
		if _, err := fmt.Fprintln(iw, id); err != nil {
			return err
		}
		count++
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := vw.Flush(); err != nil {
		return 0, err
	}
	if err := iw.Flush(); err != nil {
		return 0, err
	}
	h := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", count, dim)
	pre := []byte("\x93NUMPY\x01\x00")
	pad := npyHeader - len(pre) - 2 - len(h) - 1
	if pad < 0 {
		return 0, fmt.Errorf("npy header of %d bytes does not fit", len(h))
	}
	hdr := append(pre, byte(npyHeader-len(pre)-2), 0)
	hdr = append(hdr, h...)
	for range pad {
		hdr = append(hdr, ' ')
	}
	hdr = append(hdr, '\n')
	if _, err := vf.WriteAt(hdr, 0); err != nil {
		return 0, err
	}
	if err := idf.Close(); err != nil {
		return 0, err
	}
	return count, vf.Close()
}
