package sandbox

import (
	"errors"
	"fmt"
	"hash/fnv"
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

// DefaultUID and DefaultGID are the ids every tenant's commands share when
// the config names one uid (Config.UID or GID, the older single-uid form)
// without the other: 65533, in the range Debian's policy reserves and never
// hands out (65000-65533), just below nobody (65534).
const (
	DefaultUID = 65533
	DefaultGID = 65533
)

// DefaultIDFirst and DefaultIDCount are the range of ids tenants' commands
// run as on a root node (Config.IDs): 65,536 ids from 1,879,048,192
// (0x70000000), just above the container ranges systemd hands out
// (524,288-1,879,048,191) and below 2^31, where no account, package or
// container runtime takes ids by default. Reserve it on the host
// (docs/operations.md: "root:1879048192:65536" in /etc/subuid and
// /etc/subgid) so that nothing else is given it.
const (
	DefaultIDFirst = 1879048192
	DefaultIDCount = 65536
)

// IDRange is a range of uids (and the gids of the same numbers): First,
// First+1, ..., First+Count-1.
type IDRange struct {
	First, Count int
}

// Cgroup modes of Config.Cgroups.
const (
	// CgroupsAuto, the default (also meant by ""), puts each sandbox in a
	// cgroup of its own, under one per tenant, wherever the node can make
	// cgroups (v2 where delegated to it, v1 where that is what the host
	// has), and the node in one of its own.
	CgroupsAuto = "auto"
	// CgroupsOff uses no cgroup: the limits are rlimits, and the node-wide
	// budget of sandboxes and processes (Limits) is kept by counting.
	CgroupsOff = "off"
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

// Limits cap what one sandboxed command may use, what all of a tenant's
// sandboxes may use together, and what all the node's sandboxes may. A zero
// field takes its default (DefaultLimits for the per-process ones; the
// budgets' defaults are shares of what the host gives the node, see
// Sandbox.Budget).
type Limits struct {
	// Processes caps the processes and threads the sandbox may hold at
	// once (RLIMIT_NPROC, counted in the sandbox's own user namespace, and
	// its cgroup's pids.max).
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

	// SandboxMemory caps, in bytes, the memory of one sandbox as a whole
	// (its cgroup's memory limit: every process, its /tmp, its page
	// cache). Default: TenantMemory.
	SandboxMemory int64
	// TenantProcesses and TenantMemory cap all of one tenant's sandboxes
	// together. Defaults: half of NodeProcesses and NodeMemory.
	TenantProcesses int
	TenantMemory    int64
	// NodeProcesses and NodeMemory cap all the node's sandboxes together,
	// below what the host gives the node, so that the node's own threads
	// and memory never run short. Defaults: half of the host's ceiling
	// (Budget). A value above the ceiling less a reserve is lowered to it.
	NodeProcesses int
	NodeMemory    int64
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
	// UID and GID, when either is set, are what every tenant's commands
	// run as when the node runs as root (the older single-uid form; the
	// other defaults to DefaultUID or DefaultGID): not 0. Zero for both
	// (the default) gives each tenant its own, from UIDs (IDs). On a node
	// that is not root, commands run as the node's own uid and gid.
	UID, GID int
	// UIDs is the range tenants' uids and gids are drawn from on a root
	// node (IDs); zero means DefaultIDFirst and DefaultIDCount.
	UIDs IDRange
	// Tenants are the tenants the node serves, known at start: two whose
	// ids collide in UIDs are refused by Validate.
	Tenants []string
	// ReadOnly are more host paths (absolute) shown read-only inside the
	// sandbox, beside the system directories (/usr, /bin, /sbin, /lib*,
	// /etc, /opt): tool chains installed elsewhere, say.
	ReadOnly []string
	// Hidden are host paths (absolute) that must be absent inside the
	// sandbox even where they lie under a directory it shows: the node's
	// data dir, its workspace root, its config file and credentials.
	// Directories leading to the workspace appear as empty directories.
	// They are hidden by what they are: under the name given, the path
	// with its symbolic links resolved, every other mount of the same
	// file system that shows them, and their device and inode. New
	// refuses one that cannot be hidden (a file with more hard links than
	// the one name, one inside WorkspaceRoot).
	Hidden []string
	// WorkspaceRoot is the directory holding the workspaces. Each
	// sandbox shows its own workspace whole, so nothing hidden may lie in
	// it. Default "": no such check.
	WorkspaceRoot string
	// RunDir is the node's own directory for what sandboxes need on the
	// host (a mount point per run; the private temporary directories of
	// the fallback without namespaces). New makes it mode 0700 and
	// empties it of what runs left (a node killed mid-call), so each node
	// needs one of its own: DATA/sandbox. Default "": the system's
	// temporary directory, emptied of nothing.
	RunDir string
	// Cgroups is CgroupsAuto (the default, also meant by "") or
	// CgroupsOff.
	Cgroups string
	// TenantDisk, when set, gives each of Tenants a file system of its
	// own of that many bytes for its workspaces (WorkspaceRoot/TENANT):
	// an ext4 image in DiskDir on a loop device (disk.go). It needs a
	// root node, loop devices and mkfs.ext4. Default 0: the workspaces
	// are wherever WorkspaceRoot is.
	TenantDisk int64
	// DiskDir is where the tenants' disk images are kept: DATA/disks.
	DiskDir string
	// Limits cap each command; zero fields take DefaultLimits.
	Limits Limits
	// Prepared is how many sandboxes Start keeps prepared ahead of need
	// for each tenant (and network mode) that ran a command in the last
	// minute: 0 means DefaultPrepared, a negative number none (every
	// command then waits for its sandbox to be set up).
	Prepared int
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
	if c.WorkspaceRoot != "" && !filepath.IsAbs(c.WorkspaceRoot) {
		bad("workspace root %q: want an absolute path", c.WorkspaceRoot)
	}
	if c.TenantDisk < 0 {
		bad("tenant disk %d: want a size in bytes, or 0 for none", c.TenantDisk)
	}
	if c.RunDir != "" && (!filepath.IsAbs(c.RunDir) || filepath.Clean(c.RunDir) == "/") {
		bad("run dir %q: want an absolute path below /", c.RunDir)
	}
	switch c.Cgroups {
	case "", CgroupsAuto, CgroupsOff:
	default:
		bad("cgroups %q: want %q (the default) or %q", c.Cgroups, CgroupsAuto, CgroupsOff)
	}
	if r := c.UIDs; r != (IDRange{}) && (r.First < 1 || r.Count < 1 || r.First+r.Count-1 > 1<<31-2) {
		bad("uids {first %d, count %d}: want a range of ids from 1 to 2147483646 (zero for the default {%d, %d})", r.First, r.Count, DefaultIDFirst, DefaultIDCount)
	} else if c.UID == 0 && c.GID == 0 {
		byID := map[int]string{}
		for _, t := range c.Tenants {
			uid, _ := c.IDs(t)
			if other, ok := byID[uid]; ok && other != t {
				bad("tenants %q and %q both get uid %d from the range {first %d, count %d}: sandboxed commands of different tenants must not share a uid; choose a wider range (sandbox.uids.count) or another first id", other, t, uid, c.idRange().First, c.idRange().Count)
			}
			byID[uid] = t
		}
	}
	l := c.Limits
	if l.Processes < 0 || l.FileSize < 0 || l.Memory < 0 || l.CPU < 0 || l.SandboxMemory < 0 ||
		l.TenantProcesses < 0 || l.TenantMemory < 0 || l.NodeProcesses < 0 || l.NodeMemory < 0 {
		bad("limits %+v: no limit may be negative (0 takes the default)", l)
	}
	for _, b := range c.AcceptWeaker {
		if !slices.Contains(Boundaries, b) {
			bad("accept_weaker %q: not a boundary; want some of %s", b, strings.Join(Boundaries, ", "))
		}
	}
	return errors.Join(errs...)
}

// IDs returns the uid and gid tenant's commands run as on a root node. With
// Config.UID or GID set, every tenant shares them. Otherwise each tenant has
// its own, the same number for both: First + (FNV-1a, 32 bits, of the
// tenant's name) mod Count, in the range UIDs (default DefaultIDFirst,
// DefaultIDCount). The same name gives the same ids on every node and
// across restarts, so a tenant's workspaces stay its own; Validate refuses
// two configured tenants that collide.
func (c Config) IDs(tenant string) (uid, gid int) {
	if c.UID != 0 || c.GID != 0 {
		uid, gid = c.UID, c.GID
		if uid == 0 {
			uid = DefaultUID
		}
		if gid == 0 {
			gid = DefaultGID
		}
		return uid, gid
	}
	r := c.idRange()
	h := fnv.New32a()
	h.Write([]byte(tenant))
	id := r.First + int(h.Sum32()%uint32(r.Count))
	return id, id
}

// idRange is UIDs with its defaults.
func (c Config) idRange() IDRange {
	if c.UIDs == (IDRange{}) {
		return IDRange{First: DefaultIDFirst, Count: DefaultIDCount}
	}
	return c.UIDs
}
