package events_test

import "syscall"

// threadCPUNanos returns the CPU time the calling OS thread has used
// (RUSAGE_THREAD), for benchmarks that report CPU per operation beside wall
// time: on the shared machine wall time also counts waiting for a core.
func threadCPUNanos() (int64, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1, &ru); err != nil { // 1: RUSAGE_THREAD
		return 0, false
	}
	return ru.Utime.Nano() + ru.Stime.Nano(), true
}
