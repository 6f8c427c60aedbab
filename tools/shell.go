package tools

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/callsheet/callsheet/tool"
)

// MaxShellTimeout is the longest a shell call may ask for with timeout_ms
// (10 minutes), and the shell tool's hard timeout as the runtime sees it. A
// call that gives no timeout_ms gets tool.DefaultShellTimeout (60 s).
const MaxShellTimeout = 10 * time.Minute

// shellArgs are the shell tool's arguments.
type shellArgs struct {
	Command   string `json:"command" jsonschema:"the command line, run by bash (or sh) with -c in the workspace directory"`
	TimeoutMS int    `json:"timeout_ms,omitempty" jsonschema:"how long the command may run, in milliseconds (default 60000, at most 600000); when it expires the command and everything it started are killed" minimum:"1" maximum:"600000"`
	Escalate  bool   `json:"escalate,omitempty" jsonschema:"ask to run outside the sandbox; this always needs the user's approval, so use it only when the command cannot work inside"`
}

// shellPath is the shell commands run under: bash when the node has it,
// else /bin/sh. It is looked up once.
var shellPath = sync.OnceValue(func() string {
	if p, err := exec.LookPath("bash"); err == nil {
		return p
	}
	return "/bin/sh"
})

// newShell builds the shell tool: side_effecting, never, exclusive,
// escalation allowed. The sandbox a call runs in (and what escalate lifts)
// belongs to the runtime around the tool; the tool runs the command as it
// is given.
func newShell() (*tool.Tool, error) {
	return tool.New("shell",
		"Run a shell command in the workspace directory and return its combined output (stdout and stderr, "+
			"in the order written) and its exit code. Stdin is empty. The command and every process it starts "+
			"are killed when it finishes or times out (60 s unless timeout_ms says otherwise), so nothing runs in the background after the call.",
		runShell,
		tool.WithShortDescription("Run a shell command in the workspace."),
		tool.WithGuidelines(
			"Use shell to build, test, run programs and inspect state that the file tools cannot; use read, glob and grep to look at files.",
			"A non-zero exit code is reported, not treated as a failure of the tool: read it as information.",
			"Set timeout_ms for commands that need more than 60 seconds. Commands cannot be interactive: stdin is empty.",
		),
		tool.WithSnippet(`{"command": "go test ./...", "timeout_ms": 300000}`),
		tool.WithDeclarations(tool.Declarations{
			Effect:      tool.EffectSideEffecting,
			Replay:      tool.ReplayNever,
			Concurrency: tool.ConcurrencyExclusive,
		}),
		tool.WithTimeout(MaxShellTimeout),
		tool.WithEscalation(),
	)
}

// runShell is the shell tool's function. A non-zero exit is an ok result that
// shows the exit code; a timeout is an error wrapping ErrTimeout, with the
// output so far in its message; a cancelled context is returned as is.
func runShell(ctx context.Context, a shellArgs) (tool.Result, error) {
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
	out, code, err := runProcess(ctx, procSpec{
		Args:    []string{shellPath(), "-c", a.Command},
		Dir:     call.Workspace,
		Env:     processEnv(call, nil),
		Timeout: timeout,
	})
	switch {
	case errors.Is(err, ErrTimeout):
		return tool.Result{}, fmt.Errorf("shell: %w %s; the command and everything it started were killed%s", err, timeoutWhen(ctx, timeout), quoteTail(nil, out))
	case err != nil:
		return tool.Result{}, err
	}
	return tool.Text(shellText(out, code)), nil
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
