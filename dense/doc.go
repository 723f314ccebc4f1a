// Package dense owns single-vector retrieval: dual encoders (GTR- and
// TAS-B-style, Siamese or asymmetric) run through ONNX Runtime, and FAISS
// indexes searched with the metadata filter applied inside the search.
//
// FAISS indexes are derived state: their vectors live in storage, and an
// index snapshot only makes opening fast.
package dense
