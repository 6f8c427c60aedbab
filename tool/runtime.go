package tool

import (
	"context"
	"encoding/json"
	"errors"
)

// Runtime is what a running call may ask of the runtime that runs it. Most
// tools never need it; the ones that keep durable session state (plan, todo,
// goal), wait for a person (question), or look after background jobs (bg,
// job) find it with RuntimeFrom. Implementations are safe for concurrent use.
type Runtime interface {
	// State returns the session's current value of a work state kind
	// ("plan", "todo", "goal"), or nil when it was never set.
	State(ctx context.Context, kind string) (json.RawMessage, error)
	// Answer blocks until the user answers the running call (the question
	// tool), or ctx ends. An answer given before the call (re)started is
	// returned at once.
	Answer(ctx context.Context) (json.RawMessage, error)
	// Jobs lists the session's background jobs.
	Jobs(ctx context.Context) ([]Job, error)
	// Job returns one background job; with wait, it blocks until the job is
	// done or ctx ends.
	Job(ctx context.Context, id string, wait bool) (Job, error)
	// CancelJob cancels a running background job.
	CancelJob(ctx context.Context, id string) error
	// Tools lists every registered tool, deferred ones included, for
	// tool_search.
	Tools() []*Tool
}

// Job is a background call (isolated_background) as bg and job show it.
type Job struct {
	ID     string `json:"job"`
	Tool   string `json:"tool"`
	Call   string `json:"call"`
	Status string `json:"status"` // running, ok, error, indeterminate, cancelled
	// Output is the job's result content once it is done.
	Output []Part `json:"output,omitempty"`
	Error  string `json:"error,omitempty"`
}

// ErrNoRuntime is returned by tools that need a Runtime when run without one
// (outside a node).
var ErrNoRuntime = errors.New("tool: this tool needs the callsheet runtime (no session runtime in context)")

type runtimeKey struct{}

// WithRuntime returns ctx carrying rt.
func WithRuntime(ctx context.Context, rt Runtime) context.Context {
	return context.WithValue(ctx, runtimeKey{}, rt)
}

// RuntimeFrom returns the runtime ctx carries, or ErrNoRuntime.
func RuntimeFrom(ctx context.Context) (Runtime, error) {
	if rt, ok := ctx.Value(runtimeKey{}).(Runtime); ok && rt != nil {
		return rt, nil
	}
	return nil, ErrNoRuntime
}

// StateUpdate asks the runtime to record a new value of a work state kind
// with the call's completion (a WorkStateUpdated event), so plan_get and
// friends read it back on any node, after any restart.
type StateUpdate struct {
	Kind  string          `json:"kind"`
	Value json.RawMessage `json:"value"`
}

// ErrPermanent marks a failure that trying again cannot fix (a path outside
// the workspace, an unknown job, arguments the tool refuses): the runtime
// does not retry it even for a replay-safe tool.
var ErrPermanent = errors.New("tool: permanent failure")

// Permanent wraps err so that errors.Is(err, ErrPermanent) holds; nil stays
// nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

type permanent struct{ error }

func (p permanent) Unwrap() error        { return p.error }
func (p permanent) Is(target error) bool { return target == ErrPermanent }

// ErrLost marks a failure whose effect is unknown: the call reached
// something that could act on it (an MCP server, a worker process) and then
// the answer was lost, as when the server exits mid-call. The runtime
// settles such a call by its replay policy (docs/spec.md §3): a never call
// is indeterminate and is not run again; a safe one is retried.
var ErrLost = errors.New("tool: call lost")

// Lost wraps err so that errors.Is(err, ErrLost) holds; nil stays nil.
func Lost(err error) error {
	if err == nil {
		return nil
	}
	return lost{err}
}

type lost struct{ error }

func (l lost) Unwrap() error        { return l.error }
func (l lost) Is(target error) bool { return target == ErrLost }

// ErrNotSent marks a failure known to come before the call reached anything
// that could act on it (no connection to the MCP server, no free connection
// slot): the runtime records a plain error, never an indeterminate outcome,
// even when the call's deadline passed while it waited.
var ErrNotSent = errors.New("tool: call not sent")

// NotSent wraps err so that errors.Is(err, ErrNotSent) holds; nil stays nil.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return notSent{err}
}

type notSent struct{ error }

func (n notSent) Unwrap() error        { return n.error }
func (n notSent) Is(target error) bool { return target == ErrNotSent }
