// Package export writes the vectors a collection stored as files another
// engine can read: NumPy .npy arrays and lists of ids. `tandem export`
// runs it once per model; the vectors are read through
// engine.Shard.ScanVectors, never re-encoded.
//
// For a model and a base path BASE (an output directory joined with the
// model's name):
//
//   - Dense writes BASE.npy, float32 little-endian ('<f4') of shape
//     (documents, dimension), and BASE.ids;
//   - Tokens writes BASE.tokens.npy, '<f4' of shape (tokens, dimension):
//     every document's token matrix, one after the other; BASE.offsets.npy,
//     int64 little-endian ('<i8') of shape (documents + 1,), document i's
//     tokens being rows offsets[i] to offsets[i+1]; and BASE.tokens.ids.
//
// Invariants:
//
//   - Rows follow document-number order, the order ScanVectors gives.
//     Line i of an ids file (each id ends with '\n') is the external id
//     of row i of BASE.npy, or of document i of the token arrays.
//     Documents without the model's vectors of that kind are left out,
//     and so are deleted ones.
//   - Every row has the dimension the caller gives (the model's): a
//     stored vector of another dimension stops the export with an error
//     rather than shifting the rows after it.
//   - The offsets start at 0, never decrease, and end at the number of
//     token rows.
//   - Every .npy file is format version 1.0 in C order, with a header of
//     exactly HeaderSize bytes: the preamble, then the dictionary padded
//     with spaces and ended by '\n', so that the data starts at a 64-byte
//     multiple. The header is written last, once the number of rows is
//     known; until then the first HeaderSize bytes are zero, so that a
//     file whose export failed is not taken for a complete array by a
//     NumPy reader.
//   - Existing files of the same names are overwritten.
package export
