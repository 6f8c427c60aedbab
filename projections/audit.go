package projections

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/callsheet/callsheet/events"
)

// The audit fold: what a person reading a session wants to see (the
// timeline page and the Markdown of docs/audit.md). Unlike Fold, it never
// fails: an audit view must show a damaged or newer log too, so an event it
// cannot place (an unknown type, a payload that does not decode, a call that
// was never received) becomes a Mark that says why, and replay --verify is
// what judges the log.

// Stamp is when one event happened: its position in the session and the time
// recorded in it. The zero Stamp names no event.
type Stamp struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// IsZero reports whether s names no event.
func (s Stamp) IsZero() bool { return s.Seq == 0 && s.Time.IsZero() }

func stampOf(ev events.Event) Stamp { return Stamp{Seq: ev.Seq, Time: ev.Time} }

// Mark is an event the audit shows as a point in time without a model of its
// own: a type this build does not know (a newer node's), or an event it
// could not place. Problem says which.
type Mark struct {
	Stamp
	Type events.Type `json:"type"`
	// Turn and Call are what the event's data names, when it names them.
	Turn string `json:"turn,omitempty"`
	Call string `json:"call,omitempty"`
	// Problem says why the event is only a mark: MarkUnknown, or what did
	// not decode or could not be placed.
	Problem string `json:"problem"`
	// Data is the event's payload as recorded (a JSON string of the bytes
	// when they are not JSON).
	Data json.RawMessage `json:"data,omitempty"`
}

// MarkUnknown is the Problem of a Mark whose event type this build does not
// know: not an error, a fact from a newer node.
const MarkUnknown = "event type not known to this build"

// Audit is the audit model of one session, folded from its events in log
// order by FoldAudit or an AuditFolder. The same events give the same model,
// live or replayed.
type Audit struct {
	Session string `json:"session"`
	Tenant  string `json:"tenant,omitempty"`
	// Events is how many events were folded; First and Last are the first
	// and the last of them.
	Events int   `json:"events"`
	First  Stamp `json:"first,omitzero"`
	Last   Stamp `json:"last,omitzero"`
	// Opened and Closed are the session's SessionOpened and SessionClosed.
	Opened *Opened `json:"opened,omitempty"`
	Closed *Closed `json:"closed,omitempty"`
	// Rewinds are the WorkspaceRewound events, in order.
	Rewinds []Rewind `json:"rewinds,omitempty"`
	// Owners are the session's changes of owner (OwnershipTaken and
	// OwnershipReleased), in order: which node ran it when (docs/spec.md §7).
	Owners []OwnerChange `json:"owners,omitempty"`
	// Signatures are the HeadSigned events, in order: the session's head
	// signed (docs/audit.md). The model does not check them; replay.Verify
	// does.
	Signatures []Signature `json:"signatures,omitempty"`
	Turns      []AuditTurn `json:"turns"`
	// Marks are the events that name no turn the session received.
	Marks []Mark `json:"marks,omitempty"`
}

// OwnerChange is one OwnershipTaken (Released false) or OwnershipReleased.
type OwnerChange struct {
	Stamp
	Node     string `json:"node"`
	Epoch    uint64 `json:"epoch"`
	Released bool   `json:"released,omitempty"`
	// WorkspaceAway names the node keeping the workspace when the owner
	// could not reach it.
	WorkspaceAway string `json:"workspace_away,omitempty"`
}

// Opened is a session's SessionOpened.
type Opened struct {
	Stamp
	Workspace string `json:"workspace"`
	Agent     string `json:"agent,omitempty"`
}

// Closed is a session's SessionClosed.
type Closed struct {
	Stamp
	Reason string `json:"reason,omitempty"`
}

// Signature is one HeadSigned: the event at Signed.Seq, whose hash is
// Signed.Hash, signed with the key Signed.Key.
type Signature struct {
	Stamp
	Signed events.HeadSigned `json:"signed"`
}

// Rewind is one WorkspaceRewound: the workspace's checkpointed files were
// restored to just before the call To.
type Rewind struct {
	Stamp
	To       events.CallRef `json:"to"`
	Restored []string       `json:"restored,omitempty"`
	Removed  []string       `json:"removed,omitempty"`
}

// AuditTurn is one turn: its calls in model order, with everything that
// happened to each.
type AuditTurn struct {
	Turn string `json:"turn"`
	// Status is StatusRunning until the turn's TurnCompleted, then
	// StatusComplete.
	Status            string `json:"status"`
	Received          Stamp  `json:"received"`
	Completed         Stamp  `json:"completed,omitzero"`
	ParallelToolCalls bool   `json:"parallel_tool_calls"`
	Cap               int    `json:"cap"`
	// Streamed marks a turn whose calls arrived in batches while the model
	// streamed (TurnOpened; Received is then its opening): Batches are its
	// CallsAdded in order, and Ended its TurnEnded, nil while it is open.
	Streamed bool    `json:"streamed,omitempty"`
	Batches  []Batch `json:"batches,omitempty"`
	Ended    *Ended  `json:"ended,omitempty"`
	// End is the latest time recorded in any event of the turn so far (a
	// background call may settle after its turn completed): the right end
	// of the turn's time axis.
	End     time.Time     `json:"end"`
	Calls   []AuditCall   `json:"calls"`
	Notices []AuditNotice `json:"notices,omitempty"`
	// Marks are events that name this turn but none of its calls.
	Marks []Mark `json:"marks,omitempty"`
}

// Batch is one CallsAdded of a streamed turn: Calls calls from index From.
type Batch struct {
	Stamp
	From  int `json:"from"`
	Calls int `json:"calls"`
}

// Ended is a streamed turn's TurnEnded: why (events.EndedByHarness,
// EndedByTimeout, EndedByCancel) and with how many calls.
type Ended struct {
	Stamp
	Reason string `json:"reason"`
	Calls  int    `json:"calls"`
}

// AuditNotice is a retry notice the turn carries: a call of an earlier turn
// whose outcome is unknown.
type AuditNotice struct {
	Stamp
	About   events.CallRef `json:"about"`
	Tool    string         `json:"tool"`
	Attempt int            `json:"attempt"`
	Text    string         `json:"text"`
}

// AuditCall is one call of a turn.
type AuditCall struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	Name  string `json:"name"`
	// Arguments are the call's arguments verbatim, as the model sent them;
	// Normalized are the arguments it was requested with (the decoded
	// object, or a middleware's rewrite).
	Arguments  json.RawMessage `json:"arguments"`
	Normalized json.RawMessage `json:"normalized,omitempty"`
	// ArgumentsBytes and NormalizedBytes are the sizes of Arguments and
	// Normalized when a folder that clips (ClipAt) kept only their first
	// bytes, as a JSON string; 0 when they are whole.
	ArgumentsBytes  int `json:"arguments_bytes,omitempty"`
	NormalizedBytes int `json:"normalized_bytes,omitempty"`
	// ResultBytes is the size of the Result's parts when a folder that
	// clips kept only the first bytes of some (each cut part is text); 0
	// when they are whole.
	ResultBytes int `json:"result_bytes,omitempty"`
	// Arrived is the CallsAdded that brought a streamed turn's call; zero
	// for a call of a posted turn, which arrived with its TurnReceived.
	Arrived Stamp `json:"arrived,omitzero"`
	// Plan is the pre-phase's decision for the call (declarations, rule,
	// ask, block).
	Plan          events.PlanEntry `json:"plan"`
	Blocked       *Blocked         `json:"blocked,omitempty"`
	Approval      *Approval        `json:"approval,omitempty"`
	Attempts      []Attempt        `json:"attempts,omitempty"`
	Retries       []Retry          `json:"retries,omitempty"`
	Indeterminate *Indeterminate   `json:"indeterminate,omitempty"`
	Cancelled     *Cancellation    `json:"cancelled,omitempty"`
	Checkpoints   []Checkpoint     `json:"checkpoints,omitempty"`
	Answers       []Answer         `json:"answers,omitempty"`
	WorkState     []WorkState      `json:"work_state,omitempty"`
	// Committed and Result are the call's ResultCommitted: the result the
	// model saw, as the transcript holds it.
	Committed Stamp          `json:"committed,omitzero"`
	Result    *events.Result `json:"result,omitempty"`
	// Marks are events that name this call but have no place above.
	Marks []Mark `json:"marks,omitempty"`
}

// Blocked is a call's DispatchBlocked: it was refused and never ran.
type Blocked struct {
	Stamp
	Category events.Block `json:"category"`
	Reason   string       `json:"reason"`
	Rule     string       `json:"rule,omitempty"`
}

// Approval decisions.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
)

// Approval is a call that asked a person: its ApprovalRequested and, once
// decided, its ApprovalGranted or ApprovalDenied. Decision is empty while it
// is pending.
type Approval struct {
	Requested Stamp           `json:"requested"`
	Rule      string          `json:"rule"`
	Reason    string          `json:"reason"`
	Effect    string          `json:"effect,omitempty"`
	Labels    []string        `json:"labels,omitempty"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Escalate  bool            `json:"escalate,omitempty"`
	// Decision is DecisionAllow or DecisionDeny, or empty while pending.
	Decision string `json:"decision,omitempty"`
	Decided  Stamp  `json:"decided,omitzero"`
	// By is who decided (a person, or approval-timeout).
	By string `json:"by,omitempty"`
	// Scope is the grant's scope (call, tool_args, tool) for an allow.
	Scope string `json:"scope,omitempty"`
	// DecisionReason is the approver's reason (for a deny: what the model
	// sees).
	DecisionReason string `json:"decision_reason,omitempty"`
}

// Pending reports whether the approval waits for a decision.
func (a *Approval) Pending() bool { return a != nil && a.Decision == "" }

// Attempt outcomes, as an Attempt records them once it ended.
const (
	AttemptOK            = "ok"
	AttemptError         = "error"
	AttemptIndeterminate = "indeterminate"
)

// Attempt is one attempt of a call: requested, claimed, run and ended.
type Attempt struct {
	Attempt   int   `json:"attempt"`
	Requested Stamp `json:"requested,omitzero"`
	// Claimed is the attempt's ToolCallStarted, by Worker (a node id);
	// ExternalWorker is the external worker that took it (a harness
	// tool's call).
	Claimed        Stamp  `json:"claimed,omitzero"`
	Worker         string `json:"worker,omitempty"`
	ExternalWorker string `json:"external_worker,omitempty"`
	// ClaimedWithOutcome is true when the claim was recorded together with
	// the outcome (same time): a read-only, safe call runs before its claim
	// (docs/events.md, ToolCallStarted).
	ClaimedWithOutcome bool `json:"claimed_with_outcome,omitempty"`
	// Started is derived, not recorded: the log holds no start event. It
	// is the end minus the handler time DurationMS, no earlier than the
	// request (nor the claim, for a call claimed before it ran); for a
	// claimed attempt still running, its claim.
	Started time.Time `json:"started,omitzero"`
	// Ended is the attempt's ToolCallCompleted, ToolCallFailed or
	// ToolCallIndeterminate; Outcome is AttemptOK, AttemptError or
	// AttemptIndeterminate accordingly.
	Ended      Stamp   `json:"ended,omitzero"`
	Outcome    string  `json:"outcome,omitempty"`
	DurationMS float64 `json:"duration_ms,omitempty"`
	// Error, Final and TimedOut are a failed attempt's.
	Error    string `json:"error,omitempty"`
	Final    bool   `json:"final,omitempty"`
	TimedOut bool   `json:"timed_out,omitempty"`
	// Reason is an indeterminate attempt's.
	Reason string `json:"reason,omitempty"`
	// Content, Truncated, FullOutput and Touched are a completed attempt's
	// result as the tool returned it (cut to the output caps; the full
	// output is FullOutput).
	Content    []events.Part     `json:"content,omitempty"`
	Truncated  bool              `json:"truncated,omitempty"`
	FullOutput *events.OutputRef `json:"full_output,omitempty"`
	Touched    []string          `json:"touched,omitempty"`
	// ContentBytes is the size of Content when a folder that clips kept only
	// the first bytes of some of its parts; 0 when they are whole.
	ContentBytes int `json:"content_bytes,omitempty"`
}

// Running reports whether the attempt was claimed and has not ended.
func (a Attempt) Running() bool { return !a.Claimed.IsZero() && a.Ended.IsZero() }

// Queued is how long the attempt waited from its request until it was
// claimed (for a call claimed with its outcome: until it started); 0 when
// unknown.
func (a Attempt) Queued() time.Duration {
	end := a.Claimed.Time
	if a.ClaimedWithOutcome || a.Claimed.IsZero() {
		end = a.Started
	}
	if a.Requested.IsZero() || end.IsZero() || end.Before(a.Requested.Time) {
		return 0
	}
	return end.Sub(a.Requested.Time)
}

// Duration is the handler time the worker measured (DurationMS).
// A negative or NaN DurationMS is 0; one beyond time.Duration's range is its
// maximum.
func (a Attempt) Duration() time.Duration {
	ms := a.DurationMS
	switch {
	case !(ms > 0):
		return 0
	case ms >= float64(math.MaxInt64/int64(time.Millisecond)):
		return math.MaxInt64
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (a *Attempt) derive() {
	switch {
	case !a.Ended.IsZero() && a.Outcome == AttemptIndeterminate && !a.Claimed.IsZero():
		// No handler time is recorded for an attempt whose outcome is
		// unknown: it ran from its claim.
		a.Started = a.Claimed.Time
	case !a.Ended.IsZero():
		s := a.Ended.Time.Add(-a.Duration())
		if !a.ClaimedWithOutcome && !a.Claimed.IsZero() && s.Before(a.Claimed.Time) {
			s = a.Claimed.Time
		}
		if !a.Requested.IsZero() && s.Before(a.Requested.Time) {
			s = a.Requested.Time
		}
		if s.Year() < 1 { // a handler time no clock could have measured
			s = a.Ended.Time
		}
		a.Started = s
	case !a.Claimed.IsZero():
		a.Started = a.Claimed.Time
	default:
		a.Started = time.Time{}
	}
}

// Retry is a RetryScheduled: Attempt will run once Delay has passed after
// the event, at Due.
type Retry struct {
	Stamp
	Attempt int           `json:"attempt"`
	Delay   time.Duration `json:"delay_ns"`
	Due     time.Time     `json:"due"`
	Error   string        `json:"error"`
}

// Indeterminate is a call's ToolCallIndeterminate: its effect may or may
// not have happened. NoticedIn is the turn whose retry notice named it.
type Indeterminate struct {
	Stamp
	Attempt   int    `json:"attempt"`
	Reason    string `json:"reason"`
	NoticedIn string `json:"noticed_in,omitempty"`
}

// Cancellation is a call's CallCancelled.
type Cancellation struct {
	Stamp
	Reason string `json:"reason"`
	// Running is true when the call had started: its outcome came later.
	Running bool `json:"running"`
}

// Checkpoint is a FileCheckpointed: a file's pre-image, stored before the
// call's attempt Attempt ran.
type Checkpoint struct {
	Stamp
	Attempt int    `json:"attempt"`
	Path    string `json:"path"`
	Existed bool   `json:"existed"`
	Size    int64  `json:"size"`
	SHA256  string `json:"sha256,omitempty"`
	Object  string `json:"object,omitempty"`
}

// Answer is an AnswerReceived for a user-mediated call.
type Answer struct {
	Stamp
	By     string          `json:"by,omitempty"`
	Answer json.RawMessage `json:"answer"`
}

// WorkState is a WorkStateUpdated: the call set a new whole value of the
// session's durable work state.
type WorkState struct {
	Stamp
	Kind  string          `json:"kind"`
	Value json.RawMessage `json:"value"`
}

// FoldAudit folds a session's events, in log order, into its audit model.
// It is pure and never fails (see Mark).
func FoldAudit(tenant, session string, evs []events.Event, opts ...AuditOption) Audit {
	f := NewAuditFolder(tenant, session, opts...)
	for _, ev := range evs {
		f.Apply(ev)
	}
	return f.Audit()
}

// AuditFolder folds events one at a time, for a live view, and remembers
// which parts of the model each event changed (Changes). Not safe for
// concurrent use.
type AuditFolder struct {
	a     Audit
	index map[string]int // turn id -> position in a.Turns
	dirty map[int]bool   // turns changed since the last Changes
	clip  int            // ClipAt's n; 0 keeps everything
}

// AuditOption configures an AuditFolder.
type AuditOption func(*AuditFolder)

// ClipAt makes a folder keep at most n bytes of each value a session's
// size lies in: each call's arguments (as sent, as run, as asked to
// approve), each part of an output or result, each answer, work state
// value and mark's data. A longer value keeps its first n bytes (whole
// runes), as a JSON string for JSON values and as text for parts (a part
// of another type becomes a text part saying what it was), and the call or
// attempt records the whole size (ArgumentsBytes, NormalizedBytes,
// ResultBytes, ContentBytes). Every value kept is a copy, so the model of a
// session of any size holds at most about n bytes a value, never the
// events. n < 1 keeps everything (the default).
func ClipAt(n int) AuditOption {
	return func(f *AuditFolder) { f.clip = max(n, 0) }
}

// NewAuditFolder returns an empty folder for a session of tenant.
func NewAuditFolder(tenant, session string, opts ...AuditOption) *AuditFolder {
	f := &AuditFolder{
		a:     Audit{Session: session, Tenant: tenant, Turns: []AuditTurn{}},
		index: map[string]int{},
		dirty: map[int]bool{},
	}
	for _, o := range opts {
		o(f)
	}
	return f
}

// Audit returns the model so far. It shares memory with the folder: the
// caller must not modify it, and the next Apply changes it.
func (f *AuditFolder) Audit() Audit { return f.a }

// Changes returns the positions (in Audit().Turns, ascending) of the turns
// changed since the last call, and forgets them. Every event also changes
// the session's header (its count and last event), so a live view redraws
// that after any event.
func (f *AuditFolder) Changes() []int {
	out := make([]int, 0, len(f.dirty))
	for i := range f.dirty {
		out = append(out, i)
	}
	slices.Sort(out)
	clear(f.dirty)
	return out
}

// Apply folds one event. An event it cannot place becomes a Mark.
func (f *AuditFolder) Apply(ev events.Event) {
	a := &f.a
	a.Events++
	if a.First.IsZero() {
		a.First = stampOf(ev)
	}
	a.Last = stampOf(ev)
	p, err := events.Decode(ev)
	if err != nil {
		problem := MarkUnknown
		if events.Known(ev.Type) {
			problem = "undecodable payload: " + err.Error()
		}
		f.mark(ev, problem)
		return
	}
	st := stampOf(ev)
	switch p := p.(type) {
	case *events.SessionOpened:
		if a.Opened != nil {
			f.mark(ev, fmt.Sprintf("the session was already opened at seq %d", a.Opened.Seq))
			return
		}
		a.Opened = &Opened{Stamp: st, Workspace: p.Workspace, Agent: p.Agent}
	case *events.SessionClosed:
		if a.Closed != nil {
			f.mark(ev, fmt.Sprintf("the session was already closed at seq %d", a.Closed.Seq))
			return
		}
		a.Closed = &Closed{Stamp: st, Reason: p.Reason}
	case *events.WorkspaceRewound:
		a.Rewinds = append(a.Rewinds, Rewind{Stamp: st, To: p.To, Restored: p.Restored, Removed: p.Removed})
	case *events.OwnershipTaken:
		a.Owners = append(a.Owners, OwnerChange{Stamp: st, Node: p.Node, Epoch: p.Epoch, WorkspaceAway: p.WorkspaceAway})
	case *events.OwnershipReleased:
		a.Owners = append(a.Owners, OwnerChange{Stamp: st, Node: p.Node, Epoch: p.Epoch, Released: true})
	case *events.HeadSigned:
		a.Signatures = append(a.Signatures, Signature{Stamp: st, Signed: *p})
	case *events.TurnReceived:
		if i, ok := f.index[p.Turn]; ok {
			f.markTurn(ev, i, fmt.Sprintf("turn %q was already received at seq %d", p.Turn, a.Turns[i].Received.Seq))
			return
		}
		t := AuditTurn{Turn: p.Turn, Status: StatusRunning, Received: st, End: ev.Time,
			ParallelToolCalls: p.ParallelToolCalls, Cap: p.Cap, Calls: make([]AuditCall, len(p.Calls))}
		for i, c := range p.Calls {
			t.Calls[i] = AuditCall{Index: i, ID: c.ID, Name: c.Name}
			t.Calls[i].Arguments, t.Calls[i].ArgumentsBytes = f.clipJSON(c.Arguments)
		}
		for _, pe := range p.Plan {
			if pe.Index >= 0 && pe.Index < len(t.Calls) {
				t.Calls[pe.Index].Plan = pe
			}
		}
		f.index[p.Turn] = len(a.Turns)
		f.dirty[len(a.Turns)] = true
		a.Turns = append(a.Turns, t)
	case *events.TurnOpened:
		if i, ok := f.index[p.Turn]; ok {
			f.markTurn(ev, i, fmt.Sprintf("turn %q was already received at seq %d", p.Turn, a.Turns[i].Received.Seq))
			return
		}
		f.index[p.Turn] = len(a.Turns)
		f.dirty[len(a.Turns)] = true
		a.Turns = append(a.Turns, AuditTurn{Turn: p.Turn, Status: StatusRunning, Received: st, End: ev.Time, Streamed: true,
			ParallelToolCalls: p.ParallelToolCalls, Cap: p.Cap, Calls: []AuditCall{}})
	case *events.CallsAdded:
		t, ok := f.turn(ev, p.Turn)
		if !ok {
			return
		}
		switch {
		case !t.Streamed:
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("calls added to turn %q, which was posted whole", p.Turn))
			return
		case t.Ended != nil:
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("calls added to turn %q after it ended at seq %d", p.Turn, t.Ended.Seq))
			return
		case p.From != len(t.Calls):
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("calls added from index %d to turn %q, which holds %d", p.From, p.Turn, len(t.Calls)))
			return
		}
		for i, c := range p.Calls {
			ac := AuditCall{Index: p.From + i, ID: c.ID, Name: c.Name, Arrived: st}
			ac.Arguments, ac.ArgumentsBytes = f.clipJSON(c.Arguments)
			t.Calls = append(t.Calls, ac)
		}
		for _, pe := range p.Plan {
			if pe.Index >= p.From && pe.Index < len(t.Calls) {
				t.Calls[pe.Index].Plan = pe
			}
		}
		t.Batches = append(t.Batches, Batch{Stamp: st, From: p.From, Calls: len(p.Calls)})
	case *events.TurnEnded:
		t, ok := f.turn(ev, p.Turn)
		if !ok {
			return
		}
		switch {
		case !t.Streamed:
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("turn %q ended, but it was posted whole", p.Turn))
			return
		case t.Ended != nil:
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("turn %q already ended at seq %d", p.Turn, t.Ended.Seq))
			return
		}
		t.Ended = &Ended{Stamp: st, Reason: p.Reason, Calls: p.Calls}
	case *events.TurnCompleted:
		t, ok := f.turn(ev, p.Turn)
		if !ok {
			return
		}
		if !t.Completed.IsZero() {
			f.markTurn(ev, f.index[p.Turn], fmt.Sprintf("turn %q was already completed at seq %d", p.Turn, t.Completed.Seq))
			return
		}
		t.Status, t.Completed = StatusComplete, st
	case *events.RetryNoticeIssued:
		t, ok := f.turn(ev, p.Turn)
		if !ok {
			return
		}
		t.Notices = append(t.Notices, AuditNotice{Stamp: st, About: p.About, Tool: p.Name, Attempt: p.Attempt, Text: p.Notice})
		// The call it is about learns which turn told the model.
		if i, ok := f.index[p.About.Turn]; ok {
			if c := callAt(&a.Turns[i], p.About); c != nil && c.Indeterminate != nil {
				c.Indeterminate.NoticedIn = p.Turn
				f.dirty[i] = true
			}
		}
	default:
		f.applyCall(ev, st, p)
	}
}

// applyCall folds an event about one call.
func (f *AuditFolder) applyCall(ev events.Event, st Stamp, p any) {
	ref, ok := events.CallOf(p)
	if !ok {
		f.mark(ev, "no place for this event in the audit model") // a known type without a case: a new payload
		return
	}
	c, ok := f.call(ev, ref)
	if !ok {
		return
	}
	switch p := p.(type) {
	case *events.DispatchBlocked:
		if c.Blocked != nil {
			f.markCall(ev, c, fmt.Sprintf("the call was already blocked at seq %d", c.Blocked.Seq))
			return
		}
		c.Blocked = &Blocked{Stamp: st, Category: p.Category, Reason: p.Reason, Rule: p.Rule}
	case *events.ApprovalRequested:
		if c.Approval != nil {
			f.markCall(ev, c, fmt.Sprintf("approval already requested at seq %d", c.Approval.Requested.Seq))
			return
		}
		c.Approval = &Approval{Requested: st, Rule: p.Rule, Reason: p.Reason, Effect: string(p.Effect),
			Labels: p.Labels, Escalate: p.Escalate}
		c.Approval.Arguments, _ = f.clipJSON(p.Arguments)
	case *events.ApprovalGranted:
		ap := f.decision(ev, c)
		if ap == nil {
			return
		}
		ap.Decision, ap.Decided, ap.By, ap.Scope, ap.DecisionReason = DecisionAllow, st, p.By, p.Scope, p.Reason
	case *events.ApprovalDenied:
		ap := f.decision(ev, c)
		if ap == nil {
			return
		}
		ap.Decision, ap.Decided, ap.By, ap.DecisionReason = DecisionDeny, st, p.By, p.Reason
	case *events.ToolCallRequested:
		at := attempt(c, p.Attempt)
		if !at.Requested.IsZero() {
			f.markCall(ev, c, fmt.Sprintf("attempt %d was already requested at seq %d", p.Attempt, at.Requested.Seq))
			return
		}
		at.Requested = st
		if c.Normalized == nil {
			c.Normalized, c.NormalizedBytes = f.clipJSON(p.Arguments)
		}
		at.derive()
	case *events.ToolCallStarted:
		at := attempt(c, p.Attempt)
		if !at.Claimed.IsZero() {
			f.markCall(ev, c, fmt.Sprintf("attempt %d was already claimed at seq %d", p.Attempt, at.Claimed.Seq))
			return
		}
		at.Claimed, at.Worker, at.ExternalWorker = st, p.Worker, p.ExternalWorker
		at.derive()
	case *events.FileCheckpointed:
		n := 0
		if len(c.Attempts) > 0 {
			n = c.Attempts[len(c.Attempts)-1].Attempt
		}
		c.Checkpoints = append(c.Checkpoints, Checkpoint{Stamp: st, Attempt: n, Path: p.Path, Existed: p.Existed,
			Size: p.Size, SHA256: p.SHA256, Object: p.Object})
	case *events.ToolCallCompleted:
		at, ok := f.ending(ev, c, p.Attempt)
		if !ok {
			return
		}
		at.Outcome, at.DurationMS = AttemptOK, p.DurationMS
		at.Truncated, at.FullOutput, at.Touched = p.Truncated, p.FullOutput, p.Touched
		at.Content, at.ContentBytes = f.clipParts(p.Content)
		at.end(st)
	case *events.ToolCallFailed:
		at, ok := f.ending(ev, c, p.Attempt)
		if !ok {
			return
		}
		at.Outcome, at.DurationMS, at.Error, at.Final, at.TimedOut = AttemptError, p.DurationMS, p.Error, p.Final, p.TimedOut
		at.end(st)
	case *events.ToolCallIndeterminate:
		at, ok := f.ending(ev, c, p.Attempt)
		if !ok {
			return
		}
		at.Outcome, at.Reason = AttemptIndeterminate, p.Reason
		at.end(st)
		c.Indeterminate = &Indeterminate{Stamp: st, Attempt: p.Attempt, Reason: p.Reason}
	case *events.RetryScheduled:
		r := Retry{Stamp: st, Attempt: p.Attempt, Delay: p.Delay, Error: p.Error}
		if due := ev.Time.Add(p.Delay); due.Year() >= 1 && due.Year() <= 9999 { // JSON's range of years
			r.Due = due
		}
		c.Retries = append(c.Retries, r)
	case *events.CallCancelled:
		if c.Cancelled != nil {
			f.markCall(ev, c, fmt.Sprintf("the call was already cancelled at seq %d", c.Cancelled.Seq))
			return
		}
		c.Cancelled = &Cancellation{Stamp: st, Reason: p.Reason, Running: p.Running}
	case *events.AnswerReceived:
		an, _ := f.clipJSON(p.Answer)
		c.Answers = append(c.Answers, Answer{Stamp: st, By: p.By, Answer: an})
	case *events.WorkStateUpdated:
		v, _ := f.clipJSON(p.Value)
		c.WorkState = append(c.WorkState, WorkState{Stamp: st, Kind: p.Kind, Value: v})
	case *events.ResultCommitted:
		if c.Result != nil {
			f.markCall(ev, c, fmt.Sprintf("the result was already committed at seq %d", c.Committed.Seq))
			return
		}
		r := p.Result
		r.Content, c.ResultBytes = f.clipParts(r.Content)
		c.Committed, c.Result = st, &r
	}
}

// end records the attempt's outcome event and derives its start.
func (a *Attempt) end(st Stamp) {
	a.Ended = st
	a.ClaimedWithOutcome = !a.Claimed.IsZero() && a.Claimed.Time.Equal(st.Time) && a.Claimed.Seq < st.Seq
	a.derive()
}

// ending returns attempt n of c for its outcome event, or marks a second
// outcome.
func (f *AuditFolder) ending(ev events.Event, c *AuditCall, n int) (*Attempt, bool) {
	at := attempt(c, n)
	if !at.Ended.IsZero() {
		f.markCall(ev, c, fmt.Sprintf("attempt %d already ended at seq %d", n, at.Ended.Seq))
		return nil, false
	}
	return at, true
}

// decision returns c's approval for its decision event, or marks one that
// has no request or was already decided.
func (f *AuditFolder) decision(ev events.Event, c *AuditCall) *Approval {
	switch {
	case c.Approval == nil:
		f.markCall(ev, c, "a decision without an approval request")
		return nil
	case !c.Approval.Pending():
		f.markCall(ev, c, fmt.Sprintf("the approval was already decided at seq %d", c.Approval.Decided.Seq))
		return nil
	}
	return c.Approval
}

// attempt returns attempt n of c, adding it (in attempt order) when absent.
func attempt(c *AuditCall, n int) *Attempt {
	i, found := slices.BinarySearchFunc(c.Attempts, n, func(a Attempt, n int) int { return a.Attempt - n })
	if !found {
		c.Attempts = slices.Insert(c.Attempts, i, Attempt{Attempt: n})
	}
	return &c.Attempts[i]
}

// turn returns the turn an event names and marks it dirty, or marks the
// event when the turn was never received.
func (f *AuditFolder) turn(ev events.Event, id string) (*AuditTurn, bool) {
	i, ok := f.index[id]
	if !ok {
		f.mark(ev, fmt.Sprintf("names turn %q, which was never received", id))
		return nil, false
	}
	t := &f.a.Turns[i]
	f.touch(i, ev)
	return t, true
}

// call returns the call an event names, or marks the event where it fits.
func (f *AuditFolder) call(ev events.Event, ref events.CallRef) (*AuditCall, bool) {
	i, ok := f.index[ref.Turn]
	if !ok {
		f.mark(ev, fmt.Sprintf("names turn %q, which was never received", ref.Turn))
		return nil, false
	}
	c := callAt(&f.a.Turns[i], ref)
	if c == nil {
		f.markTurn(ev, i, fmt.Sprintf("names call %q at index %d, which turn %q does not have", ref.Call, ref.Index, ref.Turn))
		return nil, false
	}
	f.touch(i, ev)
	return c, true
}

func callAt(t *AuditTurn, ref events.CallRef) *AuditCall {
	if ref.Index < 0 || ref.Index >= len(t.Calls) || t.Calls[ref.Index].ID != ref.Call {
		return nil
	}
	return &t.Calls[ref.Index]
}

// touch marks turn i changed and extends its time axis to ev.
func (f *AuditFolder) touch(i int, ev events.Event) {
	f.dirty[i] = true
	if t := &f.a.Turns[i]; ev.Time.After(t.End) {
		t.End = ev.Time
	}
}

// mark places an event the model has no field for: on the call or turn its
// data names when there is one, else on the session.
func (f *AuditFolder) mark(ev events.Event, problem string) {
	m := f.newMark(ev, problem)
	if i, ok := f.index[m.Turn]; ok && m.Turn != "" {
		var ref struct {
			Index *int `json:"index"`
		}
		_ = json.Unmarshal(ev.Data, &ref)
		if ref.Index != nil {
			if c := callAt(&f.a.Turns[i], events.CallRef{Turn: m.Turn, Call: m.Call, Index: *ref.Index}); c != nil {
				c.Marks = append(c.Marks, m)
				f.touch(i, ev)
				return
			}
		}
		f.a.Turns[i].Marks = append(f.a.Turns[i].Marks, m)
		f.touch(i, ev)
		return
	}
	f.a.Marks = append(f.a.Marks, m)
}

func (f *AuditFolder) markTurn(ev events.Event, i int, problem string) {
	f.a.Turns[i].Marks = append(f.a.Turns[i].Marks, f.newMark(ev, problem))
	f.touch(i, ev)
}

func (f *AuditFolder) markCall(ev events.Event, c *AuditCall, problem string) {
	c.Marks = append(c.Marks, f.newMark(ev, problem))
}

// newMark is newMark with the data clipped as the folder clips.
func (f *AuditFolder) newMark(ev events.Event, problem string) Mark {
	m := newMark(ev, problem)
	m.Data, _ = f.clipJSON(m.Data)
	return m
}

// clipJSON is v as the folder keeps it: a copy, cut to the folder's clip
// as a JSON string of its first bytes, with v's size when cut (else 0).
// Without a clip it is v itself.
func (f *AuditFolder) clipJSON(v json.RawMessage) (json.RawMessage, int) {
	switch {
	case f.clip == 0 || v == nil:
		return v, 0
	case len(v) <= f.clip:
		return append(json.RawMessage(nil), v...), 0
	}
	b, _ := json.Marshal(clipText(string(v), f.clip))
	return b, len(v)
}

// clipParts is ps as the folder keeps them: copies, each part longer than
// the clip cut to text of its first bytes, and the parts' whole size when
// any was cut (else 0). Without a clip it is ps itself.
func (f *AuditFolder) clipParts(ps []events.Part) ([]events.Part, int) {
	if f.clip == 0 || ps == nil {
		return ps, 0
	}
	out := make([]events.Part, len(ps))
	whole, cut := 0, false
	for i, p := range ps {
		size := len(p.Text) + len(p.JSON) + len(p.Data)
		whole += size
		switch {
		case size <= f.clip:
			p.JSON = append(json.RawMessage(nil), p.JSON...)
			p.Data = append([]byte(nil), p.Data...)
			out[i] = p
		case p.Type == "text":
			out[i] = events.Part{Type: "text", Text: clipText(p.Text, f.clip)}
			cut = true
		case p.Type == "json":
			out[i] = events.Part{Type: "text", Text: clipText(string(p.JSON), f.clip)}
			cut = true
		default:
			out[i] = events.Part{Type: "text", Text: fmt.Sprintf("[%s %s, %d bytes]", p.Type, p.MIME, len(p.Data))}
			cut = true
		}
	}
	if !cut {
		whole = 0
	}
	return out, whole
}

// clipText is the first n bytes of s, cut back to a whole rune, as a copy.
func clipText(s string, n int) string {
	if len(s) <= n {
		return strings.Clone(s)
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return strings.Clone(s[:n])
}

func newMark(ev events.Event, problem string) Mark {
	m := Mark{Stamp: stampOf(ev), Type: ev.Type, Problem: problem, Data: ev.Data}
	if !json.Valid(ev.Data) {
		m.Data, _ = json.Marshal(string(ev.Data))
	}
	// What the data names, read loosely: an unknown type may name a call
	// the way every call event does (docs/events.md, CallRef).
	var ref struct {
		Turn string `json:"turn"`
		Call string `json:"call"`
	}
	if json.Unmarshal(ev.Data, &ref) == nil {
		m.Turn, m.Call = ref.Turn, ref.Call
	}
	return m
}

// State says where a call stands, for people: its committed outcome, else
// what it waits for.
func (c *AuditCall) State() string {
	switch {
	case c.Result != nil:
		return string(c.Result.Outcome)
	case c.Blocked != nil:
		return "blocked, not committed yet"
	case c.Approval.Pending():
		return "awaiting approval"
	}
	if n := len(c.Attempts); n > 0 {
		last := c.Attempts[n-1]
		switch {
		case last.Running():
			return "running"
		case !last.Ended.IsZero():
			if r := len(c.Retries); r > 0 && c.Retries[r-1].Attempt > last.Attempt {
				return "waiting to retry"
			}
			return "settled, not committed yet"
		case !last.Requested.IsZero():
			return "requested"
		}
	}
	if c.Cancelled != nil {
		return "cancelled, not committed yet"
	}
	return "waiting"
}

// PendingApproval is a call whose approval waits for a decision, with its
// turn.
type PendingApproval struct {
	Turn string
	Call *AuditCall
}

// PendingApprovals returns the calls whose approval waits for a decision, in
// log order of their turns and calls.
func (a Audit) PendingApprovals() []PendingApproval {
	var out []PendingApproval
	for i := range a.Turns {
		for j := range a.Turns[i].Calls {
			if c := &a.Turns[i].Calls[j]; c.Approval.Pending() {
				out = append(out, PendingApproval{Turn: a.Turns[i].Turn, Call: c})
			}
		}
	}
	return out
}

// Outcomes counts the session's committed results by outcome.
func (a Audit) Outcomes() map[events.Outcome]int {
	out := map[events.Outcome]int{}
	for _, t := range a.Turns {
		for _, c := range t.Calls {
			if c.Result != nil {
				out[c.Result.Outcome]++
			}
		}
	}
	return out
}
