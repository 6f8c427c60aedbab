package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter is depth behind the namespaces (docs/security.md
// "Sandbox"): a deny list of the system calls that reach kernel code a
// sandboxed command has no business with, or that would undo the sandbox
// from inside. Everything else is allowed: the namespaces, not the filter,
// are what keep a command in.
//
// It is a small classic-BPF program written here rather than with a
// library: the filters the libraries assemble let a system call of a
// foreign architecture (int 0x80 from a 64-bit process) fall through to
// their default action, which for a deny list is "allow", and the program
// is short enough to read whole.

// seccompData offsets (struct seccomp_data: nr, arch, instruction_pointer,
// args[6]).
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

// nsCloneFlags are the clone flags that create a namespace; clone with any
// of them is refused, so a command cannot build itself a fresh user
// namespace (and with it every capability inside).
const nsCloneFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// deniedSyscalls fail with EPERM inside the sandbox.
var deniedSyscalls = []uint32{
	// Namespaces and mounts: the sandbox's own view must stay as built.
	unix.SYS_UNSHARE, unix.SYS_SETNS, unix.SYS_MOUNT, unix.SYS_UMOUNT2, unix.SYS_PIVOT_ROOT,
	unix.SYS_CHROOT, unix.SYS_MOVE_MOUNT, unix.SYS_OPEN_TREE, unix.SYS_FSOPEN, unix.SYS_FSCONFIG,
	unix.SYS_FSMOUNT, unix.SYS_FSPICK, unix.SYS_MOUNT_SETATTR,
	// Kernel interfaces that are large attack surface and that no build
	// or test needs: eBPF, perf events, userfaultfd, io_uring (whose
	// operations bypass this filter), keyrings (not namespaced: the
	// node's uid has its own), modules, kexec, reboot, swap, accounting,
	// quotas, the kernel log, handle-based opens.
	unix.SYS_BPF, unix.SYS_PERF_EVENT_OPEN, unix.SYS_USERFAULTFD,
	unix.SYS_IO_URING_SETUP, unix.SYS_IO_URING_ENTER, unix.SYS_IO_URING_REGISTER,
	unix.SYS_KEYCTL, unix.SYS_ADD_KEY, unix.SYS_REQUEST_KEY,
	unix.SYS_INIT_MODULE, unix.SYS_FINIT_MODULE, unix.SYS_DELETE_MODULE,
	unix.SYS_KEXEC_LOAD, unix.SYS_REBOOT, unix.SYS_SWAPON, unix.SYS_SWAPOFF,
	unix.SYS_ACCT, unix.SYS_QUOTACTL, unix.SYS_SYSLOG, unix.SYS_VHANGUP,
	unix.SYS_OPEN_BY_HANDLE_AT, unix.SYS_NAME_TO_HANDLE_AT,
}

// allowedFamilies are the socket families a command may create: UNIX,
// IPv4, IPv6 (in the sandbox's own network namespace) and netlink (which
// ip(8) and some resolvers use). Others, AF_VSOCK first of all (not
// namespaced: a guest VM's way to its host), fail with EAFNOSUPPORT.
var allowedFamilies = []uint32{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}

// deniedIoctls are terminal ioctls that push input into a terminal another
// process reads (TIOCSTI) or reach the console (TIOCLINUX).
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// A setuid or setgid file left in a workspace would be a way in for any
// local user who reaches it: inside, nosuid mounts and no_new_privs make the
// bits inert, but on the host they are not. No system call that sets a
// file's mode may set either bit: chmod and its kin, an open or mknod that
// creates a file. openat2 carries its mode in memory, out of the filter's
// sight, so it fails with ENOSYS and libc falls back to openat.

// setIDBits are S_ISUID and S_ISGID.
const setIDBits = unix.S_ISUID | unix.S_ISGID

// createFlags are the open flags under which the mode argument is used:
// O_CREAT and O_TMPFILE (whose own bit, __O_TMPFILE, is O_TMPFILE less
// O_DIRECTORY).
const createFlags = unix.O_CREAT | (unix.O_TMPFILE &^ unix.O_DIRECTORY)

// modeCall is a system call that sets a file's mode: its number, which
// argument is the mode, and which the open flags (-1: none, the mode is
// always used).
type modeCall struct {
	nr          uint32
	mode, flags int
}

// auditArch is the AUDIT_ARCH_ value of this binary's architecture; 0 where
// the filter is not supported.
func auditArch() uint32 {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64
	}
	return 0
}

// errSeccompArch is returned on an architecture the filter does not know.
var errSeccompArch = fmt.Errorf("the seccomp filter supports amd64 and arm64, not %s", runtime.GOARCH)

// bpfProgram builds the filter. Layout: refuse a foreign architecture
// (ENOSYS); on amd64 refuse the x32 ABI; then one block per rule, each of
// which leaves the system call number in the accumulator when it does not
// match; finally allow.
func bpfProgram() ([]unix.SockFilter, error) {
	arch := auditArch()
	if arch == 0 {
		return nil, errSeccompArch
	}
	ret := func(v uint32) unix.SockFilter { return unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: v} }
	ld := func(off uint32) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: off}
	}
	jeq := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | uint32(e)&unix.SECCOMP_RET_DATA }
	// argLo is the offset of the low 32 bits of argument i: every argument
	// the rules look at is an int or a flag word whose bits of interest
	// are in the low half.
	argLo := func(i uint32) uint32 {
		off := offArgs + 8*i
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian
			off += 4
		}
		return off
	}

	p := []unix.SockFilter{
		ld(offArch),
		jeq(arch, 1, 0),
		ret(errno(unix.ENOSYS)),
		ld(offNr),
	}
	if runtime.GOARCH == "amd64" {
		const x32 = 0x40000000
		p = append(p,
			unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K, K: x32, Jt: 0, Jf: 1},
			ret(errno(unix.ENOSYS)))
	}
	for _, nr := range deniedSyscalls {
		p = append(p, jeq(nr, 0, 1), ret(errno(unix.EPERM)))
	}
	// clone3 passes its flags in memory, where a filter cannot look:
	// ENOSYS makes libc and Go fall back to clone, whose flags it can.
	p = append(p, jeq(unix.SYS_CLONE3, 0, 1), ret(errno(unix.ENOSYS)))
	// clone(flags, ...) with a namespace flag.
	p = append(p,
		jeq(unix.SYS_CLONE, 0, 4),
		ld(argLo(0)),
		unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: nsCloneFlags, Jt: 0, Jf: 1},
		ret(errno(unix.EPERM)),
		ld(offNr))
	// socket(family, ...) with a family not allowed.
	n := len(allowedFamilies)
	p = append(p, jeq(unix.SYS_SOCKET, 0, uint8(n+3)), ld(argLo(0)))
	for i, f := range allowedFamilies {
		p = append(p, jeq(f, uint8(n-i), 0)) // allowed: skip to the reload
	}
	p = append(p, ret(errno(unix.EAFNOSUPPORT)), ld(offNr))
	// ioctl(fd, request, ...) with a denied request.
	m := len(deniedIoctls)
	p = append(p, jeq(unix.SYS_IOCTL, 0, uint8(m+3)), ld(argLo(1)))
	for i, r := range deniedIoctls {
		p = append(p, jeq(r, uint8(m-i), 0)) // denied: jump to the ret
	}
	p = append(p, unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JA, K: 1}, ret(errno(unix.EPERM)), ld(offNr))
	// A mode with the setuid or setgid bit: EPERM. Each block: not this
	// call, skip it; [flags without O_CREAT or O_TMPFILE, skip the mode
	// test]; mode without the bits, skip the return; return EPERM; reload
	// the number.
	jset := func(k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K, K: k, Jt: jt, Jf: jf}
	}
	for _, c := range modeCalls {
		if c.flags < 0 {
			p = append(p, jeq(c.nr, 0, 4), ld(argLo(uint32(c.mode))), jset(setIDBits, 0, 1), ret(errno(unix.EPERM)), ld(offNr))
			continue
		}
		p = append(p, jeq(c.nr, 0, 6), ld(argLo(uint32(c.flags))), jset(createFlags, 0, 3),
			ld(argLo(uint32(c.mode))), jset(setIDBits, 0, 1), ret(errno(unix.EPERM)), ld(offNr))
	}
	p = append(p, jeq(unix.SYS_OPENAT2, 0, 1), ret(errno(unix.ENOSYS)))
	p = append(p, ret(unix.SECCOMP_RET_ALLOW))
	if len(p) > 4096 { // BPF_MAXINSNS
		return nil, errors.New("the seccomp filter is too long")
	}
	return p, nil
}

// loadSeccomp sets no_new_privs and installs the filter on every thread of
// this process (SECCOMP_FILTER_FLAG_TSYNC: the Go runtime runs several), so
// the process and everything it starts from now on are bound by it; with
// thread set, on the calling thread only, so that what it starts is.
func loadSeccomp(thread bool) error {
	prog, err := bpfProgram()
	if err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("set no_new_privs: %w", err)
	}
	flags := uintptr(unix.SECCOMP_FILTER_FLAG_TSYNC)
	if thread {
		flags = 0
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", e)
	}
	return nil
}
