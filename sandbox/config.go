package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Network modes of Config.Network and Run.Network.
const (
	// NetworkNone, the default, gives the sandbox a network namespace of
	// its own: nothing but its own loopback, so no socket of any family
	// reaches the host or beyond.
	NetworkNone = "none"
	// NetworkHost shares the node's network: commands reach whatever the
	// node reaches, the host's loopback (and so the node's own ports)
	// included.
	NetworkHost = "host"
)

// DefaultUID and DefaultGID are the ids sandboxed commands run as when the
// node runs as root: 65533, in the range Debian's policy reserves and never
// hands out (65000-65533), just below nobody (65534), so that no account,
// package or other daemon on the host owns it.
const (
	DefaultUID = 65533
	DefaultGID = 65533
)

// Default limits of Limits, per sandboxed process tree (processes) or per
// process (the others).
const (
	// DefaultProcesses caps the processes and threads of one sandbox.
	DefaultProcesses = 1024
	// DefaultFileSize caps the size of any file a command writes: 1 GiB.
	DefaultFileSize = 1 << 30
	// DefaultMemory caps a process's private writable memory (RLIMIT_DATA):
	// 8 GiB.
	DefaultMemory = 8 << 30
	// DefaultCPU caps a process's CPU time: 10 minutes, the longest a shell
	// call may run.
	DefaultCPU = 10 * time.Minute
)

// The boundaries the sandbox reports (Report, docs/security.md "Sandbox").
// Network, PID, Mount, User and Limits are required: a sandbox without one
// of them refuses to run commands unless Config.AcceptWeaker names it.
// Landlock and Seccomp add depth where the kernel has them; they are never
// required of shell, but glob and grep need Landlock (or its acceptance) to
// confine ripgrep to the workspace.
const (
	BoundaryNetwork  = "network"
	BoundaryPID      = "pid"
	BoundaryMount    = "mount"
	BoundaryUser     = "user"
	BoundaryLimits   = "limits"
	BoundaryLandlock = "landlock"
	BoundarySeccomp  = "seccomp"
)

// Boundaries lists every boundary in the order the report gives them.
var Boundaries = []string{BoundaryNetwork, BoundaryPID, BoundaryMount, BoundaryUser, BoundaryLimits, BoundaryLandlock, BoundarySeccomp}

// ErrInvalidConfig is wrapped by the error Config.Validate returns.
var ErrInvalidConfig = errors.New("sandbox: invalid config")

// Limits cap what one sandboxed command may use. A zero field takes its
// default (DefaultLimits).
type Limits struct {
	// Processes caps the processes and threads the sandbox may hold at
	// once (RLIMIT_NPROC, counted in the sandbox's own user namespace).
	Processes int
	// FileSize caps, in bytes, any file a process writes (RLIMIT_FSIZE):
	// a write past it fails and the writer gets SIGXFSZ.
	FileSize int64
	// Memory caps, in bytes, each process's private writable memory
	// (RLIMIT_DATA: heap, anonymous and private writable mappings).
	Memory int64
	// CPU caps each process's CPU time (RLIMIT_CPU): SIGXCPU at the limit,
	// SIGKILL a second later.
	CPU time.Duration
}

// DefaultLimits returns the limits a zero Limits stands for.
func DefaultLimits() Limits {
	return Limits{Processes: DefaultProcesses, FileSize: DefaultFileSize, Memory: DefaultMemory, CPU: DefaultCPU}
}

// withDefaults fills the zero fields of l from DefaultLimits.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.Processes == 0 {
		l.Processes = d.Processes
	}
	if l.FileSize == 0 {
		l.FileSize = d.FileSize
	}
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.CPU == 0 {
		l.CPU = d.CPU
	}
	return l
}

// String describes the limits for the start-up report.
func (l Limits) String() string {
	return fmt.Sprintf("processes %d, file size %d MiB, memory %d MiB, CPU %s per process", l.Processes, l.FileSize>>20, l.Memory>>20, l.CPU)
}

// Config is a node's sandbox: what every sandboxed command shares. The zero
// value is the default: no network, uid and gid DefaultUID and DefaultGID on
// a root node, DefaultLimits, nothing extra visible or hidden, every required
// boundary required.
type Config struct {
	// Network is NetworkNone (the default, also meant by "") or
	// NetworkHost.
	Network string
	// UID and GID are what commands run as when the node runs as root:
	// not 0. Zero means DefaultUID and DefaultGID. On a node that is not
	// root, commands run as the node's own uid and gid and these are
	// ignored.
	UID, GID int
	// ReadOnly are more host paths (absolute) shown read-only inside the
	// sandbox, beside the system directories (/usr, /bin, /sbin, /lib*,
	// /etc, /opt): tool chains installed elsewhere, say.
	ReadOnly []string
	// Hidden are host paths (absolute) that must be absent inside the
	// sandbox even where they lie under a directory it shows: the node's
	// data dir, its workspace root, its config file and credentials.
	// Directories leading to the workspace appear as empty directories.
	Hidden []string
	// Limits cap each command; zero fields take DefaultLimits.
	Limits Limits
	// AcceptWeaker names boundaries (BoundaryNetwork, ...) the operator
	// accepts running without when the kernel cannot give them. Empty (the
	// default): a missing required boundary refuses every command.
	AcceptWeaker []string
}

// Validate reports every problem of c at once, each wrapping
// ErrInvalidConfig with the field, the value and what to do.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...)))
	}
	switch c.Network {
	case "", NetworkNone, NetworkHost:
	default:
		bad("network %q: want %q (the default) or %q", c.Network, NetworkNone, NetworkHost)
	}
	if c.UID < 0 || c.GID < 0 || c.UID > 1<<31-2 || c.GID > 1<<31-2 {
		bad("uid %d, gid %d: want ids from 1 to 2147483646 (0 means the defaults %d and %d)", c.UID, c.GID, DefaultUID, DefaultGID)
	}
	for _, p := range c.ReadOnly {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			bad("read-only path %q: want an absolute path below /", p)
		}
	}
	for _, p := range c.Hidden {
		if !filepath.IsAbs(p) || filepath.Clean(p) == "/" {
			bad("hidden path %q: want an absolute path below /", p)
		}
	}
	l := c.Limits
	if l.Processes < 0 || l.FileSize < 0 || l.Memory < 0 || l.CPU < 0 {
		bad("limits %+v: no limit may be negative (0 takes the default)", l)
	}
	for _, b := range c.AcceptWeaker {
		if !slices.Contains(Boundaries, b) {
			bad("accept_weaker %q: not a boundary; want some of %s", b, strings.Join(Boundaries, ", "))
		}
	}
	return errors.Join(errs...)
}

// ids returns the uid and gid commands run as on a root node.
func (c Config) ids() (uid, gid int) {
	uid, gid = c.UID, c.GID
	if uid == 0 {
		uid = DefaultUID
	}
	if gid == 0 {
		gid = DefaultGID
	}
	return uid, gid
}
