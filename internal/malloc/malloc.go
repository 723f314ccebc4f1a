//go:build cgo && linux

package malloc

/*
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

// tandem_cap and tandem_capped are the arena cap the constructor set
// and whether mallopt took it. glibc computes its arena limit once, the
// first time a thread needs a new arena, and keeps it: a cap set after
// that (from Go's init, once the runtime has started threads that may
// have allocated) is ignored. A constructor runs before main, so before
// any thread exists.
static int tandem_cap;
static int tandem_capped;

// TANDEM_MMAP_THRESHOLD: blocks from this size are mmapped, whatever
// was freed before. glibc starts at 128 KiB but raises the threshold to
// the size of each mmapped block freed (up to 32 MiB), after which blocks
// of that size come from the arenas. FAISS's inverted lists are such
// blocks, grown by doubling: freed into the arenas below their top, they
// stayed resident, and at 1M 384-d vectors the C heap held about 1.5 GiB
// for 0.38 GiB of codes (docs/ingest.md). An mmapped block goes back to
// the system when freed, and grows with mremap, without a copy.
#define TANDEM_MMAP_THRESHOLD (256 * 1024)
static int tandem_mmap_fixed;

__attribute__((constructor)) static void tandem_cap_arenas(void) {
#ifdef M_MMAP_THRESHOLD
	if (getenv("MALLOC_MMAP_THRESHOLD_") == NULL) {
		tandem_mmap_fixed = mallopt(M_MMAP_THRESHOLD, TANDEM_MMAP_THRESHOLD) == 1;
	}
#endif
#ifdef M_ARENA_MAX
	if (getenv("MALLOC_ARENA_MAX") != NULL) {
		return; // glibc has applied it, and it wins
	}
	cpu_set_t set;
	int n = 2;
	if (sched_getaffinity(0, sizeof set, &set) == 0) {
		n = CPU_COUNT(&set);
	}
	if (n < 2) {
		n = 2;
	}
	if (n > 8) {
		n = 8;
	}
	tandem_cap = n;
	tandem_capped = mallopt(M_ARENA_MAX, n) == 1;
#endif
}

static int tandem_arena_cap(void) { return tandem_capped ? tandem_cap : 0; }

static int tandem_mmap_is_fixed(void) { return tandem_mmap_fixed; }

// tandem_mmap_check frees a 4 MiB block (which would raise a dynamic
// threshold to 4 MiB), then allocates 64 blocks of 512 KiB and frees all
// but the last: it returns how many more bytes malloc's arenas then hold
// free than before.
static size_t tandem_mmap_check(void) {
	size_t before = mallinfo2().fordblks;
	free(malloc(4 << 20));
	void *p[64];
	for (int i = 0; i < 64; i++) {
		p[i] = malloc(512 << 10);
		memset(p[i], 1, 512 << 10);
	}
	for (int i = 0; i < 63; i++) {
		free(p[i]);
	}
	size_t after = mallinfo2().fordblks;
	free(p[63]);
	return after > before ? after - before : 0;
}

// tandem_heaps counts the arenas malloc_info reports (its <heap nr=...>
// elements), or returns -1 when it cannot tell.
static int tandem_heaps(void) {
#ifdef M_ARENA_MAX
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (f == NULL) {
		return -1;
	}
	if (malloc_info(0, f) != 0) {
		fclose(f);
		free(buf);
		return -1;
	}
	fclose(f);
	int n = 0;
	for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++) {
		n++;
	}
	free(buf);
	return n;
#else
	return -1;
#endif
}

// tandem_churn allocates and frees blocks of many sizes, as a cgo call of
// FAISS or ONNX Runtime would.
static void tandem_churn(int rounds) {
	for (int i = 0; i < rounds; i++) {
		void *p[64];
		for (int j = 0; j < 64; j++) {
			p[j] = malloc(64 + (size_t)((i * 64 + j) % 4096) * 16);
		}
		for (int j = 0; j < 64; j++) {
			free(p[j]);
		}
	}
}

// tandem_stats reports what malloc has handed out and not freed (in
// use) and what it holds from the system (held), over every arena and
// the blocks it mmapped on its own.
static void tandem_stats(size_t *in_use, size_t *held) {
	struct mallinfo2 mi = mallinfo2();
	*in_use = mi.uordblks + mi.hblkhd;
	*held = mi.arena + mi.hblkhd;
}

// tandem_trim returns the free memory of every arena to the system.
static int tandem_trim(void) { return malloc_trim(0); }

// tandem_fragment leaves most of n blocks of size bytes free, but held:
// every other block is freed, so the arena cannot shrink from its top.
// It returns the blocks kept, for tandem_free_all.
static void **tandem_fragment(int n, size_t size) {
	void **p = calloc((size_t)n, sizeof(void *));
	for (int i = 0; i < n; i++) {
		p[i] = malloc(size);
		memset(p[i], 1, size);
	}
	for (int i = 0; i < n - 1; i++) {
		free(p[i]);
		p[i] = NULL;
	}
	return p;
}

static void tandem_free_all(void **p, int n) {
	for (int i = 0; i < n; i++) {
		free(p[i]);
	}
	free(p);
}
*/
import "C"

import (
	"os"
	"runtime"
	"sync"
	"time"
)

// Limit is the number of arenas the package allows: the cores the process
// may run on, at least 2 and at most 8 (glibc's default is 8 per core).
var Limit = min(max(runtime.NumCPU(), 2), 8)

// applied reports whether the cap was set at start-up (false when
// MALLOC_ARENA_MAX was set, or mallopt refused); atInit is the number of
// arenas at the package's init.
var (
	applied bool
	atInit  int
)

func init() {
	if _, ok := os.LookupEnv("MALLOC_ARENA_MAX"); ok {
		return
	}
	atInit = heaps()
	if n := int(C.tandem_arena_cap()); n > 0 {
		applied, Limit = true, n
	}
}

// mmapFixed reports whether the constructor fixed the mmap threshold
// (false when MALLOC_MMAP_THRESHOLD_ was set, or mallopt refused).
func mmapFixed() bool { return C.tandem_mmap_is_fixed() == 1 }

// mmapCheck returns how many more free bytes malloc's arenas hold after
// freeing 63 blocks of 512 KiB that followed a freed 4 MiB one.
func mmapCheck() uint64 { return uint64(C.tandem_mmap_check()) }

// heaps returns the number of arenas malloc_info reports, -1 if unknown.
func heaps() int { return int(C.tandem_heaps()) }

// churn allocates and frees in C on the calling thread.
func churn(rounds int) { C.tandem_churn(C.int(rounds)) }

// Stats returns what the C heap (glibc's malloc, used by FAISS, ONNX
// Runtime and cgo) has in use and what it holds from the system, in
// bytes; held minus in use is free memory malloc keeps (fragmentation,
// or freed blocks not yet returned).
func Stats() (inUse, held uint64, ok bool) {
	var u, h C.size_t
	C.tandem_stats(&u, &h)
	return uint64(u), uint64(h), true
}

// Trim returns the free memory malloc holds in every arena to the system
// (malloc_trim(0)); it reports whether any was returned.
func Trim() bool { return C.tandem_trim() == 1 }

// The trimmer's schedule: every trimInterval, when malloc holds more than
// trimSlack bytes free and that amount has moved by a quarter of trimSlack
// since the last trim, Trim runs. (Trim releases pages, not address
// space: malloc still counts what it returned as held, so the free amount
// alone would call for a trim every time.)
const (
	trimInterval = 10 * time.Second
	trimSlack    = 32 << 20
)

var trimOnce sync.Once

// KeepTrimmed starts, once per process, a goroutine that trims the C heap
// every 10 seconds while malloc holds more than 32 MiB free and that
// amount has changed since the last trim. glibc returns freed memory to
// the system only from the top of an arena, and FAISS and ONNX Runtime
// free blocks of every size from many threads, so without it a
// long-running process keeps more and more freed C memory resident. The
// goroutine runs until the process exits, like the Go runtime's
// scavenger, which does the same for the Go heap.
func KeepTrimmed() {
	trimOnce.Do(func() {
		go func() {
			var last uint64
			for range time.Tick(trimInterval) {
				u, h, _ := Stats()
				free := h - min(u, h)
				if free > trimSlack && max(free, last)-min(free, last) > trimSlack/4 {
					Trim()
					last = free
				}
			}
		}()
	})
}

// fragment leaves about n*size bytes free but held by malloc, for tests;
// release frees the rest.
func fragment(n int, size int) (release func()) {
	p := C.tandem_fragment(C.int(n), C.size_t(size))
	return func() { C.tandem_free_all(p, C.int(n)) }
}
