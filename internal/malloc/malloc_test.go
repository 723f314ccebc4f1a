//go:build cgo && linux

package malloc

import (
	"os"
	"runtime"
	"sync"
	"testing"
)

// TestArenasCapped allocates in C from many OS threads at once, which
// without the cap opens an arena per thread up to 8 per core, and checks
// that no arena was added beyond Limit or those that existed at init.
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
	if n > max(Limit, atInit) {
		t.Errorf("%d arenas after %d threads allocated at once; the cap is %d, and %d existed at init", n, threads, Limit, atInit)
	}
	t.Logf("%d arenas after %d threads (cap %d, %d at init)", n, threads, Limit, atInit)
}
