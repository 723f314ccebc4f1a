package cluster

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tandemsearch/tandem"
	"github.com/tandemsearch/tandem/engine"
)

// A shard's log entries are write batches: documents to put, with the
// blobs the accepting node computed (engine.Prepared), and ids to delete,
// applied in one atomic storage batch on every replica.
//
// Encoding, version 1: the version byte; a uint32 count of puts, each a
// uint32-prefixed JSON document and a uint32 count of blobs, each a
// uint16-prefixed name and a uint32-prefixed value; a uint32 count of
// deletes, each a uint16-prefixed id. Integers are big-endian. Blobs are
// raw bytes, so vectors cost what they weigh.
const entryVersion = 1

type entry struct {
	Puts    []engine.Prepared
	Deletes []string
}

func (e *entry) encode() ([]byte, error) {
	size := 1 + 4 + 4
	for _, p := range e.Puts {
		size += 4 + 4 + 256
		for n, v := range p.Blobs {
			size += 2 + len(n) + 4 + len(v)
		}
	}
	b := make([]byte, 0, size)
	b = append(b, entryVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Puts)))
	for _, p := range e.Puts {
		d := p.Doc
		d.Vectors = nil
		js, err := json.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("cluster: encode document %q: %w", d.ID, err)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(js)))
		b = append(b, js...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(p.Blobs)))
		for n, v := range p.Blobs {
			if len(n) > 0xffff {
				return nil, fmt.Errorf("cluster: blob name of %d bytes", len(n))
			}
			b = binary.BigEndian.AppendUint16(b, uint16(len(n)))
			b = append(b, n...)
			b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
			b = append(b, v...)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Deletes)))
	for _, id := range e.Deletes {
		if len(id) > 0xffff {
			return nil, fmt.Errorf("cluster: id of %d bytes", len(id))
		}
		b = binary.BigEndian.AppendUint16(b, uint16(len(id)))
		b = append(b, id...)
	}
	return b, nil
}

var errBadEntry = errors.New("cluster: damaged log entry")

// reader reads an entry's fields, failing once past the end.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n uint64) []byte {
	if r.err != nil || uint64(len(r.b)) < n {
		r.err = errBadEntry
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u16() uint64 {
	if v := r.take(2); v != nil {
		return uint64(binary.BigEndian.Uint16(v))
	}
	return 0
}

func (r *reader) u32() uint64 {
	if v := r.take(4); v != nil {
		return uint64(binary.BigEndian.Uint32(v))
	}
	return 0
}

func decodeEntry(b []byte) (*entry, error) {
	if len(b) == 0 || b[0] != entryVersion {
		return nil, fmt.Errorf("%w: unknown version", errBadEntry)
	}
	r := &reader{b: b[1:]}
	e := &entry{}
	n := r.u32()
	if n > uint64(len(r.b)) {
		return nil, errBadEntry
	}
	e.Puts = make([]engine.Prepared, 0, n)
	for range n {
		var d tandem.Doc
		js := r.take(r.u32())
		if r.err != nil {
			return nil, r.err
		}
		if err := json.Unmarshal(js, &d); err != nil {
			return nil, fmt.Errorf("%w: document: %v", errBadEntry, err)
		}
		p := engine.Prepared{Doc: d}
		nb := r.u32()
		if nb > uint64(len(r.b)) {
			return nil, errBadEntry
		}
		if nb > 0 {
			p.Blobs = make(map[string][]byte, nb)
		}
		for range nb {
			name := string(r.take(r.u16()))
			p.Blobs[name] = r.take(r.u32())
		}
		e.Puts = append(e.Puts, p)
	}
	nd := r.u32()
	if nd > uint64(len(r.b)) {
		return nil, errBadEntry
	}
	for range nd {
		e.Deletes = append(e.Deletes, string(r.take(r.u16())))
	}
	if r.err != nil {
		return nil, r.err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the end", errBadEntry, len(r.b))
	}
	return e, nil
}
