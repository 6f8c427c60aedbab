package core

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/tool"
)

// Errors returned by the decisions.
var (
	// ErrTurnInvalid is returned for a turn the runtime cannot record: no
	// id, duplicate or empty call ids.
	ErrTurnInvalid = errors.New("core: invalid turn")
	// ErrTurnActive is returned when a turn is received while another runs.
	ErrTurnActive = errors.New("core: another turn of this session is running")
	// ErrStaleClaim is returned when a claim names an attempt that is not
	// waiting to start: it already started, settled, or was superseded.
	ErrStaleClaim = errors.New("core: claim refused: the attempt is not waiting to start")
	// ErrSessionClosed is returned for work on a closed session.
	ErrSessionClosed = errors.New("core: session is closed")
	// ErrTurnMismatch is returned when a turn id already recorded arrives
	// with other calls: a turn id is an idempotency key (docs/spec.md §8), so
	// the record cannot answer for calls it does not hold.
	ErrTurnMismatch = errors.New("core: turn id already used for other calls")
)

// TurnInput is a turn as the harness sent it, plus the settings in force.
type TurnInput struct {
	ID                string
	Calls             []events.CallSpec
	ParallelToolCalls bool
	Cap               int
	Plan              PlanInput
}

// ReceiveTurn decides the event that records a new turn: TurnReceived with
// the pre-phase's plan. Progress then issues the retry notices and the
// DispatchBlocked of refused calls. A turn id seen before returns no drafts:
// the caller answers from the recorded turn.
//
// A turn id seen before with other calls returns an error wrapping
// ErrTurnMismatch (see Repeat), and so does a streamed turn's id posted as
// a whole turn with calls.
func ReceiveTurn(s *Session, in TurnInput) ([]Draft, error) {
	if s.Closed {
		return nil, ErrSessionClosed
	}
	if _, ok := s.turns[in.ID]; ok {
		return nil, Repeat(s, in.ID, in.Calls)
	}
	if in.ID == "" {
		return nil, fmt.Errorf("%w: the turn has no id", ErrTurnInvalid)
	}
	if s.active != nil {
		return nil, fmt.Errorf("%w (turn %s)", ErrTurnActive, s.active.ID)
	}
	seen := map[string]bool{}
	for i, c := range in.Calls {
		if c.ID == "" {
			return nil, fmt.Errorf("%w: calls[%d] has no id", ErrTurnInvalid, i)
		}
		if seen[c.ID] {
			return nil, fmt.Errorf("%w: calls[%d] repeats call id %q; every call of a turn needs its own id", ErrTurnInvalid, i, c.ID)
		}
		seen[c.ID] = true
	}
	calls := make([]events.CallSpec, len(in.Calls))
	for i, c := range in.Calls {
		calls[i] = recordable(c)
	}
	in.Calls = calls
	in.Plan.Policy.Grants = append(append([]permission.Grant(nil), in.Plan.Policy.Grants...), s.grants...)
	in.Plan.WorkspaceAway = s.WorkspaceAway
	plan := Plan(in.Calls, in.Plan)
	return []Draft{{Type: events.TypeTurnReceived, Payload: events.TurnReceived{
		Turn: in.ID, Calls: in.Calls, ParallelToolCalls: in.ParallelToolCalls, Cap: max(in.Cap, 1), Plan: plan,
	}}}, nil
}

// recordable is a call as TurnReceived records it: verbatim, except that
// bytes that are not JSON at all (a Go caller passing a cut-off arguments
// string) are kept as a JSON string, so the record stays faithful and the
// plan blocks them as invalid arguments.
func recordable(c events.CallSpec) events.CallSpec {
	if len(c.Arguments) > 0 && !json.Valid(c.Arguments) {
		c.Arguments, _ = json.Marshal(string(c.Arguments))
	}
	return c
}

// Repeat decides a turn id that arrives again. A turn id is an idempotency
// key (docs/spec.md §8): with the same calls the caller answers from the
// recorded turn and runs nothing (Repeat returns nil); with other calls the
// record cannot answer, and Repeat returns an error wrapping
// ErrTurnMismatch that says which call differs and how. An id not recorded
// returns nil as well: it is not a repeat, and so does a repeat without
// calls, which names the recorded turn without restating it (the Go API
// waits for a turn this way; the HTTP API refuses a turn without calls).
//
// The same calls means as many calls, in the same order, each with the same
// id and tool name, and arguments that tool.SameArguments counts as equal:
// equal JSON values once normalized (whitespace, object key order and
// string escapes do not matter, numbers compare by value so 5.0 is 5, and
// arguments sent as a string holding the object equal the object).
func Repeat(s *Session, id string, calls []events.CallSpec) error {
	t, ok := s.turns[id]
	if !ok || len(calls) == 0 {
		return nil
	}
	if t.Streamed {
		return fmt.Errorf("%w (turn id %q, session %s): it names a streamed turn (its calls posted to .../turns/%s/calls), not a turn posted whole; add calls with POST .../calls, end it with POST .../end, or use a new turn id",
			ErrTurnMismatch, id, s.ID, id)
	}
	differs := func(format string, args ...any) error {
		return fmt.Errorf("%w (turn id %q, session %s): %s; "+
			"a turn id is an idempotency key: resend exactly the recorded calls to get the recorded results, or use a new turn id for new calls",
			ErrTurnMismatch, id, s.ID, fmt.Sprintf(format, args...))
	}
	if len(calls) != len(t.Calls) {
		return differs("this turn has %s, the recorded one %s", plural(len(calls), "call"), plural(len(t.Calls), "call"))
	}
	for i, c := range calls {
		c, rec := recordable(c), t.Calls[i]
		switch {
		case c.ID != rec.ID:
			return differs("calls[%d] has id %q, the recorded call %q", i, c.ID, rec.ID)
		case c.Name != rec.Name:
			return differs("calls[%d] (id %q) names tool %q, the recorded call %q", i, c.ID, c.Name, rec.Name)
		case !tool.SameArguments(c.Arguments, rec.Arguments):
			return differs("calls[%d] (id %q) has other arguments than the recorded call", i, c.ID)
		}
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// Progress decides the next step of the running turn, or nothing: issue the
// retry notices of earlier indeterminate calls, record the DispatchBlocked of
// refused calls, request the next call the schedule admits, commit the next
// settled result in call order, or complete the turn. The shell applies the
// drafts and calls it again until it returns none.
//
// Every step is derived from the state alone, so a log that holds only part
// of what an owner decided (it died between two appends) resumes correctly:
// the new owner decides the missing steps again.
func Progress(s *Session) []Draft {
	if d := reissue(s); len(d) > 0 {
		return d
	}
	t := s.active
	if t == nil {
		return nil
	}
	var drafts []Draft
	for k, u := range s.unnoticed {
		if u.Turn != t.ID {
			drafts = append(drafts, Draft{Type: events.TypeRetryNoticeIssued, Causation: s.unnoticedID[k], Payload: events.RetryNoticeIssued{
				Turn: t.ID, About: u.CallRef, Name: u.Name, Attempt: u.Attempt, Notice: NoticeText(u),
			}})
		}
	}
	for i, e := range t.Plan {
		ref := events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i}
		switch {
		case e.Blocked != "" && t.States[i].Result == nil:
			drafts = append(drafts, Draft{Type: events.TypeDispatchBlocked, Causation: cause(t.States[i].LastID, t.ReceivedID), Payload: events.DispatchBlocked{
				CallRef: ref, Name: e.Name, Category: e.Blocked, Reason: e.Reason, Rule: e.Rule,
			}})
		case t.States[i].Denied != "" && t.States[i].Result == nil:
			drafts = append(drafts, Draft{Type: events.TypeDispatchBlocked, Causation: t.States[i].LastID, Payload: events.DispatchBlocked{
				CallRef: ref, Name: e.Name, Category: events.BlockDenied, Reason: t.States[i].Denied, Rule: "approval",
			}})
		case e.Ask && !t.States[i].Asked:
			drafts = append(drafts, Draft{Type: events.TypeApprovalRequested, Causation: cause(t.States[i].LastID, t.ReceivedID), Payload: ApprovalRequest(t, i)})
		}
	}
	if len(drafts) > 0 {
		return drafts
	}
	if i, ok := t.Sched.Next(); ok {
		if s.WorkspaceAway != "" && !t.Plan[i].WorkspaceFree {
			// Admitted when its workspace was here; it is not now.
			return []Draft{awaySettle(s, t, i, events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i})}
		}
		return []Draft{{Type: events.TypeToolCallRequested, Causation: cause(t.States[i].LastID, t.ReceivedID), Payload: request(s, t, i, 1)}}
	}
	if c := t.Committed; c < len(t.Calls) && t.States[c].Result != nil && (t.States[c].Phase == PhaseSettled || t.Sched.Settled(c)) {
		return []Draft{{Type: events.TypeResultCommitted, Causation: t.States[c].LastID, Payload: events.ResultCommitted{
			CallRef: events.CallRef{Turn: t.ID, Call: t.Calls[c].ID, Index: c}, Result: *t.States[c].Result,
		}}}
	}
	if t.Committed == len(t.Calls) && !t.Completed && !t.Open {
		return []Draft{{Type: events.TypeTurnCompleted, Causation: t.ReceivedID, Payload: events.TurnCompleted{Turn: t.ID}}}
	}
	return nil
}

// request is the request of attempt of call i, addressed to the session's
// owner: the node that runs its calls (docs/spec.md §7).
func request(s *Session, t *Turn, i, attempt int) events.ToolCallRequested {
	e := t.Plan[i]
	args := CallArgs(t, i)
	return events.ToolCallRequested{
		CallRef:   events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i},
		Name:      e.Name,
		Arguments: args,
		Attempt:   attempt,
		Effect:    e.Effect, Replay: e.Replay, Concurrency: e.Concurrency,
		IdempotencyKey: IdempotencyKey(s.Tenant, s.ID, t.ID, i),
		TimeoutMS:      e.TimeoutMS,
		Escalate:       e.Escalate,
		Node:           s.Owner,
		WorkspaceFree:  e.WorkspaceFree,
		FleetCap:       e.FleetCap, FleetCapScope: e.FleetCapScope,
	}
}

// reissue decides, after a change of owner, what becomes of every attempt an
// earlier owner requested and nobody claimed: its request went to the
// earlier owner's workers, and only the owner runs the session's calls. It
// is requested again, the same attempt, from the current owner; or, when
// the call needs the workspace and the owner cannot reach it, settled
// without running (blocked for a first attempt; cancelled for a retry,
// since an earlier attempt ran). Derived from state alone, like every step
// of Progress, so a new owner that dies before it reissued leaves the work
// to the next one.
func reissue(s *Session) []Draft {
	if s.Owner == "" || s.Released || s.reissueClear == s.OwnedSince+1 {
		return nil
	}
	var drafts []Draft
	for _, id := range s.order {
		t := s.turns[id]
		for i := range t.Calls {
			if t.States[i].Phase != PhaseRequested || t.States[i].RequestSeq > s.OwnedSince || t.States[i].Cancelled {
				continue
			}
			ref := events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i}
			if s.WorkspaceAway != "" && !t.Plan[i].WorkspaceFree {
				drafts = append(drafts, awaySettle(s, t, i, ref))
				continue
			}
			drafts = append(drafts, Draft{Type: events.TypeToolCallRequested, Causation: t.States[i].LastID, Payload: request(s, t, i, t.States[i].Attempt)})
		}
	}
	if len(drafts) == 0 {
		// Nothing an earlier owner requested is left unclaimed, and
		// nothing will be until the next OwnershipTaken: every request
		// from now on is this owner's (its Seq is past OwnedSince), and a
		// cancelled call stays cancelled. So the walk through every turn
		// is not repeated at each step (it was 30 % of the node's CPU per
		// call in a long session: docs/performance.md, "CPU per call").
		s.reissueClear = s.OwnedSince + 1
	}
	return drafts
}

// awaySettle settles call i, which needs the workspace and has not started,
// without running it, because its workspace is on a lost node.
func awaySettle(s *Session, t *Turn, i int, ref events.CallRef) Draft {
	reason := WorkspaceAwayReason(t.Calls[i].Name, s.WorkspaceAway)
	if t.States[i].Attempt <= 1 {
		return Draft{Type: events.TypeDispatchBlocked, Causation: cause(t.States[i].LastID, t.ReceivedID), Payload: events.DispatchBlocked{
			CallRef: ref, Name: t.Plan[i].Name, Category: events.BlockUnavailable, Reason: reason,
		}}
	}
	return Draft{Type: events.TypeCallCancelled, Causation: t.States[i].LastID, Payload: events.CallCancelled{
		CallRef: ref, Name: t.Calls[i].Name, Reason: reason,
	}}
}

// TakeOwnership decides that node (this process: incarnation) becomes the
// session's owner at the next epoch (docs/spec.md §7). workspaceAway names
// the node holding the session's workspace when node cannot reach it.
// Progress then hands the earlier owner's unclaimed requests to node.
func TakeOwnership(s *Session, node, incarnation, workspaceAway string) Draft {
	return Draft{Type: events.TypeOwnershipTaken, Payload: events.OwnershipTaken{
		Node: node, Epoch: s.Epoch + 1, Incarnation: incarnation, WorkspaceAway: workspaceAway,
	}}
}

// Release decides that the owner hands the session over (a graceful
// shutdown), or nothing when it is not owned or already released.
func Release(s *Session) []Draft {
	if s.Owner == "" || s.Released {
		return nil
	}
	return []Draft{{Type: events.TypeOwnershipReleased, Payload: events.OwnershipReleased{Node: s.Owner, Epoch: s.Epoch}}}
}

// Owns reports whether node, in process incarnation, is the session's
// owner now.
func Owns(s *Session, node, incarnation string) bool {
	return s.Owner == node && s.Incarnation == incarnation && !s.Released
}

// CurrentRequest reports whether the request with id requestID is the one
// attempt of call ref waits on: requested, not claimed, and not superseded
// by a request of a later owner. A worker checks before it runs a call that
// needs no claim, and a claim answers only the current request; otherwise
// ErrStaleClaim.
func CurrentRequest(s *Session, ref events.CallRef, attempt int, requestID string) error {
	t, ok := s.turns[ref.Turn]
	if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
		return fmt.Errorf("%w: unknown call %s/%d", ErrStaleClaim, ref.Turn, ref.Index)
	}
	i := ref.Index
	if t.States[i].Phase != PhaseRequested || t.States[i].Attempt != attempt {
		return fmt.Errorf("%w (call %s attempt %d)", ErrStaleClaim, ref.Call, attempt)
	}
	if requestID != "" && t.States[i].RequestID != requestID {
		return fmt.Errorf("%w (call %s attempt %d: request %s was superseded by %s)", ErrStaleClaim, ref.Call, attempt, requestID, t.States[i].RequestID)
	}
	return nil
}

// IdempotencyKey is the runtime-minted key of a call: stable across attempts
// and restarts because it depends only on tenant, session, turn and index.
// The hash is of "tenant\x00session\x00turn\x00index" (index in decimal),
// written on the stack for the usual ids.
func IdempotencyKey(tenant, session, turn string, index int) string {
	var buf [128]byte
	b := append(buf[:0], tenant...)
	b = append(append(b, 0), session...)
	b = append(append(b, 0), turn...)
	b = strconv.AppendInt(append(b, 0), int64(index), 10)
	h := sha256.Sum256(b)
	var key [len("cs_") + 32]byte
	copy(key[:], "cs_")
	hex.Encode(key[len("cs_"):], h[:16])
	return string(key[:])
}

// Claim decides the claim of attempt of a call by worker: the pre-images of
// the files it will mutate (FileCheckpointed), then ToolCallStarted; or
// ErrStaleClaim when that attempt is not waiting to start. Two workers can
// never both get a claim for one attempt: the first one applied moves the
// call out of PhaseRequested.
func Claim(s *Session, ref events.CallRef, attempt int, worker string, checkpoints ...events.FileCheckpointed) ([]Draft, error) {
	return ClaimQueued(s, ref, attempt, worker, 0, checkpoints...)
}

// ClaimQueued is Claim for a call that waited queued for a slot of its
// tool's fleet-wide cap: its claim records how long (docs/spec.md §7).
func ClaimQueued(s *Session, ref events.CallRef, attempt int, worker string, queued time.Duration, checkpoints ...events.FileCheckpointed) ([]Draft, error) {
	return ClaimTaken(s, ref, attempt, worker, "", queued, checkpoints...)
}

// ClaimTaken is ClaimQueued for an attempt an external worker took (a
// harness tool's call): its claim names that worker too (takenBy; "" for
// none).
func ClaimTaken(s *Session, ref events.CallRef, attempt int, worker, takenBy string, queued time.Duration, checkpoints ...events.FileCheckpointed) ([]Draft, error) {
	t, ok := s.turns[ref.Turn]
	if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
		return nil, fmt.Errorf("%w: unknown call %s/%d", ErrStaleClaim, ref.Turn, ref.Index)
	}
	if t.States[ref.Index].Phase != PhaseRequested || t.States[ref.Index].Attempt != attempt {
		return nil, fmt.Errorf("%w (call %s attempt %d)", ErrStaleClaim, ref.Call, attempt)
	}
	var drafts []Draft
	for _, c := range checkpoints {
		c.CallRef = ref
		drafts = append(drafts, Draft{Type: events.TypeFileCheckpointed, Causation: t.States[ref.Index].LastID, Payload: c})
	}
	return append(drafts, Draft{Type: events.TypeToolCallStarted, Causation: t.States[ref.Index].LastID, Payload: events.ToolCallStarted{
		CallRef: ref, Attempt: attempt, Worker: worker, ExternalWorker: takenBy, QueuedMS: ms(queued)}}), nil
}

// ErrNotAwaitingAnswer is returned by Answer for a call that is not a
// running user-mediated call, or already has an answer.
var ErrNotAwaitingAnswer = errors.New("core: the call is not waiting for an answer")

// Answer decides the record of the user's answer to a user-mediated call of
// the running turn.
func Answer(s *Session, callID string, answer json.RawMessage, by string) (Draft, error) {
	t := s.active
	if t == nil {
		return Draft{}, fmt.Errorf("%w: no turn is running", ErrNotAwaitingAnswer)
	}
	for i, c := range t.Calls {
		if c.ID != callID {
			continue
		}
		ref := events.CallRef{Turn: t.ID, Call: c.ID, Index: i}
		if t.Plan[i].Effect != tool.EffectUserMediated || t.States[i].Phase == PhaseSettled || t.Plan[i].Blocked != "" {
			return Draft{}, fmt.Errorf("%w: call %s (%s) does not ask the user anything now", ErrNotAwaitingAnswer, callID, c.Name)
		}
		if _, ok := s.answers[callKey(ref)]; ok {
			return Draft{}, fmt.Errorf("%w: call %s was already answered", ErrNotAwaitingAnswer, callID)
		}
		return Draft{Type: events.TypeAnswerReceived, Causation: t.States[i].LastID, Payload: events.AnswerReceived{CallRef: ref, Answer: answer, By: by}}, nil
	}
	return Draft{}, fmt.Errorf("%w: turn %s has no call %q", ErrNotAwaitingAnswer, t.ID, callID)
}

// Cancel decides the cancellation of one call (callID) or, with callID
// empty, of every unsettled call of the running turn. Calls not yet started
// settle at once and never run; running ones are marked, and the shell tells
// their tool through its context. It returns the drafts and the calls to
// interrupt: the running ones, and the requested ones, since a read-only,
// safe call runs before its claim (an interrupt finds nothing to stop for a
// call that has not started; a harness tool's worker learns of it from its
// heartbeat, docs/workers.md). Cancelling the whole of an open streamed
// turn also ends it (TurnEnded, reason cancelled): no call comes after.
func Cancel(s *Session, turn, callID, reason string) ([]Draft, []events.CallRef) {
	t, ok := s.turns[turn]
	if !ok {
		return nil, nil
	}
	// A completed turn can only have background calls still running.
	if reason == "" {
		reason = "cancelled by the harness"
	}
	var drafts []Draft
	var running []events.CallRef
	for i, c := range t.Calls {
		if (callID != "" && c.ID != callID) || t.States[i].Phase == PhaseSettled || t.States[i].Cancelled {
			continue
		}
		ref := events.CallRef{Turn: t.ID, Call: c.ID, Index: i}
		isRunning := t.States[i].Phase == PhaseStarted
		drafts = append(drafts, Draft{Type: events.TypeCallCancelled, Payload: events.CallCancelled{
			CallRef: ref, Name: c.Name, Reason: reason, Running: isRunning,
		}})
		if isRunning || t.States[i].Phase == PhaseRequested {
			running = append(running, ref)
		}
	}
	if callID == "" && t.Open {
		// The whole turn: no call of it may come after.
		drafts = append(drafts, Draft{Type: events.TypeTurnEnded, Payload: events.TurnEnded{Turn: t.ID, Reason: events.EndedByCancel, Calls: len(t.Calls)}})
	}
	return drafts, running
}

// Outcome is what a worker reports for one attempt.
type Outcome struct {
	OK         bool
	Content    []events.Part
	Truncated  bool
	FullOutput *events.OutputRef
	Touched    []string
	Err        string
	// TimedOut: the attempt hit its timeout. Lost: the worker or node was
	// lost, so nothing came back. Both are near a side effect.
	TimedOut bool
	Lost     bool
	// Cancelled: the harness cancelled the call while it ran.
	Cancelled bool
	// Permanent: a retry cannot fix the failure (tool.ErrPermanent).
	Permanent bool
	Duration  time.Duration
	// Queued is how long the call waited for a slot of its tool's fleet
	// cap (recorded with the claim of a call that ran unclaimed).
	Queued time.Duration
	// TakenBy is the external worker that took the attempt (a harness
	// tool's), for a claim recorded with the outcome (ClaimAndSettle).
	TakenBy string
	// State is durable work state the call set (recorded with it).
	State *tool.StateUpdate
}

// Retry is the retry policy for replay-safe calls; Delay is the backoff
// before the next attempt, computed by the shell (it holds the jitter).
type Retry struct {
	MaxAttempts int
	Delay       time.Duration
}

// Settle decides the events for an attempt's outcome (docs/spec.md §3): success
// completes; a failure of a safe call with attempts left schedules a retry;
// a timeout or loss of a never call is indeterminate; anything else is a
// final error. An outcome for an attempt that is not running decides nothing.
func Settle(s *Session, ref events.CallRef, attempt int, o Outcome, r Retry) []Draft {
	t, ok := s.turns[ref.Turn]
	if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
		return nil
	}
	i := ref.Index
	if t.States[i].Attempt != attempt || t.States[i].Phase != PhaseStarted {
		return nil
	}
	return settle(t, i, ref, attempt, o, r, t.States[i].LastID)
}

// ClaimAndSettle decides, for a read-only, replay-safe call that ran without
// a durable claim, its claim and its outcome together: the claim is not
// needed before such a call runs (running it twice is harmless), only to
// record which attempt settled it. ErrStaleClaim when the attempt is not
// waiting (another worker settled it first).
//
// When the outcome's first event is a ToolCallCompleted or ToolCallFailed
// and the claim would say no more than which node ran it (no external
// worker took it, it waited for no cap slot), the claim is that event's
// Worker instead of a ToolCallStarted of its own (docs/spec.md §4): one
// event fewer for the commonest call.
func ClaimAndSettle(s *Session, ref events.CallRef, attempt int, worker string, o Outcome, r Retry) ([]Draft, error) {
	claim, err := ClaimTaken(s, ref, attempt, worker, o.TakenBy, o.Queued)
	if err != nil {
		return nil, err
	}
	t := s.turns[ref.Turn]
	if o.TakenBy == "" && o.Queued == 0 {
		drafts := settle(t, ref.Index, ref, attempt, o, r, claim[0].Causation)
		var first any
		if len(drafts) > 0 {
			first = drafts[0].Payload
		}
		switch p := first.(type) {
		case events.ToolCallCompleted:
			p.Worker = worker
			drafts[0].Payload = p
			return drafts, nil
		case events.ToolCallFailed:
			p.Worker = worker
			drafts[0].Payload = p
			return drafts, nil
		}
	}
	return append(claim, settle(t, ref.Index, ref, attempt, o, r, CausedByPrevious)...), nil
}

// settle decides the events for attempt's outcome o; cause is the event the
// first of them follows from (the claim).
func settle(t *Turn, i int, ref events.CallRef, attempt int, o Outcome, r Retry, cause string) []Draft {
	if o.OK {
		var drafts []Draft
		if o.State != nil {
			// The state first: if only it reaches the log, the call is
			// still in flight and settles by its replay policy.
			drafts = append(drafts, Draft{Type: events.TypeWorkStateUpdated, Causation: cause, Payload: events.WorkStateUpdated{
				CallRef: ref, Kind: o.State.Kind, Value: o.State.Value,
			}})
		}
		return append(drafts, Draft{Type: events.TypeToolCallCompleted, Causation: cause, Payload: events.ToolCallCompleted{
			CallRef: ref, Attempt: attempt, Content: o.Content, Truncated: o.Truncated,
			FullOutput: o.FullOutput, Touched: o.Touched, DurationMS: ms(o.Duration),
		}})
	}
	name := t.Calls[i].Name
	safe := t.Plan[i].Replay == tool.ReplaySafe
	if o.Lost && t.Plan[i].Effect == tool.EffectUserMediated && !t.States[i].Cancelled {
		// Asking again is the whole effect of a user-mediated call, and an
		// answer already given is read back from the log: ask again.
		return []Draft{
			{Type: events.TypeToolCallFailed, Causation: cause, Payload: events.ToolCallFailed{CallRef: ref, Attempt: attempt, Error: "the node was lost while waiting for the user"}},
			{Type: events.TypeRetryScheduled, Causation: CausedByPrevious, Payload: events.RetryScheduled{CallRef: ref, Attempt: attempt + 1, Error: "asking again after a restart"}},
		}
	}
	if o.Cancelled || t.States[i].Cancelled {
		// A cancelled call is never retried. A never call cut short may have
		// had its effect: that is indeterminate, not an error.
		if !safe {
			return []Draft{{Type: events.TypeToolCallIndeterminate, Causation: cause, Payload: events.ToolCallIndeterminate{
				CallRef: ref, Name: name, Attempt: attempt, Reason: "it was cancelled while running",
			}}}
		}
		return []Draft{{Type: events.TypeToolCallFailed, Causation: cause, Payload: events.ToolCallFailed{
			CallRef: ref, Attempt: attempt, Error: "cancelled while running", DurationMS: ms(o.Duration), Final: true,
		}}}
	}
	if !safe && (o.TimedOut || o.Lost) {
		reason := "the node running it was lost"
		if o.TimedOut {
			reason = fmt.Sprintf("it did not finish within its %s timeout", time.Duration(t.Plan[i].TimeoutMS)*time.Millisecond)
			if o.Err != "" {
				reason = "it timed out: " + clip(o.Err, 300)
			}
		} else if o.Err != "" {
			reason = o.Err
		}
		return []Draft{{Type: events.TypeToolCallIndeterminate, Causation: cause, Payload: events.ToolCallIndeterminate{
			CallRef: ref, Name: name, Attempt: attempt, Reason: reason,
		}}}
	}
	msg := o.Err
	if o.TimedOut {
		msg = fmt.Sprintf("timed out after %s", time.Duration(t.Plan[i].TimeoutMS)*time.Millisecond)
	} else if o.Lost && msg == "" {
		msg = "the node running it was lost"
	}
	final := !safe || o.Permanent || attempt >= max(r.MaxAttempts, 1)
	text := msg
	if final && safe && attempt > 1 {
		text = fmt.Sprintf("%s (after %d attempts)", msg, attempt)
	}
	drafts := []Draft{{Type: events.TypeToolCallFailed, Causation: cause, Payload: events.ToolCallFailed{
		CallRef: ref, Attempt: attempt, Error: text, DurationMS: ms(o.Duration), Final: final, TimedOut: o.TimedOut,
	}}}
	if !final {
		drafts = append(drafts, Draft{Type: events.TypeRetryScheduled, Causation: CausedByPrevious, Payload: events.RetryScheduled{
			CallRef: ref, Attempt: attempt + 1, Delay: r.Delay, Error: msg,
		}})
	}
	return drafts
}

// RetryDue decides the request of a scheduled retry once its delay passed.
func RetryDue(s *Session, ref events.CallRef, attempt int) []Draft {
	t, ok := s.turns[ref.Turn]
	if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
		return nil
	}
	if t.States[ref.Index].Phase != PhaseRetrying || t.States[ref.Index].Retry.Attempt != attempt || t.States[ref.Index].Cancelled {
		return nil
	}
	if s.WorkspaceAway != "" && !t.Plan[ref.Index].WorkspaceFree {
		return []Draft{{Type: events.TypeCallCancelled, Causation: t.States[ref.Index].LastID, Payload: events.CallCancelled{
			CallRef: ref, Name: t.Calls[ref.Index].Name, Reason: WorkspaceAwayReason(t.Calls[ref.Index].Name, s.WorkspaceAway),
		}}}
	}
	return []Draft{{Type: events.TypeToolCallRequested, Causation: t.States[ref.Index].LastID, Payload: request(s, t, ref.Index, attempt)}}
}

// Recover decides what a new owner of the session does with attempts that
// were running when the previous owner was lost: each is settled by its
// replay policy as a lost outcome. Requested-but-unclaimed attempts are left
// alone: their request is still in the log and will be claimed.
//
// When the new owner cannot reach the session's workspace, a lost call that
// needs it is not retried here: a safe one settles as an error naming the
// node that holds the workspace.
func Recover(s *Session, r Retry) []Draft { return RecoverExcept(s, r, nil) }

// RecoverExcept is Recover for an owner that knows some attempts are still
// running under it (running reports them): those are left to report.
func RecoverExcept(s *Session, r Retry, running func(ref events.CallRef, attempt int) bool) []Draft {
	var drafts []Draft
	for _, id := range s.order {
		t := s.turns[id]
		for i := range t.Calls {
			if t.States[i].Phase != PhaseStarted {
				continue
			}
			ref := events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i}
			if running != nil && running(ref, t.States[i].Attempt) {
				continue
			}
			o, rr := Outcome{Lost: true}, r
			if s.WorkspaceAway != "" && !t.Plan[i].WorkspaceFree && t.Plan[i].Effect != tool.EffectUserMediated {
				o.Err = "the node running it was lost, and " + WorkspaceAwayReason(t.Calls[i].Name, s.WorkspaceAway)
				rr.MaxAttempts = t.States[i].Attempt // no retry without the workspace
			}
			drafts = append(drafts, Settle(s, ref, t.States[i].Attempt, o, rr)...)
		}
	}
	return drafts
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// clip shortens s to at most n bytes, on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// ErrNothingToRewind is returned by RewindPlan when the call never started or
// no file was checkpointed at or after it.
var ErrNothingToRewind = errors.New("core: nothing to rewind")

// RewindPlan returns, for the call with id callID (in turn, or else the
// latest call with that id: models reuse ids across turns), the pre-image to
// restore for every file checkpointed by that call or any later one: the
// earliest such checkpoint of each path is its state just before the call.
func RewindPlan(s *Session, turn, callID string) (events.CallRef, []events.FileCheckpointed, error) {
	for k := len(s.order) - 1; k >= 0; k-- {
		t := s.turns[s.order[k]]
		if turn != "" && t.ID != turn {
			continue
		}
		for i, c := range t.Calls {
			if c.ID != callID {
				continue
			}
			ref := events.CallRef{Turn: t.ID, Call: c.ID, Index: i}
			if t.States[i].StartedSeq == 0 {
				return ref, nil, fmt.Errorf("%w: call %s never started", ErrNothingToRewind, callID)
			}
			cut := t.States[i].StartedSeq
			for _, cp := range s.checkpoints {
				if cp.CallRef == ref {
					cut = min(cut, cp.Seq)
					break
				}
			}
			seen := map[string]bool{}
			var plan []events.FileCheckpointed
			for _, cp := range s.checkpoints {
				if cp.Seq >= cut && !seen[cp.Path] {
					seen[cp.Path] = true
					plan = append(plan, cp.FileCheckpointed)
				}
			}
			if len(plan) == 0 {
				return ref, nil, fmt.Errorf("%w: no file was checkpointed at or after call %s", ErrNothingToRewind, callID)
			}
			return ref, plan, nil
		}
	}
	if turn != "" {
		return events.CallRef{}, nil, fmt.Errorf("%w: no call %q in turn %q", ErrNothingToRewind, callID, turn)
	}
	return events.CallRef{}, nil, fmt.Errorf("%w: no call %q in this session", ErrNothingToRewind, callID)
}

// ErrNotAwaitingApproval is returned by Approve for a call that does not
// wait for an approval.
var ErrNotAwaitingApproval = errors.New("core: the call is not waiting for an approval")

// Decision is a person's (or a timeout's) answer to an approval request.
type Decision struct {
	Allow  bool
	By     string
	Reason string
	// Scope is events.ScopeCall (default), ScopeToolArgs or ScopeTool; an
	// escalated call is approved for the call only, whatever it says.
	Scope string
}

// Approve decides ApprovalGranted or ApprovalDenied for a call of the
// running turn that waits for approval.
func Approve(s *Session, callID string, d Decision) (Draft, error) {
	for _, ref := range s.PendingApprovals() {
		if ref.Call != callID {
			continue
		}
		t := s.turns[ref.Turn]
		e := t.Plan[ref.Index]
		if !d.Allow {
			reason := d.Reason
			if reason == "" {
				reason = "the approver denied this call"
			}
			return Draft{Type: events.TypeApprovalDenied, Causation: t.States[ref.Index].LastID, Payload: events.ApprovalDenied{
				CallRef: ref, Name: e.Name, By: d.By, Reason: fmt.Sprintf("denied by %s: %s", d.By, reason),
			}}, nil
		}
		scope := d.Scope
		if scope == "" || e.Escalate {
			scope = events.ScopeCall
		}
		g := events.ApprovalGranted{CallRef: ref, Name: e.Name, By: d.By, Scope: scope, Reason: d.Reason}
		if scope == events.ScopeToolArgs {
			g.Arguments = permission.CompactArgs(CallArgs(t, ref.Index))
		}
		return Draft{Type: events.TypeApprovalGranted, Causation: t.States[ref.Index].LastID, Payload: g}, nil
	}
	return Draft{}, fmt.Errorf("%w: no call %q waits for approval in the running turn", ErrNotAwaitingApproval, callID)
}

// ApprovalRequest is the request for call i's approval: the tool, its
// arguments, its effect and labels, and the rule that asked.
func ApprovalRequest(t *Turn, i int) events.ApprovalRequested {
	e := t.Plan[i]
	args := CallArgs(t, i)
	labels := e.Labels
	if len(labels) == 0 {
		labels = []string{"(none declared)"}
	}
	return events.ApprovalRequested{
		CallRef: events.CallRef{Turn: t.ID, Call: t.Calls[i].ID, Index: i}, Name: e.Name, Arguments: args,
		Effect: e.Effect, Labels: labels, Rule: e.Rule, Reason: e.Reason, Escalate: e.Escalate,
	}
}

// CallArgs returns the arguments call i runs with: a middleware's rewrite,
// else the plan's prepared arguments (optional nulls dropped), else the
// model's own, normalized.
func CallArgs(t *Turn, i int) json.RawMessage {
	if r := t.Plan[i].Rewritten; r != nil {
		return r
	}
	if a := t.Plan[i].Args; a != nil {
		return a
	}
	args, err := tool.NormalizeArguments(t.Calls[i].Arguments)
	if err != nil {
		return json.RawMessage("{}") // unreachable for admitted calls
	}
	return args
}

// CausedByPrevious, as a draft's Causation, names the draft before it in the
// same decision: the shell fills in that event's id once it is minted.
const CausedByPrevious = "\x00previous"

// cause returns the first id that is set.
func cause(ids ...string) string {
	for _, id := range ids {
		if id != "" {
			return id
		}
	}
	return ""
}

// Close decides SessionClosed. A session with a running turn is not closed:
// ErrTurnActive; closing a closed session decides nothing.
func Close(s *Session, reason string) ([]Draft, error) {
	if s.Closed {
		return nil, nil
	}
	if s.active != nil {
		return nil, fmt.Errorf("%w (turn %s): cancel it or wait for it, then close", ErrTurnActive, s.active.ID)
	}
	return []Draft{{Type: events.TypeSessionClosed, Payload: events.SessionClosed{Reason: reason}}}, nil
}
