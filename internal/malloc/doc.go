// Package malloc bounds glibc's malloc arenas in a Tandem process, and
// trims the memory they keep.
//
// glibc gives each thread that allocates under contention an arena of its
// own, up to 8 per core, and keeps what an arena frees for reuse by that
// arena. FAISS, ONNX Runtime and OpenBLAS allocate from whatever OS
// threads the Go scheduler runs cgo calls on, so a long-running server
// touches many arenas, and the memory they hold grows with time although
// nothing leaks. Importing this package (internal/faiss and internal/ort
// do) caps the arenas to Limit, unless MALLOC_ARENA_MAX is set in the
// environment, which glibc has then applied already and which wins. The
// cap is set by a C constructor, before main and so before any thread
// exists: glibc fixes its arena limit the first time a thread needs a new
// arena, and a cap set from Go's init, after the runtime had started
// threads, was ignored whenever one of them had (4 to 6 arenas for a cap
// of 2 in TestArenasCapped; 2 now).
//
// A cap does not stop an arena from keeping what it frees below its top:
// glibc returns memory to the system only from there, or when asked with
// malloc_trim. KeepTrimmed (engine.Open calls it) asks every 10 seconds
// while malloc keeps more than 32 MiB free. The same constructor fixes
// the mmap threshold at 256 KiB (unless MALLOC_MMAP_THRESHOLD_ is set):
// glibc's threshold otherwise rises to the size of every mmapped block
// freed, after which FAISS's inverted lists, grown by doubling, come from
// the arenas and stay resident when freed (TestMmapThresholdFixed); an
// mmapped block goes back to the system at once, and grows with mremap.
// Stats reports the C heap's
// size for the soak. The package does nothing where the C library is not
// glibc.
package malloc
