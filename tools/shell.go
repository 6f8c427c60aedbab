package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
)

// MaxShellTimeout is the longest a shell call may ask for with timeout_ms
// (10 minutes), and the shell tool's hard timeout as the runtime sees it. A
// call that gives no timeout_ms gets tool.DefaultShellTimeout (60 s).
const MaxShellTimeout = 10 * time.Minute

// Values of ShellOptions.Sandbox: the values of the config's shell.sandbox.
const (
	// ShellSandboxLandlock, the default, runs every command that does not
	// escalate in the sandbox (package sandbox: fresh namespaces, with
	// Landlock as one of its layers). The name is the one the option had
	// when Landlock was the whole sandbox; ShellSandboxOn says the same.
	ShellSandboxLandlock = "landlock"
	// ShellSandboxOn is ShellSandboxLandlock.
	ShellSandboxOn = "on"
	// ShellSandboxOff runs every command unconfined.
	ShellSandboxOff = "off"
)

// ErrInvalidShellOption is wrapped by the error ShellTool returns for options
// that cannot apply: an unknown Sandbox value.
var ErrInvalidShellOption = errors.New("tools: invalid shell option")

// ShellOptions configure the shell tool: the config's "shell" object and
// the node's sandbox. The zero value runs every command in the default
// sandbox, off the network.
type ShellOptions struct {
	// Sandbox is ShellSandboxLandlock (the default, also meant by "" and
	// ShellSandboxOn) or ShellSandboxOff. In the sandbox a command sees
	// the system directories read-only, writes only the workspace and its
	// private /tmp, and sees nothing else of the host; where the kernel
	// cannot give a boundary the config did not accept the lack of, every
	// call fails with an error saying so, rather than run less confined.
	Sandbox string
	// Network gives sandboxed commands the node's network (the config's
	// shell.network, the older spelling of sandbox.network "host").
	// Default false: the sandbox's own network, its loopback only.
	// Commands that escalate, or run with the sandbox off, always have the
	// node's network.
	Network bool
	// Box is the node's sandbox; nil uses DefaultSandbox, made at the
	// first sandboxed call.
	Box *sandbox.Sandbox
}

// Validate reports a Sandbox value other than "", ShellSandboxLandlock,
// ShellSandboxOn and ShellSandboxOff, wrapping ErrInvalidShellOption.
func (o ShellOptions) Validate() error {
	switch o.Sandbox {
	case "", ShellSandboxLandlock, ShellSandboxOn, ShellSandboxOff:
		return nil
	}
	return fmt.Errorf("%w: sandbox %q: want %q (the default), %q or %q", ErrInvalidShellOption, o.Sandbox, ShellSandboxLandlock, ShellSandboxOn, ShellSandboxOff)
}

// DefaultSandbox is the sandbox of tools built without one: the zero
// sandbox.Config (no network, a uid of its own per tenant on a root node, default limits),
// probed on first use. Nodes build their own from the config.
var DefaultSandbox = sync.OnceValue(func() *sandbox.Sandbox {
	sb, err := sandbox.New(sandbox.Config{})
	if err != nil {
		panic(err) // the zero config is valid
	}
	return sb
})

// shellArgs are the shell tool's arguments.
type shellArgs struct {
	Command    string `json:"command" jsonschema:"the command line, run by bash (or sh) with -c in the workspace directory"`
	TimeoutMS  int    `json:"timeout_ms,omitempty" jsonschema:"how long the command may run, in milliseconds (default 60000, at most 600000); when it expires the command and everything it started are killed" minimum:"1" maximum:"600000"`
	Escalate   bool   `json:"escalate,omitempty" jsonschema:"ask to run outside the sandbox; this always needs the user's approval, so use it only when the command cannot work inside"`
	Background bool   `json:"background,omitempty" jsonschema:"run it as a background job: the call answers at once with a job id; read the output later with bg or job"`
}

// shellPath is the shell commands run under: bash when the node has it,
// else /bin/sh. It is looked up once.
var shellPath = sync.OnceValue(func() string {
	if p, err := exec.LookPath("bash"); err == nil {
		return p
	}
	return "/bin/sh"
})

// newShell builds the shell tool with the default options, for Builtins.
func newShell() (*tool.Tool, error) { return ShellTool(ShellOptions{}) }

// ShellTool builds the shell tool: side_effecting, never, exclusive,
// escalation allowed, 60 s default timeout. Each call runs its command under
// bash -c in the workspace, with TMPDIR set to a fresh temporary directory
// that is removed when the call ends; with the Landlock sandbox (the
// default) the command runs confined unless the call escalates. The binary
// must call sandbox.Main at the start of main (or TestMain) for sandboxed
// calls to run; the tool is safe for concurrent use.
//
// It returns an error wrapping ErrInvalidShellOption for invalid options, or
// a *tool.RegistrationError, which only a broken build could produce.
func ShellTool(opts ShellOptions) (*tool.Tool, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Sandbox == "" || opts.Sandbox == ShellSandboxOn {
		opts.Sandbox = ShellSandboxLandlock
	}
	sh := &shell{opts: opts}
	return tool.New("shell",
		"Run a shell command in the workspace directory and return its combined output (stdout and stderr, "+
			"in the order written) and its exit code. Stdin is empty. The command and every process it starts "+
			"are killed when it finishes or times out (60 s unless timeout_ms says otherwise), so nothing runs in the background after the call. "+
			"With background: true it runs as a job off the turn's path: the call answers at once with a job id, and bg or job read its output later. "+
			"TMPDIR names a fresh temporary directory, removed when the call ends."+sh.sandboxText(),
		sh.run,
		tool.WithShortDescription("Run a shell command in the workspace."),
		tool.WithGuidelines(sh.guidelines()...),
		tool.WithSnippet(`{"command": "go test ./...", "timeout_ms": 300000}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectSideEffecting,
			Replay:      tool.ReplayNever,
			Concurrency: tool.ConcurrencyExclusive,
		}),
		tool.WithClassify(func(a shellArgs) tool.Declarations {
			d := tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}
			if a.Background {
				d.Concurrency = tool.ConcurrencyIsolatedBackground
			}
			return d
		}),
		tool.WithTimeout(MaxShellTimeout),
		tool.WithEscalation(),
	)
}

// boxReady is Sandbox.Ready; tests replace it to play a kernel that cannot
// give a boundary.
var boxReady = (*sandbox.Sandbox).Ready

// shell is the shell tool's state: its options, fixed when it is built.
type shell struct {
	opts ShellOptions
}

// sandboxed reports whether the options confine commands that do not
// escalate.
func (s *shell) sandboxed() bool { return s.opts.Sandbox == ShellSandboxLandlock }

// sandboxText is the part of the description that says what confines a
// command: the sentence is fixed by the options, so the description does not
// change from one call to the next.
func (s *shell) sandboxText() string {
	if !s.sandboxed() {
		return ""
	}
	network := "The network is off: connections fail, but for servers the command starts on its own loopback."
	if s.network() == sandbox.NetworkHost {
		network = "The network is reachable."
	}
	return " Commands run in a sandbox: they see the system directories (/usr, /etc, ...) read-only, can write only the workspace and /tmp " +
		"(private to the call, = $TMPDIR), and see no other file, process or user of the host. " + network
}

// box is the sandbox commands run in: the options', or DefaultSandbox,
// made on first use (a shell built and never run, as Builtins' is in a
// node that replaces it, probes nothing).
func (s *shell) box() *sandbox.Sandbox {
	if s.opts.Box != nil {
		return s.opts.Box
	}
	return DefaultSandbox()
}

// network is the network sandboxed commands get: NetworkHost with the
// option or the sandbox's config saying so (DefaultSandbox's is none).
func (s *shell) network() string {
	if s.opts.Network || s.opts.Box != nil && s.opts.Box.Config().Network == sandbox.NetworkHost {
		return sandbox.NetworkHost
	}
	return sandbox.NetworkNone
}

// guidelines are the shell tool's guidelines for these options.
func (s *shell) guidelines() []string {
	g := []string{
		"Use shell to build, test, run programs and inspect state that the file tools cannot; use read, glob and grep to look at files.",
		"A non-zero exit code is reported, not treated as a failure of the tool: read it as information.",
		"Set timeout_ms for commands that need more than 60 seconds. Commands cannot be interactive: stdin is empty.",
	}
	if s.sandboxed() {
		g = append(g,
			"Anything a later call needs goes in the workspace: /tmp is emptied after each call. If a command fails only because the sandbox refused it "+
				"(a read-only file system or a missing path outside the workspace, or a refused connection), run it again with escalate: true and say why; "+
				"escalating needs the user's approval.")
	}
	return g
}

// run is the shell tool's function. A non-zero exit is an ok result that
// shows the exit code; a timeout is an error wrapping ErrTimeout, with the
// output so far in its message; a cancelled context is returned as is. A
// sandbox that cannot confine the command (no Landlock in the kernel, or a
// helper that failed) is an error, and nothing ran.
func (s *shell) run(ctx context.Context, a shellArgs) (tool.Result, error) {
	call, err := callFrom(ctx)
	if err != nil {
		return tool.Result{}, err
	}
	if strings.TrimSpace(a.Command) == "" {
		return tool.Result{}, errors.New("shell: the command is empty")
	}
	timeout := tool.DefaultShellTimeout
	if a.TimeoutMS > 0 {
		timeout = min(time.Duration(a.TimeoutMS)*time.Millisecond, MaxShellTimeout)
	}
	confined := s.sandboxed() && !a.Escalate
	var box *sandbox.Sandbox
	if confined {
		box = s.box()
		if err := boxReady(box); err != nil {
			return tool.Result{}, fmt.Errorf("shell: nothing ran: %w. Or the node's operator can run shell commands unconfined with \"shell\": {\"sandbox\": \"off\"} in the node's config", err)
		}
	}

	// The output streams to a spill: the node holds its start and end, the
	// rest waits on disk for the runtime to keep it (tools/spill.go).
	sp := spillFor(call)
	defer sp.Discard() // unless Output took the file over
	spec := procSpec{
		Args:    []string{shellPath(), "-c", a.Command},
		Dir:     call.Workspace,
		Timeout: timeout,
		Output:  sp,
	}
	if confined {
		// The sandbox gives the command its private /tmp, TMPDIR with it.
		spec.Env = processEnv(call, nil)
		run, release, err := sandboxRun(ctx, call, box)
		if err != nil {
			return tool.Result{}, fmt.Errorf("shell: nothing ran: %w", err)
		}
		defer release()
		run.Network = s.network()
		spec.Sandbox, spec.Run = box, run
	} else {
		// In the node's run directory when it has one (DATA/sandbox,
		// mode 0700, emptied at start): a killed node leaves nothing in
		// the system's /tmp.
		mkdir := func() (string, error) { return os.MkdirTemp("", "callsheet-shell-") }
		if s.opts.Box != nil {
			mkdir = s.opts.Box.MkdirTemp
		}
		tmp, err := mkdir()
		if err != nil {
			return tool.Result{}, fmt.Errorf("shell: create the call's temporary directory: %w", err)
		}
		defer removeTemp(tmp)
		spec.Env = processEnv(call, map[string]string{"TMPDIR": tmp})
	}

	_, code, err := runProcess(ctx, spec)
	out := sp.Head()
	switch {
	case errors.Is(err, ErrTimeout):
		return tool.Result{}, fmt.Errorf("shell: %w %s; the command and everything it started were killed%s", err, timeoutWhen(ctx, timeout), quoteTail(nil, sp.Tail()))
	case errors.Is(err, sandbox.ErrSetup):
		return tool.Result{}, fmt.Errorf("shell: nothing ran: %w", err)
	case err != nil:
		return tool.Result{}, err
	case confined && code == sandbox.ExitSetupFailed && bytes.HasPrefix(out, []byte(sandbox.ErrorPrefix)):
		// The Landlock helper (the fallback on a kernel without the
		// namespaces) failed before the command started.
		return tool.Result{}, fmt.Errorf("shell: nothing ran: the sandbox could not start the command: %s",
			strings.TrimSpace(strings.TrimPrefix(string(out), sandbox.ErrorPrefix)))
	}
	var note string
	if confined && s.network() == sandbox.NetworkNone {
		if b := box.Report().Get(sandbox.BoundaryNetwork); !b.Available {
			note = "\nnote: the sandbox could not keep this command off the network: " + b.Detail
		}
	}
	if !sp.Spilled() {
		return tool.Text(shellText(out, code) + note), nil
	}
	// Too large to hold: the result shows the start, and the whole (the
	// output, a note on what was dropped, the exit code) is the full output.
	res := tool.Text(strings.ToValidUTF8(string(out), "\uFFFD"))
	res.Full = sp.Output(fmt.Sprintf("exit code %d", code) + note)
	return res, nil
}

// removeTemp removes a call's temporary directory, making read-only
// directories in it writable first if a plain removal fails. Failing that,
// the directory is left for the system's temporary-file cleaning.
func removeTemp(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	_ = os.RemoveAll(dir)
}

// shellText renders a finished command: its output (or "(no output)"), then
// a line "exit code N" (128+S for a command killed by signal S, as shells
// report it).
func shellText(out []byte, code int) string {
	var b strings.Builder
	if len(out) == 0 {
		b.WriteString("(no output)\n")
	} else {
		b.WriteString(strings.ToValidUTF8(string(out), "\uFFFD"))
		if out[len(out)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	fmt.Fprintf(&b, "exit code %d", code)
	return b.String()
}
