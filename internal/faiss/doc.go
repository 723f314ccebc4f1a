// Package faiss is Tandem's narrow wrapper over github.com/blevesearch/go-faiss
// for the retrievers in dense and latecollect. The C library behind it,
// libfaiss_c, is built by scripts/setup.sh from FAISS 1.7.3's C API plus the
// extension functions in native/faiss_c_ex.
package faiss
