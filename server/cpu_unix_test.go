//go:build unix

package server

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used so far, user and
// system, for benchmarks that report the CPU a decision costs.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
