package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

func getUint(txn *badger.Txn, k []byte) (uint64, error) {
	item, err := txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n uint64
	err = item.Value(func(v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("%w: %s has %d bytes", ErrCorruption, k, len(v))
		}
		n = binary.BigEndian.Uint64(v)
		return nil
	})
	return n, err
}

func u64(n uint64) []byte { return binary.BigEndian.AppendUint64(nil, n) }

func idKey(id string) []byte     { return append([]byte{tagID}, id...) }
func docKey(n uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagDoc}, n) }
func logKey(s uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagLog}, s) }
func numKey(n uint64) []byte     { return binary.BigEndian.AppendUint64([]byte{tagNum}, n) }
func snapKey(n string) []byte    { return append([]byte{tagSnapshot}, n...) }
func markKey(n string) []byte    { return append([]byte{tagMark}, n...) }
func blobPrefix(n uint64) []byte { return binary.BigEndian.AppendUint64([]byte{tagBlob}, n) }
func blobKey(n uint64, name string) []byte {
	return append(blobPrefix(n), name...)
}

// encodeChange is op, docnum (8 bytes big-endian), external id.
func encodeChange(op Op, num uint64, id string) []byte {
	b := make([]byte, 0, 9+len(id))
	b = append(b, byte(op))
	b = binary.BigEndian.AppendUint64(b, num)
	return append(b, id...)
}

func decodeChange(v []byte, c *Change) error {
	if len(v) < 9 || (Op(v[0]) != OpPut && Op(v[0]) != OpDelete) {
		return fmt.Errorf("%w: change %d: bad record", ErrCorruption, c.Seq)
	}
	c.Op = Op(v[0])
	c.DocNum = binary.BigEndian.Uint64(v[1:9])
	c.ID = string(bytes.Clone(v[9:]))
	return nil
}
