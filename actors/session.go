package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/projections"
)

// Session actor messages. Replies travel on buffered channels of capacity 1,
// so Receive never blocks on a slow caller.
type (
	// OpenSession records SessionOpened for a new session.
	OpenSession struct {
		Workspace, Agent string
		Reply            chan error
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
	// claim asks to start attempt of a call; the reply comes once the claim
	// is durable, or with an error.
	claim struct {
		req         events.ToolCallRequested
		worker      string
		checkpoints []events.FileCheckpointed
		reply       chan error
	}
	// outcome reports an attempt's outcome. An unclaimed outcome (a
	// read-only, safe call run without a durable claim) carries its claim and
	// wants a reply once both are durable.
	outcome struct {
		ref       events.CallRef
		attempt   int
		out       core.Outcome
		unclaimed bool
		worker    string
		reply     chan error
	}
	loaded struct {
		evs []events.Event
		err error
	}
	appended  struct{ err error }
	idleCheck struct{}
	retryDue  struct {
		ref     events.CallRef
		attempt int
	}
)

// TurnReply answers SubmitTurn and GetTurn.
type TurnReply struct {
	Turn projections.Turn
	// Found is false for GetTurn of an unknown turn.
	Found bool
	Err   error
}

// MaxQueuedTurns bounds the turns that may wait behind a session's running
// turn; one more is refused with ErrBusy. Together with one claim and one
// outcome per running call, it bounds a session actor's inbox.
const MaxQueuedTurns = 16

// ErrRetired is returned by a session actor that was passivated: the sender
// asks the node for the session's actor again and resends.
var ErrRetired = errors.New("actors: session actor retired; resend to the session's new actor")

// retireGrace is how long a passivated actor lingers, refusing messages,
// before it stops: longer than any sender holds a PID before sending.
const retireGrace = time.Second

// ErrBusy is returned when a session already has MaxQueuedTurns waiting.
var ErrBusy = errors.New("actors: session busy")

// ErrSessionUnavailable is returned when a session actor cannot serve: its log
// failed to load, or an append failed and it stopped to reload.
var ErrSessionUnavailable = errors.New("actors: session unavailable")

// pending is an event decided but not yet durable, and what to do once it is.
type pending struct {
	ev    events.Event
	after func()
	fail  func(error)
}

// Session is the actor of one session. It rebuilds its state from the log when
// it starts, decides with the pure core, appends what it decided through one
// append goroutine at a time (so a burst of decisions becomes one atomic batch),
// and acts on an event only once it is durable: a worker runs only after its
// claim is in the log, a caller hears of a turn only after it is recorded.
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
	stash      []any
	outbox     []pending
	appending  []pending
	durable    uint64
	waiters    map[string][]SubmitTurn
	queued     []SubmitTurn
	watchers   []watcher
	askedAt    map[string]time.Time // approval key → when it was requested
	lastActive time.Time            // when the actor last handled a message
	idleTimer  *time.Timer          // one per actor, re-armed, never one per message
	retired    bool                 // passivated: refuses everything until it stops
	timers     map[string]*time.Timer
	ctx        context.Context
	cancel     context.CancelFunc
	onStopped  func()
}

// NewSession returns the producer of a session actor. onStopped, if not nil,
// is called when the actor stops (the node forgets its PID).
func NewSession(deps *Deps, tenant, id string, onStopped func()) actor.Producer {
	return func() actor.Receiver {
		return &Session{deps: deps, tenant: tenant, id: id, onStopped: onStopped}
	}
}

// Receive handles one message. It never blocks: log I/O and waiting happen in
// goroutines that report back as messages.
func (s *Session) Receive(c *actor.Context) {
	// Everything decided while handling one message goes to the log as one
	// append (one packed message where it can), started once the message
	// is handled.
	defer func() {
		if s.loaded {
			s.flush()
		}
	}()
	switch m := c.Message().(type) {
	case actor.Started:
		s.pid, s.engine = c.PID(), c.Engine()
		s.ctx, s.cancel = context.WithCancel(context.Background())
		s.reset()
		s.load()
	case actor.Stopped:
		s.stop()
	case loaded:
		s.onLoaded(m)
	case appended:
		s.onAppended(m)
		s.armIdle()
	case idleCheck:
		if rest := s.deps.IdleTimeout - time.Since(s.lastActive); rest > 0 {
			if s.idle() {
				s.idleTimer.Reset(rest) // active since the timer was set
			}
			return
		}
		if s.idle() && !s.retired && s.deps.Passivate != nil {
			// Passivate: the log holds everything. The node forgets this
			// actor first, so new messages go to a fresh one; messages that
			// still reach this one are refused with ErrRetired (the sender
			// retries), and it stops once no sender can still hold its PID.
			s.retired = true
			s.deps.Passivate(s.tenant, s.id, s.pid)
			e, pid := s.engine, s.pid
			time.AfterFunc(retireGrace, func() { e.Poison(pid) })
		}
	default:
		if s.retired {
			s.refuse(m, fmt.Errorf("%w: session %s", ErrRetired, s.id))
			return
		}
		if !s.loaded {
			if s.failed != nil {
				s.refuse(m, s.failed)
				return
			}
			s.stash = append(s.stash, m)
			return
		}
		s.handle(m)
		s.armIdle()
	}
}

// idle reports whether the actor holds nothing that is not in the log: no
// running turn or queued one, nothing being appended, nobody waiting.
func (s *Session) idle() bool {
	return s.loaded && s.state.Active() == nil && len(s.queued) == 0 && s.allDurable() &&
		len(s.waiters) == 0 && len(s.watchers) == 0 && len(s.timers) == 0 && !s.jobsRunning()
}

func (s *Session) jobsRunning() bool {
	for _, j := range s.state.Jobs() {
		if j.Status == "running" {
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
	s.outbox, s.appending, s.durable = nil, nil, 0
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
	err := fmt.Errorf("%w: session %s stopped", ErrSessionUnavailable, s.id)
	for _, m := range s.stash {
		s.refuse(m, err)
	}
	for _, ws := range s.waiters {
		for _, w := range ws {
			reply(w.Reply, TurnReply{Err: err})
		}
	}
	for _, q := range s.queued {
		reply(q.Reply, TurnReply{Err: err})
	}
	s.failPending(err)
	if s.onStopped != nil {
		s.onStopped()
	}
}

// load reads the session's log in a goroutine; the result comes back as a
// loaded message.
func (s *Session) load() {
	ctx, log, t, id, pid, e := s.ctx, s.deps.Log, s.tenant, s.id, s.pid, s.engine
	go func() {
		evs, err := log.Read(ctx, t, id, 0)
		e.Send(pid, loaded{evs: evs, err: err})
	}()
}

func (s *Session) onLoaded(m loaded) {
	if m.err != nil && !errors.Is(m.err, events.ErrNotFound) {
		s.failed = fmt.Errorf("%w: reading session %s: %v", ErrSessionUnavailable, s.id, m.err)
		s.deps.logf("session %s/%s: %v", s.tenant, s.id, s.failed)
		s.engine.Poison(s.pid)
		return
	}
	for _, ev := range m.evs {
		if err := s.applyOne(ev); err != nil {
			s.failed = fmt.Errorf("%w: session %s log is inconsistent: %v", ErrSessionUnavailable, s.id, err)
			s.deps.logf("%v", s.failed)
			s.engine.Poison(s.pid)
			return
		}
	}
	s.durable = s.state.Seq
	s.settings = s.deps.Settings(s.tenant, s.state.Agent)
	s.loaded = true
	// Settle what the previous owner left running, re-arm pending retries,
	// and carry on with the open turn.
	if s.state.Opened {
		s.decide(core.Recover(s.state, core.Retry{MaxAttempts: s.settings.MaxAttempts}), nil, nil)
		s.rearmRetries()
		s.progress()
	}
	stash := s.stash
	s.stash = nil
	for _, m := range stash {
		s.handle(m)
	}
	s.armIdle()
}

func (s *Session) applyOne(ev events.Event) error {
	p, err := events.Decode(ev)
	if err != nil {
		return err
	}
	return s.applyDecoded(ev, p)
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

func (s *Session) handle(m any) {
	if s.handleRuntime(m) {
		return
	}
	switch m := m.(type) {
	case OpenSession:
		if s.state.Opened {
			reply(m.Reply, nil)
			return
		}
		s.settings = s.deps.Settings(s.tenant, m.Agent)
		s.decide([]core.Draft{{Type: events.TypeSessionOpened, Payload: events.SessionOpened{Workspace: m.Workspace, Agent: m.Agent}}},
			func() { reply(m.Reply, nil) }, func(err error) { reply(m.Reply, err) })
	case SubmitTurn:
		s.submit(m)
	case GetTurn:
		reply(m.Reply, s.turnView(m.ID))
	case CancelTurn:
		s.cancelCalls(m)
	case claim:
		s.onClaim(m)
	case outcome:
		s.onOutcome(m)
	case SignHead:
		s.onSign(m)
	case retryDue:
		delete(s.timers, retryKey(m.ref, m.attempt))
		s.decide(core.RetryDue(s.state, m.ref, m.attempt), nil, nil)
		s.progress()
	}
}

func (s *Session) cancelCalls(m CancelTurn) {
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
			if s.deps.Interrupt != nil {
				s.deps.Interrupt(tenant, id, ref)
			}
		}
		reply(m.Reply, nil)
	}, func(err error) { reply(m.Reply, err) })
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
	if !ok || !s.isDurable(t.Received) {
		return TurnReply{}
	}
	if t.Completed && s.isDurable(t.CompletedSeq) {
		tv, _ := s.folder.Turn(id)
		return TurnReply{Turn: tv, Found: true}
	}
	return TurnReply{Turn: projections.Turn{Turn: id, Status: projections.StatusRunning, Results: []events.Result{}, Notices: []projections.Notice{}}, Found: true}
}

// isDurable reports whether the event with seq is in the log.
func (s *Session) isDurable(seq uint64) bool { return seq <= s.durable }

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

func (s *Session) onClaim(m claim) {
	d, err := core.Claim(s.state, m.req.CallRef, m.req.Attempt, m.worker, m.checkpoints...)
	if err != nil {
		reply(m.reply, err)
		return
	}
	s.decide(d, func() { reply(m.reply, nil) }, func(err error) { reply(m.reply, err) })
}

func (s *Session) onOutcome(m outcome) {
	var delay time.Duration
	if s.settings.Backoff != nil {
		delay = s.settings.Backoff(m.attempt)
	}
	r := core.Retry{MaxAttempts: s.settings.MaxAttempts, Delay: delay}
	if m.unclaimed {
		d, err := core.ClaimAndSettle(s.state, m.ref, m.attempt, m.worker, m.out, r)
		if err != nil {
			reply(m.reply, err)
			return
		}
		s.decide(d, func() { reply(m.reply, nil) }, func(err error) { reply(m.reply, err) })
	} else {
		s.decide(core.Settle(s.state, m.ref, m.attempt, m.out, r), nil, nil)
	}
	s.progress()
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
}

// startQueued submits the next queued turn once none is active.
func (s *Session) startQueued() {
	for len(s.queued) > 0 && s.state.Active() == nil {
		m := s.queued[0]
		s.queued = s.queued[1:]
		s.submit(m)
	}
}

// rearmRetries starts a timer for every scheduled retry that has none.
func (s *Session) rearmRetries() {
	t := s.state.Active()
	if t == nil {
		return
	}
	for i := range t.Calls {
		if t.Phase[i] != core.PhaseRetrying {
			continue
		}
		r := t.Retry[i]
		key := retryKey(r.CallRef, r.Attempt)
		if _, ok := s.timers[key]; ok {
			continue
		}
		wait := max(t.RetryAt[i].Sub(s.deps.Now()), 0)
		e, pid, msg := s.engine, s.pid, retryDue{ref: r.CallRef, attempt: r.Attempt}
		s.timers[key] = time.AfterFunc(wait, func() { e.Send(pid, msg) })
	}
}

func retryKey(ref events.CallRef, attempt int) string {
	return fmt.Sprintf("%s/%d/%d", ref.Turn, ref.Index, attempt)
}

// decide turns drafts into events, applies them, and queues them for the log.
// after runs once the last of them is durable.
func (s *Session) decide(drafts []core.Draft, after func(), fail func(error)) {
	if len(drafts) == 0 {
		return
	}
	now := s.deps.Now().UTC()
	prev := ""
	for i, d := range drafts {
		if d.Causation == core.CausedByPrevious {
			d.Causation = prev
		}
		ev := events.Event{
			ID: s.deps.NewID(), Tenant: s.tenant, Session: s.id, Seq: s.state.Seq + 1,
			Time: now, Type: d.Type, Causation: d.Causation, Data: events.Payload(d.Payload),
		}
		prev = ev.ID
		// The hash chain: the event carries its predecessor's hash.
		link, err := s.state.Head()
		if err != nil {
			err = fmt.Errorf("session %s: the hash chain: %w", s.id, err)
			if fail != nil {
				fail(err)
			}
			s.failAndStop(err)
			return
		}
		ev.Prev = link
		payload := events.Pointer(d.Payload)
		if err := s.applyDecoded(ev, payload); err != nil {
			// A draft the core decided always applies; if not, the state is
			// wrong and only a reload can fix it.
			s.deps.logf("session %s: %v", s.id, err)
			s.failAndStop(err)
			return
		}
		s.deps.Metrics.decided(ev, payload)
		p := pending{ev: ev}
		if i == len(drafts)-1 {
			p.after, p.fail = after, fail
		}
		s.outbox = append(s.outbox, p)
	}
}

// flush starts an append of everything in the outbox unless one is running.
func (s *Session) flush() {
	if len(s.appending) > 0 || len(s.outbox) == 0 {
		return
	}
	s.appending, s.outbox = s.outbox, nil
	evs := make([]events.Event, len(s.appending))
	for i, p := range s.appending {
		evs[i] = p.ev
	}
	ctx, log, t, id, expected, pid, e := s.ctx, s.deps.Log, s.tenant, s.id, s.durable, s.pid, s.engine
	go func() {
		e.Send(pid, appended{err: appendRetrying(ctx, log, t, id, expected, evs)})
	}()
}

// appendRetrying retries transient failures: the append is idempotent (the
// message id is the event id), so a retry after a lost ack stores nothing twice.
func appendRetrying(ctx context.Context, log events.Log, tenant, id string, expected uint64, evs []events.Event) error {
	delay := 20 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := log.Append(ctx, tenant, id, expected, evs)
		if err == nil || errors.Is(err, events.ErrConflict) || ctx.Err() != nil || attempt == 8 {
			return err
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		delay = min(2*delay, time.Second)
	}
}

func (s *Session) onAppended(m appended) {
	if m.err != nil {
		s.failAndStop(fmt.Errorf("%w: appending to session %s: %v", ErrSessionUnavailable, s.id, m.err))
		return
	}
	done := s.appending
	s.appending = nil
	if faults.Enabled {
		for _, p := range done {
			switch p.ev.Type {
			case events.TypeToolCallRequested:
				faults.Hit(faults.AfterRequested)
			case events.TypeToolCallCompleted, events.TypeToolCallFailed:
				faults.Hit(faults.AfterResult)
			}
		}
	}
	s.durable = done[len(done)-1].ev.Seq
	if s.deps.Durable != nil {
		s.deps.Durable(s.tenant, s.id, durableEvents(done))
	}
	for _, p := range done {
		if p.after != nil {
			p.after()
		}
	}
	for id := range s.waiters {
		s.notifyWaiters(id)
	}
	s.runWatchers()
	s.startQueued()
}

// failAndStop gives up on the in-memory state: nothing not yet durable was
// acted on, so stopping and reloading from the log is always safe.
func (s *Session) failAndStop(err error) {
	s.failed = err
	s.loaded = false
	s.deps.logf("session %s/%s: %v", s.tenant, s.id, err)
	s.failPending(err)
	s.engine.Poison(s.pid)
}

// failPending tells whoever waits on an event that never became durable.
func (s *Session) failPending(err error) {
	for _, p := range append(s.appending, s.outbox...) {
		if p.fail != nil {
			p.fail(err)
		}
	}
	s.appending, s.outbox = nil, nil
}

func (s *Session) refuse(m any, err error) { Refuse(m, err) }

// Refuse answers a session message with err; the node uses it for messages
// that reached a stopped actor (dead letters), so no caller waits forever.
func Refuse(m any, err error) {
	switch m := m.(type) {
	case OpenSession:
		reply(m.Reply, err)
	case SubmitTurn:
		reply(m.Reply, TurnReply{Err: err})
	case GetTurn:
		reply(m.Reply, TurnReply{Err: err})
	case CancelTurn:
		reply(m.Reply, err)
	case Answer:
		reply(m.Reply, err)
	case RewindPlan:
		reply(m.Reply, RewindReply{Err: err})
	case RecordRewind:
		reply(m.Reply, err)
	case cancelJob:
		reply(m.reply, err)
	case Approve:
		reply(m.Reply, err)
	case GetApprovals:
		reply(m.Reply, ApprovalsReply{Err: err})
	case CloseSession:
		reply(m.Reply, err)
	case SignHead:
		reply(m.Reply, SignReply{Err: err})
	case stateQuery, answerWait, jobsQuery:
		// Asked by a running tool, whose context bounds the wait.
	case jobQuery:
		reply(m.reply, jobReply{err: err})
	case claim:
		reply(m.reply, err)
	case outcome:
		if m.reply != nil {
			reply(m.reply, err)
		}
	}
}

// reply sends without blocking: every reply channel has room for one answer.
func reply[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default:
	}
}
