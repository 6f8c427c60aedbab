package sandbox

import (
	"math"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Descriptors a process inherits without close-on-exec pass on to every
// program it starts: a node whose parent left a root-only file open on
// descriptor 7 would hand it to every sandboxed command. The node marks
// what it inherited close-on-exec at start (Main), and each helper closes
// whatever it inherited but its own descriptors before it confines itself,
// so neither a careless parent nor a Go program embedding the node that
// skipped Main leaks one into a sandbox.

// closeOnExecInherited marks every descriptor above standard error
// close-on-exec. Descriptors the Go runtime and os open carry the flag
// already; what this changes is only what the process inherited. A child
// still gets the files exec.Cmd passes it on purpose (ExtraFiles are
// duplicated without the flag).
func closeOnExecInherited() {
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	// Before Linux 5.11: one by one.
	for _, fd := range openFDs() {
		if fd > 2 {
			unix.CloseOnExec(fd)
		}
	}
}

// closeInherited closes every descriptor this process inherited except
// standard input, output, error and keep. A descriptor it inherited is one
// without close-on-exec: exec closed every one that had it, and what this
// process opened since (the Go runtime's epoll and event descriptors,
// os.Files) has it. When /proc cannot be read, the descriptors past keep's
// highest are closed by range instead, which can only be inherited ones as
// long as the runtime has opened nothing yet.
func closeInherited(keep ...int) {
	fds := openFDs()
	if fds == nil {
		high := 2
		for _, k := range keep {
			high = max(high, k)
		}
		_ = unix.CloseRange(uint(high+1), math.MaxUint32, 0)
		return
	}
	for _, fd := range fds {
		if fd <= 2 || slices.Contains(keep, fd) {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			unix.Close(fd)
		}
	}
}

// openFDs lists this process's open descriptors (nil when /proc/self/fd
// cannot be read). The descriptor used to read the directory is among them
// while it is read; it is closed by then, which no caller minds.
func openFDs() []int {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return nil
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil
	}
	fds := make([]int, 0, len(names))
	for _, n := range names {
		if fd, err := strconv.Atoi(n); err == nil {
			fds = append(fds, fd)
		}
	}
	return fds
}
