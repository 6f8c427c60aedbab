package core

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/tool"
)

// Phase is where one call of a turn stands.
type Phase int

// Phases of a call. A call moves waiting → requested → started → settled, or
// through retrying back to requested; blocked calls are settled from the start.
const (
	PhaseWaiting Phase = iota
	PhaseRequested
	PhaseStarted
	PhaseRetrying
	PhaseSettled
)

// Draft is an event the core decided on, before the shell gives it an id, a
// time and a sequence number.
type Draft struct {
	Type      events.Type
	Causation string
	Payload   any
}

// Session is a session's state, folded from its events by Apply. Decisions
// read it and return drafts; state changes only in Apply. Not safe for
// concurrent use: one actor owns it.
type Session struct {
	Tenant, ID string
	Workspace  string
	Agent      string
	// Seq is the sequence of the last applied event.
	Seq    uint64
	Opened bool
	Closed bool
	// Ownership (docs/spec.md §7), from the latest OwnershipTaken: the
	// owner's node and incarnation, the epoch, and the Seq of that event
	// (requests decided before it were made by an earlier owner). Released
	// is true once the owner handed the session over. Empty Owner: never
	// owned (a log from before fleets, or a session just opened).
	Owner       string
	Incarnation string
	Epoch       uint64
	OwnedSince  uint64
	Released    bool
	// WorkspaceNode is the node that keeps the session's workspace ("" when
	// workspaces are shared); WorkspaceAway is set while the owner cannot
	// reach it, and names that node.
	WorkspaceNode string
	WorkspaceAway string
	// reissueClear is OwnedSince+1 once reissue found nothing to reissue
	// for that ownership (0: not known): a memo, like head, that only
	// saves the walk.
	reissueClear uint64

	turns  map[string]*Turn
	order  []string
	active *Turn
	// unnoticed are indeterminate calls no retry notice has named yet, by
	// the id of their ToolCallIndeterminate.
	unnoticed   []events.ToolCallIndeterminate
	unnoticedID []string
	// work holds durable work state by kind (plan, todo, goal).
	work map[string]json.RawMessage
	// answers holds user answers by call key.
	answers map[string]events.AnswerReceived
	// jobs are background calls by job id, in the order they started.
	jobs     map[string]*Job
	jobOrder []string
	// checkpoints are the recorded pre-images, in log order.
	checkpoints []Checkpoint
	// grants are standing approvals for the rest of the session.
	grants []permission.Grant
	// last is the last applied event and head its hash, computed when first
	// asked for (Head): the hash chain's link for the next event.
	last events.Event
	head string
	// chain is the rule the session's events are linked by, read from its
	// first event (events.ChainOf); "" before it, when a new session is
	// chained by events.ChainVersion.
	chain events.Chain
	// signed is the latest HeadSigned, at signedSeq (Signed).
	signed    events.HeadSigned
	signedSeq uint64
}

// Grants returns the session's standing approvals.
func (s *Session) Grants() []permission.Grant { return s.grants }

// Job is a background call's state.
type Job struct {
	ID     string
	Ref    events.CallRef
	Name   string
	Status JobStatus
	Result *events.Result
}

// JobStatus is where a background job stands: running, then its call's
// outcome (ok, error, blocked, indeterminate), or cancelled.
type JobStatus string

// Job statuses other than the outcomes (JobStatus(events.Outcome...)).
const (
	JobRunning   JobStatus = "running"
	JobCancelled JobStatus = "cancelled"
)

// Checkpoint is a recorded pre-image and where in the log it stands.
type Checkpoint struct {
	Seq uint64
	events.FileCheckpointed
}

// Turn is one turn's state.
type Turn struct {
	ID    string
	Calls []events.CallSpec
	Plan  []events.PlanEntry
	Sched *Schedule
	// States is where each call stands, in model order.
	States []CallState
	// ReceivedID is the id of the turn's TurnReceived, the causation of
	// what follows it.
	ReceivedID string
	Committed  int
	Completed  bool
	Notices    []events.RetryNoticeIssued
	// Received and CompletedSeq are the sequences of the TurnReceived (a
	// streamed turn's TurnOpened) and TurnCompleted events.
	Received     uint64
	CompletedSeq uint64
	// ParallelToolCalls and Cap are the turn's settings, as recorded.
	ParallelToolCalls bool
	Cap               int
	// Streamed marks a turn whose calls arrive in batches (TurnOpened);
	// Open is true until its TurnEnded, EndReason and EndedSeq say why and
	// where it ended. BatchID, BatchSeq and BatchAt are the id, sequence
	// and time of its latest batch (CallsAdded): a turn left open
	// turns.stream_timeout after it ends by itself.
	Streamed  bool
	Open      bool
	EndReason string
	EndedSeq  uint64
	BatchID   string
	BatchSeq  uint64
	BatchAt   time.Time
}

// CallState is where one call of a turn stands.
type CallState struct {
	Phase   Phase
	Attempt int
	Result  *events.Result
	// RequestSeq and RequestID are the Seq and id of the call's latest
	// ToolCallRequested: a worker's claim must answer that request.
	RequestSeq uint64
	RequestID  string
	Retry      events.RetryScheduled
	// RetryAt is when a scheduled retry is due (the RetryScheduled event's
	// time plus its delay).
	RetryAt time.Time
	// Cancelled marks a call the harness cancelled.
	Cancelled bool
	// Asked marks a call whose ApprovalRequested is recorded; Denied holds
	// the reason of a denied approval until its DispatchBlocked.
	Asked  bool
	Denied string
	// StartedSeq is the sequence of the call's first ToolCallStarted.
	StartedSeq uint64
	// LastID is the id of the latest event that moved the call on, the
	// causation of what follows it.
	LastID string
}

// newTurn returns the state of a turn recorded by event ev, without calls.
func newTurn(id string, ev events.Event, parallel bool, cap int) *Turn {
	return &Turn{ID: id, ReceivedID: ev.ID, Received: ev.Seq, ParallelToolCalls: parallel, Cap: cap,
		Sched: NewSchedule(nil, cap, !parallel)}
}

// add appends calls, with their plan, to the turn's state and schedule.
// A turn's first calls are kept as the event holds them; later ones are
// copied after them.
func (t *Turn) add(calls []events.CallSpec, plan []events.PlanEntry) {
	n := len(calls)
	if len(t.Calls) == 0 {
		t.Calls, t.Plan = calls, plan
	} else {
		t.Calls = append(t.Calls[:len(t.Calls):len(t.Calls)], calls...)
		t.Plan = append(t.Plan[:len(t.Plan):len(t.Plan)], plan...)
	}
	t.States = grow(t.States, n)
	t.Sched.Append(Slots(plan))
}

// grow returns s with n zero values more.
func grow[T any](s []T, n int) []T {
	s = slices.Grow(s, n)[:len(s)+n]
	clear(s[len(s)-n:])
	return s
}

// NewSession returns the empty state of a session.
func NewSession(tenant, id string) *Session {
	return &Session{Tenant: tenant, ID: id, turns: map[string]*Turn{},
		work: map[string]json.RawMessage{}, answers: map[string]events.AnswerReceived{}, jobs: map[string]*Job{}}
}

// WorkState returns the current value of a work state kind, or nil.
func (s *Session) WorkState(kind string) json.RawMessage { return s.work[kind] }

// AnswerFor returns the recorded answer to a call, if any.
func (s *Session) AnswerFor(ref events.CallRef) (events.AnswerReceived, bool) {
	a, ok := s.answers[callKey(ref)]
	return a, ok
}

// Jobs returns the background jobs in the order they started.
func (s *Session) Jobs() []*Job {
	out := make([]*Job, 0, len(s.jobOrder))
	for _, id := range s.jobOrder {
		out = append(out, s.jobs[id])
	}
	return out
}

// JobByID returns one background job.
func (s *Session) JobByID(id string) (*Job, bool) {
	j, ok := s.jobs[id]
	return j, ok
}

// Checkpoints returns the recorded pre-images in log order.
func (s *Session) Checkpoints() []Checkpoint { return s.checkpoints }

func callKey(ref events.CallRef) string { return fmt.Sprintf("%s/%d", ref.Turn, ref.Index) }

// Head returns the link the session's next event carries in Prev
// (docs/events.md, "The hash chain"): the hash of the last applied event
// under the session's rule (Chain), or the session's genesis link before
// its first. The hash is computed once,
// when first asked for, so folding a long log hashes only its last event.
// It encodes nothing: events.Hash reads the event's fields and its Data
// bytes as they are, so the first Head after a session is loaded from its
// log costs one hash, as it does after an event is decided. It fails,
// wrapping events.ErrCanonical, only for a last event whose data is not
// JSON.
func (s *Session) Head() (string, error) {
	if s.Seq == 0 {
		return s.Chain().Genesis(s.Tenant, s.ID), nil
	}
	if s.head == "" {
		h, err := s.Chain().Hash(s.last)
		if err != nil {
			return "", err
		}
		s.head = h
	}
	return s.head, nil
}

// Chain returns the rule the session's events are linked by: the one its
// first event names (events.ChainOf), or events.ChainVersion for a session
// without events. A session keeps its rule for life, so a session opened
// before Chain2 is carried on by Chain1.
func (s *Session) Chain() events.Chain {
	if s.chain == "" {
		return events.ChainVersion
	}
	return s.chain
}

// Turn returns a turn by id.
func (s *Session) Turn(id string) (*Turn, bool) {
	t, ok := s.turns[id]
	return t, ok
}

// Active returns the turn that is running, if any.
func (s *Session) Active() *Turn { return s.active }

// Turns returns the turn ids in the order they were received.
func (s *Session) Turns() []string { return s.order }

// Apply folds one event into the state. Events must come in sequence; a
// payload that does not decode is an error and changes nothing.
func (s *Session) Apply(ev events.Event) error {
	if ev.Seq != s.Seq+1 {
		return fmt.Errorf("core: session %s: event %s has seq %d, want %d", s.ID, ev.ID, ev.Seq, s.Seq+1)
	}
	p, err := events.Decode(ev)
	if err != nil {
		return err
	}
	return s.ApplyDecoded(ev, p)
}

// ApplyDecoded folds an event whose payload the caller already holds (a
// pointer to the payload type of ev.Type, as events.Decode returns): the
// shell applies what the core just decided without decoding it again.
func (s *Session) ApplyDecoded(ev events.Event, p any) error {
	if ev.Seq != s.Seq+1 {
		return fmt.Errorf("core: session %s: event %s has seq %d, want %d", s.ID, ev.ID, ev.Seq, s.Seq+1)
	}
	if err := s.apply(ev, p); err != nil {
		return err
	}
	s.Seq = ev.Seq
	s.last, s.head = ev, ""
	if ev.Seq == 1 {
		s.chain = events.ChainOf(s.Tenant, s.ID, ev)
	}
	// Remember the latest event of each call, the cause of its next one.
	if ref, ok := callRefOf(p); ok {
		if t, ok := s.turns[ref.Turn]; ok && ref.Index >= 0 && ref.Index < len(t.States) {
			t.States[ref.Index].LastID = ev.ID
		}
	}
	return nil
}

// callRefOf returns the call a payload is about, for the events that move a
// call on: a checkpoint, an answer, a work-state update and the commit are
// about a call but cause nothing further in it, so they are not its latest
// event for causation.
func callRefOf(p any) (events.CallRef, bool) {
	switch p.(type) {
	case *events.FileCheckpointed, *events.AnswerReceived, *events.WorkStateUpdated, *events.ResultCommitted:
		return events.CallRef{}, false
	}
	return events.CallOf(p)
}

func (s *Session) call(ref events.CallRef) (*Turn, int, error) {
	t, ok := s.turns[ref.Turn]
	if !ok || ref.Index < 0 || ref.Index >= len(t.Calls) {
		return nil, 0, fmt.Errorf("core: session %s: event names unknown call %s/%d", s.ID, ref.Turn, ref.Index)
	}
	return t, ref.Index, nil
}

func (s *Session) apply(ev events.Event, p any) error {
	switch p := p.(type) {
	case *events.SessionOpened:
		s.Opened, s.Workspace, s.Agent, s.WorkspaceNode = true, p.Workspace, p.Agent, p.Node
	case *events.OwnershipTaken:
		if p.Epoch != s.Epoch+1 || p.Node == "" {
			return fmt.Errorf("core: session %s: OwnershipTaken by %q at epoch %d, want a node at epoch %d", s.ID, p.Node, p.Epoch, s.Epoch+1)
		}
		s.Owner, s.Incarnation, s.Epoch, s.OwnedSince = p.Node, p.Incarnation, p.Epoch, ev.Seq
		s.Released, s.WorkspaceAway = false, p.WorkspaceAway
	case *events.OwnershipReleased:
		if p.Epoch == s.Epoch && p.Node == s.Owner {
			s.Released = true
		}
	case *events.SessionClosed:
		s.Closed = true
	case *events.TurnReceived:
		if len(p.Plan) != len(p.Calls) {
			return fmt.Errorf("core: turn %s: plan has %d entries for %d calls", p.Turn, len(p.Plan), len(p.Calls))
		}
		t := newTurn(p.Turn, ev, p.ParallelToolCalls, p.Cap)
		t.add(p.Calls, p.Plan)
		s.turns[p.Turn] = t
		s.order = append(s.order, p.Turn)
		s.active = t
	case *events.TurnOpened:
		if _, ok := s.turns[p.Turn]; ok {
			return fmt.Errorf("core: session %s: turn %s opened, but it was recorded before", s.ID, p.Turn)
		}
		t := newTurn(p.Turn, ev, p.ParallelToolCalls, p.Cap)
		t.Streamed, t.Open = true, true
		t.BatchID, t.BatchSeq, t.BatchAt = ev.ID, ev.Seq, ev.Time
		s.turns[p.Turn] = t
		s.order = append(s.order, p.Turn)
		s.active = t
	case *events.CallsAdded:
		t, ok := s.turns[p.Turn]
		switch {
		case !ok || !t.Streamed || !t.Open:
			return fmt.Errorf("core: session %s: calls added to turn %s, which is not an open streamed turn", s.ID, p.Turn)
		case p.From != len(t.Calls):
			return fmt.Errorf("core: session %s: calls added to turn %s from %d; it holds %d", s.ID, p.Turn, p.From, len(t.Calls))
		case len(p.Plan) != len(p.Calls):
			return fmt.Errorf("core: turn %s: plan has %d entries for %d calls", p.Turn, len(p.Plan), len(p.Calls))
		}
		t.add(p.Calls, p.Plan)
		// Each call's first cause is its batch.
		for i := p.From; i < len(t.States); i++ {
			t.States[i].LastID = ev.ID
		}
		t.BatchID, t.BatchSeq, t.BatchAt = ev.ID, ev.Seq, ev.Time
	case *events.TurnEnded:
		t, ok := s.turns[p.Turn]
		if !ok || !t.Streamed {
			return fmt.Errorf("core: session %s: turn %s ended, but it is not a streamed turn", s.ID, p.Turn)
		}
		if t.Open {
			t.Open, t.EndReason, t.EndedSeq = false, p.Reason, ev.Seq
		}
	case *events.RetryNoticeIssued:
		if t, ok := s.turns[p.Turn]; ok {
			t.Notices = append(t.Notices, *p)
		}
		for i, u := range s.unnoticed {
			if u.CallRef == p.About && u.Attempt == p.Attempt {
				s.unnoticed = append(s.unnoticed[:i:i], s.unnoticed[i+1:]...)
				s.unnoticedID = append(s.unnoticedID[:i:i], s.unnoticedID[i+1:]...)
				break
			}
		}
	case *events.ResultCommitted:
		t, ok := s.turns[p.Turn]
		if !ok || p.Index != t.Committed {
			return fmt.Errorf("core: session %s: commit of %s/%d out of call order", s.ID, p.Turn, p.Index)
		}
		t.States[p.Index].Result = &p.Result
		t.Committed++
	case *events.TurnCompleted:
		if t, ok := s.turns[p.Turn]; ok {
			t.Completed = true
			t.CompletedSeq = ev.Seq
			if s.active == t {
				s.active = nil
			}
		}
	case *events.FileCheckpointed:
		s.checkpoints = append(s.checkpoints, Checkpoint{Seq: ev.Seq, FileCheckpointed: *p})
	case *events.AnswerReceived:
		s.answers[callKey(p.CallRef)] = *p
	case *events.WorkStateUpdated:
		s.work[p.Kind] = p.Value
	case *events.WorkspaceRewound:
		// A fact for audit; the files themselves are the state.
	case *events.HeadSigned:
		s.signed, s.signedSeq = *p, ev.Seq
	default:
		return s.applyCall(ev, p)
	}
	return nil
}

// applyCall folds an event that moves one call of a turn on: its approval,
// request, claim, outcome, retry or cancellation.
func (s *Session) applyCall(ev events.Event, p any) error {
	switch p := p.(type) {
	case *events.DispatchBlocked:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.States[i].Phase = PhaseSettled
		r := &events.Result{
			ID: t.Calls[i].ID, Name: t.Calls[i].Name, Outcome: events.OutcomeBlocked, Block: p.Category,
			Content: []events.Part{{Type: "text", Text: p.Reason}}, Attempts: 0,
		}
		if j, ok := s.job(t, i); ok {
			// A background call whose request could not be served (its
			// workspace was lost before anyone claimed it): its job ends.
			j.Status, j.Result = JobStatus(events.OutcomeBlocked), r
		} else {
			t.States[i].Result = r
		}
		t.Sched.Drop(i)
	case *events.ApprovalRequested:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.States[i].Asked = true
	case *events.ApprovalGranted:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.Plan[i].Ask = false
		t.Sched.Release(i)
		switch p.Scope {
		case events.ScopeTool:
			s.grants = append(s.grants, permission.Grant{Tool: p.Name, ID: ev.ID})
		case events.ScopeToolArgs:
			s.grants = append(s.grants, permission.Grant{Tool: p.Name, Args: p.Arguments, ID: ev.ID})
		}
	case *events.ApprovalDenied:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.Plan[i].Ask = false
		t.States[i].Denied = p.Reason
	case *events.ToolCallRequested:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.States[i].Phase = PhaseRequested
		t.States[i].Attempt = p.Attempt
		t.States[i].RequestSeq, t.States[i].RequestID = ev.Seq, ev.ID
		t.Sched.Start(i)
		if p.Concurrency == tool.ConcurrencyIsolatedBackground && t.States[i].Result == nil {
			// The foreground result of a background call is its job handle.
			id := JobID(s.ID, p.Turn, p.Index)
			if _, ok := s.jobs[id]; !ok {
				s.jobs[id] = &Job{ID: id, Ref: p.CallRef, Name: p.Name, Status: JobRunning}
				s.jobOrder = append(s.jobOrder, id)
			}
			handle, _ := json.Marshal(map[string]string{"job": id, "status": string(JobRunning)})
			t.States[i].Result = &events.Result{
				ID: t.Calls[i].ID, Name: t.Calls[i].Name, Outcome: events.OutcomeOK,
				Content: []events.Part{{Type: "json", JSON: handle}}, Attempts: 1,
			}
			t.Sched.Settle(i)
		}
	case *events.ToolCallStarted:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		if t.States[i].Phase != PhaseSettled {
			t.States[i].Phase = PhaseStarted
		}
		if t.States[i].StartedSeq == 0 {
			t.States[i].StartedSeq = ev.Seq
		}
	case *events.ToolCallCompleted:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		if p.Worker != "" {
			s.startedWithOutcome(t, i, ev.Seq)
		}
		r, _ := attemptResult(t.Calls[i], p)
		s.settle(t, i, r)
	case *events.ToolCallFailed:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		if p.Worker != "" {
			s.startedWithOutcome(t, i, ev.Seq)
		}
		if p.Final {
			r, _ := attemptResult(t.Calls[i], p)
			s.settle(t, i, r)
		}
	case *events.ToolCallIndeterminate:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		r, _ := attemptResult(t.Calls[i], p)
		s.settle(t, i, r)
		s.unnoticed = append(s.unnoticed, *p)
		s.unnoticedID = append(s.unnoticedID, ev.ID)
	case *events.RetryScheduled:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.States[i].Phase = PhaseRetrying
		t.States[i].Retry = *p
		t.States[i].RetryAt = ev.Time.Add(p.Delay)
	case *events.CallCancelled:
		t, i, err := s.call(p.CallRef)
		if err != nil {
			return err
		}
		t.States[i].Cancelled = true
		if !p.Running {
			t.States[i].Phase = PhaseSettled
			if t.States[i].Result == nil {
				t.States[i].Result = &events.Result{
					ID: t.Calls[i].ID, Name: t.Calls[i].Name, Outcome: events.OutcomeError,
					Content: []events.Part{{Type: "text", Text: "cancelled before it ran: " + p.Reason}}, Attempts: t.States[i].Attempt,
				}
			}
			t.Sched.Drop(i)
		}
	}
	return nil
}

// settle records a call's final result unless it already settled (a
// background call's foreground result, or a duplicate outcome).
// startedWithOutcome applies the claim an outcome event carries (its
// Worker): what a ToolCallStarted at seq would have.
func (s *Session) startedWithOutcome(t *Turn, i int, seq uint64) {
	if t.States[i].Phase != PhaseSettled {
		t.States[i].Phase = PhaseStarted
	}
	if t.States[i].StartedSeq == 0 {
		t.States[i].StartedSeq = seq
	}
}

func (s *Session) settle(t *Turn, i int, r *events.Result) {
	if t.States[i].Phase == PhaseSettled {
		return
	}
	if j, ok := s.job(t, i); ok {
		j.Status, j.Result = JobStatus(r.Outcome), r
		if t.States[i].Cancelled && r.Outcome != events.OutcomeOK {
			j.Status = JobCancelled
		}
	}
	t.States[i].Phase = PhaseSettled
	if t.States[i].Result == nil {
		t.States[i].Result = r
	}
	t.Sched.Settle(i)
}

// IndeterminateText is the result text of an indeterminate call.
func IndeterminateText(name, reason string) string {
	return fmt.Sprintf("The outcome of this %s call is unknown (%s): its effect may or may not have happened. "+
		"It will not be run again. Check the authoritative state before making any new change.", name, reason)
}

// NoticeText is the retry notice the model sees on the next turn.
func NoticeText(u events.ToolCallIndeterminate) string {
	return fmt.Sprintf("Call %s (%s, attempt %d) in turn %s ended indeterminate (%s): it may or may not have taken effect and was not retried. "+
		"Check the authoritative state before any new mutation.", u.Call, u.Name, u.Attempt, u.Turn, u.Reason)
}

// JobID names the background job of a call.
func JobID(session, turn string, index int) string {
	return session + "/" + turn + "/" + strconv.Itoa(index)
}

// job returns the background job of call i of turn t, if it is one.
func (s *Session) job(t *Turn, i int) (*Job, bool) {
	if len(s.jobs) == 0 {
		return nil, false // most sessions run none: no id to build
	}
	j, ok := s.jobs[JobID(s.ID, t.ID, i)]
	return j, ok
}

// Pending is a call waiting for approval.
type Pending struct {
	Ref     events.CallRef
	Request events.ApprovalRequested
}

// PendingApprovals lists the running turn's calls that wait for approval.
func (s *Session) PendingApprovals() []events.CallRef {
	t := s.active
	if t == nil {
		return nil
	}
	var out []events.CallRef
	for i, c := range t.Calls {
		if t.States[i].Asked && t.Plan[i].Ask && t.States[i].Denied == "" {
			out = append(out, events.CallRef{Turn: t.ID, Call: c.ID, Index: i})
		}
	}
	return out
}
