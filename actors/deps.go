package actors

import (
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/gopool"
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
// (LocalRequests), each with one of the class's workers: Next waits until a
// request may have a worker or ctx ends; Done frees the worker once the
// request's call is over.
type RequestSource interface {
	Next(ctx context.Context) (Request, error)
	Done(Request)
}

// Objects stores full outputs that were cut to the output caps, large
// images and file pre-images.
type Objects interface {
	Put(ctx context.Context, name string, r io.Reader) (size int64, err error)
}

// OutputQuota says why a tenant may not keep another full output
// (limits.output_bytes_per_tenant), or nil.
type OutputQuota interface {
	KeepOutput(tenant string) error
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
	Backoff     Backoff
	// ApprovalTimeout denies an approval nobody decided in time; 0 waits
	// for ever.
	ApprovalTimeout time.Duration
	// StreamTimeout ends a streamed turn left open this long after its
	// last batch (turns.stream_timeout); 0 never ends one by itself.
	StreamTimeout time.Duration
	// CallsPerTurn bounds the calls one turn holds (limits.calls_per_turn);
	// a streamed turn is held to it batch by batch. 0: no bound.
	CallsPerTurn int
}

// Backoff gives the delay before attempt n+1 of a call after attempt n
// failed.
type Backoff interface {
	Delay(attempt int) time.Duration
}

// Rules resolves the Settings of a tenant's session run by agent.
type Rules interface {
	Settings(tenant, agent string) Settings
}

// Tools is the tool surface as the tool actors see it.
type Tools interface {
	// Resolve finds the tool a call of tenant's session was planned with,
	// whatever its availability now (the plan already admitted the call):
	// a shared tool or the tenant's own.
	Resolve(tenant, name string) (*tool.Tool, bool)
	// Searchable lists the tools tool_search may offer.
	Searchable() []*tool.Tool
}

// Workspaces opens a session's workspace for one call (checked each time to
// be the directory its name leads to without a symbolic link:
// docs/security.md, "Workspace"); the caller closes it. An error that is a
// *workspace.NameError means the workspace cannot be used (the call fails
// with that error); any other error is taken as transient.
type Workspaces interface {
	Workspace(tenant, session string) (*workspace.Dir, error)
}

// Clock is the shell's clock and id mint: the only source of times and ids
// of what the actors decide.
type Clock interface {
	Now() time.Time
	NewID() string
}

// Sessions is the node's registry of session actors, as the actors see it.
type Sessions interface {
	// Route returns the live actor of a session on this node, spawning it
	// if needed.
	Route(tenant, session string) (*actor.PID, error)
	// Passivate forgets a session's actor if pid is still the one it routes
	// to, so the next message spawns a fresh one. It must not block.
	Passivate(tenant, session string, pid *actor.PID)
	// Revive is told by a session actor that stops after giving up while
	// work may be in flight (an append failed during a turn, and not
	// because another writer extended the session): the registry spawns
	// the session's actor again after a pause, until one loads, so the
	// rebuilt actor carries the turn on (redispatch). It must not block.
	Revive(tenant, session string)
}

// Fleet is this node's part in its fleet (docs/spec.md §7), as the actors
// see it. Nil: a node alone, which owns every session it is asked about
// and may always act.
type Fleet interface {
	// Gate is asked before every append and before a call starts: its
	// error means this node may not act now (it cannot show it holds its
	// lease), and nothing is published or run.
	Gate() error
	// Place decides whether this node should own a session whose log
	// names cur.
	Place(tenant, session string, cur Owner) Placement
	// Owned is told once this node's OwnershipTaken (released false) or
	// OwnershipReleased (released true) of a session is durable, so the
	// fleet's owners index can follow. It must not block.
	Owned(tenant, session string, epoch uint64, released bool, workspaceNode string)
}

// workerTaker is Calls that can take a worker for a request as its session
// decides it (Pools), so that the request's claim goes into the log with
// it and the call runs without asking for one (Session.claimWithRequests).
type workerTaker interface {
	takeWorker(tenant string, r *events.ToolCallRequested) heldWorker
}

// Calls are this node's tool actors, as the session actors see them
// (Pools).
type Calls interface {
	// Offer queues a durable request addressed to this node for the tool
	// actor of its class; fresh says it is offered the moment it became
	// durable (or before, for a call that may run unclaimed). It must not
	// block.
	Offer(ev events.Event, r *events.ToolCallRequested, fresh bool)
	// Running reports whether a call of the session runs here now: a
	// session actor rebuilt while one does (it failed, or the node regained
	// its lease) does not settle it as lost.
	Running(tenant, session string, ref events.CallRef) bool
	// Run reports how far a call of the session handed over here got:
	// not ok while it waits to start (or after its outcome reached the
	// session), else when its tool started and whether it returned.
	Run(tenant, session string, ref events.CallRef) (CallRun, bool)
	// Interrupt cancels the context of a running call, if one runs here.
	Interrupt(tenant, session string, ref events.CallRef)
}

// CallRun is a call's run on a tool actor (Calls.Run).
type CallRun struct {
	// Start is when its tool started; Ended, that its tool returned and
	// its outcome is on its way to the session.
	Start time.Time
	Ended bool
}

// AfterHooks run after each attempt, with its result as the log records it
// (core.SettledResult). They run in the tool actor's goroutine of the call.
type AfterHooks interface {
	After(ctx context.Context, ev events.Event, r *events.ToolCallRequested, res events.Result)
}

// Durable is told, in the session actor, of every batch of events once it
// is in the log, in order (the node keeps the session search index with
// it). It must not block.
type Durable interface {
	Durable(tenant, session string, evs []events.Event)
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
	// and takes it for the call.
	Acquire(ctx context.Context, tenant, session string, r *events.ToolCallRequested) (CapSlot, error)
}

// CapSlot is the slot of a fleet-wide cap a call took.
type CapSlot struct {
	// Release frees it.
	Release func()
	// Deadline is when the call's run must end (its timeout from when the
	// slot was taken; zero for a call without one): the slot is held until
	// then, plus a grace, even if this node is lost, unless the call's
	// processes are held by Lease.
	Deadline time.Time
	// Lease, when non-nil, goes to the call's tool (tool.WithLease): the
	// process groups it holds are ended before the slot could lapse, which
	// then lapses with this node's renewals of it.
	Lease tool.Lease
}

// Outputs are the output caps and where a cut result's full output goes.
type Outputs struct {
	// MaxBytes and MaxLines are the result caps (docs/spec.md §2.5).
	MaxBytes, MaxLines int
	// Store names the object store bucket full outputs go to.
	Store string
	// MaxOutput is how much of one call's output tools keep
	// (limits.output_bytes_per_call), and SpillDir where they spill it;
	// both reach the tool in tool.Call. Zero and "" take the tool's
	// defaults.
	MaxOutput int64
	SpillDir  string
	// MaxOutputFor, if set, is MaxOutput for a tenant (its own
	// tenants.<t>.limits.output_bytes_per_call).
	MaxOutputFor func(tenant string) int64
}

// Deps are the collaborators of the actors, each an interface the node (or
// a test) implements, and the values they need. Log, Rules, Tools,
// Workspaces, Clock and Sessions are required; the others may be nil (or
// zero) unless they say otherwise.
type Deps struct {
	Log        events.Log
	Objects    Objects
	Rules      Rules
	Tools      Tools
	Workspaces Workspaces
	Clock      Clock
	Sessions   Sessions
	// Fleet, if set, fences the actors by this node's lease and places
	// sessions in the fleet.
	Fleet Fleet
	// Calls, if set, are the tool actors the session actors hand their
	// requests to; nil: no request is handed over (a test of the session
	// alone).
	Calls Calls
	// Quota, if set, says when a tenant may not keep another full output:
	// a cut result then says its full output was not kept, and the call's
	// outcome is unchanged (it ran).
	Quota OutputQuota
	// After, if set, runs after each attempt (AfterHooks).
	After AfterHooks
	// Durable, if set, is told of every durable batch of events.
	Durable Durable
	// Caps, if set, enforces the tools' fleet-wide caps; without it a
	// declared fleet cap is not enforced (a node alone and no cap bucket).
	Caps FleetCaps
	// Logger, if set, logs operational problems.
	Logger *slog.Logger
	// Goroutines, if set, runs the session actors' appends and the tool
	// actors' calls on goroutines kept between them, whose stacks are
	// already grown (internal/gopool); nil: a fresh goroutine each.
	Goroutines *gopool.Pool
	// Metrics may be nil.
	Metrics *Metrics
	// SigningKey signs session heads (HeadSigned, sign.go) when a session
	// closes and on request; nil signs nothing and refuses SignHead.
	SigningKey ed25519.PrivateKey
	Outputs    Outputs
	// Node names this node (unique in the fleet) and Incarnation its
	// process: the session actors record both when they take a session, and
	// the tool actors name Node in claims.
	Node, Incarnation string
	// IdleTimeout passivates a session actor that has held nothing but
	// what the log holds for this long; 0 keeps actors for ever.
	IdleTimeout time.Duration
	// ReadLinger bounds how long of their run a session holds an append
	// that carries the requests of calls that may run unclaimed, handed
	// to the tool actors here, waiting for their outcomes to join it
	// (DefaultReadLinger); 0 takes DefaultReadLinger, negative never holds.
	ReadLinger time.Duration

	// handoffs are the session actors' handoffs, for the tool actors.
	handoffs handoffs
}

// log is the Logger, or one that discards.
func (d *Deps) log() *slog.Logger {
	if d.Logger == nil {
		return discard
	}
	return d.Logger
}

var discard = slog.New(slog.DiscardHandler)

// gate is the Fleet's Gate, or nil for a node alone.
func (d *Deps) gate() error {
	if d.Fleet == nil {
		return nil
	}
	return d.Fleet.Gate()
}

// spawn runs f on the Goroutines pool, or on a goroutine of its own.
func (d *Deps) spawn(f func()) {
	if d.Goroutines != nil {
		d.Goroutines.Go(f)
		return
	}
	go f()
}

// maxOutput is MaxOutput for tenant.
func (o Outputs) maxOutput(tenant string) int64 {
	if o.MaxOutputFor != nil {
		return o.MaxOutputFor(tenant)
	}
	return o.MaxOutput
}
