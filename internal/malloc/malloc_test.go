//go:build cgo && linux

package malloc

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestArenasCapped allocates in C from many OS threads at once, which
// without the cap opens an arena per thread up to 8 per core, and checks
// that there are at most Limit arenas: the cap, set before any thread
// started, binds them all.
func TestArenasCapped(t *testing.T) {
	if _, ok := os.LookupEnv("MALLOC_ARENA_MAX"); ok {
		t.Skip("MALLOC_ARENA_MAX is set: glibc's setting wins and the package leaves it")
	}
	if !applied {
		t.Skip("mallopt(M_ARENA_MAX) not supported by this C library")
	}
	const threads = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range threads {
		wg.Go(func() {
			runtime.LockOSThread() // a distinct OS thread each, kept to the end
			defer runtime.UnlockOSThread()
			<-start
			churn(2000)
		})
	}
	close(start)
	wg.Wait()
	n := heaps()
	if n < 0 {
		t.Skip("malloc_info unavailable")
	}
	if n > Limit {
		t.Errorf("%d arenas after %d threads allocated at once; the cap is %d (%d existed at init)", n, threads, Limit, atInit)
	}
	t.Logf("%d arenas after %d threads (cap %d, %d at init)", n, threads, Limit, atInit)
}

// TestTrim leaves 64 MiB free but resident in malloc's heap (a run of
// blocks freed below one kept, so the arena cannot shrink from its top)
// and checks that Trim hands at least half of it back to the system.
func TestTrim(t *testing.T) {
	const n, size = 1024, 64 << 10
	release := fragment(n, size)
	defer release()
	u, h, ok := Stats()
	if !ok {
		t.Skip("mallinfo2 unavailable")
	}
	if h < u+n*size/2 {
		t.Fatalf("%d bytes held, %d in use: the freed blocks are not held", h, u)
	}
	before := rssAnon(t)
	if !Trim() {
		t.Errorf("Trim returned nothing, with %d MiB free in malloc", (h-u)>>20)
	}
	after := rssAnon(t)
	if before-after < n*size/2 {
		t.Errorf("anonymous RSS %d MiB before Trim, %d after: want %d MiB less", before>>20, after>>20, n*size/2>>20)
	}
	t.Logf("anonymous RSS %d MiB before Trim, %d after; malloc held %d MiB, %d in use", before>>20, after>>20, h>>20, u>>20)
}

// rssAnon reads the process's anonymous resident set, in bytes.
func rssAnon(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("RssAnon: %q: %v", rest, err)
			}
			return kb << 10
		}
	}
	t.Skip("no RssAnon in /proc/self/status")
	return 0
}

// TestMmapThresholdFixed: after a 4 MiB block is freed (which raises
// glibc's dynamic threshold to 4 MiB), blocks of 512 KiB are still
// mmapped, so freeing 63 of them leaves the arenas holding almost nothing
// free; with the dynamic threshold they would hold about 31 MiB.
func TestMmapThresholdFixed(t *testing.T) {
	if _, ok := os.LookupEnv("MALLOC_MMAP_THRESHOLD_"); ok {
		t.Skip("MALLOC_MMAP_THRESHOLD_ is set: glibc's setting wins and the package leaves it")
	}
	if !mmapFixed() {
		t.Skip("mallopt(M_MMAP_THRESHOLD) not supported by this C library")
	}
	if free := mmapCheck(); free > 8<<20 {
		t.Errorf("arenas hold %d bytes free after freeing 63 blocks of 512 KiB; want them returned (mmapped)", free)
	}
}
