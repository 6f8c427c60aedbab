package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Cmd is a command Start runs in the sandbox.
type Cmd struct {
	// Args is the command's argv; Args[0] is looked up inside the
	// sandbox, in Env's PATH, when it holds no slash. Required.
	Args []string
	// Env is the command's complete environment; TMPDIR is set to the
	// sandbox's private /tmp.
	Env []string
	// Stdin, Stdout and Stderr are the command's standard streams; nil
	// means /dev/null. The caller keeps its files: it may close them once
	// Start returned.
	Stdin, Stdout, Stderr *os.File
}

// Process is a command Start started in a sandbox: the sandbox's first
// process (its init, on the host a process of the node's) and, under it,
// the command. Call Wait, then Finish.
type Process struct {
	s        *Sandbox
	proc     proc
	attached *Attached // a sandbox set up for this call (Attach)
	// status is the helper's status pipe; share the run's share of the
	// resources (a prepared sandbox's; an attached one's is attached's).
	status *os.File
	share  *runShare
	// head is what use read of the status pipe past "ok" or short of it,
	// for readStatus; started says it read "ok".
	head    []byte
	started bool

	mu       sync.Mutex
	waited   bool
	setupErr error
}

// Pid returns the process id, on the host, of the sandbox's first process.
func (p *Process) Pid() int { return p.proc.Pid() }

// Kill ends the sandbox: SIGKILL to its first process, the init of its PID
// namespace, with which everything else in it dies (without namespaces, to
// its process group). Once Wait returned it does nothing and returns
// os.ErrProcessDone.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waited {
		return os.ErrProcessDone
	}
	if p.status == nil {
		err := syscall.Kill(-p.proc.Pid(), syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return os.ErrProcessDone
		}
		return err
	}
	return p.proc.Kill()
}

// Wait waits for the command's end and returns its status: code is its
// exit code, or 128+N for a command killed by signal N; exited is false
// when the sandbox itself was killed (Kill, a signal from outside, its
// deadline) before the command's end was known, code then being 128+N for
// the signal that killed the sandbox. Once the sandbox's init says the
// command ended and every other process of the sandbox is gone, Wait
// returns: the init's own exit and the teardown of the namespaces go on
// meanwhile, and Close waits for them. The error is exec's, when the
// process could not be waited for.
func (p *Process) Wait() (code int, exited bool, err error) {
	if p.status == nil {
		// Without namespaces (the Landlock helper became the command):
		// its group may hold what it started.
		code, exited, err := p.proc.Wait()
		p.mu.Lock()
		p.waited = true
		syscall.Kill(-p.proc.Pid(), syscall.SIGKILL)
		p.mu.Unlock()
		return code, exited, err
	}
	code, ended := p.readStatus()
	p.mu.Lock()
	p.waited = true
	p.mu.Unlock()
	if ended {
		// Its last word: end it rather than wait for its runtime to exit,
		// and let the reaper wait for the namespaces' teardown. The pool
		// may prepare its replacement now.
		p.proc.Kill()
		p.s.pool.wake()
		p.s.reaping.Go(func() {
			p.proc.Wait()
			p.release()
		})
		return code, true, nil
	}
	code, exited, err = p.proc.Wait()
	p.release()
	return code, exited, err
}

// readStatus reads the helper's status pipe until it says the command
// ended ("exit N"), or closes it: what went wrong while setting up, if
// anything, goes to setupErr.
func (p *Process) readStatus() (code int, ended bool) {
	r := bufio.NewReaderSize(io.LimitReader(io.MultiReader(bytes.NewReader(p.head), p.status), 64<<10), 512)
	started := p.started
	for {
		line, err := r.ReadString('\n')
		switch {
		case line == "ready\n":
		case line == "ok\n":
			started = true
		case strings.HasPrefix(line, "exit "):
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "exit ")))
			if err == nil {
				return n, true
			}
		case strings.HasPrefix(line, "error: "):
			rest, _ := io.ReadAll(r)
			p.setupErr = fmt.Errorf("%w: %s", ErrSetup, strings.TrimSpace(strings.TrimPrefix(line, "error: ")+string(rest)))
			return 0, false
		}
		if err != nil {
			if !started {
				p.setupErr = fmt.Errorf("%w: the sandbox was stopped while it was being set up", ErrSetup)
			}
			return 0, false
		}
	}
}

// release closes the status pipe and gives the run's share back, once the
// sandbox's init was reaped.
func (p *Process) release() {
	p.status.Close()
	if p.attached != nil {
		p.attached.status = nil // read here
		if err := p.attached.Finish(); err != nil && p.setupErr != nil {
			p.setupErr = err // the reason it was stopped (its cgroup)
		}
	} else {
		p.share.release()
	}
}

// proc is a sandbox's first process as the node holds it: a child of the
// node's (cmdProc) or a helper the spawner started (spawned).
type proc interface {
	Pid() int
	// Kill sends it SIGKILL; os.ErrProcessDone once it was waited for.
	Kill() error
	// Wait waits for its end: code is its exit code or 128+N for signal
	// N, exited false when a signal ended it.
	Wait() (code int, exited bool, err error)
}

// cmdProc is a proc the node started itself.
type cmdProc struct{ cmd *exec.Cmd }

func (c cmdProc) Pid() int    { return c.cmd.Process.Pid }
func (c cmdProc) Kill() error { return c.cmd.Process.Kill() }
func (c cmdProc) Wait() (int, bool, error) {
	err := c.cmd.Wait()
	return exitOf(c.cmd.ProcessState, err)
}

// exitOf turns a wait's outcome into Wait's.
func exitOf(state *os.ProcessState, err error) (code int, exited bool, _ error) {
	if state == nil {
		return -1, false, err
	}
	code = state.ExitCode()
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return code, state.Exited(), nil
}

// Finish reports, after Wait, whether the sandbox started the command: an
// error wrapping ErrSetup (with the helper's reason) means nothing ran.
// Call it once, after Wait.
func (p *Process) Finish() error {
	if p.status == nil && p.attached != nil {
		return p.attached.Finish()
	}
	return p.setupErr
}

// Start runs c in the sandbox for run r, as Attach and exec.Cmd.Start
// would, in its own process group: in a sandbox prepared ahead for r's
// tenant and network when one is ready and r's workspace lies in no
// directory the sandbox shows from the host (the node's workspaces never
// do), else in one set up for this call. A prepared sandbox serves this one
// call and ends with it. Start returns Attach's errors, ErrInvalidSpec for
// a Cmd without Args, and the error of starting the process.
func (s *Sandbox) Start(c Cmd, r Run) (*Process, error) {
	if err := s.Ready(); err != nil {
		return nil, err
	}
	if len(c.Args) == 0 || c.Args[0] == "" {
		return nil, fmt.Errorf("%w: no command to run", ErrInvalidSpec)
	}
	if p, err := s.startPrepared(c, r); p != nil || err != nil {
		return p, err
	}
	p, err := s.startAttached(c, r)
	if errors.Is(err, ErrBusy) && s.pool.evictOrWait(r.Tenant) {
		// Prepared sandboxes, and those being prepared, hold places in the
		// counted budget: one gives its place to a call.
		p, err = s.startAttached(c, r)
	}
	return p, err
}

// startAttached starts c in a sandbox set up for it (Attach).
func (s *Sandbox) startAttached(c Cmd, r Run) (*Process, error) {
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Env = c.Env
	cmd.Dir = r.Dir
	if cmd.Dir == "" {
		cmd.Dir = r.Workspace
	}
	// Nil interfaces, not nil files: exec gives those /dev/null.
	if c.Stdin != nil {
		cmd.Stdin = c.Stdin
	}
	if c.Stdout != nil {
		cmd.Stdout = c.Stdout
	}
	if c.Stderr != nil {
		cmd.Stderr = c.Stderr
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a, err := s.Attach(cmd, r)
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		a.Finish()
		return nil, err
	}
	a.Started()
	return &Process{s: s, proc: cmdProc{cmd}, attached: a, status: a.status}, nil
}

// startPrepared starts c in a prepared sandbox, if one is ready for r and
// may serve it; (nil, nil) otherwise.
func (s *Sandbox) startPrepared(c Cmd, r Run) (*Process, error) {
	if s.pool == nil || !s.ns {
		return nil, nil
	}
	r, network, err := s.checkRun(r)
	if err != nil {
		return nil, err
	}
	if !s.preparable(r) {
		return nil, nil
	}
	hidden, err := s.hidden()
	if err != nil {
		return nil, err
	}
	key := poolKey{tenant: r.Tenant, network: network}
	pr := s.pool.take(key, hidden)
	if pr == nil {
		// None ready nor coming (a tenant's first call, or its first
		// after a minute idle): one prepared now by the spawner spares the
		// node forking itself; without a spawner, Attach sets one up.
		if !s.pool.spawnerUp() {
			return nil, nil
		}
		if pr, err = s.prepare(key); err != nil {
			return nil, nil
		}
	}
	p, err := s.use(pr, c, r)
	if err != nil {
		// It died while it waited or before it started the call (an OOM
		// kill in the tenant's cgroup, its spawner's end): nothing ran, and
		// a sandbox set up for the call takes its place.
		pr.discard()
		return nil, nil
	}
	return p, nil
}

// use sends c and r to the prepared sandbox pr, which then finishes its
// view for r and starts c.
func (s *Sandbox) use(pr *prepared, c Cmd, r Run) (*Process, error) {
	call := s.callMessage(r, c.Args, c.Env, pr.share)
	call.Stdio = true
	raw, err := encodeMessage(call)
	if err != nil {
		return nil, err
	}
	ws, err := s.openWorkspace(call.Workspace, r.Opened)
	if err != nil {
		return nil, err
	}
	defer ws.Close()
	fds := []int{int(ws.Fd())}
	for _, f := range []*os.File{c.Stdin, c.Stdout, c.Stderr} {
		if f == nil {
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return nil, err
			}
			defer null.Close()
			f = null
		}
		fds = append(fds, int(f.Fd()))
	}
	if err := sendFrame(pr.ctl, raw, fds); err != nil {
		return nil, fmt.Errorf("sandbox: hand the call to a prepared sandbox: %w", err)
	}
	unix.Close(pr.ctl)
	pr.ctl = -1
	head, err := handedOff(pr.status)
	if err != nil {
		return nil, err
	}
	p := &Process{s: s, proc: pr.proc, status: pr.status, share: pr.share, head: head}
	if string(head) == "ok\n" {
		p.head, p.started = nil, true
	}
	return p, nil
}

// handedOff waits up to handoffWait for a prepared sandbox's first word on
// its status pipe once it was handed a call, and returns what it read: "ok"
// once the command runs, the start of an error it reports otherwise, or
// nothing when it did not answer in time (the call goes on, and its
// deadline governs). It fails when the sandbox ended without a word: it
// died before it started the command, so nothing ran.
func handedOff(status *os.File) ([]byte, error) {
	status.SetReadDeadline(time.Now().Add(handoffWait))
	defer status.SetReadDeadline(time.Time{})
	var word [3]byte
	n, err := io.ReadFull(status, word[:])
	if n == 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("sandbox: the prepared sandbox ended before it started the call: %v", err)
	}
	return word[:n], nil
}

// checkRun fills r's defaults and checks it, returning the network it
// gets: ErrInvalidSpec for a relative workspace or a directory outside it.
func (s *Sandbox) checkRun(r Run) (Run, string, error) {
	if !filepath.IsAbs(r.Workspace) {
		return r, "", fmt.Errorf("%w: workspace %q is not an absolute path", ErrInvalidSpec, r.Workspace)
	}
	if r.Dir == "" {
		r.Dir = r.Workspace
	}
	if rel, err := filepath.Rel(r.Workspace, r.Dir); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return r, "", fmt.Errorf("%w: directory %q is not inside the workspace %q", ErrInvalidSpec, r.Dir, r.Workspace)
	}
	network := s.cfg.Network
	if r.Network != "" {
		network = r.Network
	}
	return r, network, nil
}

// preparable reports whether a prepared sandbox may serve r: its view was
// built before r's workspace was known, so the workspace must lie in no
// directory it shows from the host (the system directories,
// Config.ReadOnly) nor hold one, under its name or its resolved one, and
// no read-only path of r's may hold it or lie in it. Otherwise the
// workspace's neighbours would show (Attach hides the workspace while it
// builds the view, so they do not). A root node's prepared sandboxes have
// left the host's tree before the call: they take no run read-only paths.
func (s *Sandbox) preparable(r Run) bool {
	ws := names(r.Workspace)
	overlaps := func(paths []string) bool {
		for _, p := range paths {
			for _, w := range ws {
				if under(w, p) || under(p, w) {
					return true
				}
			}
		}
		return false
	}
	if overlaps(s.shown) {
		return false
	}
	if s.root && len(r.ReadOnly) > 0 {
		return false // prepared without the host's tree (nsPrep.Pivot)
	}
	for _, ro := range r.ReadOnly {
		if overlaps(names(ro)) {
			return false
		}
	}
	return true
}

// names returns the path p cleaned and, when it differs, with its symbolic
// links resolved.
func names(p string) []string {
	out := []string{filepath.Clean(p)}
	if real, err := filepath.EvalSymlinks(p); err == nil && real != out[0] {
		out = append(out, real)
	}
	return out
}

// shownPaths are the host paths every sandbox of cfg shows: the system
// directories and cfg.ReadOnly, under their names and resolved ones.
func shownPaths(cfg Config) []string {
	var out []string
	for _, d := range systemDirs {
		out = append(out, names("/"+d)...)
	}
	for _, ro := range cfg.ReadOnly {
		out = append(out, names(ro)...)
	}
	return slices.Compact(out)
}
