package actors

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/tool"
)

// The actor's own lifecycle messages: they come from its goroutines and
// timers, never from a caller.
type (
	loaded struct {
		evs []events.Event
		err error
	}
	appended  struct{ err error }
	idleCheck struct{}
	// lingerDue ends the wait of held appends (Session.holding).
	lingerDue struct{}
)

// DefaultReadLinger bounds how long of its run a session holds an append
// that carries the requests of read-only, safe calls handed to this node's
// tool actors, waiting for their outcomes to go in the same append
// (docs/spec.md §4: such a call needs nothing durable before it runs, so
// its events can be batched); Deps.ReadLinger overrides it. A call that
// runs longer costs at most one more append's round trip. A call still
// waiting to start extends the hold (Session.lingerMore), to at most
// maxHeldLingers lingers in all: its turn shows in the log at most that
// much later.
const DefaultReadLinger = time.Millisecond

// maxHeldLingers bounds, in lingers, how long an append is held in all
// (20 ms by default).
const maxHeldLingers = 20

// MaxQueuedTurns bounds the turns that may wait behind a session's running
// turn; one more is refused with ErrBusy. Together with one claim and one
// outcome per running call, it bounds a session actor's inbox.
const MaxQueuedTurns = 16

// ErrRetired is returned by a session actor that retired (passivated, or
// stopped by the node): the sender asks the node for the session's actor
// again and resends.
var ErrRetired = errors.New("actors: session actor retired; resend to the session's new actor")

// retireGrace is how long a retired actor lingers, refusing messages,
// before it stops: longer than any sender holds a PID before sending.
const retireGrace = time.Second

// ErrBusy is returned when a session already has MaxQueuedTurns waiting.
var ErrBusy = errors.New("actors: session busy")

// ErrSessionUnavailable is returned when a session actor cannot serve: its log
// failed to load, or an append failed and it stopped to reload.
var ErrSessionUnavailable = errors.New("actors: session unavailable")

// ErrNotOwner is wrapped by a NotOwnerError.
var ErrNotOwner = errors.New("actors: this node does not own the session")

// NotOwnerError says that another node of the fleet owns a session
// (docs/spec.md §7): a session actor returns it on a node that lost the
// session, and the node names where it is served (the HTTP API forwards the
// call to URL). Owner is empty when no node can serve the session right now
// (its ownership is moving: the caller retries). It wraps ErrNotOwner;
// node.NotOwnerError is this type.
type NotOwnerError struct {
	Tenant, Session string
	// Owner names the owner; URL is its HTTP API, empty if unknown.
	Owner, URL string
}

func (e *NotOwnerError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("session %s is between owners: no node can serve it right now; retry shortly", e.Session)
	}
	return fmt.Sprintf("session %s is owned by node %s", e.Session, e.Owner)
}

// Unwrap makes errors.Is(err, ErrNotOwner) hold.
func (e *NotOwnerError) Unwrap() error { return ErrNotOwner }

// Session is the actor of one session. It rebuilds its state from the log when
// it starts, decides with the pure core, appends what it decided through its
// outbox (one append at a time, so a burst of decisions becomes one append),
// and acts on an event only once it is durable: a worker runs only after its
// claim is in the log, a caller hears of a turn only after it is recorded.
//
// Its jobs, and where each lives: lifecycle, loading and passivation
// (Receive, onLoaded, this file); the append pipeline (outbox, outbox.go);
// the messages it serves, each of which handles and refuses itself
// (messages.go, runtime.go, stream.go); timers and the queries that wait for durable
// state (runtime.go).
type Session struct {
	deps       *Deps
	tenant, id string
	pid        *actor.PID
	engine     *actor.Engine
	state      *core.Session
	folder     *projections.TranscriptFolder
	settings   Settings
	loaded     bool
	failed     error
	stash      []Message
	out        outbox
	waiters    map[string][]SubmitTurn
	queued     []SubmitTurn
	watchers   []watcher
	askedAt    map[string]time.Time // approval key → when it was requested
	lastActive time.Time            // when the actor last handled a message
	idleTimer  *time.Timer          // one per actor, re-armed, never one per message
	retired    bool                 // retire ran: serves nothing, answers everything (turnAway)
	timers     map[string]*time.Timer
	// streamSeq is the last batch the stream timer is armed from
	// (armStream).
	streamSeq uint64
	ctx       context.Context
	cancel    context.CancelFunc
	onStopped func()
	// early holds the ids of requests handed to a tool actor before they
	// were durable (read-only, safe calls: Session.decide) whose outcome
	// has not come yet and which have not gone out in an append; while any
	// is queued the outbox holds its append until lingerUntil.
	early       map[string]bool
	lingerUntil time.Time
	// heldSince is when the held append's first early request was
	// decided: lingerMore's bound counts from it.
	heldSince time.Time
	// claimable counts the queued requests whose claim may go out with
	// them (claimWithRequests).
	claimable   int
	lingerTimer *time.Timer
	// revive: the actor gave up while work may be in flight (an append
	// failed during a turn, not refused by the guard), so it asks the node,
	// as it stops, to rebuild it (Sessions.Revive).
	revive bool
	// direct takes the outcomes of the calls handed over early straight
	// from the tool actor while the actor is inside an activation
	// (handoff); earlyBefore: some of early were handed over in an earlier
	// activation, so their outcomes may be in the inbox and the actor does
	// not wait for them on direct.
	direct      *handoff
	earlyBefore bool
	waitTimer   *time.Timer
	// down: the actor panicked (crashed) and refuses everything with it
	// until it stops.
	down error
	// forgotten: onStopped was called.
	forgotten bool
	// taken are the messages the current activation took from the stash
	// or the handoff, for crashed to answer.
	taken []Message
	// run handles cur on a pool worker and sends ran what it panicked
	// with, or nil (Receive).
	run func()
	cur *actor.Context
	ran chan any
}

// NewSession returns the producer of a session actor. onStopped, if not nil,
// is called when the actor stops (the node forgets its PID).
func NewSession(deps *Deps, tenant, id string, onStopped func()) actor.Producer {
	return func() actor.Receiver {
		return &Session{deps: deps, tenant: tenant, id: id, onStopped: onStopped}
	}
}

// Receive handles one message, on a worker of the node's goroutine pool
// (Deps.Goroutines) while hollywood's goroutine waits for it: hollywood
// starts a fresh goroutine for each burst of an idle actor's messages, and
// a message's handling (deciding, encoding, an inline append) would grow its
// stack again each time, where a pool worker's stack is already grown
// (docs/performance.md, "Latency"). The actor still handles one message at
// a time, in its inbox's order.
//
// A panic in the handling, on the worker or here, is recovered and stops
// this actor alone (crashed). Hollywood's own answer to a panic is no
// answer here: it restarts the actor on the same PID with the rest of its
// batch, after the registry was told it stopped, and once the restarts are
// used up (the node spawns sessions with none) v1.0.5 calls a nil cancel
// func outside any recover and the whole process dies.
func (s *Session) Receive(c *actor.Context) {
	if s.deps.Goroutines == nil {
		defer func() {
			if v := recover(); v != nil {
				s.crashed(c, v, debug.Stack())
			}
		}()
		s.receive(c)
		return
	}
	if s.run == nil {
		s.ran = make(chan any, 1)
		s.run = func() {
			defer func() {
				if v := recover(); v != nil {
					s.ran <- &panicked{value: v, stack: debug.Stack()}
					return
				}
				s.ran <- nil
			}()
			s.receive(s.cur)
		}
	}
	s.cur = c
	s.deps.Goroutines.Go(s.run)
	v := <-s.ran
	s.cur = nil
	if p, ok := v.(*panicked); ok {
		s.crashed(c, p.value, p.stack)
	}
}

// panicked is what a session actor's handling panicked with on a pool
// worker, or one of its goroutines (guarded), with that goroutine's stack.
type panicked struct {
	value any
	stack []byte
}

// guarded returns f for a goroutine of the actor pid's (its log's read, an
// append): a panic in it is sent to the actor, which stops as after a
// panic in its handling (crashed), rather than ending the process.
func guarded(e *actor.Engine, pid *actor.PID, f func()) func() {
	return func() {
		defer func() {
			if v := recover(); v != nil {
				e.Send(pid, &panicked{value: v, stack: debug.Stack()})
			}
		}()
		f()
	}
}

// ErrSessionFailed is wrapped by a FailedError.
var ErrSessionFailed = errors.New("actors: session actor failed")

// FailedError is what a session actor answers its callers with when it
// stopped on a fault of its own (a panic while handling a message):
// whatever the request asked for may or may not be recorded, and the
// session's next request rebuilds the actor from the log. It wraps
// ErrSessionFailed.
type FailedError struct {
	Tenant, Session string
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("internal error in session %s: its actor failed while handling a request and was stopped; "+
		"the session restarts from its log on its next request. What was asked may or may not be recorded: "+
		"read the turn to see, or retry with the same turn id", e.Session)
}

// Unwrap makes errors.Is(err, ErrSessionFailed) hold.
func (e *FailedError) Unwrap() error { return ErrSessionFailed }

// crashed stops the actor after its handling of c's message panicked with
// v: it logs the panic with its stack and counts it, answers the message
// and everyone waiting on the actor with a FailedError, refuses every
// later message the same way, and poisons itself. What it decided and did
// not append is dropped, and nothing is revived: the session's next request
// (or a running call's outcome) spawns a fresh actor that loads the log,
// as after a crash, so nothing half-applied in memory survives, and a
// panic the log itself brings on cannot loop.
func (s *Session) crashed(c *actor.Context, v any, stack []byte) {
	s.deps.Metrics.panicked()
	what := fmt.Sprintf("%T", c.Message())
	if _, ok := c.Message().(*panicked); ok {
		what = "none: a goroutine of the actor (its log's read or an append)"
	}
	s.deps.log().Error("session actor panicked; it stops, and the session's next request rebuilds it from the log",
		"tenant", s.tenant, "session", s.id, "message", what, "panic", fmt.Sprint(v), "stack", string(stack))
	if _, stopping := c.Message().(actor.Stopped); stopping {
		// stop itself panicked: answer whom it did not reach, and make
		// sure the node forgets this actor.
		if s.down == nil {
			s.down = &FailedError{Tenant: s.tenant, Session: s.id}
			s.failed = s.down
		}
		s.stopAgain()
		return
	}
	if s.down != nil {
		if m, ok := c.Message().(Message); ok {
			m.refuse(s.down)
		}
		return
	}
	s.down = &FailedError{Tenant: s.tenant, Session: s.id}
	s.failed, s.loaded, s.revive = s.down, false, false
	// The node forgets this actor before anyone hears of the failure, so a
	// caller's retry reaches a fresh actor (as with passivation); appends
	// of this one still under way end, and the log's guard refuses any
	// that lands after the fresh actor loaded.
	if s.cancel != nil {
		s.cancel()
	}
	if s.onStopped != nil && !s.forgotten {
		s.forgotten = true
		s.onStopped()
	}
	if m, ok := c.Message().(Message); ok {
		m.refuse(s.down)
	}
	// The messages this activation took from the stash or the handoff:
	// the one that panicked may be among them, and those after it were
	// never served. Answering one that was answered already changes
	// nothing: its caller took the first answer and reads no more.
	for _, m := range s.taken {
		m.refuse(s.down)
	}
	s.taken = nil
	if s.direct != nil {
		for _, m := range s.direct.close() {
			m.refuse(s.down)
		}
	}
	s.out.fail(s.down)
	stopLater(c.Engine(), c.PID())
}

// stopAgain runs stop once more after it panicked, recovering a second
// panic, and tells the node the actor stopped if stop did not get to.
func (s *Session) stopAgain() {
	defer func() {
		if v := recover(); v != nil {
			s.deps.log().Error("session actor: stopping panicked again", "tenant", s.tenant, "session", s.id, "panic", fmt.Sprint(v))
		}
		if !s.forgotten && s.onStopped != nil {
			s.forgotten = true
			s.onStopped()
		}
	}()
	s.stop()
}

// receive handles one message. It does not wait on anything but the log
// (an append with nothing else of the session in flight: appendsInline)
// and, at most the read linger, the outcome of a read-only call it handed
// to a tool actor in the same activation (awaitEarly); other log I/O and
// waiting happen in goroutines that report back as messages. Lifecycle
// messages are handled here; every other message serves or refuses itself
// (Message).
func (s *Session) receive(c *actor.Context) {
	if s.down != nil {
		// It panicked and is stopping: everything is refused.
		switch m := c.Message().(type) {
		case actor.Stopped:
			s.stop()
		case Message:
			m.refuse(s.down)
		}
		return
	}
	if s.retired {
		// It stopped serving (retire): it answers, and stops when its grace
		// ends.
		if m, ok := c.Message().(Message); ok {
			s.turnAway(m)
		}
		return
	}
	// Everything decided while handling one message goes to the log as one
	// append (one packed message where it can), started once the message
	// is handled; not after a panic, which drops what was decided (crashed).
	handled := false
	defer func() {
		if !handled {
			return
		}
		if s.loaded {
			s.flush()
		}
		s.leave()
		clear(s.taken)
		s.taken = s.taken[:0]
		if s.retired {
			s.stop() // it retired while it handled this message
		}
	}()
	switch m := c.Message().(type) {
	case actor.Initialized:
	case actor.Started:
		s.pid, s.engine = c.PID(), c.Engine()
		s.direct = newHandoff(s.pid)
		s.deps.handoffs.add(s.direct)
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.reset()
		s.load()
	case actor.Stopped:
		s.stop()
	case Retire:
		s.retire()
	case loaded:
		s.onLoaded(m)
	case appended:
		s.onAppended(m)
		s.armIdle()
	case idleCheck:
		s.onIdleCheck()
	case lingerDue:
		// The deferred flush starts what was held.
	case *panicked:
		s.crashed(c, m.value, m.stack)
	case Message:
		s.serve(m)
	default:
		s.deps.log().Error("session actor: unexpected message", "tenant", s.tenant, "session", s.id, "type", fmt.Sprintf("%T", m))
	}
	handled = true
}

// serve handles a message once the log is loaded, keeps it until then, and
// refuses it when the actor cannot serve.
func (s *Session) serve(m Message) {
	switch {
	case s.retired:
		s.turnAway(m)
	case !s.loaded && s.failed != nil:
		m.refuse(s.failed)
	case !s.loaded:
		s.stash = append(s.stash, m)
	default:
		m.handle(s)
		s.armIdle()
	}
}

func (s *Session) onIdleCheck() {
	if rest := s.deps.IdleTimeout - time.Since(s.lastActive); rest > 0 {
		if s.idle() {
			s.idleTimer.Reset(rest) // active since the timer was set
		}
		return
	}
	if s.idle() && !s.retired {
		// Passivate: the log holds everything.
		s.deps.Sessions.Passivate(s.tenant, s.id, s.pid)
		s.retire()
	}
}

// retire stops the actor serving (stop: whoever waits on it is answered,
// and the node forgets it, so the session's next message spawns a fresh
// actor that loads the log) and stops it for good once no sender can still
// hold its PID (retireGrace). Meanwhile every message that reaches it is
// answered (turnAway). It is never stopped at once while senders may hold
// its PID: hollywood drops, unanswered, what reaches an actor's inbox after
// it took its poison pill.
//
// It is called while the actor handles a message, and stops serving once
// that message is handled (receive), so whoever that message added as a
// waiter is answered too.
func (s *Session) retire() {
	if s.retired {
		return
	}
	s.retired, s.loaded = true, false
	stopLater(s.engine, s.pid)
}

// stopLater stops the actor pid once no sender can still hold its PID
// (retireGrace).
func stopLater(e *actor.Engine, pid *actor.PID) {
	time.AfterFunc(retireGrace, func() { e.Poison(pid) })
}

// turnAway answers a message that reached the actor after it retired: with
// why it stopped, or else ErrRetired (the sender resends to the session's
// new actor). A call's outcome is not refused but forwarded to that new
// actor, which waits for it: a call still running on this node is left to
// report by the session's next actor (onLoaded).
func (s *Session) turnAway(m Message) {
	if o, ok := m.(outcome); ok {
		if pid, err := s.deps.Sessions.Route(s.tenant, s.id); err == nil && !pid.Equals(s.pid) {
			s.engine.Send(pid, o)
			return
		}
	}
	switch {
	case s.failed != nil:
		m.refuse(s.failed)
	default:
		m.refuse(fmt.Errorf("%w: session %s", ErrRetired, s.id))
	}
}

// idle reports whether the actor holds nothing that is not in the log: no
// running turn or queued one, nothing being appended, nobody waiting.
func (s *Session) idle() bool {
	return s.loaded && s.state.Active() == nil && len(s.queued) == 0 && s.out.idle() &&
		len(s.waiters) == 0 && len(s.watchers) == 0 && len(s.timers) == 0 && !s.jobsRunning()
}

func (s *Session) jobsRunning() bool {
	for _, j := range s.state.Jobs() {
		if j.Status == core.JobRunning {
			return true
		}
	}
	return false
}

// armIdle notes activity and, when the actor is idle, makes sure a
// passivation check is due once the idle timeout has passed since the last
// activity. The check re-arms itself if activity came meanwhile.
func (s *Session) armIdle() {
	s.lastActive = time.Now()
	if s.deps.IdleTimeout <= 0 || !s.idle() {
		return
	}
	if s.idleTimer == nil {
		e, pid := s.engine, s.pid
		s.idleTimer = time.AfterFunc(s.deps.IdleTimeout, func() { e.Send(pid, idleCheck{}) })
		return
	}
	s.idleTimer.Reset(s.deps.IdleTimeout)
}

func (s *Session) reset() {
	s.state = core.NewSession(s.tenant, s.id)
	s.folder = projections.NewTranscriptFolder(s.id)
	s.waiters = map[string][]SubmitTurn{}
	s.timers = map[string]*time.Timer{}
	s.loaded, s.failed = false, nil
	s.out.reset(0)
	s.early, s.lingerUntil, s.heldSince, s.claimable = map[string]bool{}, time.Time{}, time.Time{}, 0
	s.watchers = nil
	s.askedAt = map[string]time.Time{}
}

func (s *Session) stop() {
	if s.cancel != nil {
		s.cancel()
	}
	for _, t := range s.timers {
		t.Stop()
	}
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	if s.lingerTimer != nil {
		s.lingerTimer.Stop()
	}
	err := fmt.Errorf("%w: session %s stopped", ErrSessionUnavailable, s.id)
	if s.failed != nil {
		err = s.failed
	}
	if s.direct != nil {
		s.deps.handoffs.remove(s.direct)
		for _, m := range s.direct.close() {
			m.refuse(err)
		}
	}
	for _, m := range s.stash {
		m.refuse(err)
	}
	for _, ws := range s.waiters {
		for _, w := range ws {
			w.refuse(err)
		}
	}
	for _, q := range s.queued {
		q.refuse(err)
	}
	for _, w := range s.watchers {
		w.refuse(err)
	}
	s.out.fail(err)
	if s.onStopped != nil && !s.forgotten {
		s.forgotten = true
		s.onStopped()
	}
	if s.revive {
		s.deps.Sessions.Revive(s.tenant, s.id)
	}
}

// load reads the session's log in a goroutine; the result comes back as a
// loaded message.
func (s *Session) load() {
	ctx, log, t, id, pid, e := s.ctx, s.deps.Log, s.tenant, s.id, s.pid, s.engine
	go guarded(e, pid, func() {
		evs, err := log.Read(ctx, t, id, 0)
		e.Send(pid, loaded{evs: evs, err: err})
	})()
}

func (s *Session) onLoaded(m loaded) {
	if m.err != nil && !errors.Is(m.err, events.ErrNotFound) {
		s.failed = fmt.Errorf("%w: reading session %s: %v", ErrSessionUnavailable, s.id, m.err)
		s.deps.log().Warn("session actor: loading failed", "tenant", s.tenant, "session", s.id, "err", s.failed)
		s.retire()
		return
	}
	// The last request of each call: the only one that can still be
	// current once the log is folded (redispatch).
	reqs := map[events.CallRef]requested{}
	for _, ev := range m.evs {
		p, err := events.Decode(ev)
		if err == nil {
			err = s.applyDecoded(ev, p)
		}
		if err != nil {
			s.failed = fmt.Errorf("%w: session %s log is inconsistent: %v", ErrSessionUnavailable, s.id, err)
			s.deps.log().Error("session actor: log inconsistent", "tenant", s.tenant, "session", s.id, "err", s.failed)
			s.retire()
			return
		}
		if r, ok := p.(*events.ToolCallRequested); ok && s.deps.Calls != nil {
			reqs[r.CallRef] = requested{ev: ev, call: r}
		}
	}
	s.out.reset(s.state.Seq)
	s.settings = s.deps.Rules.Settings(s.tenant, s.state.Agent)
	if s.state.Seq > 0 && !core.Owns(s.state, s.deps.Node, s.deps.Incarnation) {
		// Own it before deciding anything: the OwnershipTaken is the fence
		// that refuses every later append of an earlier owner.
		p := s.place()
		if !p.Take {
			s.failed = &NotOwnerError{Tenant: s.tenant, Session: s.id, Owner: p.Holder}
			s.retire()
			return
		}
		s.decide([]core.Draft{core.TakeOwnership(s.state, s.deps.Node, s.deps.Incarnation, p.WorkspaceAway)}, s.ownedNow(false), nil)
	}
	s.loaded = true
	// Settle what the previous owner left running, re-arm pending retries,
	// and carry on with the open turn (whose unclaimed requests Progress
	// hands to this node).
	if s.state.Opened {
		var running func(events.CallRef, int) bool
		if s.deps.Calls != nil {
			running = func(ref events.CallRef, _ int) bool { return s.deps.Calls.Running(s.tenant, s.id, ref) }
		}
		s.decide(core.RecoverExcept(s.state, core.Retry{MaxAttempts: s.settings.MaxAttempts}, running), nil, nil)
		s.rearmRetries()
		s.progress()
		s.redispatch(reqs)
	}
	stash := s.stash
	s.stash = nil
	s.taken = append(s.taken, stash...)
	for _, m := range stash {
		m.handle(s)
	}
	s.armIdle()
}

// ownedNow returns a callback, run by the actor once the ownership change
// just decided is durable, that tells the fleet (Fleet.Owned).
func (s *Session) ownedNow(released bool) func() {
	if s.deps.Fleet == nil {
		return nil
	}
	return func() { s.deps.Fleet.Owned(s.tenant, s.id, s.state.Epoch, released, s.state.WorkspaceNode) }
}

// place asks the fleet whether this node should own the session, as its
// log stands.
func (s *Session) place() Placement {
	if s.deps.Fleet == nil {
		return Placement{Take: true}
	}
	return s.deps.Fleet.Place(s.tenant, s.id, Owner{Node: s.state.Owner, Incarnation: s.state.Incarnation,
		Released: s.state.Released, WorkspaceNode: s.state.WorkspaceNode})
}

// applyDecoded folds an event into the state and the live transcript; p is
// its decoded payload.
func (s *Session) applyDecoded(ev events.Event, p any) error {
	if err := s.state.ApplyDecoded(ev, p); err != nil {
		return err
	}
	if a, ok := p.(*events.ApprovalRequested); ok {
		s.askedAt["approval/"+a.Turn+"/"+a.Call] = ev.Time
	}
	return s.folder.ApplyDecoded(ev, p)
}

// progress applies core.Progress until the turn has nothing more to do now.
func (s *Session) progress() {
	for {
		drafts := core.Progress(s.state)
		if len(drafts) == 0 {
			break
		}
		s.decide(drafts, nil, nil)
	}
	s.rearmRetries()
	s.armApprovalTimeouts(s.askedAt)
	s.armStream()
}

// rearmRetries starts a timer for every scheduled retry that has none.
func (s *Session) rearmRetries() {
	t := s.state.Active()
	if t == nil {
		return
	}
	for i := range t.Calls {
		if t.States[i].Phase != core.PhaseRetrying {
			continue
		}
		r := t.States[i].Retry
		key := retryKey(r.CallRef, r.Attempt)
		if _, ok := s.timers[key]; ok {
			continue
		}
		wait := max(t.States[i].RetryAt.Sub(s.deps.Clock.Now()), 0)
		e, pid, msg := s.engine, s.pid, retryDue{ref: r.CallRef, attempt: r.Attempt}
		s.timers[key] = time.AfterFunc(wait, func() { e.Send(pid, msg) })
	}
}

func retryKey(ref events.CallRef, attempt int) string {
	return fmt.Sprintf("%s/%d/%d", ref.Turn, ref.Index, attempt)
}

// decide turns drafts into events, applies them, and queues them in the
// outbox. after runs once the last of them is durable; fail if it never is.
func (s *Session) decide(drafts []core.Draft, after func(), fail func(error)) {
	if len(drafts) == 0 {
		return
	}
	now := s.deps.Clock.Now().UTC()
	prev := ""
	for i, d := range drafts {
		if d.Causation == core.CausedByPrevious {
			d.Causation = prev
		}
		// The hash chain: the event carries its predecessor's hash.
		link, err := s.state.Head()
		if err != nil {
			err = fmt.Errorf("session %s: the hash chain: %w", s.id, err)
			if fail != nil {
				fail(err)
			}
			s.failAndStop(err, false)
			return
		}
		// Encoded once, here; the log stores these bytes (docs/events.md).
		ev := events.Encode(events.Event{
			ID: s.deps.Clock.NewID(), Tenant: s.tenant, Session: s.id, Seq: s.state.Seq + 1,
			Time: now, Type: d.Type, Causation: d.Causation, Prev: link,
		}, d.Payload)
		prev = ev.ID
		payload := events.Pointer(d.Payload)
		if err := s.applyDecoded(ev, payload); err != nil {
			// A draft the core decided always applies; if not, the state is
			// wrong and only a reload can fix it. Whoever waits on this
			// decision hears so.
			s.deps.log().Error("session actor: a decided event does not apply", "tenant", s.tenant, "session", s.id, "err", err)
			if fail != nil {
				fail(err)
			}
			s.failAndStop(err, false)
			return
		}
		s.deps.Metrics.decided(ev, payload)
		p := pending{ev: ev}
		if r, ok := payload.(*events.ToolCallRequested); ok {
			c := *r // the state may keep payload; the tool actor gets its own
			p.call = &c
			early, claimable := s.handover(&c)
			if claimable {
				p.claimable = true
				s.claimable++
			}
			if early {
				// Handed over now, not once durable: it runs while its
				// request is appended, and its outcome may share the append.
				p.dispatched = true
				s.direct.start() // before the tool actor can have the call
				s.dispatch(ev, &c, true)
				s.early[ev.ID] = true
				if s.lingerUntil.IsZero() {
					s.lingerUntil = now.Add(s.linger())
				}
				if s.heldSince.IsZero() {
					s.heldSince = now
				}
			}
		}
		if i == len(drafts)-1 {
			p.after, p.fail = after, fail
		}
		s.out.queue(p)
	}
}

// flush starts the outbox's next append, if one is due and not held
// (holding): in a goroutine that reports back with an appended message, or,
// when nothing else of the session is in flight (appendsInline), on the
// actor's own goroutine, acting on its result at once; then the next.
func (s *Session) flush() {
	for s.loaded {
		if rest, hold := s.holding(); hold {
			if !s.awaitEarly(rest) {
				s.armLinger(rest)
				return
			}
			continue
		}
		if s.out.idleAppending() {
			s.claimWithRequests() // what start is about to send
		}
		run := s.out.start(s.ctx, s.deps.Log, s.tenant, s.id, s.deps.gate)
		if run == nil {
			return
		}
		// What goes out now no longer holds anything back.
		for _, p := range s.out.appending {
			s.settledEarly(p.ev.ID)
		}
		s.lingerUntil, s.heldSince = time.Time{}, time.Time{}
		if !s.appendsInline() {
			pid, e := s.pid, s.engine
			s.deps.spawn(guarded(e, pid, func() { e.Send(pid, appended{err: run()}) }))
			return
		}
		s.onAppended(appended{err: run()})
		s.armIdle()
	}
}

// appendsInline reports whether the append just started may run on the
// actor's goroutine: no turn runs and no background job, so no outcome or
// claim can arrive to be decided while it runs (nothing a later append
// would batch), and the caller waiting for the turn's record is answered
// without two goroutine hand-offs (to an appending goroutine and, through
// the actor's inbox, back). The actor handles nothing else meanwhile.
func (s *Session) appendsInline() bool {
	return s.state.Active() == nil && len(s.early) == 0 && !s.jobsRunning()
}

// handover says how a request just decided reaches this node's tool actor.
//
// early: it goes as soon as it is decided, before it is durable. A call
// that may run before its claim is durable (core.MayRunUnclaimed) needs
// nothing durable before it runs. Its outcome is recorded only if the
// request is still the current one then (outcome.handle), so a request
// whose append fails leaves a read-only run and nothing in the log.
//
// claimable: its claim may be decided with it, so that request and claim
// go out in one append and the call runs once that is durable, without
// the tool actor asking for the claim (claimWithRequests): a call that
// needs its claim, runs at once on this node if a worker is free then,
// and whose claim holds nothing the tool actor has to find out first (no
// files to checkpoint, no external worker to name, no fleet-wide cap's
// slot to wait for). A background call's claim stays after its turn's
// commit, where the log has it.
//
// Otherwise it goes once durable, and the tool actor that takes it asks
// for its claim (Pool.runClaimed).
func (s *Session) handover(r *events.ToolCallRequested) (early, claimable bool) {
	if s.deps.Calls == nil || r.Node != s.deps.Node {
		return false, false
	}
	t, _ := s.deps.Tools.Resolve(s.tenant, r.Name)
	if core.MayRunUnclaimed(r, t) {
		return true, false
	}
	return false, t != nil && t.MutatedPaths == nil && !t.ClaimsWhenTaken &&
		(r.FleetCap < 1 || s.deps.Caps == nil) && r.Concurrency != tool.ConcurrencyIsolatedBackground
}

// claimWithRequests decides, as the queued events start to go out, the
// claim of each claimable request among them (handover) for which this
// node's tool actor has a worker free now: the claim joins the same append,
// after everything else decided with the request, so the log holds the
// events the two-step path would write, in the same order, one append
// sooner. The worker is taken now and handed the call once the append is
// durable (onAppended); a request that gets none, or whose claim can no
// longer be decided, goes the usual way.
func (s *Session) claimWithRequests() {
	if s.claimable == 0 {
		return
	}
	s.claimable = 0
	taker, ok := s.deps.Calls.(workerTaker)
	if !ok || s.deps.gate() != nil {
		for i := range s.out.queued {
			s.out.queued[i].claimable = false
		}
		return
	}
	for i, n := 0, len(s.out.queued); i < n; i++ {
		p := &s.out.queued[i]
		if !p.claimable {
			continue
		}
		p.claimable = false
		r, id := p.call, p.ev.ID
		if core.CurrentRequest(s.state, r.CallRef, r.Attempt, id) != nil {
			continue // settled meanwhile (cancelled)
		}
		d, err := core.Claim(s.state, r.CallRef, r.Attempt, s.deps.Node)
		if err != nil {
			continue
		}
		w := taker.takeWorker(s.tenant, r)
		if !w.held() {
			continue
		}
		p.worker = w // before decide, which may move the queue
		s.decide(d, nil, nil)
		if !s.loaded {
			return // it failed: the outbox freed the worker
		}
	}
}

// holding reports whether the append due now waits for the outcomes of the
// read-only calls whose requests it carries, so that they go out together,
// and for how long at most (until lingerUntil).
func (s *Session) holding() (time.Duration, bool) {
	if len(s.early) == 0 || !s.out.idleAppending() || s.answersOnRecord() {
		return 0, false
	}
	waiting := false
	for _, p := range s.out.queued {
		if s.early[p.ev.ID] {
			waiting = true
			break
		}
	}
	if !waiting {
		return 0, false
	}
	rest := min(time.Until(s.lingerUntil), s.linger())
	if rest <= 0 {
		if rest = s.lingerMore(); rest <= 0 {
			return 0, false
		}
		s.lingerUntil = time.Now().Add(rest)
	}
	return min(rest, s.linger()), true
}

// lingerMore is how much longer the held append may wait once its linger
// is over: the linger is meant for a call's run, so a call that waits to
// start (queued for a worker or a CPU, as on a node under load) gets it
// once it starts, and one whose tool returned gets it for its outcome to
// arrive; in all at most maxHeldLingers lingers from heldSince. Zero or
// less: the append goes now.
func (s *Session) lingerMore() time.Duration {
	if s.deps.Calls == nil {
		return 0
	}
	now := time.Now()
	var until time.Time
	for _, p := range s.out.queued {
		if !s.early[p.ev.ID] || p.call == nil {
			continue
		}
		end := now.Add(s.linger()) // not started yet, or its outcome is on its way
		if run, ok := s.deps.Calls.Run(s.tenant, s.id, p.call.CallRef); ok && !run.Ended {
			end = run.Start.Add(s.linger())
		}
		if end.After(until) {
			until = end
		}
	}
	if limit := s.heldSince.Add(maxHeldLingers * s.linger()); until.After(limit) {
		until = limit
	}
	return until.Sub(now)
}

// armLinger arms the timer that ends a held append's wait after rest.
func (s *Session) armLinger(rest time.Duration) {
	if s.lingerTimer == nil {
		e, pid := s.engine, s.pid
		s.lingerTimer = time.AfterFunc(rest, func() { e.Send(pid, lingerDue{}) })
	} else {
		s.lingerTimer.Reset(rest)
	}
}

// awaitEarly waits, at most rest, for the tool actor to hand over (direct)
// an outcome of a call it was given early in this activation, and serves
// what it hands over; it reports false, having waited for nothing, when an
// outcome may come through the inbox instead (direct is closed, or a call
// was handed over in an earlier activation), so the actor must return to
// its inbox. The held append waits for these outcomes anyway; waiting here
// spares the actor the activation the inbox would start for each, at the
// price of serving its other messages up to rest later.
func (s *Session) awaitEarly(rest time.Duration) bool {
	if s.earlyBefore || !s.direct.isOpen() {
		return false
	}
	if s.waitTimer == nil {
		s.waitTimer = time.NewTimer(rest)
	} else {
		s.waitTimer.Reset(rest)
	}
	defer s.waitTimer.Stop()
	for {
		if got := s.direct.take(); len(got) > 0 {
			s.taken = append(s.taken, got...)
			for _, m := range got {
				s.serve(m)
			}
			return true
		}
		select {
		case <-s.direct.wake:
		case <-s.waitTimer.C:
			s.lingerUntil = time.Time{} // the wait is over: the append goes
			return true
		}
	}
}

// leave ends an activation: it closes direct and serves what was handed
// over meanwhile (which may hand over new calls and open it again).
func (s *Session) leave() {
	if s.direct == nil {
		return
	}
	for {
		got := s.direct.close()
		if len(got) == 0 {
			break
		}
		s.taken = append(s.taken, got...)
		for _, m := range got {
			s.serve(m)
		}
		if s.loaded {
			s.flush()
		}
	}
	// Outcomes of calls still out may now come through the inbox.
	s.earlyBefore = len(s.early) > 0
}

// linger is how long an append waits for early calls' outcomes.
func (s *Session) linger() time.Duration {
	if s.deps.ReadLinger == 0 {
		return DefaultReadLinger
	}
	return max(s.deps.ReadLinger, 0)
}

// answersOnRecord reports whether a caller waits to hear of a turn as soon
// as it is recorded (SubmitTurn without Wait: docs/spec.md §8, ?wait=0 is
// 202): such a turn's append is not held back for its calls.
func (s *Session) answersOnRecord() bool {
	for _, ws := range s.waiters {
		for _, w := range ws {
			if !w.Wait {
				return true
			}
		}
	}
	return false
}

// settledEarly notes that the call a request asked for has reported (its
// claim or outcome came), or that the request went out in an append: the
// append need not wait for it any more.
func (s *Session) settledEarly(requestID string) {
	delete(s.early, requestID)
	if len(s.early) == 0 {
		s.earlyBefore = false
	}
}

// dispatch hands a durable request addressed to this node to its tool
// actor (Calls.Offer). A request addressed to another node is that node's
// to run: it cannot be in this actor's log while this node owns the session
// (every request names the owner that appended it), so it is only logged.
func (s *Session) dispatch(ev events.Event, r *events.ToolCallRequested, fresh bool) {
	if s.deps.Calls == nil {
		return
	}
	if r.Node != s.deps.Node {
		s.deps.log().Warn("session actor: a request names another node: not run here", "tenant", s.tenant, "session", s.id, "event", ev.ID, "node", r.Node, "self", s.deps.Node)
		return
	}
	s.deps.Calls.Offer(ev, r, fresh)
}

// redispatch offers the tool actors, after the actor was rebuilt from the
// log, every request in it that is still current: one stored by an append
// whose answer was lost (the actor stopped before it heard) was never
// offered. Offers of requests already queued are ignored (LocalRequests).
// After a change of owner none is current: the new owner requested them
// again (core's reissue), and those go out when durable.
func (s *Session) redispatch(reqs map[events.CallRef]requested) {
	for ref, q := range reqs {
		if core.CurrentRequest(s.state, ref, q.call.Attempt, q.ev.ID) == nil {
			s.dispatch(q.ev, q.call, false)
		}
	}
}

// requested is a ToolCallRequested read back from the log.
type requested struct {
	ev   events.Event
	call *events.ToolCallRequested
}

func (s *Session) onAppended(m appended) {
	stored, evs, err := s.out.done(m.err)
	if err != nil {
		// A refused append means another writer extended the session (a
		// new owner, who drives it now): nothing to revive for.
		s.failAndStop(fmt.Errorf("%w: appending to session %s: %v", ErrSessionUnavailable, s.id, err), errors.Is(err, events.ErrConflict))
		return
	}
	if faults.Enabled {
		for _, p := range stored {
			switch p.ev.Type {
			case events.TypeToolCallRequested:
				faults.Hit(faults.AfterRequested)
			case events.TypeToolCallCompleted, events.TypeToolCallFailed:
				faults.Hit(faults.AfterResult)
			}
		}
	}
	if s.deps.Durable != nil {
		s.deps.Durable.Durable(s.tenant, s.id, evs)
	}
	var lost []*events.ToolCallRequested
	for _, p := range stored {
		switch {
		case p.call == nil || p.dispatched:
		case p.worker.held():
			if !p.worker.hand(p.ev, p.call) {
				lost = append(lost, p.call)
			}
		default:
			s.dispatch(p.ev, p.call, true)
		}
	}
	for _, p := range stored {
		if p.after != nil {
			p.after()
		}
	}
	for _, r := range lost {
		// Claimed, and it will not run here (the node's tool actors
		// stopped): nothing of it ran.
		outcome{ref: r.CallRef, attempt: r.Attempt, out: notRun("the node's tool actors stopped before it started")}.handle(s)
	}
	s.out.recycle(stored)
	for id := range s.waiters {
		s.notifyWaiters(id)
	}
	s.runWatchers()
	s.startQueued()
}

// failAndStop gives up on the in-memory state: nothing not yet durable was
// acted on, so stopping and reloading from the log is always safe. Unless
// another writer extended the session (conflict: a new owner drives it), a
// session mid-turn is rebuilt (Sessions.Revive): nothing else may wake a
// session whose request is in the log but was never handed to a tool
// actor (the append's answer was lost), and its rebuilt actor does
// (redispatch).
func (s *Session) failAndStop(err error, conflict bool) {
	s.revive = !conflict && s.state != nil && s.state.Active() != nil
	s.failed = err
	s.loaded = false
	s.deps.log().Warn("session actor: stopping to reload from the log", "tenant", s.tenant, "session", s.id, "err", err)
	s.out.fail(err)
	s.retire()
}
