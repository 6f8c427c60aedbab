package sandbox

import "golang.org/x/sys/unix"

// modeCalls are the system calls that can set a file's mode on arm64 (which
// has no chmod, creat, open or mknod of its own).
var modeCalls = []modeCall{
	{unix.SYS_FCHMOD, 1, -1}, {unix.SYS_FCHMODAT, 2, -1}, {unix.SYS_FCHMODAT2, 2, -1},
	{unix.SYS_OPENAT, 3, 2}, {unix.SYS_MKNODAT, 2, -1},
}
