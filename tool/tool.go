package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/callsheet/callsheet/decl"
)

// Effect says what a call does to the world (decl.Effect, its one owner).
// The zero value is undeclared; Normalize fills it with the strictest,
// EffectSideEffecting.
type Effect = decl.Effect

// The four effects of docs/spec.md §1.
const (
	EffectReadOnly      = decl.EffectReadOnly
	EffectUserMediated  = decl.EffectUserMediated
	EffectDelegating    = decl.EffectDelegating
	EffectSideEffecting = decl.EffectSideEffecting
)

// Replay says whether a call may be tried again after a failure
// (decl.Replay).
type Replay = decl.Replay

// ReplayNever (at most once) is the default; ReplaySafe calls may be retried
// after backoff.
const (
	ReplayNever = decl.ReplayNever
	ReplaySafe  = decl.ReplaySafe
)

// Concurrency is a call's concurrency class (decl.Class).
type Concurrency = decl.Class

// ConcurrencyExclusive (the default) is a two-way barrier; ParallelSafe calls
// overlap each other up to the session's cap; IsolatedBackground calls run off
// the foreground path and answer with a job handle.
const (
	ConcurrencyExclusive          = decl.ClassExclusive
	ConcurrencyParallelSafe       = decl.ClassParallelSafe
	ConcurrencyIsolatedBackground = decl.ClassIsolatedBackground
)

// Label is an effect label: a signal for approvers and telemetry, never a gate.
type Label string

// The effect labels of docs/spec.md §1.
const (
	LabelIrreversible  Label = "irreversible"
	LabelFinancial     Label = "financial"
	LabelExternal      Label = "external"
	LabelAffectsOthers Label = "affects_others"
)

// Default timeouts. Infinite is allowed only for user-mediated tools.
const (
	DefaultTimeout      = 120 * time.Second
	DefaultShellTimeout = 60 * time.Second
	Infinite            = time.Duration(-1)
)

// Declarations are the three independent declarations of a call. A tool
// declares them statically, or picks them per call with Classify.
type Declarations struct {
	Effect      Effect      `json:"effect"`
	Replay      Replay      `json:"replay"`
	Concurrency Concurrency `json:"concurrency"`
}

// Strictest is what an undeclared tool is: side-effecting, never-replay,
// exclusive. Unknown tools fail closed.
var Strictest = Declarations{Effect: EffectSideEffecting, Replay: ReplayNever, Concurrency: ConcurrencyExclusive}

// Normalize fills every empty declaration with its strictest value.
func (d Declarations) Normalize() Declarations {
	return Declarations{Effect: d.Effect.OrStrictest(), Replay: d.Replay.OrStrictest(), Concurrency: d.Concurrency.OrStrictest()}
}

// Validate reports an unknown value in any declaration.
func (d Declarations) Validate() error {
	if !d.Effect.Valid() {
		return fmt.Errorf("effect %q is not one of %s", d.Effect, strings.Join(decl.Names(decl.Effects()), ", "))
	}
	if !d.Replay.Valid() {
		return fmt.Errorf("replay %q is not one of %s", d.Replay, strings.Join(decl.Names(decl.Replays()), ", "))
	}
	if !d.Concurrency.Valid() {
		return fmt.Errorf("concurrency %q is not one of %s", d.Concurrency, strings.Join(decl.Names(decl.Classes()), ", "))
	}
	return nil
}

// Tool is one registered tool: what the model sees, the declarations the
// scheduler enforces, and the function that runs it. Build one with New (a
// typed Go function) or fill the struct and call Registry.Register, which
// validates it. A Tool is immutable once registered and safe for concurrent use.
type Tool struct {
	// Name is unique and stable: it is the API the model sees.
	Name string
	// Description is model-visible; required.
	Description string
	// ShortDescription is used when the tool section is over budget; it
	// falls back to Description.
	ShortDescription string
	// InputSchema is the JSON Schema of the arguments object.
	InputSchema json.RawMessage
	// Guidelines say when to use the tool; at least one non-empty one.
	Guidelines []string
	// Snippet is an example call.
	Snippet string

	// Declarations are the static effect, replay and concurrency; empty
	// fields take the strictest value.
	Declarations
	// Labels are effect labels (signals, never gates).
	Labels []Label
	// SelfConcurrency, when it returns ≥ 2, lets calls of this tool overlap
	// each other up to that cap while staying exclusive with every other tool.
	// It is read at each call, so a tool may change it at run time. Nil means 1.
	SelfConcurrency func() int
	// Timeout is the hard per-call timeout; 0 means DefaultTimeout and
	// Infinite is only for user-mediated tools.
	Timeout time.Duration
	// Escalation says a call may carry "escalate": true.
	Escalation bool
	// MutatedPaths returns the files a call will write (relative to the
	// workspace), whose pre-images are checkpointed before it runs. It must
	// return nil for malformed arguments.
	MutatedPaths func(args json.RawMessage) []string
	// TouchedPaths returns the files a call reads, recorded after success.
	TouchedPaths func(args json.RawMessage) []string
	// Classify picks the declarations from validated arguments, for mixed
	// tools. Nil means the static Declarations.
	Classify func(args json.RawMessage) Declarations
	// Deferred keeps the tool out of the model's list; tool_search finds it.
	Deferred bool
	// WorkspaceFree declares that the tool never touches the session's
	// workspace, so a node that does not hold the workspace may run it
	// (docs/spec.md §7). False, the strictest, means it needs the workspace.
	WorkspaceFree bool
	// ClaimsWhenTaken declares that the tool's Run claims its call itself,
	// through the function ClaimFrom finds in its context, when an external
	// worker takes it, naming that worker, and hands it over only once the
	// claim is durable (harness tools: docs/workers.md). The runtime then
	// runs the call before its claim, and records the claim Run makes.
	// False (the default): the runtime claims every call before it runs.
	ClaimsWhenTaken bool
	// FleetCap, when ≥ 1, bounds how many calls of this tool run at once
	// across every session and node, per FleetCapScope (docs/spec.md §7); 0
	// means no fleet-wide cap.
	FleetCap int
	// FleetCapScope is what the fleet cap counts over: FleetCapTenant (the
	// default: each tenant has its own FleetCap slots) or FleetCapFleet
	// (one set of slots for every tenant).
	FleetCapScope string

	// Validate checks arguments strictly against InputSchema before any code
	// runs. Register fills it from InputSchema when it is nil.
	Validate func(args json.RawMessage) error
	// Run executes one call. Its error becomes an "error" outcome the model
	// sees; a cancelled context is not converted into a recoverable result.
	Run func(ctx context.Context, args json.RawMessage) (Result, error)

	// prune drops optional fields sent as null (see Arguments) from obj,
	// the value of args, and returns the arguments without them (args
	// itself when none was dropped); set by New and Register from
	// InputSchema.
	prune func(args json.RawMessage, obj map[string]any) json.RawMessage
	// memo holds the arguments a tool built by New has validated (see
	// argsMemo); nil for other tools.
	memo *argsMemo
	// lazy is the input schema of a tenant's tool, compiled on first use
	// (Registry.ReplaceTenant); nil for other tools.
	lazy *lazySchema
}

// Arguments turns a call's raw arguments into the ones it runs with:
// NormalizeArguments (an object, or a string holding one), then every field
// that is null where InputSchema makes it optional and does not accept null
// is dropped, as absent (a model in OpenAI's strict mode sends null for the
// optional fields it leaves out), then Validate. The error is an
// *ArgumentError for arguments that cannot be used. A tool that was neither
// built by New nor registered is only normalized and validated.
func (t *Tool) Arguments(raw json.RawMessage) (json.RawMessage, error) {
	args, obj, err := parseArguments(raw)
	if err != nil {
		return nil, err
	}
	if t.prune != nil {
		args = t.prune(args, obj) // the value parsed once, not again
	}
	if t.Validate != nil {
		err = t.Validate(args)
	}
	return args, err
}

// Fleet cap scopes (Tool.FleetCapScope).
const (
	FleetCapTenant = "tenant"
	FleetCapFleet  = "fleet"
)

// MaxFleetCap bounds Tool.FleetCap.
const MaxFleetCap = 10_000

// DeclarationsFor returns the normalized declarations of one call with
// already-validated arguments.
func (t *Tool) DeclarationsFor(args json.RawMessage) Declarations {
	if t.Classify != nil {
		return t.Classify(args).Normalize()
	}
	return t.Declarations.Normalize()
}

// SelfCap returns the self-concurrency cap for a call now: 1 unless the tool
// declares a cap of at least 2.
func (t *Tool) SelfCap() int {
	if t.SelfConcurrency == nil {
		return 1
	}
	if n := t.SelfConcurrency(); n >= 2 {
		return n
	}
	return 1
}

// EffectiveTimeout returns the call timeout with the default applied.
func (t *Tool) EffectiveTimeout() time.Duration {
	if t.Timeout == 0 {
		return DefaultTimeout
	}
	return t.Timeout
}

// Short returns the short description, falling back to Description.
func (t *Tool) Short() string {
	if t.ShortDescription != "" {
		return t.ShortDescription
	}
	return t.Description
}
