package ort

// ONNX Runtime, FAISS and OpenBLAS allocate from whatever threads run cgo
// calls: package malloc caps the C allocator's arenas (glibc).
import _ "github.com/tandemsearch/tandem/internal/malloc"
