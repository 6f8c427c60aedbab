package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// noopArg, as a process's first argument, makes Main exit 0 at once: the
// probe starts it with one namespace flag at a time to find which one the
// kernel refuses.
const noopArg = "__callsheet_sandbox_noop__"

// Errors returned by Sandbox.
var (
	// ErrWeaker is wrapped by the error Ready (and so Attach) returns when
	// the kernel cannot give a required boundary that the config does not
	// accept the lack of; the message names each and why.
	ErrWeaker = errors.New("sandbox: a required boundary is unavailable")
	// ErrSetup is wrapped by the error Attached.Finish returns when the
	// sandbox could not be set up, so the command never started.
	ErrSetup = errors.New("sandbox: the command could not be started in the sandbox")
)

// Boundary is one line of the start-up report.
type Boundary struct {
	// Name is one of Boundaries.
	Name string
	// Available reports that the kernel gives it and the sandbox uses it.
	Available bool
	// Required reports that commands are refused without it, unless the
	// config accepts its lack (Config.AcceptWeaker).
	Required bool
	// Accepted reports that the config accepts running without it.
	Accepted bool
	// Detail says what it does when available, and why not when not.
	Detail string
}

// String renders the boundary as the node logs it:
// "network: available: ...", "pid: UNAVAILABLE (required): ...".
func (b Boundary) String() string {
	state := "available"
	switch {
	case b.Available:
	case b.Required && b.Accepted:
		state = "unavailable (accepted by sandbox.accept_weaker)"
	case b.Required:
		state = "UNAVAILABLE (required: commands are refused)"
	default:
		state = "unavailable"
	}
	return b.Name + ": " + state + ": " + b.Detail
}

// Report is what a Sandbox can give on this kernel, one Boundary per name of
// Boundaries, in that order.
type Report []Boundary

// Get returns the boundary called name.
func (r Report) Get(name string) Boundary {
	for _, b := range r {
		if b.Name == name {
			return b
		}
	}
	return Boundary{Name: name}
}

// Run is one command's part of the sandbox.
type Run struct {
	// Tenant is the tenant the command runs for: its uid on a root node
	// (Config.IDs), its share of the node's budget and its cgroup. ""
	// stands for a tenant of that name.
	Tenant string
	// Workspace is the directory the command runs in, the only one it may
	// write besides its private /tmp: an absolute path. Required.
	Workspace string
	// Dir is the directory the command starts in, inside the workspace;
	// "" means the workspace itself.
	Dir string
	// Network overrides Config.Network for this run ("" keeps it).
	Network string
	// ReadOnly are more host paths shown read-only for this run (a
	// command tool's program, say).
	ReadOnly []string
	// Opened, when not nil, is the workspace directory the caller already
	// opened and verified (a handle that came through no path a session
	// could swap); Attach binds that very directory. Nil: Attach opens
	// Workspace itself, refusing a symlink in its last component. The
	// caller keeps ownership of the file.
	Opened *os.File
	// Deadline, when set, is when the sandbox ends on its own: its init
	// (the namespace helper) exits then, and the kernel kills every process
	// in its PID namespace, whether or not the node that started it is
	// still running (a node stopped past its lease cannot kill its calls,
	// and a fleet-wide cap's slot must not outlive them; docs/spec.md §7).
	// The node kills a call at its own deadline first; this is the backstop.
	Deadline time.Time
}

// Sandbox runs commands in fresh Linux namespaces (docs/spec.md §10
// "Sandbox"), with Landlock and seccomp for depth where the kernel has them.
// Build it with New; it is safe for concurrent use.
type Sandbox struct {
	cfg  Config
	root bool
	// own are the node's uid and gid: what commands run as when it is
	// not root.
	ownUID, ownGID int
	landlock       Status
	seccomp        bool
	// useLandlock: Landlock is available and worked in the probe; seccomp,
	// once probed, says the filter loaded there. A layer of depth that
	// fails in the probe is reported and left out, not a run's failure.
	useLandlock bool
	// ns: the namespace helper works; net: and so does a network
	// namespace.
	ns, net bool
	report  Report
	// res is the sandboxes' share of the host: cgroups, or the budget kept
	// by counting (resources.go).
	res *resources
	// disks are the tenants' disks New mounted (disk.go).
	disks []mountedDisk
	// pool keeps sandboxes prepared ahead for Start (pool.go); nil with
	// Config.Prepared below zero. shown are the host paths every view
	// shows (Sandbox.preparable).
	pool  *pool
	shown []string
	// reaping waits for the first processes of sandboxes whose command
	// ended (Process.Wait), and gives their shares back; Close waits.
	reaping *sync.WaitGroup
}

// New checks cfg, prepares the node's share of the host and probes the
// kernel: it makes Config.RunDir (emptied of what earlier runs left), sets
// the sandboxes' cgroups up where it can (moving this process into a cgroup
// of its own, see Budget), and starts the sandbox once, with nothing to
// run, to see which boundaries it gets (Report). It fails for an invalid
// cfg (wrapping ErrInvalidConfig), a hidden path it cannot hide (wrapping
// ErrCannotHide) and a RunDir it cannot make; a kernel that cannot give a
// boundary is reported, and Ready refuses. With Config.TenantDisk it makes
// and mounts each tenant's disk (failing with ErrDisk), which Close
// unmounts. The binary must call Main at the start of main (or TestMain).
func New(cfg Config) (*Sandbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	findHelper()
	if cfg.Network == "" {
		cfg.Network = NetworkNone
	}
	if cfg.Cgroups == "" {
		cfg.Cgroups = CgroupsAuto
	}
	cfg.Limits = cfg.Limits.withDefaults()
	s := &Sandbox{cfg: cfg, root: os.Geteuid() == 0, landlock: Probe(), ownUID: os.Getuid(), ownGID: os.Getgid(), reaping: &sync.WaitGroup{}}
	s.useLandlock = s.landlock.Available()
	if _, err := s.hidden(); err != nil {
		return nil, err
	}
	if err := prepareRunDir(cfg.RunDir); err != nil {
		return nil, err
	}
	if err := s.setUpDisks(); err != nil {
		return nil, err
	}
	s.res = newResources(cfg)
	s.res.budget.Disk = s.diskReport()
	s.seccomp = auditArch() != 0
	s.report = s.probe()
	s.shown = shownPaths(cfg)
	if n := cfg.Prepared; n >= 0 && s.ns {
		if n == 0 {
			n = DefaultPrepared
		}
		s.pool = newPool(s, n)
	}
	return s, nil
}

// ids returns the uid and gid tenant's commands run as.
func (s *Sandbox) ids(tenant string) (uid, gid int) {
	if !s.root {
		return s.ownUID, s.ownGID
	}
	return s.cfg.IDs(tenant)
}

// probeTenant is the tenant whose ids the probe runs as: the first the
// config names, else "default".
func (s *Sandbox) probeTenant() string {
	if len(s.cfg.Tenants) > 0 {
		return s.cfg.Tenants[0]
	}
	return "default"
}

// runDir is where a run's host directory is made.
func (s *Sandbox) runDir() string {
	if s.cfg.RunDir != "" {
		return s.cfg.RunDir
	}
	return os.TempDir()
}

// prepareRunDir makes dir (when set) mode 0700 and removes what runs left in
// it: a node killed mid-call leaves its runs' directories behind.
func prepareRunDir(dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: the run directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("sandbox: the run directory: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("sandbox: the run directory: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), runDirPrefix) {
			removeAll(filepath.Join(dir, e.Name()))
		}
	}
	return nil
}

// MkdirTemp makes a temporary directory, mode 0700, for a command run
// outside the sandbox (an escalated call): in Config.RunDir when set, which
// New empties of what a killed node left, else in the system's temporary
// directory. The caller removes it.
func (s *Sandbox) MkdirTemp() (string, error) {
	return os.MkdirTemp(s.runDir(), runDirPrefix+"unconfined-")
}

// runDirPrefix starts the name of every run's host directory.
const runDirPrefix = "callsheet-sandbox-"

// Config returns the config the sandbox runs with, defaults filled in.
func (s *Sandbox) Config() Config { return s.cfg }

// Owner returns the uid and gid tenant's sandboxed commands run as: what
// its workspaces must be owned by for them to write them (the node's own
// ids when it is not root).
func (s *Sandbox) Owner(tenant string) (uid, gid int) { return s.ids(tenant) }

// Budget returns what the node's sandboxes may use, resolved from the
// config's limits and what the host gives the node, and how it is kept.
func (s *Sandbox) Budget() Budget { return s.res.budget }

// Report returns the boundaries as probed by New.
func (s *Sandbox) Report() Report { return slices.Clone(s.report) }

// Ready returns nil when commands can run: every required boundary is
// available or accepted. Otherwise an error wrapping ErrWeaker names each
// missing boundary, why, and how to accept it; or ErrNoHelper when the
// binary never called Main.
func (s *Sandbox) Ready() error {
	if !mainCalled.Load() {
		return ErrNoHelper
	}
	var missing []string
	for _, b := range s.report {
		if b.Required && !b.Available && !b.Accepted {
			missing = append(missing, fmt.Sprintf("%s (%s)", b.Name, b.Detail))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: this kernel cannot give %s. The node's operator can accept running without it with \"sandbox\": {\"accept_weaker\": [%s]} in the config",
		ErrWeaker, strings.Join(missing, "; "), quoted(s.missingNames()))
}

func (s *Sandbox) missingNames() []string {
	var names []string
	for _, b := range s.report {
		if b.Required && !b.Available && !b.Accepted {
			names = append(names, b.Name)
		}
	}
	return names
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// Attached is a command Attach prepared. Call Started once cmd.Start
// returned nil, and Finish once cmd.Wait returned (or Start failed).
type Attached struct {
	dir    string
	cmd    *exec.Cmd
	status *os.File   // read end of the helper's status pipe
	child  []*os.File // the child's ends, closed in the node after Start
	// ctl is the node's end of the control socket: Started sends prep and
	// call on it (with ws, the workspace's descriptor), once the helper is
	// in its cgroup; it waits for them before it does anything.
	ctl        int
	prep, call []byte
	ws         *os.File
	// run is the run's share of the node's resources (its cgroup, or its
	// slot in the counted budget); released by Finish.
	run      *runShare
	started  bool
	placeErr error
}

// Started puts the helper in the run's cgroup, sends it the policy and the
// call (it waits for them, so nothing runs outside the cgroup) and closes
// the node's copies of the files the helper inherited. If the helper cannot
// be put in its cgroup it is killed, and Finish says why.
func (a *Attached) Started() {
	a.started = true
	for _, f := range a.child {
		f.Close()
	}
	a.child = nil
	if a.ctl < 0 {
		return
	}
	if a.run != nil && a.cmd != nil && a.cmd.Process != nil {
		if err := a.run.place(a.cmd.Process.Pid); err != nil {
			a.placeErr = err
			a.cmd.Process.Kill()
		}
	}
	if a.placeErr == nil {
		// A helper that died meanwhile makes these fail (EPIPE); Finish
		// reports what it said.
		if sendFrame(a.ctl, a.prep, nil) == nil {
			sendFrame(a.ctl, a.call, []int{int(a.ws.Fd())})
		}
	}
	a.closeControl()
}

// closeControl closes the node's end of the control socket and the
// workspace's descriptor.
func (a *Attached) closeControl() {
	if a.ctl >= 0 {
		unix.Close(a.ctl)
		a.ctl = -1
	}
	if a.ws != nil {
		a.ws.Close()
		a.ws = nil
	}
}

// Finish reports whether the sandbox started the command: after cmd.Wait,
// an error wrapping ErrSetup (with the helper's reason) means nothing ran.
// It removes the run's private directory. Safe to call once.
func (a *Attached) Finish() error {
	for _, f := range a.child {
		f.Close()
	}
	a.closeControl()
	var err error
	if a.status != nil {
		err = readStatus(a.status, a.started)
		a.status.Close()
	}
	if a.placeErr != nil {
		err = fmt.Errorf("%w: %v", ErrSetup, a.placeErr)
	}
	if a.dir != "" {
		removeAll(a.dir)
	}
	if a.run != nil {
		a.run.release()
		a.run = nil
	}
	return err
}

// readStatus reads what the helper said on its status pipe until it
// closed it and turns it into Finish's error: nil once it said "ok",
// ErrSetup with its reason when it said "error: ...", or ErrSetup when it
// was stopped before it said either (only after it started).
func readStatus(status *os.File, started bool) error {
	msg, _ := io.ReadAll(io.LimitReader(status, 64<<10))
	s := strings.TrimPrefix(string(msg), "ready\n")
	switch {
	case strings.HasPrefix(s, "ok\n"):
		return nil
	case strings.HasPrefix(s, "error: "):
		return fmt.Errorf("%w: %s", ErrSetup, strings.TrimSpace(strings.TrimPrefix(s, "error: ")))
	case started:
		// Killed before it said anything (a timeout, a cancel):
		// nothing ran either, but the caller's own error says why.
		return fmt.Errorf("%w: the sandbox was stopped while it was being set up", ErrSetup)
	}
	return nil
}

// Attach rewrites cmd, built to run a command unconfined (Path and Args as
// exec.Command set them, Env, Dir, the standard streams), so that it runs in
// the sandbox instead: cmd then starts this binary (/proc/self/exe) as the
// namespace helper, in fresh user, mount, PID, IPC, UTS and cgroup
// namespaces and, unless the network is the host's, a network namespace.
// The helper keeps cmd's process group, so killing that group (or the
// helper alone) kills everything the command started, and it dies with the
// node (Pdeathsig). TMPDIR is set to the sandbox's private /tmp.
//
// On a kernel without the namespaces, when the config accepts it, the
// command runs under the Landlock helper alone (Wrap), with the limits.
// Attach returns Ready's error when the sandbox cannot run commands,
// ErrInvalidSpec for a relative or missing workspace, and errors from
// preparing the run's files.
func (s *Sandbox) Attach(cmd *exec.Cmd, r Run) (*Attached, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	return s.attach(cmd, r, false)
}

func (s *Sandbox) attach(cmd *exec.Cmd, r Run, probe bool) (_ *Attached, err error) {
	if !filepath.IsAbs(r.Workspace) {
		return nil, fmt.Errorf("%w: workspace %q is not an absolute path", ErrInvalidSpec, r.Workspace)
	}
	if r.Dir == "" {
		r.Dir = r.Workspace
	}
	if rel, err := filepath.Rel(r.Workspace, r.Dir); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nil, fmt.Errorf("%w: directory %q is not inside the workspace %q", ErrInvalidSpec, r.Dir, r.Workspace)
	}
	network := s.cfg.Network
	if r.Network != "" {
		network = r.Network
	}
	uid, gid := s.ids(r.Tenant)
	hidden, err := s.hidden()
	if err != nil {
		return nil, err
	}
	a := &Attached{cmd: cmd, ctl: -1}
	defer func() {
		if err != nil {
			a.Finish()
		}
	}()
	argv := slices.Clone(cmd.Args)
	if len(argv) == 0 {
		return nil, fmt.Errorf("%w: no command to run", ErrInvalidSpec)
	}
	if cmd.Err == nil && cmd.Path != "" {
		argv[0] = cmd.Path
	}
	cmd.Err = nil // the helper looks the program up inside the sandbox

	if !s.ns {
		// Without namespaces the command's private temporary directory is
		// on the host: in the node's run directory, mode 0700, removed
		// when the run ends (and, in the node's own RunDir, at its next
		// start after a kill).
		if a.dir, err = os.MkdirTemp(s.runDir(), runDirPrefix); err != nil {
			return nil, fmt.Errorf("sandbox: the run's private directory: %w", err)
		}
		if err := os.Mkdir(filepath.Join(a.dir, "tmp"), 0o700); err != nil {
			return nil, fmt.Errorf("sandbox: the run's private directory: %w", err)
		}
		return s.attachLandlock(cmd, a, argv, r, network)
	}
	if !probe {
		if a.run, err = s.res.admit(r.Tenant); err != nil {
			return nil, err
		}
	}
	prep := s.prepMessage(hidden, network, probe)
	prep.Workspace = filepath.Clean(r.Workspace)
	call := s.callMessage(r, argv, cmd.Env, a.run)
	if a.ws, err = s.openWorkspace(call.Workspace, r.Opened); err != nil {
		return nil, err
	}
	if a.prep, err = encodeMessage(prep); err != nil {
		return nil, err
	}
	if a.call, err = encodeMessage(call); err != nil {
		return nil, err
	}
	ctl, child, err := controlPair()
	if err != nil {
		return nil, err
	}
	a.ctl = ctl
	statusR, statusW, err := os.Pipe()
	if err != nil {
		child.Close()
		return nil, err
	}
	a.status = statusR
	a.child = []*os.File{child, statusW}

	cmd.ExtraFiles = a.child
	s.helperCommand(cmd, uid, gid, network)
	return a, nil
}

// prepMessage is the prepare message of a sandbox of this node: what every
// call's view shares.
func (s *Sandbox) prepMessage(hidden hiddenSet, network string, probe bool) nsPrep {
	return nsPrep{
		Tree:        s.root,
		Hidden:      hidden.names,
		HiddenIDs:   hidden.ids,
		ReadOnly:    slices.Clone(s.cfg.ReadOnly),
		HostNetwork: network == NetworkHost,
		TmpSize:     s.res.budget.SandboxMemory,
		Landlock:    s.useLandlock,
		Seccomp:     s.seccomp,
		Probe:       probe,
	}
}

// callMessage is the call message of run r: argv and env are the
// command's, TMPDIR set to the sandbox's /tmp; share, when not nil, is the
// run's share of the resources (its processes limit).
func (s *Sandbox) callMessage(r Run, argv, env []string, share *runShare) nsCall {
	limits := s.cfg.Limits
	if share != nil && share.processes > 0 {
		limits.Processes = share.processes
	}
	return nsCall{
		Workspace: filepath.Clean(r.Workspace),
		Cwd:       filepath.Clean(r.Dir),
		ReadOnly:  slices.Clone(r.ReadOnly),
		Args:      argv,
		Env:       withEnv(env, "TMPDIR", "/tmp"),
		Limits:    limits,
		Deadline:  r.Deadline,
	}
}

// encodeMessage encodes a message to the helper, refusing one beyond what
// the helper accepts.
func encodeMessage(m any) ([]byte, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode the helper's message: %w", err)
	}
	if len(raw) > maxFrame {
		return nil, fmt.Errorf("%w: the sandbox's policy and call are %d bytes, more than %d (too many read-only or hidden paths, or too large an environment)", ErrInvalidSpec, len(raw), maxFrame)
	}
	return raw, nil
}

// controlPair makes the control socket: the node's end, and the helper's
// as a file for cmd.ExtraFiles (the node closes its copy once the helper
// started).
func controlPair() (node int, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("sandbox: the helper's control socket: %w", err)
	}
	return fds[0], os.NewFile(uintptr(fds[1]), "control"), nil
}

// helperCommand makes cmd start the namespace helper (the small helper
// binary, else this binary: helperPath) in fresh user, mount, PID, IPC, UTS
// and cgroup namespaces and, unless the network is the host's, a network
// namespace, as uid and gid, with the capabilities it needs in its own user
// namespace only, dying with the node.
func (s *Sandbox) helperCommand(cmd *exec.Cmd, uid, gid int, network string) {
	cmd.Path = helperPath()
	cmd.Args = []string{cmd.Path, NamespaceArg, protocolID()}
	cmd.Env = helperEnv
	// The helper starts in a directory every uid may reach (the
	// workspace's path may not be: a data dir under /root); it chdirs to
	// the command's inside the sandbox.
	cmd.Dir = "/"
	cmd.SysProcAttr = helperSys(cmd.SysProcAttr, uid, gid, network != NetworkHost, s.root)
}

// helperEnv is the helper's environment: its Go runtime gets one P, so it
// makes few threads (each counts against the sandbox's processes, and
// Landlock and seccomp are applied to every one).
var helperEnv = []string{"GOMAXPROCS=1"}

// helperSys adds to sys (or a new one, when nil) how a helper starts: in
// fresh user, mount, PID, IPC, UTS and cgroup namespaces and, with network,
// a network namespace of its own, as uid and gid, with the capabilities it
// needs in its own user namespace only, dying with its parent's thread. A
// root node (root) lets it call setgroups.
func helperSys(sys *syscall.SysProcAttr, uid, gid int, network, root bool) *syscall.SysProcAttr {
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	sys.Cloneflags = unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP
	if network {
		sys.Cloneflags |= unix.CLONE_NEWNET
	}
	sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
	sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
	// Only a root node may let the sandbox call setgroups (to clear its
	// supplementary groups); an unprivileged one must deny it to write a
	// gid map at all.
	sys.GidMappingsEnableSetgroups = root
	sys.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: !root}
	sys.AmbientCaps = helperCaps
	sys.Pdeathsig = syscall.SIGKILL
	return sys
}

// openWorkspace opens the workspace directory for the helper (or takes
// opened, the caller's verified handle on it), without following a symlink
// in its last component. A root node sends a detached copy of its mount
// (open_tree(2)), which the helper moves in place: the helper's uid could
// not even reach the path (a data dir under /root). A node that is not root
// cannot clone mounts; it sends the O_PATH directory, which the helper
// checks against what it opens itself.
func (s *Sandbox) openWorkspace(ws string, opened *os.File) (*os.File, error) {
	var fd int
	var err error
	if opened != nil {
		fd, err = unix.Openat(int(opened.Fd()), ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	} else {
		fd, err = unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: open the workspace %s: %w", ws, err)
	}
	if !s.root {
		return os.NewFile(uintptr(fd), ws), nil
	}
	defer unix.Close(fd)
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return nil, fmt.Errorf("sandbox: clone the workspace's mount: %w", err)
	}
	return os.NewFile(uintptr(tree), ws), nil
}

// attachLandlock is Attach on a kernel without the namespaces (accepted by
// the config): the Landlock helper confines writes to the workspace and a
// private temporary directory, and the network unless it is the host's.
func (s *Sandbox) attachLandlock(cmd *exec.Cmd, a *Attached, argv []string, r Run, network string) (*Attached, error) {
	tmp := filepath.Join(a.dir, "tmp")
	args, env, err := wrap(Spec{
		Args:     argv,
		Env:      withEnv(cmd.Env, "TMPDIR", tmp),
		Writable: []string{filepath.Clean(r.Workspace), tmp},
		Network:  network == NetworkHost,
	}, s.cfg.Limits, s.landlock.Available())
	if err != nil {
		return nil, err
	}
	cmd.Path, cmd.Args, cmd.Env = args[0], args, env
	sys := cmd.SysProcAttr
	if sys == nil {
		sys = &syscall.SysProcAttr{}
	}
	sys.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = sys
	return a, nil
}

// withEnv returns env with name set to value (replacing any earlier value).
func withEnv(env []string, name, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return append(out, name+"="+value)
}

// removeAll removes dir, making read-only directories in it writable first
// if a plain removal fails (a command may chmod its /tmp).
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// probeCache holds one probe per kind of sandbox: probing starts a sandbox,
// and the answer does not change while the process runs.
var probeCache sync.Map // probeKey → probed

type probeKey struct {
	hostNetwork bool
	uid, gid    int
	root        bool
	// readOnly is Config.ReadOnly joined: those paths are shown in the
	// probe's file system too, and one the uid cannot reach fails it.
	readOnly string
}

type probed struct {
	ns, net bool
	res     probeResult
	startNS string // why the namespaces could not be created, if so
}

// probe finds what this kernel gives and builds the report.
func (s *Sandbox) probe() Report {
	uid, gid := s.ids(s.probeTenant())
	key := probeKey{s.cfg.Network == NetworkHost, uid, gid, s.root, strings.Join(s.cfg.ReadOnly, "\x00")}
	v, ok := probeCache.Load(key)
	if !ok {
		v, _ = probeCache.LoadOrStore(key, s.probeKernel())
	}
	pr := v.(probed)
	s.ns, s.net = pr.ns, pr.net
	s.useLandlock = s.useLandlock && pr.res.Landlock == ""
	s.seccomp = s.seccomp && pr.res.Seccomp == ""
	return s.buildReport(pr)
}

// probeKernel runs the helper once in probe mode; if the namespaces cannot
// be created it finds which one the kernel refuses.
func (s *Sandbox) probeKernel() probed {
	var pr probed
	if !mainCalled.Load() {
		pr.startNS = ErrNoHelper.Error()
		return pr
	}
	ws, err := os.MkdirTemp(s.runDir(), runDirPrefix+"probe-")
	if err != nil {
		pr.startNS = err.Error()
		return pr
	}
	defer os.RemoveAll(ws)
	tenant := s.probeTenant()
	if s.root {
		uid, gid := s.ids(tenant)
		os.Chown(ws, uid, gid)
	}
	s.ns = true
	cmd := exec.Command(selfExe)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	a, err := s.attach(cmd, Run{Tenant: tenant, Workspace: ws}, true)
	if err != nil {
		pr.startNS = err.Error()
		return pr
	}
	flags := cmd.SysProcAttr.Cloneflags
	if err := cmd.Start(); err != nil {
		a.Finish()
		pr.startNS = s.whichNamespace(flags, err)
		return pr
	}
	a.Started()
	cmd.Wait()
	out, _ := io.ReadAll(a.status)
	a.status.Close()
	a.status = nil
	a.Finish()
	out = bytes.TrimPrefix(out, []byte("ready\n"))
	if err := json.Unmarshal(bytes.TrimSpace(out), &pr.res); err != nil {
		msg := strings.TrimSpace(string(out))
		if msg == "" {
			msg = strings.TrimSpace(stderr.String())
		}
		pr.startNS = "the sandbox helper failed: " + strings.TrimPrefix(msg, "error: ")
		return pr
	}
	pr.ns = pr.res.View == "" && pr.res.Caps == ""
	pr.net = s.cfg.Network != NetworkHost && pr.res.Loopback == ""
	return pr
}

// whichNamespace starts a process that exits at once with one namespace
// flag at a time (with a user namespace, which the others need) and says
// which the kernel refuses, and why.
func (s *Sandbox) whichNamespace(flags uintptr, startErr error) string {
	names := []struct {
		flag uintptr
		name string
	}{
		{unix.CLONE_NEWUSER, "user"}, {unix.CLONE_NEWNS, "mount"}, {unix.CLONE_NEWPID, "PID"},
		{unix.CLONE_NEWNET, "network"}, {unix.CLONE_NEWIPC, "IPC"}, {unix.CLONE_NEWUTS, "UTS"}, {unix.CLONE_NEWCGROUP, "cgroup"},
	}
	for _, n := range names {
		if flags&n.flag == 0 {
			continue
		}
		uid, gid := s.ids(s.probeTenant())
		cmd := exec.Command(selfExe, noopArg)
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Cloneflags:  unix.CLONE_NEWUSER | n.flag,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}},
		}
		if err := cmd.Run(); err != nil {
			return fmt.Sprintf("the kernel refuses a new %s namespace: %v%s", n.name, err, namespaceHint(n.flag, err))
		}
	}
	return fmt.Sprintf("the kernel refuses the namespaces together: %v", startErr)
}

// namespaceHint says what usually makes the kernel refuse a namespace.
func namespaceHint(flag uintptr, err error) string {
	switch {
	case errors.Is(err, syscall.EPERM) && flag == unix.CLONE_NEWUSER && os.Geteuid() != 0:
		return " (unprivileged user namespaces are disabled: sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces > 0, or AppArmor's kernel.apparmor_restrict_unprivileged_userns=0; or run the node as root)"
	case errors.Is(err, syscall.EPERM):
		return " (a container or security module forbids it: run the node with CAP_SYS_ADMIN, or where namespaces are allowed)"
	case errors.Is(err, syscall.ENOSPC):
		return " (the user.max_*_namespaces sysctl is 0 or exhausted)"
	case errors.Is(err, syscall.EINVAL):
		return " (the kernel is built without that namespace)"
	}
	return ""
}

// buildReport turns a probe into the report.
func (s *Sandbox) buildReport(pr probed) Report {
	accepted := func(name string) bool { return slices.Contains(s.cfg.AcceptWeaker, name) }
	why := func(step string) string {
		switch {
		case pr.startNS != "":
			return pr.startNS
		case step == "" && pr.res.View != "":
			// The probe stops when the file system cannot be built.
			return "not tried: the sandbox's file system could not be built: " + pr.res.View
		}
		return step
	}
	var r Report
	add := func(name string, ok, required bool, detail string) {
		r = append(r, Boundary{Name: name, Available: ok, Required: required, Accepted: required && accepted(name), Detail: detail})
	}

	switch {
	case s.cfg.Network == NetworkHost:
		add(BoundaryNetwork, false, false, `off: sandbox.network is "host", so commands reach what the node reaches, its own ports included`)
	case pr.ns && pr.net:
		add(BoundaryNetwork, true, true, "a network namespace of its own: no socket of any family reaches the host; the sandbox has its own loopback")
	case pr.ns:
		add(BoundaryNetwork, false, true, "the sandbox's network namespace has no working loopback: "+pr.res.Loopback)
	default:
		add(BoundaryNetwork, false, true, why(""))
	}
	if pr.ns {
		add(BoundaryPID, true, true, "a PID namespace of its own: the node and other sessions' processes are invisible, and every process the command starts dies when it ends or when the node dies")
		add(BoundaryMount, true, true, "a file system of its own: system directories read-only, the workspace and a private /tmp (a tmpfs) writable; the data dir, config, credentials, workspace root and other workspaces absent, under whatever name")
	} else {
		add(BoundaryPID, false, true, why(pr.res.View))
		add(BoundaryMount, false, true, why(pr.res.View))
	}
	switch {
	case pr.ns && s.root && (s.cfg.UID != 0 || s.cfg.GID != 0):
		uid, gid := s.ids("")
		add(BoundaryUser, true, true, fmt.Sprintf("every tenant's commands run as uid %d, gid %d (sandbox.uid, sandbox.gid: not root, but one uid for all tenants), with no capabilities, in a user namespace of their own", uid, gid))
	case pr.ns && s.root:
		r := s.cfg.idRange()
		add(BoundaryUser, true, true, fmt.Sprintf("each tenant's commands run as a uid and gid of its own from %d-%d (not root), with no capabilities, in a user namespace of their own", r.First, r.First+r.Count-1))
	case pr.ns:
		add(BoundaryUser, true, true, fmt.Sprintf("commands run as the node's own uid %d (the node is not root), with no capabilities, in a user namespace of their own", s.ownUID))
	case !s.root:
		add(BoundaryUser, true, true, fmt.Sprintf("commands run as the node's own uid %d (the node is not root), with no capabilities", s.ownUID))
	default:
		add(BoundaryUser, false, true, "the node is root and cannot start commands as another uid without a user namespace: "+why(pr.res.Caps))
	}
	switch {
	case pr.ns && pr.res.Limits == "":
		add(BoundaryLimits, true, true, s.cfg.Limits.String()+"; "+s.res.budget.String())
	case pr.ns:
		add(BoundaryLimits, false, true, pr.res.Limits)
	default:
		add(BoundaryLimits, true, true, s.cfg.Limits.String()+" (without a user namespace, processes are counted per uid, across every sandbox)")
	}
	switch {
	case !s.landlock.Available():
		add(BoundaryLandlock, false, false, s.landlock.String())
	case pr.ns && pr.res.Landlock != "":
		add(BoundaryLandlock, false, false, pr.res.Landlock)
	default:
		add(BoundaryLandlock, true, false, s.landlock.String()+"; inside the namespaces it confines writes to the workspace and /tmp")
	}
	switch {
	case auditArch() == 0:
		add(BoundarySeccomp, false, false, errSeccompArch.Error())
	case pr.ns && pr.res.Seccomp != "":
		add(BoundarySeccomp, false, false, pr.res.Seccomp)
	default:
		add(BoundarySeccomp, true, false, "a filter refuses namespace, mount, eBPF, io_uring, keyring, module and other kernel-surface system calls, socket families but UNIX, IPv4, IPv6 and netlink, 32-bit system calls, and setting a setuid or setgid bit")
	}
	return r
}
