//go:build unix

package latecollect

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used, user and system, in
// all its threads: on a machine shared with other work, a benchmark's CPU
// time per operation varies less than its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
