package export

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// HeaderSize is the size of the .npy headers export writes: the version
// 1.0 preamble and a dictionary padded with spaces to a 64-byte multiple,
// as the format asks, with room for any shape.
const HeaderSize = 128

// npyFile writes a .npy array row by row; its header, written last, gives
// the number of rows then known.
type npyFile struct {
	f     *os.File
	w     *bufio.Writer
	descr string // "<f4" or "<i8"
	cols  int    // 0 for a one-dimensional array
	rows  int
}

func createNpy(path, descr string, cols int) (*npyFile, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(make([]byte, HeaderSize)); err != nil {
		f.Close()
		return nil, err
	}
	return &npyFile{f: f, w: bufio.NewWriter(f), descr: descr, cols: cols}, nil
}

func (n *npyFile) float32s(v []float32) error {
	var b [4]byte
	for _, x := range v {
		binary.LittleEndian.PutUint32(b[:], math.Float32bits(x))
		if _, err := n.w.Write(b[:]); err != nil {
			return err
		}
	}
	n.rows += len(v) / max(1, n.cols)
	return nil
}

func (n *npyFile) int64(v int64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	_, err := n.w.Write(b[:])
	n.rows++
	return err
}

// close writes the header and closes the file.
func (n *npyFile) close() error {
	err := n.w.Flush()
	if err == nil {
		err = n.writeHeader()
	}
	if cerr := n.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (n *npyFile) writeHeader() error {
	shape := fmt.Sprintf("(%d, %d)", n.rows, n.cols)
	if n.cols == 0 {
		shape = fmt.Sprintf("(%d,)", n.rows)
	}
	h := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", n.descr, shape)
	pre := []byte("\x93NUMPY\x01\x00")
	pad := HeaderSize - len(pre) - 2 - len(h) - 1
	if pad < 0 {
		return fmt.Errorf("npy header of %d bytes does not fit", len(h))
	}
	hdr := append(pre, byte(HeaderSize-len(pre)-2), 0)
	hdr = append(hdr, h...)
	for range pad {
		hdr = append(hdr, ' ')
	}
	hdr = append(hdr, '\n')
	_, err := n.f.WriteAt(hdr, 0)
	return err
}

func writeLine(w *bufio.Writer, s string) error {
	_, err := fmt.Fprintln(w, s)
	return err
}

// Dense writes model's stored dense vectors, each of dim values, to
// base.npy and their ids to base.ids, and returns the number of rows.
func Dense(ctx context.Context, e *engine.Engine, model string, dim int, base string) (int, error) {
	vecs, err := createNpy(base+".npy", "<f4", dim)
	if err != nil {
		return 0, err
	}
	defer vecs.f.Close()
	idf, err := os.Create(base + ".ids")
	if err != nil {
		return 0, err
	}
	defer idf.Close()
	iw := bufio.NewWriter(idf)
	err = e.Shard().ScanVectors(ctx, model, "dense", func(id string, v tandem.Vectors) error {
		if len(v.Dense) != dim {
			return fmt.Errorf("a vector of %d dimensions, the model has %d", len(v.Dense), dim)
		}
		if err := vecs.float32s(v.Dense); err != nil {
			return err
		}
		return writeLine(iw, id)
	})
	if err != nil {
		return 0, err
	}
	if err := iw.Flush(); err != nil {
		return 0, err
	}
	if err := idf.Close(); err != nil {
		return 0, err
	}
	return vecs.rows, vecs.close()
}

// Tokens writes model's stored token matrices, each row of dim values, to
// base.tokens.npy, the documents' first rows to base.offsets.npy and their
// ids to base.tokens.ids, and returns the numbers of documents and of
// token rows.
func Tokens(ctx context.Context, e *engine.Engine, model string, dim int, base string) (docs, tokens int, err error) {
	toks, err := createNpy(base+".tokens.npy", "<f4", dim)
	if err != nil {
		return 0, 0, err
	}
	defer toks.f.Close()
	offs, err := createNpy(base+".offsets.npy", "<i8", 0)
	if err != nil {
		return 0, 0, err
	}
	defer offs.f.Close()
	idf, err := os.Create(base + ".tokens.ids")
	if err != nil {
		return 0, 0, err
	}
	defer idf.Close()
	iw := bufio.NewWriter(idf)
	if err := offs.int64(0); err != nil {
		return 0, 0, err
	}
	err = e.Shard().ScanVectors(ctx, model, "late", func(id string, v tandem.Vectors) error {
		for _, row := range v.Tokens {
			if len(row) != dim {
				return fmt.Errorf("tokens of %d dimensions, the model has %d", len(row), dim)
			}
			if err := toks.float32s(row); err != nil {
				return err
			}
		}
		if err := offs.int64(int64(toks.rows)); err != nil {
			return err
		}
		return writeLine(iw, id)
	})
	if err != nil {
		return 0, 0, err
	}
	if err := iw.Flush(); err != nil {
		return 0, 0, err
	}
	if err := idf.Close(); err != nil {
		return 0, 0, err
	}
	docs, tokens = offs.rows-1, toks.rows
	if err := toks.close(); err != nil {
		return 0, 0, err
	}
	return docs, tokens, offs.close()
}
