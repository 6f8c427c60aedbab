package main

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD: the calling thread only.
const rusageThread = 1

// threadCPU returns the CPU time the calling OS thread has used; the caller
// locks its goroutine to the thread. On a loaded machine it shows what a
// single-threaded computation costs where wall time also counts waiting for
// a core.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// processCPU returns the CPU time the whole process has used (every thread:
// the rig's, the embedded server's, the runtime's).
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
