package latecollect

import (
	"encoding/binary"
	"maps"
	"math"
	"slices"
)

// v1Loc is a document's token-file location in a version-1 snapshot.
type v1Loc struct {
	off       int64
	size, crc uint32
}

// encodeSnapshotV1 writes f's residual codes as format version 1 did (the
// format before tokens were read from the store): a token-file id and
// size after the codebook, and each document's token-file location.
func encodeSnapshotV1(f *residualFamily, tfID, tfSize uint64, locOf func(num uint64) v1Loc) []byte {
	le := binary.LittleEndian
	var b []byte
	b = append(b, residualMagic...)
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, uint32(f.opts.Dim))
	b = le.AppendUint16(b, uint16(len(f.opts.Description)))
	b = append(b, f.opts.Description...)
	r := f.rc
	if r == nil {
		b = le.AppendUint32(b, 0)
		b = le.AppendUint64(b, 0)
		return append(b, residualEnd...)
	}
	cb := r.cb
	b = le.AppendUint32(b, uint32(cb.nlist))
	b = le.AppendUint32(b, math.Float32bits(cb.meanRes))
	trained := uint64(cb.trained)
	if cb.provisional {
		trained |= provisionalBit
	}
	b = le.AppendUint64(b, trained)
	for _, v := range [][]float32{cb.cent, cb.cutoff, cb.lo, cb.hi} {
		b = appendF32s(b, v)
	}
	b = le.AppendUint64(b, tfID)
	b = le.AppendUint64(b, tfSize)
	b = le.AppendUint64(b, uint64(len(r.docs)))
	for _, num := range slices.Sorted(maps.Keys(r.docs)) {
		d := r.docs[num]
		l := locOf(num)
		b = le.AppendUint64(b, num)
		cids, codes := r.tokensOf(num, d, nil, nil)
		b = le.AppendUint32(b, uint32(len(cids)))
		b = le.AppendUint32(b, math.Float32bits(d.normSum))
		b = le.AppendUint64(b, uint64(l.off))
		b = le.AppendUint32(b, l.size)
		b = le.AppendUint32(b, l.crc)
		for _, c := range cids {
			b = le.AppendUint16(b, c)
		}
		b = append(b, codes...)
	}
	return append(b, residualEnd...)
}

// encodeSnapshotV2 writes f's residual codes as format version 2 did: per
// document its stamp, centroid ids and codes, and no code lists.
func encodeSnapshotV2(f *residualFamily) []byte {
	le := binary.LittleEndian
	var b []byte
	b = append(b, residualMagic...)
	b = le.AppendUint32(b, 2)
	b = le.AppendUint32(b, uint32(f.opts.Dim))
	b = le.AppendUint16(b, uint16(len(f.opts.Description)))
	b = append(b, f.opts.Description...)
	r := f.rc
	cb := r.cb
	b = le.AppendUint32(b, uint32(cb.nlist))
	b = le.AppendUint32(b, math.Float32bits(cb.meanRes))
	trained := uint64(cb.trained)
	if cb.provisional {
		trained |= provisionalBit | settledBit
	}
	b = le.AppendUint64(b, trained)
	for _, v := range [][]float32{cb.cent, cb.cutoff, cb.lo, cb.hi} {
		b = appendF32s(b, v)
	}
	b = le.AppendUint64(b, uint64(len(r.docs)))
	for _, num := range slices.Sorted(maps.Keys(r.docs)) {
		d := r.docs[num]
		cids, codes := r.tokensOf(num, d, nil, nil)
		b = le.AppendUint64(b, num)
		b = le.AppendUint32(b, uint32(len(cids)))
		b = le.AppendUint32(b, math.Float32bits(d.normSum))
		b = le.AppendUint32(b, d.blob.size)
		b = le.AppendUint32(b, d.blob.crc)
		for _, c := range cids {
			b = le.AppendUint16(b, c)
		}
		b = append(b, codes...)
	}
	return append(b, residualEnd...)
}
