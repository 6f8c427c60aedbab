package sandbox

import "golang.org/x/sys/unix"

// modeCalls are the system calls that can set a file's mode on amd64.
var modeCalls = []modeCall{
	{unix.SYS_CHMOD, 1, -1}, {unix.SYS_FCHMOD, 1, -1}, {unix.SYS_FCHMODAT, 2, -1}, {unix.SYS_FCHMODAT2, 2, -1},
	{unix.SYS_CREAT, 1, -1}, {unix.SYS_OPEN, 2, 1}, {unix.SYS_OPENAT, 3, 2},
	{unix.SYS_MKNOD, 1, -1}, {unix.SYS_MKNODAT, 2, -1},
}
