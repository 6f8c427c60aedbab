package actors

import (
	"context"
	"crypto/ed25519"

	"github.com/callsheet/callsheet/internal/gopool"

	"io"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Request is one durable ToolCallRequested handed to a tool actor
// (LocalRequests). Exactly one of Ack or Nak settles it: Ack lets it go for
// good (the claim in the log, not the queue, keeps it from running twice),
// Nak gives it back to be taken again after delay.
type Request interface {
	// Event is the stored event; Call is its payload, not decoded again.
	Event() events.Event
	Call() *events.ToolCallRequested
	Ack() error
	Nak(delay time.Duration) error
}

// RequestSource hands out the requests of one concurrency class
// (LocalRequests): Next waits until one is queued or ctx ends.
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

// Owner is a session's owner as its log records it (docs/spec.md §7).
type Owner struct {
	// Node and Incarnation are empty for a session never owned.
	Node, Incarnation string
	// Released: the owner handed the session over.
	Released bool
	// WorkspaceNode keeps the session's workspace ("" when shared).
	WorkspaceNode string
}

// Placement is a node's answer to "should I own this session?".
type Placement struct {
	// Take: this node should take the session over (or keep it).
	Take bool
	// Holder, when not Take, is the node that serves the session; empty
	// when none can now.
	Holder string
	// WorkspaceAway, when Take, names the node holding the session's
	// workspace if this node cannot reach it.
	WorkspaceAway string
}

// FleetCaps hands out the slots of tools' fleet-wide caps (docs/spec.md
// §7; cluster.Caps behind the node's adapter).
type FleetCaps interface {
	// Acquire waits until a slot of r's tool's cap is free, or ctx ends,
	// and takes it for the call; release frees it. deadline is when the
	// call's run must end (its timeout from now; zero for a call without
	// one): the slot is held until then, plus a grace, even if this node is
	// lost.
	Acquire(ctx context.Context, tenant, session string, r *events.ToolCallRequested) (release func(), deadline time.Time, err error)
}

// Deps are what the actors need from the node. Every field is required
// unless it says otherwise.
type Deps struct {
	// Goroutines, if set, runs the session actors' appends and the tool
	// actors' calls on goroutines kept between them, whose stacks are
	// already grown (internal/gopool; docs/performance.md, "CPU per
	// call"); nil: a fresh goroutine each.
	Goroutines *gopool.Pool
	Log        events.Log
	Objects    Objects
	// Settings resolves the rules for an agent of a tenant's session.
	Settings func(tenant, agent string) Settings
	// Tool finds a registered tool by name for a worker running a call of
	// tenant's session (whatever the session's availability; the plan
	// already admitted the call): a shared tool or the tenant's own.
	Tool func(tenant, name string) (*tool.Tool, bool)
	// AllTools lists every registered tool (for tool_search); may be nil.
	AllTools func() []*tool.Tool
	// Workspace opens the workspace of a session for one call (checked
	// each time to be the directory its name leads to without a symbolic
	// link: docs/security.md, "Workspace"); the caller closes it, which for
	// the node's shared per-session handle releases a lease. An error that is a *workspace.NameError means the workspace
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
	// Node names this node (unique in the fleet) and Incarnation its
	// process: the session actors record both when they take a session, and
	// the tool actors name Node in claims.
	Node, Incarnation string
	// Place decides whether this node should own a session whose log
	// names cur (docs/spec.md §7); nil: this node owns every session it is
	// asked about (a node alone).
	Place func(tenant, session string, cur Owner) Placement
	// Owned, if set, is told once this node's OwnershipTaken (released
	// false) or OwnershipReleased (released true) of a session is durable,
	// so the fleet's owners index can follow. It must not block.
	Owned func(tenant, session string, epoch uint64, released bool, workspaceNode string)
	// Running, if set, reports whether this node's tool actors are running
	// attempt of a call right now: a session actor rebuilt while one is (it
	// failed, or the node regained its lease) does not settle it as lost.
	Running func(tenant, session string, ref events.CallRef, attempt int) bool
	// Gate, if set, is asked before every append and before a call starts:
	// its error means this node may not act now (it cannot show it holds
	// its lease, docs/spec.md §7), and nothing is published or run.
	Gate func() error
	// Caps, if set, enforces the tools' fleet-wide caps; without it a
	// declared fleet cap is not enforced (a node alone and no cap bucket).
	Caps FleetCaps
	// Metrics may be nil.
	Metrics *Metrics
	// Logf logs operational problems; nil discards them.
	Logf func(format string, args ...any)
	// SigningKey signs session heads (HeadSigned, sign.go) when a session
	// closes and on request; nil signs nothing and refuses SignHead.
	SigningKey ed25519.PrivateKey
	// Dispatch, if set, is handed every ToolCallRequested addressed to
	// this node (ToolCallRequested.Node) by the session actor, in the
	// actor, the moment it is durable (fresh true), and again for each
	// request of its log still current when the actor is rebuilt in the
	// same process (fresh false). The node queues it for the tool actor of
	// its class (LocalRequests); it must not block. Nil: the session hands
	// its requests to no tool actor (a test of the session alone).
	Dispatch func(ev events.Event, r *events.ToolCallRequested, fresh bool)
	// ReadLinger bounds how long a session holds an append that carries
	// the requests of read-only, safe calls already running here, waiting
	// for their outcomes to join it; 0 takes DefaultReadLinger, negative
	// never holds.
	ReadLinger time.Duration
	// Revive, if set, is told by a session actor that stops after giving
	// up while work may be in flight (an append failed during a turn, and
	// not because another writer extended the session): the node spawns
	// the session's actor again after a pause, until one loads, so the
	// rebuilt actor carries the turn on (a request in the log that no tool
	// actor holds is handed over again: redispatch). It must not block.
	Revive func(tenant, session string)
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

// spawn runs f on the Goroutines pool, or on a goroutine of its own.
func (d *Deps) spawn(f func()) {
	if d.Goroutines != nil {
		d.Goroutines.Go(f)
		return
	}
	go f()
}
