//go:build cgo && linux

package malloc

/*
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>

static int tandem_limit_arenas(int n) {
#ifdef M_ARENA_MAX
	return mallopt(M_ARENA_MAX, n);
#else
	return 0;
#endif
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
*/
import "C"

import (
	"os"
	"runtime"
)

// Limit is the number of arenas the package allows: the cores, at least 2
// and at most 8 (glibc's default is 8 per core).
var Limit = min(max(runtime.NumCPU(), 2), 8)

// applied reports whether init set the cap (false when MALLOC_ARENA_MAX
// was set, or mallopt refused); atInit is the number of arenas then.
var (
	applied bool
	atInit  int
)

func init() {
	if _, ok := os.LookupEnv("MALLOC_ARENA_MAX"); ok {
		return
	}
	atInit = heaps()
	applied = C.tandem_limit_arenas(C.int(Limit)) == 1
}

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
