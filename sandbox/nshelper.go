package sandbox

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// NamespaceArg, as a process's first argument, makes Main act as the
// namespace helper: the first process of a fresh set of namespaces, which
// builds the sandbox's view, confines itself and starts the command as its
// only child (see Sandbox.Attach and Sandbox.Start). Its second argument is
// the protocol the node speaks (protocolID); a helper built from other
// sources refuses it. It is meant to be passed by the sandbox only.
const NamespaceArg = "__callsheet_sandbox_ns__"

// The helper's inherited files (cmd.ExtraFiles, in this order).
const (
	// fdControl is a stream socket from the node: first the prepare
	// message (nsPrep), then the call message (nsCall) with the workspace
	// and, for a prepared sandbox, the command's standard streams as
	// SCM_RIGHTS; each message a frame (sendFrame).
	fdControl = 3
	// fdStatus is written: "ready\n" once the sandbox is prepared, then
	// "ok\n" once the command runs, or "error: ...\n"; "exit N\n" once the
	// command exited with status N (128+S for signal S) and every other
	// process of the sandbox is gone.
	fdStatus = 4
)

// nsInherited are the descriptors the namespace helper keeps of those it
// inherited (besides 0, 1 and 2); it closes any other at start.
var nsInherited = []int{fdControl, fdStatus}

// systemDirs are the host's top-level entries every sandbox shows,
// read-only: what programs and their libraries need. A symlink among them
// (/bin -> usr/bin on a merged-/usr system) is recreated as a symlink.
var systemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt"}

// devices are the character devices a sandbox shows, bound from the host.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// helperCaps are the capabilities (in the sandbox's own user namespace) the
// helper keeps across its exec to build the view; it drops them all before
// it starts the command. Numbers from linux/capability.h.
var helperCaps = []uintptr{
	unix.CAP_SYS_ADMIN,  // mounts, pivot_root, sethostname
	unix.CAP_NET_ADMIN,  // bring the sandbox's loopback up
	unix.CAP_SETPCAP,    // empty the bounding set
	unix.CAP_SYS_CHROOT, // pivot_root's companion chroot checks
}

// nsPrep is what the helper needs before any call: what every sandbox of
// the node shows and hides. The node sends it once the helper is in its
// cgroup; the helper builds everything of the view but the workspace, then
// says "ready".
type nsPrep struct {
	// Workspace, when the call is already known (Attach), is its
	// workspace: it counts as hidden while the tree is built, so that its
	// parents (the workspace root, other workspaces) never come in with a
	// directory that holds it. A prepared sandbox leaves it empty: the
	// node prepares only for workspaces that lie in no directory the view
	// shows (Sandbox.preparable), and the helper checks it (finish).
	Workspace string `json:"workspace,omitempty"`
	// Tree says the workspace will come as a detached mount to move in
	// place (open_tree by a root node); otherwise as an O_PATH directory
	// whose device and inode the helper checks against the path it opens
	// itself.
	Tree bool `json:"tree"`
	// Hidden are the names of Config's hidden paths (as given, resolved,
	// and through other mounts), HiddenIDs their devices and inodes;
	// ReadOnly are Config's read-only paths.
	Hidden    []string `json:"hidden"`
	HiddenIDs []fileID `json:"hidden_ids"`
	ReadOnly  []string `json:"read_only"`
	// HostNetwork is set when the sandbox shares the node's network.
	HostNetwork bool `json:"host_network"`
	// TmpSize is the size of the sandbox's /tmp, a tmpfs of its own (its
	// pages count in the sandbox's memory cgroup where there is one).
	TmpSize int64 `json:"tmp_size"`
	// Landlock enables Landlock (the kernel's ABI); Seccomp loads the
	// filter.
	Landlock bool `json:"landlock"`
	Seccomp  bool `json:"seccomp"`
	// Probe builds everything, runs no command and reports each step.
	Probe bool `json:"probe"`
	// Pivot moves into the view before the call (a prepared sandbox of a
	// root node, whose workspace comes as a detached mount that needs no
	// host path): the host's tree is gone before the call arrives, and the
	// call adds only the workspace. Never with run read-only paths.
	Pivot bool `json:"pivot,omitempty"`
}

// nsCall is one call's part: the node sends it when the call arrives (at
// once, for Attach), with the workspace's descriptor and, when Stdio is
// set, the command's standard input, output and error.
type nsCall struct {
	// Workspace is the workspace's path, on the host and inside alike.
	Workspace string `json:"workspace"`
	// Cwd is where the command starts: the workspace or a directory in it.
	Cwd string `json:"cwd"`
	// ReadOnly are the run's own read-only paths (Run.ReadOnly).
	ReadOnly []string `json:"read_only,omitempty"`
	// Args and Env are the command's argv and complete environment; Args
	// is empty only for a probe.
	Args []string `json:"args"`
	Env  []string `json:"env"`
	// Stdio says the message carries the command's standard streams;
	// otherwise it gets the helper's own 0, 1 and 2 (Attach).
	Stdio  bool   `json:"stdio"`
	Limits Limits `json:"limits"`
	// Deadline, when set, is when the helper exits, ending every process
	// of the sandbox (Run.Deadline).
	Deadline time.Time `json:"deadline,omitzero"`
}

// probeResult is what a probing helper reports on fdStatus: the error of
// each step, "" for a step that worked.
type probeResult struct {
	View     string `json:"view"`
	Loopback string `json:"loopback"`
	Limits   string `json:"limits"`
	Caps     string `json:"caps"`
	Landlock string `json:"landlock"`
	Seccomp  string `json:"seccomp"`
}

// decodeStrict decodes one JSON object of v's fields and nothing else.
func decodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

// absolute checks that every path is absolute.
func absolute(paths ...string) error {
	for _, path := range paths {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("%q is not an absolute path", path)
		}
	}
	return nil
}

// decodePrep reads the prepare message the node sent: one JSON object of
// nsPrep's fields and nothing else, with absolute paths.
func decodePrep(raw []byte) (nsPrep, error) {
	var p nsPrep
	if err := decodeStrict(raw, &p); err != nil {
		return nsPrep{}, fmt.Errorf("decode the sandbox's policy: %w", err)
	}
	paths := append(slices.Clone(p.Hidden), p.ReadOnly...)
	if p.Workspace != "" {
		paths = append(paths, p.Workspace)
	}
	if err := absolute(paths...); err != nil {
		return nsPrep{}, fmt.Errorf("decode the sandbox's policy: %w", err)
	}
	return p, nil
}

// decodeCall reads a call message: one JSON object of nsCall's fields and
// nothing else, with absolute paths, a working directory inside the
// workspace and, unless probe, a command.
func decodeCall(raw []byte, probe bool) (nsCall, error) {
	var c nsCall
	if err := decodeStrict(raw, &c); err != nil {
		return nsCall{}, fmt.Errorf("decode the call: %w", err)
	}
	if err := absolute(append([]string{c.Workspace, c.Cwd}, c.ReadOnly...)...); err != nil {
		return nsCall{}, fmt.Errorf("decode the call: %w", err)
	}
	if rel, err := filepath.Rel(c.Workspace, c.Cwd); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return nsCall{}, fmt.Errorf("decode the call: directory %q is not inside the workspace %q", c.Cwd, c.Workspace)
	}
	if !probe && (len(c.Args) == 0 || c.Args[0] == "") {
		return nsCall{}, errors.New("decode the call: no command to run")
	}
	return c, nil
}

// nsMain is the namespace helper's main: it never returns.
func nsMain(args []string) {
	status := os.NewFile(fdStatus, "status")
	if len(args) != 1 || args[0] != protocolID() {
		// Built from other sources than the node (a stale helper binary):
		// it must not guess what the node meant.
		err := fmt.Errorf("the sandbox helper speaks protocol %s, the node %q: build the helper from the node's sources", protocolID(), strings.Join(args, " "))
		fmt.Fprintf(status, "error: %v\n", err)
		os.Exit(ExitSetupFailed)
	}
	code, err := nsHelper(status)
	if err != nil {
		fmt.Fprintf(status, "error: %v\n", err)
		fmt.Fprintf(os.Stderr, "%s%v\n", ErrorPrefix, err)
		os.Exit(ExitSetupFailed)
	}
	os.Exit(code)
}

// nsHelper prepares the sandbox, waits for the call, finishes the sandbox
// for it and runs the command, returning its exit status, or an error when
// nothing could be started.
func nsHelper(status *os.File) (int, error) {
	for _, fd := range nsInherited {
		syscall.CloseOnExec(fd)
	}
	// The OOM killer takes the sandbox's processes before anything of the
	// host's, the node above all (raising one's own score needs no
	// privilege; the command and its children inherit it).
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(oomScoreAdj)), 0); err != nil {
		return 0, fmt.Errorf("raise the sandbox's oom_score_adj: %w", err)
	}
	// The node sends the policy once this process is in the run's cgroup
	// (Attached.Started, or the pool): nothing is done before.
	raw, _, err := recvFrame(fdControl, 0)
	if err != nil {
		return 0, fmt.Errorf("read the sandbox's policy: %w", err)
	}
	p, err := decodePrep(raw)
	if err != nil {
		return 0, err
	}
	// A cgroup namespace rooted here: /proc/self/cgroup inside names no
	// cgroup of the host's (not the tenant's, not the node's).
	_ = unix.Unshare(unix.CLONE_NEWCGROUP)
	var res probeResult
	step := func(dst *string, err error) error {
		if err != nil {
			*dst = err.Error()
		}
		return err
	}
	// In probe mode every step is tried and reported; otherwise the first
	// failure ends the run, and nothing runs.
	check := func(dst *string, err error) error {
		if step(dst, err) != nil && !p.Probe {
			return err
		}
		return nil
	}
	report := func() (int, error) {
		b, _ := json.Marshal(res)
		status.Write(append(b, '\n'))
		return 0, nil
	}
	v, err := prepareView(p)
	if err := check(&res.View, err); err != nil {
		return 0, fmt.Errorf("build the sandbox's file system: %w", err)
	}
	if p.Probe && res.View != "" {
		// Without its own file system the helper still sees the host's
		// /proc, where pid 1 is not itself: the later steps (Landlock on
		// every thread reads /proc/self, here the host init's tasks)
		// would wait for threads that are not its own, for ever. The
		// probe reports the view's failure; the rest is moot.
		return report()
	}
	if !p.HostNetwork {
		if err := check(&res.Loopback, loopbackUp()); err != nil {
			return 0, fmt.Errorf("bring the sandbox's loopback up: %w", err)
		}
	}
	_ = unix.Sethostname([]byte("callsheet-sandbox"))
	status.Write([]byte("ready\n"))

	// Everything above is the same for every call of the tenant; from
	// here on it is this call's.
	raw, fds, err := recvFrame(fdControl, 4)
	unix.Close(fdControl)
	if err != nil {
		closeAll(fds)
		return 0, fmt.Errorf("read the call: %w", err)
	}
	c, err := decodeCall(raw, p.Probe)
	if err == nil && (len(fds) < 1 || c.Stdio && len(fds) != 4 || !c.Stdio && len(fds) != 1) {
		err = fmt.Errorf("the call came with %d descriptors, want the workspace%s", len(fds), map[bool]string{true: " and three standard streams"}[c.Stdio])
	}
	if err != nil {
		closeAll(fds)
		return 0, err
	}
	if err := check(&res.View, v.finish(p, c, fds[0])); err != nil {
		return 0, fmt.Errorf("build the sandbox's file system: %w", err)
	}
	if p.Probe && res.View != "" {
		return report()
	}
	// From here on this goroutine keeps its thread, for good: what
	// confines the command below is the thread's (capabilities, Landlock,
	// seccomp, no_new_privs), and the command is forked from it. The
	// helper's other threads keep their capabilities in the sandbox's user
	// namespace; not dumpable, it cannot be traced or read by the command,
	// which has none.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return 0, fmt.Errorf("make the sandbox's init not dumpable: %w", err)
	}
	if err := check(&res.Caps, dropCaps()); err != nil {
		return 0, fmt.Errorf("drop capabilities: %w", err)
	}
	if p.Landlock {
		// The network namespace keeps the network out; Landlock's TCP
		// rules would only break servers a command runs on its own
		// loopback (a test's HTTP server).
		err := restrictThread(policy{Writable: []string{c.Workspace, "/tmp"}, Network: true})
		if err := check(&res.Landlock, err); err != nil {
			return 0, fmt.Errorf("enable Landlock: %w", err)
		}
	}
	if p.Seccomp {
		if err := check(&res.Seccomp, loadSeccomp(true)); err != nil {
			return 0, fmt.Errorf("load the seccomp filter: %w", err)
		}
	}
	// The limits come last, just before the command starts: they bind the
	// helper too (it passes them on by fork), whose Go runtime (a race
	// detector's shadow memory above all) must not run short while it
	// still sets things up.
	if p.Probe {
		step(&res.Limits, setLimits(c.Limits))
		return report()
	}

	path, err := lookPath(c.Args[0], envValue(c.Env, "PATH"))
	if err != nil {
		return 0, err
	}
	if err := setLimits(c.Limits); err != nil {
		return 0, err
	}
	files := []uintptr{0, 1, 2}
	if c.Stdio {
		files = []uintptr{uintptr(fds[1]), uintptr(fds[2]), uintptr(fds[3])}
	}
	pid, err := syscall.ForkExec(path, c.Args, &syscall.ProcAttr{
		Dir:   c.Cwd,
		Env:   c.Env,
		Files: files,
	})
	if c.Stdio {
		// The command holds them now: its output ends when it (and what
		// it started) closes them, not when this process exits.
		closeAll(fds[1:])
	}
	if err != nil {
		return 0, fmt.Errorf("start %s: %w", c.Args[0], err)
	}
	status.Write([]byte("ok\n"))
	if !c.Deadline.IsZero() {
		// The backstop of a call's deadline, independent of the node: when
		// init exits, the kernel kills the whole PID namespace.
		time.AfterFunc(time.Until(c.Deadline), func() { os.Exit(128 + int(syscall.SIGKILL)) })
	}
	code := reap(pid)
	// Whatever the command left (a setsid child, a nohup'ed one) dies now,
	// and is reaped, before the node is told the command ended: the node
	// may answer the call then, while this process and its namespaces are
	// still being torn down.
	endAll()
	fmt.Fprintf(status, "exit %d\n", code)
	return code, nil
}

// endAll kills every other process of the sandbox's PID namespace (kill -1
// from its init reaches them all) and reaps them until none is left. It
// kills again before each wait, so that a process forked while the first
// signals went out dies too.
func endAll() {
	for {
		syscall.Kill(-1, syscall.SIGKILL)
		_, err := syscall.Wait4(-1, nil, 0, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return // ECHILD: none left
		}
	}
}

// envValue returns the value of name in env ("" when unset).
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}

// closeAll closes descriptors.
func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// lookPath finds a program as a shell would, inside the sandbox's view.
func lookPath(prog, path string) (string, error) {
	if strings.Contains(prog, "/") {
		if err := unix.Access(prog, unix.X_OK); err != nil {
			return "", fmt.Errorf("%s is not an executable inside the sandbox: %w", prog, err)
		}
		return prog, nil
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, prog)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && unix.Access(p, unix.X_OK) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in the sandbox's PATH (%s): the sandbox shows /usr, /bin, /sbin, /lib*, /etc, /opt and the workspace; add the program's directory to sandbox.read_only", prog, exec.ErrNotFound, path)
}

// reap waits, as the sandbox's init, for every process that ends (orphans
// are reparented to it) until the command itself has exited, and returns
// the command's status the way a shell reports it (128+N for signal N).
// Then the helper ends what is left (endAll) and exits.
func reap(cmd int) int {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 128 + int(syscall.SIGKILL) // no child left: cannot happen
		}
		if pid != cmd {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// view is the sandbox's file system under construction: root is the path
// of the new root (its mount's descriptor mnt under /proc/self/fd), rootDev
// and tmpDev the devices of the root's tmpfs and of the private /tmp.
type view struct {
	root      string
	mnt       int
	rootDev   uint64
	tmpDev    uint64
	hidden    []string
	hiddenIDs []fileID
}

// prepareView makes what every call's view shares: a fresh, read-only
// tmpfs root holding the system directories (read-only), Config's
// read-only extras, /dev, the sandbox's own /proc and its private /tmp;
// Hidden paths are absent wherever they would appear. finish adds the
// call's part and moves into it.
func prepareView(p nsPrep) (*view, error) {
	// Nothing done here may reach the host's mount table.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return nil, fmt.Errorf("make the mount tree private: %w", err)
	}
	v := &view{mnt: -1}
	for _, h := range p.Hidden {
		v.hidden = append(v.hidden, filepath.Clean(h))
	}
	v.hiddenIDs = append(v.hiddenIDs, p.HiddenIDs...)
	if p.Workspace != "" {
		// The workspace counts as hidden while the tree is built: it is
		// mounted on its own at the end, and its parents (the workspace
		// root, other workspaces) must not come in with a directory that
		// holds it.
		v.hidden = append(v.hidden, filepath.Clean(p.Workspace))
	}
	// The new root is a tmpfs mounted over "/" in this private mount
	// namespace: no host directory is needed for it (nor left behind),
	// and host paths still resolve from the old root, under it, until
	// pivot_root. Its own paths are reached through its mount's
	// descriptor.
	mnt, err := newTmpfs("mode=0755,size=4m", "/")
	if err != nil {
		return nil, fmt.Errorf("mount the root tmpfs: %w", err)
	}
	v.mnt = mnt
	v.root = fmt.Sprintf("/proc/self/fd/%d", mnt)
	var st unix.Stat_t
	if err := unix.Fstat(mnt, &st); err != nil {
		return nil, err
	}
	v.rootDev = st.Dev
	for _, name := range systemDirs {
		if err := v.expose("/" + name); err != nil {
			return nil, err
		}
	}
	if err := v.nameIDs(); err != nil {
		return nil, err
	}
	// /tmp before what may lie below it (read-only extras, the workspace):
	// their mount points are then made in the private /tmp, not covered by
	// it.
	if err := v.mkdir("/tmp"); err != nil {
		return nil, err
	}
	// /tmp is a tmpfs of the sandbox's own: nothing of it is on the host,
	// so it is private to the call and gone with it, kill -9 or not.
	tmpSize := p.TmpSize
	if tmpSize <= 0 {
		tmpSize = defaultTmpSize
	}
	if err := unix.Mount("tmpfs", v.root+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("mode=1777,size=%d", tmpSize)); err != nil {
		return nil, fmt.Errorf("mount the sandbox's /tmp: %w", err)
	}
	if err := unix.Stat(v.root+"/tmp", &st); err != nil {
		return nil, err
	}
	v.tmpDev = st.Dev
	for _, ro := range p.ReadOnly {
		if err := v.expose(filepath.Clean(ro)); err != nil {
			return nil, err
		}
	}
	if err := v.dev(); err != nil {
		return nil, err
	}
	if err := v.mkdir("/proc"); err != nil {
		return nil, err
	}
	if err := unix.Mount("proc", v.root+"/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return nil, fmt.Errorf("mount the sandbox's /proc: %w", err)
	}
	if err := v.mkdir("/var"); err != nil {
		return nil, err
	}
	if err := os.Symlink("../tmp", v.root+"/var/tmp"); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if p.Pivot {
		if err := v.pivot(); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// pivot moves into the view (pivot_root) and detaches the host's tree; the
// root stays writable until the workspace's mount point is made.
func (v *view) pivot() error {
	old := v.root + "/.oldroot"
	if err := os.Mkdir(old, 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(v.root, old); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	unix.Close(v.mnt)
	v.mnt, v.root = -1, ""
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach the host's file system: %w", err)
	}
	return os.Remove("/.oldroot")
}

// finish adds the call's part to the view: the run's read-only paths and
// the workspace (the descriptor ws, writable); then pivot_root into it and
// detach the host's tree (unless prepareView did), make the root read-only
// and chdir to the command's directory. The workspace's mount point must be a directory the
// sandbox makes itself, below none the view shows from the host: a
// workspace under a shown directory would bring its neighbours in (Attach
// hides it while the view is built; a prepared sandbox is never used for
// one, and this check holds that).
func (v *view) finish(p nsPrep, c nsCall, ws int) error {
	ownWS := !slices.Contains(v.hidden, filepath.Clean(c.Workspace))
	if ownWS {
		v.hidden = append(v.hidden, filepath.Clean(c.Workspace))
	}
	if p.Pivot && len(c.ReadOnly) > 0 {
		unix.Close(ws)
		return errors.New("a sandbox prepared without the host's tree cannot show the run's read-only paths")
	}
	for _, ro := range c.ReadOnly {
		if err := v.expose(filepath.Clean(ro)); err != nil {
			unix.Close(ws)
			return err
		}
	}
	if ownWS {
		v.hidden = v.hidden[:len(v.hidden)-1]
	}
	if err := v.ownMountPoint(c.Workspace); err != nil {
		unix.Close(ws)
		return err
	}
	if err := v.mkdir(c.Workspace); err != nil {
		unix.Close(ws)
		return fmt.Errorf("make the workspace's mount point: %w", err)
	}
	if err := mountWorkspace(p.Tree, c.Workspace, ws, v.root+c.Workspace); err != nil {
		return fmt.Errorf("mount the workspace: %w", err)
	}
	if !p.Pivot {
		if err := v.pivot(); err != nil {
			return err
		}
	}
	if err := setAttr("/", unix.MOUNT_ATTR_RDONLY, false); err != nil {
		return fmt.Errorf("make the root read-only: %w", err)
	}
	return unix.Chdir(c.Cwd)
}

// ownMountPoint checks that the workspace's path, as far as it exists in
// the view, is made of directories of the sandbox's own file systems (the
// root's tmpfs, its /tmp), and that nothing is there yet.
func (v *view) ownMountPoint(ws string) error {
	parts := strings.Split(strings.Trim(filepath.Clean(ws), "/"), "/")
	p := ""
	for i, part := range parts {
		p += "/" + part
		var st unix.Stat_t
		err := unix.Stat(v.root+p, &st)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		if i == len(parts)-1 || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != v.rootDev && st.Dev != v.tmpDev {
			return fmt.Errorf("the workspace %s lies in a directory the sandbox shows from the host (%s): refused", ws, p)
		}
	}
	return nil
}

// isHidden reports whether host path p is hidden, or lies under a hidden
// path.
func (v *view) isHidden(p string) bool {
	return slices.ContainsFunc(v.hidden, func(h string) bool { return p == h || strings.HasPrefix(p, h+"/") })
}

// isHiddenFile reports whether what fi describes (an lstat) is a hidden
// file or directory under whatever name.
func (v *view) isHiddenFile(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && slices.Contains(v.hiddenIDs, fileID{Dev: uint64(st.Dev), Ino: st.Ino})
}

// hidesBelow reports whether a hidden path lies strictly under p, under p
// as named or p with its symbolic links resolved.
func (v *view) hidesBelow(p string) bool {
	names := []string{p}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
		names = append(names, real)
	}
	for _, n := range names {
		prefix := strings.TrimSuffix(n, "/") + "/"
		if slices.ContainsFunc(v.hidden, func(h string) bool { return strings.HasPrefix(h, prefix) }) {
			return true
		}
	}
	return false
}

// mkdir makes the directory p (a sandbox path) and its parents in the new
// root. A parent that a read-only bind already shows cannot take more, and
// is an error.
func (v *view) mkdir(p string) error {
	return os.MkdirAll(v.root+p, 0o755)
}

// expose shows the host path p, read-only, at the same path in the sandbox,
// unless it is hidden. A directory holding a hidden path is not bound whole:
// it becomes a directory of the new root in which each entry but the hidden
// one is exposed in turn, so what is hidden is absent, not covered. A path
// that does not exist is skipped.
func (v *view) expose(p string) error {
	if v.isHidden(p) {
		return nil
	}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != p && v.isHidden(real) {
		return nil
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("show %s: the sandbox's uid %d cannot reach it (a directory above it is closed to others); make its directories searchable by that uid, or leave it out of sandbox.read_only: %w", p, os.Getuid(), err)
	}
	if err != nil {
		return err
	}
	if v.isHiddenFile(fi) {
		return nil
	}
	if sfi, err := os.Stat(p); err == nil && v.isHiddenFile(sfi) {
		return nil // a name for a hidden file, through a link
	}
	dst := v.root + p
	if _, err := os.Lstat(dst); err == nil {
		return nil // already shown, by an earlier path
	}
	if err := v.mkdir(filepath.Dir(p)); err != nil {
		return nil // under a read-only directory already shown whole
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir() && v.hidesBelow(p):
		if err := os.Mkdir(dst, fi.Mode().Perm()|0o500); err != nil {
			return err
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil // unreadable: shown empty, so its hidden entries stay out of reach
		}
		for _, e := range entries {
			if err := v.expose(filepath.Join(p, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.IsDir():
		if err := os.Mkdir(dst, 0o755); err != nil {
			return err
		}
	default:
		if err := os.WriteFile(dst, nil, 0o644); err != nil {
			return err
		}
	}
	if err := bind(p, dst, true); err != nil {
		return fmt.Errorf("show %s read-only: %w", p, err)
	}
	return nil
}

// sandboxUser is the name /etc/passwd and /etc/group give the sandbox's
// uid and gid when the host's files do not name them.
const sandboxUser = "sandbox"

// nameIDs gives the sandbox's uid and gid a name: when the view shows the
// host's /etc/passwd (or /etc/group) and it has no entry for the id, a copy
// with one more line (user "sandbox", home /tmp) is bound read-only over
// it. Without one a command is "I have no name!", and every program that
// looks its user up (bash at its start, id, ls -l) falls through to the
// next name service, loading its library each time.
func (v *view) nameIDs() error {
	uid, gid := os.Getuid(), os.Getgid()
	for _, f := range []struct {
		name string
		id   int
		line string
	}{
		{"passwd", uid, userLine(uid, gid)},
		{"group", gid, groupLine(gid)},
	} {
		dst := v.root + "/etc/" + f.name
		if fi, err := os.Lstat(dst); err != nil || !fi.Mode().IsRegular() {
			continue // not shown (hidden, absent, or a link): nothing to name
		}
		// A file the sandbox's uid cannot read, or too large for the root
		// tmpfs (4 MiB), stays the host's, unnamed: a name is a
		// convenience, not worth a command that cannot run.
		host, err := os.ReadFile(dst)
		if err != nil || namesID(host, f.id) {
			continue
		}
		if len(host) > 0 && host[len(host)-1] != '\n' {
			host = append(host, '\n')
		}
		// Written in the root tmpfs, bound in place, then unlinked: the
		// bind keeps the file, which no other path shows.
		src := v.root + "/." + f.name
		if err := os.WriteFile(src, append(host, f.line...), 0o644); err != nil {
			os.Remove(src)
			continue
		}
		err = bind(src, dst, true)
		os.Remove(src)
		if err != nil {
			// The bind may be in place but writable: nothing runs.
			return fmt.Errorf("name the sandbox's ids in /etc/%s: %w", f.name, err)
		}
	}
	return nil
}

// userLine and groupLine are the entries nameIDs adds for the sandbox's
// uid and gid.
func userLine(uid, gid int) string {
	return fmt.Sprintf("%s:x:%d:%d:callsheet sandbox:/tmp:/bin/sh\n", sandboxUser, uid, gid)
}

func groupLine(gid int) string { return fmt.Sprintf("%s:x:%d:\n", sandboxUser, gid) }

// namesID reports whether a passwd or group file has an entry whose third
// field is id.
func namesID(file []byte, id int) bool {
	want := strconv.Itoa(id)
	for line := range bytes.Lines(file) {
		f := bytes.SplitN(bytes.TrimRight(line, "\n"), []byte(":"), 4)
		if len(f) >= 3 && string(f[2]) == want {
			return true
		}
	}
	return false
}

// newTmpfs makes a tmpfs with options (fsopen, fsmount: Linux 5.2), nosuid
// and nodev, mounts it on the directory onto and returns the new mount's
// descriptor.
func newTmpfs(options string, onto string) (int, error) {
	fs, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fs)
	for _, kv := range strings.Split(options, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if err := unix.FsconfigSetString(fs, k, v); err != nil {
			return -1, fmt.Errorf("fsconfig %s: %w", kv, err)
		}
	}
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1, fmt.Errorf("fsconfig create: %w", err)
	}
	mnt, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	if err := unix.MoveMount(mnt, "", unix.AT_FDCWD, onto, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		unix.Close(mnt)
		return -1, fmt.Errorf("move_mount: %w", err)
	}
	return mnt, nil
}

// bind bind-mounts src (with what is mounted below it) on dst, read-only
// when ro, always nosuid and nodev.
func bind(src, dst string, ro bool) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return err
	}
	attr := uint64(unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV)
	if ro {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	return setAttr(dst, attr, true)
}

// setAttr adds mount attributes to the mount at p (and those below it when
// recursive), with mount_setattr(2) (Linux 5.12).
func setAttr(p string, attr uint64, recursive bool) error {
	flags := 0
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	return unix.MountSetattr(unix.AT_FDCWD, p, uint(flags), &unix.MountAttr{Attr_set: attr})
}

// dev builds /dev: the harmless character devices bound from the host, a
// private devpts and /dev/shm, and the usual symlinks.
func (v *view) dev() error {
	if err := v.mkdir("/dev"); err != nil {
		return err
	}
	for _, d := range devices {
		dst := v.root + "/dev/" + d
		if err := os.WriteFile(dst, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+d, dst, "", unix.MS_BIND, ""); err != nil {
			if d == "tty" {
				os.Remove(dst) // no controlling terminal to bind: fine
				continue
			}
			return fmt.Errorf("bind /dev/%s: %w", d, err)
		}
		if err := setAttr(dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, false); err != nil {
			return err
		}
	}
	if err := v.mkdir("/dev/shm"); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", v.root+"/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := v.mkdir("/dev/pts"); err != nil {
		return err
	}
	if err := unix.Mount("devpts", v.root+"/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, v.root+"/dev/"+name); err != nil {
			return err
		}
	}
	return nil
}

// mountWorkspace puts the workspace the node opened (ws, a descriptor
// the call brought) at dst, writable. A root node (tree) sends a detached
// copy of its mount (open_tree), moved in place as is. Otherwise ws is an
// O_PATH directory from the node's mount namespace, which cannot be bound
// across namespaces: the helper opens the workspace path itself and binds
// it only if it is the very directory the node opened (same device and
// inode), so a symlink swapped in meanwhile is refused rather than
// followed. It closes ws.
func mountWorkspace(tree bool, path string, ws int, dst string) error {
	defer unix.Close(ws)
	if tree {
		if err := unix.MoveMount(ws, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount: %w", err)
		}
		return setAttr(dst, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, false)
	}
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var want, got unix.Stat_t
	if err := unix.Fstat(ws, &want); err != nil {
		return err
	}
	if err := unix.Fstat(fd, &got); err != nil {
		return err
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return fmt.Errorf("%s is no longer the directory the node opened (it was replaced, by a symlink or otherwise): refused", path)
	}
	return bind(fmt.Sprintf("/proc/self/fd/%d", fd), dst, false)
}

// loopbackUp brings up lo in the sandbox's network namespace: servers a
// command starts on 127.0.0.1 (a test's HTTP server) work, and they are the
// sandbox's own, not the host's.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setLimits applies l (defaults filled) to this process, so the command and
// everything it starts inherit them; core dumps are off.
func setLimits(l Limits) error {
	l = l.withDefaults()
	cpu := uint64(l.CPU.Seconds())
	for _, r := range []struct {
		res      int
		cur, max uint64
		name     string
	}{
		{unix.RLIMIT_NPROC, uint64(l.Processes), uint64(l.Processes), "processes"},
		{unix.RLIMIT_FSIZE, uint64(l.FileSize), uint64(l.FileSize), "file size"},
		{unix.RLIMIT_DATA, uint64(l.Memory), uint64(l.Memory), "memory"},
		{unix.RLIMIT_CPU, cpu, cpu + 1, "CPU time"},
		{unix.RLIMIT_CORE, 0, 0, "core dumps"},
	} {
		// Never above the node's own hard limit: raising it needs a
		// capability the sandbox does not have.
		var cur unix.Rlimit
		if err := unix.Getrlimit(r.res, &cur); err == nil {
			r.max = min(r.max, cur.Max)
			r.cur = min(r.cur, r.max)
		}
		if err := unix.Setrlimit(r.res, &unix.Rlimit{Cur: r.cur, Max: r.max}); err != nil {
			return fmt.Errorf("set the %s limit: %w", r.name, err)
		}
	}
	return nil
}

// dropCaps empties the ambient and bounding sets, so the command the helper
// starts (an exec by a uid that is not root in the sandbox's user
// namespace) holds no capability, and nothing it runs can gain one.
func dropCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear the ambient set: %w", err)
	}
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	// The inheritable set too: with the bounding set empty it could only
	// combine with a file's inheritable capabilities, which nosuid mounts
	// and no_new_privs ignore anyway; empty is simpler to reason about.
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear the inheritable set: %w", err)
	}
	return nil
}

// lastCap reads the highest capability number this kernel knows.
func lastCap() (int, error) {
	f, err := os.Open("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 63, nil // the sandbox's /proc is mounted; this is a fallback
	}
	defer f.Close()
	var n int
	if _, err := fmt.Fscan(bufio.NewReader(f), &n); err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	return n, nil
}
