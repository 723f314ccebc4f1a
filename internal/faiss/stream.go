//go:build cgo

package faiss

/*
#include <stdint.h>
#include <stdlib.h>
#include <faiss/c_api/tandem_ex_c.h>
#include <faiss/c_api/Index_c.h>
#include <faiss/c_api/error_c.h>

size_t tandemFaissStreamRead(uintptr_t handle, void* ptr, size_t n);
size_t tandemFaissStreamWrite(uintptr_t handle, void* ptr, size_t n);
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"runtime/cgo"
	"unsafe"

	gofaiss "github.com/blevesearch/go-faiss"
)

// Snapshots stream: WriteTo hands FAISS's serialisation to an io.Writer a
// piece at a time (one list's codes, for an IVF index), and Read builds an
// index from an io.Reader the same way. Neither holds the serialisation
// in memory, where Marshal and Unmarshal hold it twice (FAISS's buffer and
// its copy): at ten million 384-d vectors, 3.9 GB each.

// stream is the state a cgo.Handle gives the callbacks: the caller's
// reader or writer, the bytes moved, and the first error.
type stream struct {
	r   io.Reader
	w   io.Writer
	n   int64
	err error
}

//export tandemFaissStreamRead
func tandemFaissStreamRead(handle C.uintptr_t, ptr unsafe.Pointer, n C.size_t) C.size_t {
	s := cgo.Handle(handle).Value().(*stream)
	if s.err != nil {
		return 0
	}
	got, err := io.ReadFull(s.r, unsafe.Slice((*byte)(ptr), int(n)))
	s.n += int64(got)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF // FAISS asked for more than there is
		}
		s.err = err
	}
	return C.size_t(got)
}

//export tandemFaissStreamWrite
func tandemFaissStreamWrite(handle C.uintptr_t, ptr unsafe.Pointer, n C.size_t) C.size_t {
	s := cgo.Handle(handle).Value().(*stream)
	if s.err != nil {
		return 0
	}
	put, err := s.w.Write(unsafe.Slice((*byte)(ptr), int(n)))
	s.n += int64(put)
	if err == nil && put < int(n) {
		err = io.ErrShortWrite
	}
	if err != nil {
		s.err = err
	}
	return C.size_t(put)
}

// WriteTo writes the index to w in FAISS's own format, the bytes Marshal
// returns, and returns how many it wrote. Searches may run meanwhile;
// writers wait.
func (x *Index) WriteTo(w io.Writer) (int64, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.mu.closed {
		return 0, ErrClosed
	}
	ci := cIndex(x.mu.idx)
	if ci == nil {
		return 0, errors.New("faiss: serialise: not a FAISS index this package can reach")
	}
	s := &stream{w: w}
	h := cgo.NewHandle(s)
	defer h.Delete()
	if C.faiss_write_index_stream(ci, C.tandem_io_fn(C.tandemFaissStreamWrite), C.uintptr_t(h)) != 0 {
		if s.err != nil {
			return s.n, fmt.Errorf("faiss: serialise %s: %w", x.desc, s.err)
		}
		return s.n, fmt.Errorf("faiss: serialise %s: %s", x.desc, lastError())
	}
	return s.n, nil
}

// Read builds an index from r, which holds what WriteTo or Marshal wrote,
// and returns it with the number of bytes it read: exactly the index's,
// so that whatever follows in r is left. FAISS trusts the sizes it
// reads, so r must hold bytes that a checksum has vouched for.
// description and metric are as for Unmarshal.
func Read(r io.Reader, description string, metric Metric) (*Index, int64, error) {
	s := &stream{r: r}
	h := cgo.NewHandle(s)
	defer h.Delete()
	var ci *C.FaissIndex
	if C.faiss_read_index_stream(C.tandem_io_fn(C.tandemFaissStreamRead), C.uintptr_t(h), 0, &ci) != 0 {
		if s.err != nil {
			return nil, s.n, fmt.Errorf("faiss: load after %d bytes: %w", s.n, s.err)
		}
		return nil, s.n, fmt.Errorf("faiss: load after %d bytes: %s", s.n, lastError())
	}
	idx, err := adopt(ci)
	if err != nil {
		C.faiss_Index_free(ci)
		return nil, s.n, fmt.Errorf("faiss: load: %w", err)
	}
	if got := idx.MetricType(); got != metric.faiss() {
		idx.Close()
		return nil, s.n, fmt.Errorf("faiss: load: snapshot metric %d, want %s", got, metric)
	}
	return wrap(idx, description, metric), s.n, nil
}

// adopt wraps a FaissIndex* in go-faiss's type, which has no constructor
// from one: it makes a one-dimensional flat index and puts ci in place of
// its native index (the field cIndex reads), freeing the placeholder's.
func adopt(ci *C.FaissIndex) (*gofaiss.IndexImpl, error) {
	idx, err := gofaiss.IndexFactory(1, "Flat", gofaiss.MetricInnerProduct)
	if err != nil {
		return nil, err
	}
	old := cIndex(idx)
	if old == nil {
		idx.Close()
		return nil, errors.New("go-faiss's index layout is not the one this package knows")
	}
	f := reflect.ValueOf(idx.Index).Elem().Field(0)
	*(**C.FaissIndex)(unsafe.Pointer(f.UnsafeAddr())) = ci
	C.faiss_Index_free(old)
	return idx, nil
}
