// Package faiss is Tandem's narrow wrapper over github.com/blevesearch/go-faiss
// for the retrievers in dense and latecollect. The C library behind it,
// libfaiss_c, is built by scripts/setup.sh from FAISS 1.7.3's C API plus the
// extension functions in native/faiss_c_ex, which are compiled into that
// library: installing libfaiss_c.so (scripts/install.sh) installs them.
//
// In a build without cgo every constructor, and Available, fails with
// ErrNoCgo (native.ErrNoCgo), so that the retrievers built on it fail when
// a collection that needs them is opened, and BM25 still serves.
package faiss
