package events

// payloads_json.go encodes these types without reflection (jsonenc.go,
// events/internal/gen); regenerate it after changing any of them.
//go:generate go run -tags callsheet_nogen ./internal/gen/cmd -o payloads_json.go

import (
	"encoding/json"
	"time"

	"github.com/callsheet/callsheet/decl"
)

// SessionOpened starts a session.
type SessionOpened struct {
	Workspace string `json:"workspace"`
	Agent     string `json:"agent,omitempty"`
	// Node names the node that holds the workspace when nodes keep their
	// own workspaces; empty when every node shares one workspace root
	// (docs/spec.md §7), and in logs from before fleets.
	Node string `json:"node,omitempty"`
}

// OwnershipTaken records that a node became the session's owner: from this
// event until the next OwnershipTaken it is the only node that appends the
// session's events or runs its calls (docs/spec.md §7). Every append is
// guarded on the session's last event, so an append decided by an earlier
// owner is refused once this is stored.
type OwnershipTaken struct {
	Node string `json:"node"`
	// Epoch counts the session's owners, from 1.
	Epoch uint64 `json:"epoch"`
	// Incarnation names the owner's process (minted at its start): a node
	// restarted under the same name is a new owner.
	Incarnation string `json:"incarnation,omitempty"`
	// WorkspaceAway names the node that holds the session's workspace when
	// this owner cannot reach it (the node was lost): calls that need the
	// workspace are blocked as unavailable until an owner holds it again.
	WorkspaceAway string `json:"workspace_away,omitempty"`
}

// OwnershipReleased records that the owner handed the session over (a
// graceful shutdown): any live node may take it at once, and no call of the
// owner is running.
type OwnershipReleased struct {
	Node  string `json:"node"`
	Epoch uint64 `json:"epoch"`
}

// TurnReceived records a turn as the harness sent it, before any decision.
type TurnReceived struct {
	Turn  string     `json:"turn"`
	Calls []CallSpec `json:"calls"`
	// ParallelToolCalls is false when every call must run alone in order.
	ParallelToolCalls bool `json:"parallel_tool_calls"`
	// Cap is the parallel-safe cap in force for the turn.
	Cap int `json:"cap"`
	// Plan is the pre-phase's decision for every call, in model order, so a
	// replay schedules exactly as the live run did whatever the registry
	// holds by then.
	Plan []PlanEntry `json:"plan"`
}

// TurnOpened starts a streamed turn (docs/spec.md §8): its calls arrive in
// batches while the model still streams (CallsAdded), and TurnEnded closes
// the set. A posted turn is one TurnReceived instead.
type TurnOpened struct {
	Turn string `json:"turn"`
	// ParallelToolCalls and Cap are as in TurnReceived: the settings in
	// force for every call of the turn.
	ParallelToolCalls bool `json:"parallel_tool_calls"`
	Cap               int  `json:"cap"`
}

// CallsAdded records one batch of a streamed turn's calls as the harness
// sent them, with the pre-phase's plan of each, decided as the batch
// arrived. From is the index of the batch's first call in the turn: the
// calls recorded before it.
type CallsAdded struct {
	Turn  string     `json:"turn"`
	From  int        `json:"from"`
	Calls []CallSpec `json:"calls"`
	// Plan holds one entry per call, in order; an entry's Index is its
	// call's index in the turn (From + its place in the batch).
	Plan []PlanEntry `json:"plan"`
}

// Reasons a streamed turn ends (TurnEnded.Reason).
const (
	// EndedByHarness: the harness said the model's response is complete.
	EndedByHarness = "end"
	// EndedByTimeout: no batch came within turns.stream_timeout.
	EndedByTimeout = "timeout"
	// EndedByCancel: the harness cancelled the whole turn.
	EndedByCancel = "cancelled"
)

// TurnEnded closes a streamed turn's set of calls: Calls were received and
// no more will be. The turn completes once each is committed.
type TurnEnded struct {
	Turn   string `json:"turn"`
	Reason string `json:"reason"`
	Calls  int    `json:"calls"`
}

// PlanEntry is the pre-phase's decision for one call.
type PlanEntry struct {
	Index       int         `json:"index"`
	Name        string      `json:"name"`
	Effect      decl.Effect `json:"effect,omitempty"`
	Replay      decl.Replay `json:"replay,omitempty"`
	Concurrency decl.Class  `json:"concurrency,omitempty"`
	// Group and GroupCap describe a self-concurrency group.
	Group     string `json:"group,omitempty"`
	GroupCap  int    `json:"group_cap,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// Blocked is the category when the call was refused; it never runs.
	Blocked Block  `json:"blocked,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Ask is true when a person must approve the call before it runs.
	Ask bool `json:"ask,omitempty"`
	// Rule names what decided the permission (a rule id, "strict-default",
	// "plan-mode", "grant:<event id>", "escalation", a middleware name).
	Rule string `json:"rule,omitempty"`
	// Escalate is true when the call asked to run outside the sandbox.
	Escalate bool `json:"escalate,omitempty"`
	// Labels are the tool's effect labels (signals for approvers).
	Labels []string `json:"labels,omitempty"`
	// Rewritten holds the arguments a middleware rewrote the call to (the
	// call's own arguments stay as the model sent them, for audit).
	Rewritten   json.RawMessage `json:"rewritten,omitempty"`
	RewrittenBy string          `json:"rewritten_by,omitempty"`
	// WorkspaceFree is true for a tool declared not to use the session's
	// workspace: it may run on a node that does not hold it.
	WorkspaceFree bool `json:"workspace_free,omitempty"`
	// FleetCap, when set, bounds the calls of this tool running at once
	// across every node, per FleetCapScope ("tenant" or "fleet").
	FleetCap      int    `json:"fleet_cap,omitempty"`
	FleetCapScope string `json:"fleet_cap_scope,omitempty"`
	// Args, when set, are the arguments the call runs with where they differ
	// from the model's, normalized: the optional fields it sent as null
	// dropped (tool.Tool.Arguments), as OpenAI's strict mode sends them.
	Args json.RawMessage `json:"args,omitempty"`
}

// CallRef identifies a call inside a session; embedded in every call event so
// the API can show data.call and data.attempt.
type CallRef struct {
	Turn  string `json:"turn"`
	Call  string `json:"call"`
	Index int    `json:"index"`
}

// Ref returns the reference itself. Every payload that embeds CallRef gains
// it, which is how CallOf tells a call event from the others without a list
// that each new event type would have to join.
func (r CallRef) Ref() CallRef { return r }

// CallOf returns the call a decoded payload is about, and false for a payload
// that is about no call (one that does not embed CallRef).
func CallOf(p any) (CallRef, bool) {
	if c, ok := p.(interface{ Ref() CallRef }); ok {
		return c.Ref(), true
	}
	return CallRef{}, false
}

// ToolCallRequested hands a call to the tool actors of its concurrency class.
type ToolCallRequested struct {
	CallRef
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"` // the normalized arguments object
	Attempt        int             `json:"attempt"`
	Effect         decl.Effect     `json:"effect"`
	Replay         decl.Replay     `json:"replay"`
	Concurrency    decl.Class      `json:"concurrency"`
	IdempotencyKey string          `json:"idempotency_key"`
	TimeoutMS      int64           `json:"timeout_ms"`
	// Escalate is true for a call approved to run outside the sandbox.
	Escalate bool `json:"escalate,omitempty"`
	// Node is the node that runs the call: the session's owner when it was
	// requested (docs/spec.md §7). Empty: any node's workers may take it.
	Node string `json:"node,omitempty"`
	// WorkspaceFree, FleetCap and FleetCapScope are the plan's (PlanEntry).
	WorkspaceFree bool   `json:"workspace_free,omitempty"`
	FleetCap      int    `json:"fleet_cap,omitempty"`
	FleetCapScope string `json:"fleet_cap_scope,omitempty"`
}

// DispatchBlocked records that a call was refused before it ran.
type DispatchBlocked struct {
	CallRef
	Name     string `json:"name"`
	Category Block  `json:"category"`
	Reason   string `json:"reason"`
	// Rule names what denied the call (for denied ones).
	Rule string `json:"rule,omitempty"`
}

// ToolCallStarted is the claim: attempt N of the call is about to run. A call
// runs only once this is durable.
type ToolCallStarted struct {
	CallRef
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker"`
	// ExternalWorker is the id an external worker gave (its poll's
	// "worker") when it took this attempt of a harness tool's call: such a
	// claim is recorded as the worker takes the attempt, before the task is
	// handed over (docs/workers.md). Omitted for the node's own tools, and
	// in logs from before it was recorded.
	ExternalWorker string `json:"external_worker,omitempty"`
	// QueuedMS is how long the call waited for a slot of its tool's fleet
	// cap before it was claimed; omitted for tools without one.
	QueuedMS float64 `json:"queued_ms,omitempty"`
}

// FileCheckpointed records a file's pre-image before a mutating call runs.
type FileCheckpointed struct {
	CallRef
	Path string `json:"path"`
	// Existed is false when the file was absent (a rewind removes it).
	Existed bool   `json:"existed"`
	Object  string `json:"object,omitempty"`
	SHA256  string `json:"sha256,omitempty"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode,omitempty"`
}

// ToolCallCompleted records a successful attempt and its (possibly cut) result.
type ToolCallCompleted struct {
	CallRef
	Attempt    int        `json:"attempt"`
	Content    []Part     `json:"content"`
	Truncated  bool       `json:"truncated"`
	FullOutput *OutputRef `json:"full_output,omitempty"`
	Touched    []string   `json:"touched,omitempty"`
	DurationMS float64    `json:"duration_ms"`
}

// ToolCallFailed records a failed attempt: the tool, process or transport
// failed.
type ToolCallFailed struct {
	CallRef
	Attempt    int     `json:"attempt"`
	Error      string  `json:"error"`
	DurationMS float64 `json:"duration_ms"`
	// Final is true when no retry follows: the call settles as an error.
	Final bool `json:"final"`
	// TimedOut is true when the attempt hit its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
}

// ToolCallIndeterminate records an attempt whose effect may or may not have
// happened (timeout or lost worker near a side effect).
type ToolCallIndeterminate struct {
	CallRef
	Name    string `json:"name"`
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// RetryScheduled records that a safe call will be tried again.
type RetryScheduled struct {
	CallRef
	// Attempt is the attempt that will run next.
	Attempt int           `json:"attempt"`
	Delay   time.Duration `json:"delay_ns"`
	Error   string        `json:"error"`
}

// ResultCommitted is the model-visible result of one call, committed in call
// order. The transcript is built from these alone.
type ResultCommitted struct {
	CallRef
	Result Result `json:"result"`
}

// TurnCompleted closes a turn: every call is committed.
type TurnCompleted struct {
	Turn string `json:"turn"`
}

// RetryNoticeIssued tells the model, on the next turn, that a call's outcome
// is unknown and authoritative state must be checked before a new mutation.
type RetryNoticeIssued struct {
	// Turn is the turn that carries the notice.
	Turn string `json:"turn"`
	// About names the indeterminate call.
	About   CallRef `json:"about"`
	Name    string  `json:"name"`
	Attempt int     `json:"attempt"`
	Notice  string  `json:"notice"`
}

// SessionClosed ends a session.
type SessionClosed struct {
	Reason string `json:"reason,omitempty"`
}

// CallCancelled records that the harness cancelled a call (or its whole
// turn). A call that had not started settles as an error and never runs; a
// running one is told through its context and settles by what it reports.
type CallCancelled struct {
	CallRef
	Name   string `json:"name"`
	Reason string `json:"reason"`
	// Running is true when the call had started: its outcome comes later.
	Running bool `json:"running"`
}

// AnswerReceived records the user's answer to a user-mediated call (the
// question tool), given through the API. The call's tool reads it back, so an
// answer survives a restart of the node that was waiting.
type AnswerReceived struct {
	CallRef
	Answer json.RawMessage `json:"answer"`
	// By is who answered, when the API knows (a bearer token's tenant user).
	By string `json:"by,omitempty"`
}

// WorkStateUpdated records a new value of durable work state (plan, todo,
// goal) set by a call.
type WorkStateUpdated struct {
	CallRef
	Kind  string          `json:"kind"`
	Value json.RawMessage `json:"value"`
}

// WorkspaceRewound records that the workspace's checkpointed files were
// restored to just before a call.
type WorkspaceRewound struct {
	// To is the call the workspace was rewound to (its state just before).
	To CallRef `json:"to"`
	// Restored and Removed list workspace-relative paths.
	Restored []string `json:"restored"`
	Removed  []string `json:"removed"`
}

// ApprovalRequested records that a call waits for a person's approval.
type ApprovalRequested struct {
	CallRef
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Effect    decl.Effect     `json:"effect"`
	// Labels are the tool's effect labels, or ["(none declared)"].
	Labels   []string `json:"labels"`
	Rule     string   `json:"rule"`
	Reason   string   `json:"reason"`
	Escalate bool     `json:"escalate,omitempty"`
}

// Approval scopes.
const (
	// ScopeCall approves this call only.
	ScopeCall = "call"
	// ScopeToolArgs approves this tool with exactly these arguments for the
	// rest of the session.
	ScopeToolArgs = "tool_args"
	// ScopeTool approves this tool for the rest of the session.
	ScopeTool = "tool"
)

// ApprovalGranted records who allowed a call, and for how far.
type ApprovalGranted struct {
	CallRef
	Name string `json:"name"`
	// By is a person's identity from the API call, or a rule id.
	By     string `json:"by"`
	Scope  string `json:"scope"`
	Reason string `json:"reason,omitempty"`
	// Arguments are the call's canonical arguments, for a tool_args scope.
	Arguments string `json:"arguments,omitempty"`
}

// ApprovalDenied records who denied a call; the reason is what the model sees.
type ApprovalDenied struct {
	CallRef
	Name   string `json:"name"`
	By     string `json:"by"`
	Reason string `json:"reason"`
}
