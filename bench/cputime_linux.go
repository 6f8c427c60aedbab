package main

import (
	"runtime"
	"slices"
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
	u, ok := processUsage()
	return u.cpu, ok
}

// usage is what the whole process has used so far: CPU time, and minor page
// faults (first touches of memory the kernel had not yet given it).
type usage struct {
	cpu    time.Duration
	faults int64
}

func processUsage() (usage, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}, false
	}
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), faults: ru.Minflt}, true
}

// pageFault returns the CPU time one minor page fault costs here: the
// median, over rounds, of touching each 4 KiB page of a fresh anonymous
// mapping once. On a virtual machine a fault can cost tens of times what
// it costs on bare metal, and a process that keeps growing its heap pays
// it for every page.
func pageFault() (time.Duration, bool) {
	const size, rounds = 32 << 20, 5
	var each []time.Duration
	for range rounds {
		b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return 0, false
		}
		runtime.LockOSThread()
		t0, ok := threadCPU()
		for i := 0; i < size; i += 4096 {
			b[i] = 1
		}
		t1, _ := threadCPU()
		runtime.UnlockOSThread()
		_ = syscall.Munmap(b)
		if !ok {
			return 0, false
		}
		each = append(each, (t1-t0)/(size/4096))
	}
	slices.Sort(each)
	return each[rounds/2], true
}
