package dense

import (
	"encoding/binary"
	"fmt"
	"math"
	"net/url"
)

// BlobName is the storage blob that holds a document's vector for model:
// "vec/<model>". The engine attaches it with storage.Batch.Put, so the
// vector commits atomically with its document.
func BlobName(model string) string { return "vec/" + model }

// SnapshotName is the storage snapshot name of model's FAISS index:
// "dense-<model>", the model name path-escaped because storage snapshot
// names cannot contain slashes.
func SnapshotName(model string) string { return "dense-" + url.PathEscape(model) }

// EncodeVector encodes v as the vector blob format: float32 components,
// little-endian, with nothing else (the dimension is the length / 4 and is
// checked against the index's dimension by DecodeVector).
func EncodeVector(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
	return b
}

// DecodeVector decodes a vector blob of dimension dim. It fails when the
// length is not 4*dim or a component is NaN or infinite, so a corrupt or
// foreign blob never reaches FAISS.
func DecodeVector(b []byte, dim int) ([]float32, error) {
	v := make([]float32, dim)
	if err := decodeInto(v, b); err != nil {
		return nil, err
	}
	return v, nil
}

// decodeInto decodes b into dst, whose length is the expected dimension.
func decodeInto(dst []float32, b []byte) error {
	if len(b) != 4*len(dst) {
		return fmt.Errorf("%w: vector blob has %d bytes, want %d (dimension %d)", ErrDimension, len(b), 4*len(dst), len(dst))
	}
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return CheckVector(dst, len(dst))
}

// CheckVector reports whether v has dimension dim and only finite
// components. Callers validate vectors with it before writing them to
// storage, so that bad input is rejected before anything is stored.
func CheckVector(v []float32, dim int) error {
	if len(v) != dim {
		return fmt.Errorf("%w: vector has dimension %d, want %d", ErrDimension, len(v), dim)
	}
	for i, f := range v {
		if math.IsNaN(float64(f)) || math.IsInf(float64(f), 0) {
			return fmt.Errorf("%w: component %d is %v", ErrBadVector, i, f)
		}
	}
	return nil
}

// dot is the inner product of two vectors of equal length. Unrolled by four
// because the exact scan of filtered search spends its time here.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}
