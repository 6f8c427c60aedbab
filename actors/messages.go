package actors

import (
	"fmt"
	"time"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/projections"
)

// Session actor messages. Replies travel on buffered channels of capacity 1,
// so Receive never blocks on a slow caller. Each message type serves itself
// (handle) and refuses itself (refuse): see Message.
type (
	// OpenSession records SessionOpened for a new session, and this node
	// as its first owner. Node names the node that keeps the workspace
	// (empty when workspaces are shared).
	OpenSession struct {
		Workspace, Agent, Node string
		Reply                  chan error
	}
	// SubmitTurn records a turn and answers once it is recorded (Wait false)
	// or complete (Wait true). A turn id seen before answers with the
	// recorded turn and runs nothing.
	SubmitTurn struct {
		ID    string
		Calls []events.CallSpec
		Wait  bool
		// Overrides are middleware verdicts by call index.
		Overrides map[int]core.Override
		Reply     chan TurnReply
	}
	// GetTurn answers the state of one turn.
	GetTurn struct {
		ID    string
		Reply chan TurnReply
	}
	// CancelTurn cancels one call (Call set) or every unsettled call of a
	// turn. Reply gets nil once the cancellation is recorded.
	CancelTurn struct {
		Turn, Call, Reason string
		Reply              chan error
	}
	// claim asks to start the attempt request (the event with id
	// requestID) asks for; the reply comes once the claim is durable, or
	// with an error.
	claim struct {
		req         events.ToolCallRequested
		requestID   string
		worker      string
		takenBy     string // the external worker that took it, if one did
		checkpoints []events.FileCheckpointed
		// queued is how long the call waited for a slot of its tool's
		// fleet cap.
		queued time.Duration
		reply  chan error
	}
	// outcome reports an attempt's outcome. An unclaimed outcome (a
	// read-only, safe call run without a durable claim) carries its claim.
	// reply, required for an unclaimed outcome, is answered once what the
	// outcome decided is durable, with the attempt's result as the log
	// records it (what after-tool hooks are told), or with an error.
	outcome struct {
		ref       events.CallRef
		attempt   int
		out       core.Outcome
		unclaimed bool
		requestID string // of an unclaimed call: the request it ran for
		worker    string
		reply     chan settledReply
		// from is the tool actor that ran the call, told once the session
		// has the outcome or refused it (Pool.reported), and key the call
		// there; nil for an outcome of a call that did not run.
		from *Pool
		key  callKey
	}
	// checkRequest asks, before a call that needs no claim runs, whether
	// its request is still the one its attempt waits on.
	checkRequest struct {
		req       events.ToolCallRequested
		requestID string
		reply     chan error
	}
	// Release hands the session over (docs/spec.md §7, graceful shutdown):
	// the owner records OwnershipReleased, answers nil once it is durable,
	// and stops, so any live node may take the session at once.
	Release struct {
		Reply chan error
	}
	// retryDue fires when a scheduled retry's delay has passed.
	retryDue struct {
		ref     events.CallRef
		attempt int
	}
)

// Retire tells a session actor to stop serving, as the node does with
// every actor when it loses its lease: whoever waits on it is answered, the
// node forgets it (the session's next message spawns a fresh actor that
// loads the log), and it stops once no sender can still hold its PID
// (Session.retire). Not a Message: it has no caller to answer.
type Retire struct{}

// settledReply answers an outcome: the attempt's result as the durable
// events record it, or nil when they record nothing for it (the attempt
// was no longer running); err when the outcome could not be recorded.
type settledReply struct {
	result *events.Result
	err    error
}

// Message is what a session actor serves. Every message can refuse itself,
// so whatever stops a message from being served (the log failed to load,
// the actor retired or stopped, the node no longer owns the session) answers
// its caller with an error, and a new message type cannot leave a caller
// waiting: it is not a Message without its refuse, and the node sends only
// Messages. Only this package defines them.
type Message interface {
	// handle serves the message on a loaded actor.
	handle(s *Session)
	// refuse answers the message's caller, if it has one, with err.
	refuse(err error)
}

// Refuse answers a session message with err; the node uses it for messages
// that reached a stopped actor (dead letters), so no caller waits forever.
// A value that is not a session message is ignored.
func Refuse(m any, err error) {
	if msg, ok := m.(Message); ok {
		msg.refuse(err)
	}
}

// TurnReply answers SubmitTurn and GetTurn.
type TurnReply struct {
	Turn projections.Turn
	// Found is false for GetTurn of an unknown turn.
	Found bool
	Err   error
}

func (m OpenSession) refuse(err error) { reply(m.Reply, err) }

func (m OpenSession) handle(s *Session) {
	if s.state.Opened {
		reply(m.Reply, nil)
		return
	}
	s.settings = s.deps.Rules.Settings(s.tenant, m.Agent)
	opened := core.Draft{Type: events.TypeSessionOpened, Payload: events.SessionOpened{Workspace: m.Workspace, Agent: m.Agent, Node: m.Node}}
	s.decide([]core.Draft{opened}, nil, nil)
	owned := s.ownedNow(false)
	s.decide([]core.Draft{core.TakeOwnership(s.state, s.deps.Node, s.deps.Incarnation, "")},
		func() {
			if owned != nil {
				owned()
			}
			reply(m.Reply, nil)
		}, func(err error) { reply(m.Reply, err) })
}

func (m SubmitTurn) refuse(err error) { reply(m.Reply, TurnReply{Err: err}) }
func (m SubmitTurn) handle(s *Session) {
	faults.Panic(faults.PanicOnTurn, m.ID)
	s.submit(m)
}

func (m GetTurn) refuse(err error)  { reply(m.Reply, TurnReply{Err: err}) }
func (m GetTurn) handle(s *Session) { reply(m.Reply, s.turnView(m.ID)) }

func (m CancelTurn) refuse(err error) { reply(m.Reply, err) }

func (m CancelTurn) handle(s *Session) {
	if _, ok := s.state.Turn(m.Turn); !ok {
		reply(m.Reply, fmt.Errorf("%w: turn %q", events.ErrNotFound, m.Turn))
		return
	}
	drafts, running := core.Cancel(s.state, m.Turn, m.Call, m.Reason)
	if len(drafts) == 0 {
		reply(m.Reply, nil)
		return
	}
	tenant, id := s.tenant, s.id
	s.decide(drafts, func() {
		for _, ref := range running {
			if s.deps.Calls != nil {
				s.deps.Calls.Interrupt(tenant, id, ref)
			}
		}
		reply(m.Reply, nil)
	}, func(err error) { reply(m.Reply, err) })
	s.progress()
}

func (m claim) refuse(err error) { reply(m.reply, err) }

func (m claim) handle(s *Session) {
	s.settledEarly(m.requestID)
	if err := core.CurrentRequest(s.state, m.req.CallRef, m.req.Attempt, m.requestID); err != nil {
		reply(m.reply, err)
		return
	}
	d, err := core.ClaimTaken(s.state, m.req.CallRef, m.req.Attempt, m.worker, m.takenBy, m.queued, m.checkpoints...)
	if err != nil {
		reply(m.reply, err)
		return
	}
	s.decide(d, func() { reply(m.reply, nil) }, func(err error) { reply(m.reply, err) })
}

func (m checkRequest) refuse(err error) { reply(m.reply, err) }

func (m checkRequest) handle(s *Session) {
	reply(m.reply, core.CurrentRequest(s.state, m.req.CallRef, m.req.Attempt, m.requestID))
}

func (m outcome) refuse(err error) {
	m.reported()
	if m.reply != nil {
		reply(m.reply, settledReply{err: err})
	}
}

// reported tells the tool actor that ran the call that the session has its
// outcome (decided, or refused).
func (m outcome) reported() {
	if m.from != nil {
		m.from.reported(m.key, m.attempt)
	}
}

func (m outcome) handle(s *Session) {
	defer m.reported()
	faults.Panic(faults.PanicOnOutcome, m.ref.Turn)
	var delay time.Duration
	if s.settings.Backoff != nil {
		delay = s.settings.Backoff.Delay(m.attempt)
	}
	r := core.Retry{MaxAttempts: s.settings.MaxAttempts, Delay: delay}
	s.settledEarly(m.requestID)
	var d []core.Draft
	if m.unclaimed {
		if err := core.CurrentRequest(s.state, m.ref, m.attempt, m.requestID); err != nil {
			m.refuse(err)
			return
		}
		var err error
		if d, err = core.ClaimAndSettle(s.state, m.ref, m.attempt, m.worker, m.out, r); err != nil {
			m.refuse(err)
			return
		}
	} else {
		d = core.Settle(s.state, m.ref, m.attempt, m.out, r)
	}
	switch {
	case m.reply == nil:
		s.decide(d, nil, nil)
	case len(d) == 0:
		reply(m.reply, settledReply{}) // nothing to record: the attempt had settled
	default:
		var res *events.Result
		if s.deps.After != nil { // only after-tool hooks read it
			if r, ok := core.SettledResult(s.state, d); ok {
				res = &r
			}
		}
		s.decide(d, func() { reply(m.reply, settledReply{result: res}) }, func(err error) { m.refuse(err) })
	}
	s.progress()
}

func (m Release) refuse(err error) { reply(m.Reply, err) }

func (m Release) handle(s *Session) {
	d := core.Release(s.state)
	if len(d) == 0 || !core.Owns(s.state, s.deps.Node, s.deps.Incarnation) {
		reply(m.Reply, nil)
		return
	}
	owned := s.ownedNow(true)
	s.decide(d, func() {
		if owned != nil {
			owned()
		}
		reply(m.Reply, nil)
		s.retire()
	}, func(err error) { reply(m.Reply, err) })
}

// A timer's message has no caller to refuse: the next owner of the session
// re-arms what it is for from the log.
func (m retryDue) refuse(error) {}

func (m retryDue) handle(s *Session) {
	delete(s.timers, retryKey(m.ref, m.attempt))
	s.decide(core.RetryDue(s.state, m.ref, m.attempt), nil, nil)
	s.progress()
}

func (s *Session) submit(m SubmitTurn) {
	if !s.state.Opened {
		reply(m.Reply, TurnReply{Err: fmt.Errorf("%w: session %s was never opened", events.ErrNotFound, s.id)})
		return
	}
	if _, ok := s.state.Turn(m.ID); ok {
		// A turn id seen before: answer from the record, run nothing; the
		// core refuses it when the calls are not the recorded ones.
		if err := core.Repeat(s.state, m.ID, m.Calls); err != nil {
			reply(m.Reply, TurnReply{Err: err})
			return
		}
		s.waiters[m.ID] = append(s.waiters[m.ID], m)
		s.notifyWaiters(m.ID)
		return
	}
	if s.state.Active() != nil {
		if len(s.queued) >= MaxQueuedTurns {
			reply(m.Reply, TurnReply{Err: fmt.Errorf("%w: %d turns already wait behind turn %s", ErrBusy, len(s.queued), s.state.Active().ID)})
			return
		}
		s.queued = append(s.queued, m)
		return
	}
	plan := s.settings.Plan
	plan.Overrides = m.Overrides
	drafts, err := core.ReceiveTurn(s.state, core.TurnInput{
		ID: m.ID, Calls: m.Calls, ParallelToolCalls: s.settings.ParallelToolCalls,
		Cap: s.settings.Cap, Plan: plan,
	})
	if err != nil {
		reply(m.Reply, TurnReply{Err: err})
		return
	}
	s.waiters[m.ID] = append(s.waiters[m.ID], m)
	s.decide(drafts, nil, nil)
	s.progress()
}

// turnView answers a turn from durable state only: complete with its
// results once TurnCompleted is in the log, else just "running".
func (s *Session) turnView(id string) TurnReply {
	t, ok := s.state.Turn(id)
	if !ok || !s.out.isDurable(t.Received) {
		return TurnReply{}
	}
	if t.Completed && s.out.isDurable(t.CompletedSeq) {
		tv, _ := s.folder.Turn(id)
		return TurnReply{Turn: tv, Found: true}
	}
	return TurnReply{Turn: projections.Turn{Turn: id, Status: projections.StatusRunning, Results: []events.Result{}, Notices: []projections.Notice{}}, Found: true}
}

// notifyWaiters answers callers of a turn that can be answered now: those
// not waiting for completion once the turn is recorded, everyone once it is
// complete and durable.
func (s *Session) notifyWaiters(id string) {
	r := s.turnView(id)
	if !r.Found {
		return
	}
	var keep []SubmitTurn
	for _, w := range s.waiters[id] {
		if !w.Wait || r.Turn.Status == projections.StatusComplete {
			reply(w.Reply, r)
			continue
		}
		keep = append(keep, w)
	}
	if len(keep) == 0 {
		delete(s.waiters, id)
	} else {
		s.waiters[id] = keep
	}
}

// startQueued submits the next queued turn once none is active.
func (s *Session) startQueued() {
	for len(s.queued) > 0 && s.state.Active() == nil {
		m := s.queued[0]
		s.queued = s.queued[1:]
		s.submit(m)
	}
}

// reply sends without blocking: every reply channel has room for one answer.
func reply[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}
