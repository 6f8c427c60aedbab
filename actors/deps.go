package actors

import (
	"context"
	"crypto/ed25519"

	"github.com/anthdm/hollywood/actor"
	"io"
	"time"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Request is one ToolCallRequested delivered to a tool actor. Ack removes it
// for good; Nak asks for redelivery after delay; Term drops it.
type Request interface {
	Event() events.Event
	// Call is the event's payload, decoded once by the source.
	Call() *events.ToolCallRequested
	Ack() error
	Nak(delay time.Duration) error
	Term() error
	// InProgress extends the time the request may stay unacknowledged.
	InProgress() error
}

// RequestSource delivers the requests of one concurrency class. Next blocks
// until a request arrives or ctx ends. A request may be delivered again
// after a crash even if it was acked: claims make that harmless.
type RequestSource interface {
	Next(ctx context.Context) (Request, error)
}

// Objects stores full outputs that were cut to the output caps.
type Objects interface {
	Put(ctx context.Context, name string, r io.Reader) (size int64, err error)
}

// Settings are the rules in force for one session, resolved from config and
// the session's agent.
type Settings struct {
	Cap               int
	ParallelToolCalls bool
	Plan              core.PlanInput
	// Retry is the policy for replay-safe calls; Backoff gives the delay
	// before attempt n+1 after attempt n failed (jitter included).
	MaxAttempts int
	Backoff     func(attempt int) time.Duration
	// ApprovalTimeout denies an approval nobody decided in time; 0 waits
	// for ever.
	ApprovalTimeout time.Duration
}

// Deps are what the actors need from the node. Every field is required
// unless it says otherwise.
type Deps struct {
	Log     events.Log
	Objects Objects
	// Settings resolves the rules for an agent of a tenant's session.
	Settings func(tenant, agent string) Settings
	// Tool finds a registered tool by name for a worker running a call of
	// tenant's session (whatever the session's availability; the plan
	// already admitted the call): a shared tool or the tenant's own.
	Tool func(tenant, name string) (*tool.Tool, bool)
	// AllTools lists every registered tool (for tool_search); may be nil.
	AllTools func() []*tool.Tool
	// Workspace opens the workspace of a session for one call (verified
	// afresh each time: docs/security.md, "Workspace"); the caller closes
	// it. An error that is a *workspace.NameError means the workspace
	// cannot be used (its name now passes through a symbolic link, or it is
	// gone): the call fails with that error. Any other error is taken as
	// transient.
	Workspace func(tenant, session string) (*workspace.Dir, error)
	// OutputCaps are the result caps (docs/spec.md §2.5).
	MaxBytes, MaxLines int
	// OutputStore names the object store bucket full outputs go to.
	OutputStore string
	// MaxOutput is how much of one call's output tools keep
	// (limits.output_bytes_per_call), and SpillDir where they spill it;
	// both reach the tool in tool.Call. Zero and "" take the tool's
	// defaults.
	MaxOutput int64
	SpillDir  string
	// OutputQuota, if set, says why a tenant may not keep another full
	// output (limits.output_bytes_per_tenant), or nil: a cut result then
	// says its full output was not kept, and the call's outcome is
	// unchanged (it ran).
	OutputQuota func(tenant string) error
	// Now and NewID are the shell's clock and id mint.
	Now   func() time.Time
	NewID func() string
	// Interrupt cancels the context of a running call on whichever tool
	// actor runs it; nil if the node cannot.
	Interrupt func(tenant, session string, ref events.CallRef)
	// AfterTool, if set, is called (in the worker, after the outcome is
	// reported) with each attempt's result.
	AfterTool func(ctx context.Context, ev events.Event, r *events.ToolCallRequested, res events.Result)
	// IdleTimeout passivates a session actor that has held nothing but
	// what is in the log for this long; 0 keeps actors for ever.
	IdleTimeout time.Duration
	// Passivate makes the node forget a session's actor (if pid is still
	// the one it routes to), so the next message spawns a fresh one.
	Passivate func(tenant, session string, pid *actor.PID)
	// Metrics may be nil.
	Metrics *Metrics
	// Logf logs operational problems; nil discards them.
	Logf func(format string, args ...any)
	// SigningKey signs session heads (HeadSigned, sign.go) when a session
	// closes and on request; nil signs nothing and refuses SignHead.
	SigningKey ed25519.PrivateKey
	// Durable, if set, is called in the actor with every batch of events
	// once it is in the log, in order (the node keeps the session search
	// index with it). It must not block: it hands the events on.
	Durable func(tenant, session string, evs []events.Event)
}

func (d *Deps) logf(format string, args ...any) {
	if d.Logf != nil {
		d.Logf(format, args...)
	}
}
