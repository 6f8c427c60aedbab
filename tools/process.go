package tools

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// ErrTimeout is wrapped by the error a process-running tool (shell, command
// tools) returns when its timeout, or the deadline of its context, expired
// and its process group was killed. It wraps context.DeadlineExceeded, so
// errors.Is(err, context.DeadlineExceeded) holds as well: the runtime settles
// such a call as indeterminate.
var ErrTimeout = fmt.Errorf("tools: command timed out: %w", context.DeadlineExceeded)

// ErrNoWorkspace is returned by every tool run without a workspace in its
// context (tool.CallFrom(ctx).Workspace is empty).
var ErrNoWorkspace = errors.New("tools: the call carries no workspace")

// MaxProcessOutput caps what a process's output collected in memory (a
// capBuffer: a command tool's standard error) holds: 64 MiB. Bytes beyond it
// are read and discarded, so the process is never blocked on a full pipe,
// and a note saying how many were dropped is appended. Output that becomes
// a result goes to a spill instead (spill.go), which holds only its start
// and end in memory.
const MaxProcessOutput = 64 << 20

// Grace periods of the process runner.
const (
	// waitDelay bounds how long exec waits for a cancelled process to exit
	// before it gives up on it (exec.Cmd.WaitDelay). The process group is
	// sent SIGKILL first, so this only matters for a process stuck in the
	// kernel.
	waitDelay = 2 * time.Second
	// drainDelay bounds how long the runner reads output after the process
	// exited and its group was killed. Only a descendant that left the
	// group (setsid) can hold the pipe open that long; its later output is
	// lost.
	drainDelay = 2 * time.Second
	// tailBytes is how much of a failed process's output an error message
	// quotes.
	tailBytes = 4 << 10
)

// fallbackPath is the PATH a process gets when the node has none.
const fallbackPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// procSpec describes one process to run.
type procSpec struct {
	// Args is the argv; Args[0] is the program, looked up in the node's
	// PATH when it holds no slash, else relative to Dir.
	Args []string
	// Dir is the working directory: the workspace.
	Dir string
	// Env is the complete environment.
	Env []string
	// Stdin is written to the process's standard input, which is then
	// closed; nil means /dev/null.
	Stdin []byte
	// Timeout, when positive, bounds the run on top of ctx's deadline.
	Timeout time.Duration
	// Stderr, when non-nil, receives standard error separately; when nil,
	// standard error shares standard output's pipe, so the two interleave
	// in the order the process wrote them.
	Stderr *capBuffer
	// Output, when non-nil, receives standard output (and standard error
	// unless Stderr is set) instead of an in-memory buffer, so the output
	// is never held whole; runProcess then returns no output bytes.
	Output *spill
	// Sandbox, when non-nil, runs the process in it (sandbox.Attach) with
	// Run; nil runs it unconfined.
	Sandbox *sandbox.Sandbox
	Run     sandbox.Run
}

// runProcess runs spec in its own process group (in spec.Sandbox when set)
// and returns its standard output (combined with standard error unless
// spec.Stderr is set), held up to MaxProcessOutput, and its exit code (128+N
// for a process killed by signal N).
//
// A non-zero exit is not an error here: callers decide what it means. The
// error is non-nil when the process could not start, when ctx was cancelled
// (ctx.Err(), with whatever output was read), or when spec.Timeout or ctx's
// deadline expired (wrapping ErrTimeout). In every case the whole process
// group is killed with SIGKILL before runProcess returns, and runProcess
// waits for the process, so nothing it started keeps running or holds its
// output, barring a descendant that left the group on purpose; in a sandbox
// not even that one, as the sandbox's PID namespace dies with the group. A
// sandbox that could not start the command returns an error wrapping
// sandbox.ErrSetup, and nothing ran.
func runProcess(ctx context.Context, spec procSpec) (output []byte, exitCode int, err error) {
	if len(spec.Args) == 0 || spec.Args[0] == "" {
		return nil, -1, errors.New("tools: no program to run")
	}
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if spec.Timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, spec.Timeout)
	}
	defer cancel()

	cmd := exec.CommandContext(runCtx, spec.Args[0], spec.Args[1:]...)
	cmd.Dir = spec.Dir
	cmd.Env = spec.Env
	// Its own process group, so that one kill reaches every descendant.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = waitDelay

	// The runner owns every pipe: exec's own copying goroutines would make
	// Wait block until every descendant closed its copy of the pipe, and
	// the group is only killed after Wait.
	var (
		closeAfterStart []*os.File
		readers         []*os.File
		wg              sync.WaitGroup
	)
	defer func() {
		for _, f := range closeAfterStart {
			f.Close()
		}
		for _, f := range readers {
			f.Close()
		}
	}()
	collect := func(dst io.Writer) (*os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		closeAfterStart = append(closeAfterStart, w)
		readers = append(readers, r)
		wg.Go(func() { _, _ = io.Copy(dst, r) })
		return w, nil
	}

	var out capBuffer
	var dst io.Writer = &out
	if spec.Output != nil {
		dst = spec.Output
	}
	stdout, err := collect(dst)
	if err != nil {
		return nil, -1, fmt.Errorf("tools: output pipe: %w", err)
	}
	stderr := stdout
	if spec.Stderr != nil {
		if stderr, err = collect(spec.Stderr); err != nil {
			return nil, -1, fmt.Errorf("tools: error pipe: %w", err)
		}
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var stdinR, stdinW *os.File
	if spec.Stdin != nil {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return nil, -1, fmt.Errorf("tools: input pipe: %w", err)
		}
		cmd.Stdin = stdinR
		closeAfterStart = append(closeAfterStart, stdinR)
	}

	// The process: the command itself, or the sandbox's first process,
	// started by the sandbox (which may have prepared it ahead).
	var (
		wait     func() (code int, exited bool, err error)
		confined *sandbox.Process
	)
	if spec.Sandbox != nil {
		c := sandbox.Cmd{Args: spec.Args, Env: spec.Env, Stdin: stdinR, Stdout: stdout, Stderr: stderr}
		if confined, err = spec.Sandbox.Start(c, spec.Run); err != nil {
			if stdinW != nil {
				stdinW.Close()
			}
			if runCtx.Err() != nil {
				return nil, -1, ctxError(ctx)
			}
			return nil, -1, err
		}
		// Killing the sandbox's init ends everything in it; Wait kills
		// what the fallback without namespaces left in its group.
		stop := context.AfterFunc(runCtx, func() { _ = confined.Kill() })
		defer stop()
		wait = confined.Wait
	} else {
		if err := cmd.Start(); err != nil {
			if stdinW != nil {
				stdinW.Close()
			}
			if runCtx.Err() != nil {
				return nil, -1, ctxError(ctx)
			}
			return nil, -1, fmt.Errorf("tools: start %s: %w", spec.Args[0], err)
		}
		wait = func() (int, bool, error) {
			err := cmd.Wait()
			// The leader has exited: kill whatever it left behind in its
			// group, so that nothing keeps running after the call or
			// holds the pipes open.
			_ = killGroup(cmd.Process.Pid)
			if cmd.ProcessState == nil {
				return -1, false, err
			}
			code := cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
			return code, cmd.ProcessState.Exited(), nil
		}
	}
	// A call holding a fleet cap's slot hands the group to the slot's
	// lease, which ends it before the slot could lapse, whatever becomes of
	// this node; the group is gone by the time the hold is released.
	if lease, ok := tool.LeaseFrom(ctx); ok {
		pgid := 0
		if confined != nil {
			pgid = confined.Pid()
		} else {
			pgid = cmd.Process.Pid
		}
		defer lease.Hold(pgid)()
	}
	for _, f := range closeAfterStart {
		f.Close()
	}
	closeAfterStart = nil
	if stdinW != nil {
		// A process that does not read its input, or exits early, makes
		// this write fail with EPIPE once its group is gone; that is fine.
		wg.Go(func() {
			_, _ = stdinW.Write(spec.Stdin)
			stdinW.Close()
		})
	}

	exitCode, exited, waitErr := wait()
	if stdinW != nil {
		// Unblock the input writer if a descendant outside the group
		// holds the pipe without reading.
		_ = stdinW.SetWriteDeadline(time.Now().Add(drainDelay))
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainDelay):
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		<-drained
	}

	if spec.Output == nil {
		output = out.Bytes()
	}
	var setupErr error
	if confined != nil {
		setupErr = confined.Finish()
	}
	if waitErr != nil && exitCode == -1 {
		return output, -1, fmt.Errorf("tools: wait for %s: %w", spec.Args[0], waitErr)
	}
	// A process that exited on its own finished, even if the deadline
	// passed while it was being reaped. One that was killed after runCtx
	// ended was killed by us.
	if runCtx.Err() != nil && !exited {
		return output, exitCode, ctxError(ctx)
	}
	if setupErr != nil {
		// The sandbox never started the command: nothing ran.
		return nil, -1, setupErr
	}
	return output, exitCode, nil
}

// ctxError says why a run whose context ended stopped: the caller's
// cancellation as ctx.Err() (never converted into a result), anything else
// (the run's own timeout, or ctx's deadline) as ErrTimeout.
func ctxError(ctx context.Context) error {
	if err := ctx.Err(); errors.Is(err, context.Canceled) {
		return err
	}
	return ErrTimeout
}

// killGroup sends SIGKILL to the process group pgid. A group that is already
// gone is reported as os.ErrProcessDone, as exec.Cmd.Cancel expects.
func killGroup(pgid int) error {
	err := syscall.Kill(-pgid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// capBuffer holds the first MaxProcessOutput bytes written to it and counts
// the rest, which it discards. It is safe for concurrent use, so combined
// stdout and stderr may share one.
type capBuffer struct {
	mu      sync.Mutex
	buf     []byte
	dropped int64
	limit   int // 0 means MaxProcessOutput; tests set it lower
}

// Write always reports the whole of p written, so a process never blocks or
// fails because its output is over the cap.
func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	limit := b.limit
	if limit == 0 {
		limit = MaxProcessOutput
	}
	keep := min(len(p), max(0, limit-len(b.buf)))
	b.buf = append(b.buf, p[:keep]...)
	b.dropped += int64(len(p) - keep)
	return len(p), nil
}

// Bytes returns what was held, followed by a note when bytes were dropped.
func (b *capBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return b.buf
	}
	note := fmt.Sprintf("\n[output cut at %d bytes held in memory: %d more bytes were discarded]\n", len(b.buf), b.dropped)
	return append(b.buf[:len(b.buf):len(b.buf)], note...)
}

// sandboxDeadlineGrace is how long after a call's deadline its sandbox ends
// by itself: longer than the node takes to kill a call that timed out and
// drain its output, well inside a fleet cap's slot grace (cluster.CapGrace).
const sandboxDeadlineGrace = 3 * time.Second

// sandboxRun is the sandbox.Run of a call in its workspace: the call's
// tenant, the workspace path, and the verified directory the runtime opened
// for the call (workspace.FromContext) for the sandbox to bind, so no path a
// session could swap is followed. Call release when the process has
// started.
//
// A workspace that box's commands for the tenant could not write (on a root
// node, one another uid owns: made for the single sandbox uid of an older
// release) is given to the tenant's uid first (workspace.Dir.Adopt).
//
// The sandbox ends on its own a moment after the call's deadline
// (sandbox.Run.Deadline), in case the node cannot kill it then.
func sandboxRun(ctx context.Context, call tool.Call, box *sandbox.Sandbox) (run sandbox.Run, release func(), err error) {
	run = sandbox.Run{Tenant: call.Tenant, Workspace: call.Workspace}
	if dl, ok := ctx.Deadline(); ok {
		run.Deadline = dl.Add(sandboxDeadlineGrace)
	}
	ws, ok := workspace.FromContext(ctx)
	if !ok {
		return run, func() {}, nil
	}
	if box != nil && os.Geteuid() == 0 {
		uid, gid := box.Owner(call.Tenant)
		if have, _, err := ws.Owner(); err == nil && have != uid {
			if err := ws.Adopt(uid, gid); err != nil {
				return run, nil, fmt.Errorf("tools: give the workspace to the tenant's sandbox uid %d: %w", uid, err)
			}
		}
	}
	h, err := ws.Handle()
	if err != nil {
		return run, nil, fmt.Errorf("tools: open the workspace for the sandbox: %w", err)
	}
	run.Workspace, run.Opened = ws.Path(), h
	return run, func() { h.Close() }, nil
}

// processEnv returns the minimal environment of a process run for call:
// PATH and LANG from the node (with fallbacks), HOME set to the workspace,
// then extra (sorted by name), then the CALLSHEET_ variables of the call,
// which extra cannot override.
func processEnv(call tool.Call, extra map[string]string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = fallbackPath
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	vars := map[string]string{"PATH": path, "HOME": call.Workspace, "LANG": lang}
	for k, v := range extra {
		vars[k] = v
	}
	for k, v := range callVars(call) {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// callVars are the variables that tell a process which call it serves. The
// idempotency key is stable across attempts and restarts (docs/spec.md §9), so a
// process can de-duplicate an external side effect with it.
func callVars(call tool.Call) map[string]string {
	return map[string]string{
		"CALLSHEET_CALL_ID":         call.ID,
		"CALLSHEET_IDEMPOTENCY_KEY": call.IdempotencyKey,
		"CALLSHEET_SESSION":         call.Session,
		"CALLSHEET_TURN":            call.Turn,
		"CALLSHEET_ATTEMPT":         strconv.Itoa(call.Attempt),
	}
}

// callFrom returns the call ctx carries. It returns ctx.Err() when ctx is
// already done (a cancelled call does nothing, and its cancellation is not
// turned into a result), and ErrNoWorkspace when the call names no workspace.
func callFrom(ctx context.Context) (tool.Call, error) {
	if err := ctx.Err(); err != nil {
		return tool.Call{}, err
	}
	call, ok := tool.CallFrom(ctx)
	if !ok || call.Workspace == "" {
		return tool.Call{}, ErrNoWorkspace
	}
	return call, nil
}

// tail returns the last n bytes of b as text, starting at a line boundary
// when one is near, marked when something was cut.
func tail(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	if len(s) <= n {
		return strings.ToValidUTF8(s, "\uFFFD")
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 && i < n/4 {
		s = s[i+1:]
	}
	return "…" + strings.ToValidUTF8(s, "\uFFFD")
}
