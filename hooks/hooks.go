package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/permission"
)

// DefaultTimeout bounds one run of an external hook.
const DefaultTimeout = 10 * time.Second

// Call is what a hook sees of a call.
type Call struct {
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session"`
	Turn      string          `json:"turn"`
	Call      string          `json:"call"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"`
}

// Verdict is a middleware's answer: allow (zero value), deny with a reason
// the model sees, or rewrite the arguments.
type Verdict struct {
	Action    string          `json:"action"` // "allow", "deny" or "rewrite"
	Reason    string          `json:"reason,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// Before is a before-tool hook: an error fails the whole turn.
type Before struct {
	Name  string
	Tools []string // tool-name globs; empty means all
	Run   func(ctx context.Context, c Call) error
}

// Middleware can deny or rewrite a call.
type Middleware struct {
	Name  string
	Tools []string
	Run   func(ctx context.Context, c Call) (Verdict, error)
}

// After sees a call's result; its errors are only logged.
type After struct {
	Name  string
	Tools []string
	Run   func(ctx context.Context, c Call, r events.Result) error
}

// Set is every hook of a node, in the order they run.
type Set struct {
	Before     []Before
	Middleware []Middleware
	After      []After
}

// Applies reports whether a hook with these tool globs applies to tool.
func Applies(globs []string, tool string) bool {
	if len(globs) == 0 {
		return true
	}
	for _, g := range globs {
		if permission.Glob(g, tool) {
			return true
		}
	}
	return false
}

// ErrHookFailed is wrapped by the error of a before-tool hook that failed.
var ErrHookFailed = errors.New("hooks: a before-tool hook failed")

// run runs an external command with the call as JSON on stdin.
func run(ctx context.Context, argv []string, timeout time.Duration, in any) ([]byte, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	body, err := json.Marshal(in)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s timed out after %s", argv[0], timeout)
		}
		if msg == "" {
			return nil, fmt.Errorf("%s: %w", argv[0], err)
		}
		return nil, fmt.Errorf("%s: %w: %s", argv[0], err, msg)
	}
	return stdout.Bytes(), nil
}

// CommandBefore adapts an external command to a before-tool hook: a
// non-zero exit fails the turn with its stderr.
func CommandBefore(name string, argv, tools []string, timeout time.Duration) Before {
	return Before{Name: name, Tools: tools, Run: func(ctx context.Context, c Call) error {
		_, err := run(ctx, argv, timeout, c)
		return err
	}}
}

// CommandMiddleware adapts an external command to middleware: it answers a
// Verdict as JSON on stdout; empty output allows.
func CommandMiddleware(name string, argv, tools []string, timeout time.Duration) Middleware {
	return Middleware{Name: name, Tools: tools, Run: func(ctx context.Context, c Call) (Verdict, error) {
		out, err := run(ctx, argv, timeout, c)
		if err != nil {
			return Verdict{}, err
		}
		return ParseVerdict(out)
	}}
}

// CommandAfter adapts an external command to an after-tool hook; it gets the
// call and its result on stdin.
func CommandAfter(name string, argv, tools []string, timeout time.Duration) After {
	return After{Name: name, Tools: tools, Run: func(ctx context.Context, c Call, r events.Result) error {
		_, err := run(ctx, argv, timeout, struct {
			Call
			Result events.Result `json:"result"`
		}{c, r})
		return err
	}}
}

// ParseVerdict decodes a middleware's answer strictly.
func ParseVerdict(out []byte) (Verdict, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return Verdict{Action: "allow"}, nil
	}
	var v Verdict
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Verdict{}, fmt.Errorf("middleware answer is not a verdict ({\"action\": \"allow\"|\"deny\"|\"rewrite\", \"reason\", \"arguments\"}): %w", err)
	}
	switch v.Action {
	case "", "allow":
		v.Action = "allow"
	case "deny":
		if v.Reason == "" {
			v.Reason = "denied by middleware"
		}
	case "rewrite":
		if len(v.Arguments) == 0 {
			return Verdict{}, errors.New(`middleware answered "rewrite" without "arguments"`)
		}
	default:
		return Verdict{}, fmt.Errorf("middleware answered action %q: use allow, deny or rewrite", v.Action)
	}
	return v, nil
}
