//go:build unix

package replay

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time the process has used, user and system, every
// goroutine's and the garbage collector's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
