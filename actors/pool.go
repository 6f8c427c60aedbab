package actors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// Pool is the tool actor of one concurrency class. It owns one fetch
// goroutine, which takes requests from its source (the node's
// LocalRequests, which hands out each with one of the class's workers, and
// so bounds how many of them run), and one goroutine per running call. The
// node owns the Pool and calls Stop, which stops fetching, lets running
// calls finish within a grace period, then cancels them.
type Pool struct {
	deps   *Deps
	class  string
	source RequestSource

	engine   *actor.Engine
	fetchCtx context.Context // ends fetching
	stopFeed context.CancelFunc
	runCtx   context.Context // ends running calls
	stopRuns context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	running map[callKey]runningCall
	patient map[callKey]bool // calls without a timeout (waiting on a person)
}

// errShutdown is the cause of a call's context when the node stops under it.
var errShutdown = errors.New("the node is shutting down")

// errInterrupted is the cause of a call's context when the harness cancelled it.
var errInterrupted = errors.New("cancelled by the harness")

// runningCall is a call this pool runs: how to interrupt it, and which
// attempt it is.
type runningCall struct {
	interrupt context.CancelCauseFunc
	attempt   int
	run       CallRun
}

// callKey names a running call: a comparable struct, so that naming one
// allocates nothing.
type callKey struct {
	tenant, session, turn string
	index                 int
}

func keyOf(tenant, session string, ref events.CallRef) callKey {
	return callKey{tenant: tenant, session: session, turn: ref.Turn, index: ref.Index}
}

// Interrupt cancels the context of a running call, if this pool runs it.
func (p *Pool) Interrupt(tenant, session string, ref events.CallRef) bool {
	p.mu.Lock()
	c, ok := p.running[keyOf(tenant, session, ref)]
	p.mu.Unlock()
	if ok {
		c.interrupt(errInterrupted)
	}
	return ok
}

// reported forgets an attempt run started, once the session has its
// outcome (outcome.handle, or its refusal): until then a session actor that
// loads meanwhile leaves the call to report (Running) and takes the outcome
// waiting in its inbox, instead of settling the call as lost. A later
// attempt of the call stays.
func (p *Pool) reported(key callKey, attempt int) {
	p.mu.Lock()
	if c, ok := p.running[key]; ok && c.attempt == attempt {
		delete(p.running, key)
		delete(p.patient, key)
	}
	p.mu.Unlock()
}

// untrackUnless forgets the attempt run started for r unless its outcome
// went to the session (handed), which tells the pool once it has it.
func (p *Pool) untrackUnless(handed *bool, ev events.Event, r *events.ToolCallRequested) {
	if !*handed {
		p.reported(keyOf(ev.Tenant, ev.Session, r.CallRef), r.Attempt)
	}
}

// Running reports whether this pool runs a call of the session now, or ran
// it and has not yet handed its outcome to the session.
func (p *Pool) Running(tenant, session string, ref events.CallRef) bool {
	p.mu.Lock()
	_, ok := p.running[keyOf(tenant, session, ref)]
	p.mu.Unlock()
	return ok
}

// Run reports how far a call of the session this pool runs, or ran and
// has not yet handed its outcome to the session, got.
func (p *Pool) Run(tenant, session string, ref events.CallRef) (CallRun, bool) {
	p.mu.Lock()
	c, ok := p.running[keyOf(tenant, session, ref)]
	p.mu.Unlock()
	return c.run, ok
}

// NewPool returns a pool for class that runs the calls source hands out, as
// many at once as it hands out workers. Its claims name deps.Node.
func NewPool(deps *Deps, class string, source RequestSource) *Pool {
	p := &Pool{deps: deps, class: class, source: source, running: map[callKey]runningCall{}, patient: map[callKey]bool{}}
	p.fetchCtx, p.stopFeed = context.WithCancel(context.Background())
	p.runCtx, p.stopRuns = context.WithCancel(context.Background())
	return p
}

// Producer returns the pool's actor producer; spawn it once.
func (p *Pool) Producer() actor.Producer {
	return func() actor.Receiver { return p }
}

// Receive starts the fetch goroutine when the actor starts. The actor has no
// other messages: requests come from its source, outcomes go to sessions.
func (p *Pool) Receive(c *actor.Context) {
	switch c.Message().(type) {
	case actor.Started:
		p.engine = c.Engine()
		p.wg.Add(1)
		go p.fetch()
	case actor.Stopped:
		p.stopFeed()
	}
}

// Stop stops fetching, waits up to grace for running calls, then cancels the
// rest and waits for them. A cancelled call reports no outcome: the next
// owner of its session settles it by its replay policy.
func (p *Pool) Stop(grace time.Duration) {
	p.stopFeed()
	// Calls waiting on a person would hold the drain for its whole grace:
	// stop them now; the next owner asks again (their answers are events).
	p.mu.Lock()
	for key := range p.patient {
		p.running[key].interrupt(errShutdown)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		p.stopRuns()
		<-done
	}
	p.stopRuns()
}

func (p *Pool) fetch() {
	defer p.wg.Done()
	for {
		req, err := p.source.Next(p.fetchCtx)
		if err != nil {
			if p.fetchCtx.Err() != nil {
				return
			}
			p.deps.log().Error("tool actor: fetch failed", "class", p.class, "err", err)
			select {
			case <-time.After(250 * time.Millisecond):
			case <-p.fetchCtx.Done():
				return
			}
			continue
		}
		p.wg.Add(1)
		p.deps.spawn(func() {
			defer p.wg.Done()
			defer p.source.Done(req)
			var h handling
			defer p.recoverCall(req, &h)
			p.handle(req, &h)
		})
	}
}

// handling is how far a call's handling got, for recoverCall.
type handling struct {
	// begun: its claim may have been asked for, or its tool may have
	// started (an unclaimed call); before, nothing of the call ran.
	begun bool
}

// recoverCall ends a call whose handling panicked outside the tool's Run
// (runSafely recovers that): in the pool's own code or a tool's
// declarations (MutatedPaths, TouchedPaths). It logs the panic with its
// stack and counts it. Before anything of the call began, the call fails
// once, saying nothing ran (refuse): giving the request back would only
// panic again. After, it tells the session the attempt was lost, which
// settles it by its replay policy if its claim is durable (as after a
// crash: never is indeterminate, safe is tried again) and changes nothing
// if it is not, and gives the request back (nothing, once it was acked).
// The node goes on; nothing recovers a goroutine's panic otherwise.
func (p *Pool) recoverCall(req Request, h *handling) {
	v := recover()
	if v == nil {
		return
	}
	ev, r := req.Event(), req.Call()
	p.deps.Metrics.callPanicked()
	p.deps.log().Error("tool actor: a call's handling panicked", "class", p.class,
		"tenant", ev.Tenant, "session", ev.Session, "turn", r.Turn, "call", r.Call, "tool", r.Name, "attempt", r.Attempt,
		"begun", h.begun, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	if !h.begun {
		p.refuse(req, errors.New("the node failed while it prepared the call, and nothing ran (an internal error: the node's log has it)"))
		return
	}
	if pid, err := p.deps.Sessions.Route(ev.Tenant, ev.Session); err == nil {
		p.send(pid, outcome{ref: r.CallRef, attempt: r.Attempt, out: core.Outcome{Lost: true,
			Err: "the node failed while it handled the call (an internal error: the node's log has it)"}})
	}
	_ = req.Nak(time.Second)
}

// refuse settles a call that did not run with why, as a permanent failure:
// claimed (for a call that needs a claim) and failed at once, without a
// workspace, a fleet cap's slot or the tool's own code. A panic on the way
// gives the request back (giveBack: one whose claim is durable
// with it fails, having not run).
func (p *Pool) refuse(req Request, why error) {
	defer func() {
		if v := recover(); v != nil {
			p.deps.log().Error("tool actor: failing a call that did not run panicked too; giving its request back", "class", p.class, "call", req.Call().Call, "panic", fmt.Sprint(v))
			p.giveBack(req, time.Second, "the node failed while it prepared the call (an internal error: the node's log has it)")
		}
	}()
	ev, r := req.Event(), req.Call()
	pid, t, ok := p.locate(req)
	if !ok {
		return
	}
	t = refusal(t, why)
	none := slotHeld{release: func() {}}
	if !core.MayRunUnclaimed(r, t) {
		p.runClaimed(req, ev, r, t, nil, pid, none, nil)
		return
	}
	p.runUnclaimed(req, ev, r, t, nil, pid, none)
}

// MaxImageBytes bounds the image bytes a result carries inline; images past
// it go to the object store.
const MaxImageBytes = 256 << 10

// claimTimeout bounds the wait for a claim's (or an unclaimed outcome's)
// answer. The session actor always answers, once the claim is durable or
// once it gave up (its outbox fails every waiter), or its message is
// refused as a dead letter; the bound only guards against a bug. It must
// outlast the appends the answer can wait for: the append in flight and
// the claim's own, each up to appendAttempts tries of a server timeout
// (5 s) and backoff. A worker that stopped waiting sooner would give the
// request back, find it claimed (ErrStaleClaim) and drop it, and a claim
// that became durable after that would never run nor settle until the
// session is rebuilt.
const claimTimeout = 2 * time.Minute

// locate finds the actor serving req's session and req's tool; without
// them it gives the request back (giveBack) and reports false.
func (p *Pool) locate(req Request) (*actor.PID, *tool.Tool, bool) {
	ev, r := req.Event(), req.Call()
	if p.deps.gate() != nil {
		// This node may not act now (docs/spec.md §7): start nothing; the
		// request comes back, here or, once the session moved, not at all.
		p.giveBack(req, time.Second, "the node may not act for the session now")
		return nil, nil, false
	}
	pid, err := p.deps.Sessions.Route(ev.Tenant, ev.Session)
	if err != nil {
		p.giveBack(req, time.Second, "the session is not served here now")
		return nil, nil, false
	}
	t, ok := p.deps.Tools.Resolve(ev.Tenant, r.Name)
	if !ok {
		p.deps.log().Warn("tool actor: a request names an unregistered tool; leaving it for a node that has it", "class", p.class, "event", ev.ID, "tool", r.Name)
		p.giveBack(req, 5*time.Second, "its tool is not registered on this node")
		return nil, nil, false
	}
	return pid, t, true
}

func (p *Pool) handle(req Request, h *handling) {
	ev, r := req.Event(), req.Call()
	pid, t, ok := p.locate(req)
	if !ok {
		return
	}
	ws, err := p.deps.Workspaces.Workspace(ev.Tenant, ev.Session)
	var unusable *workspace.NameError
	switch {
	case err != nil && r.WorkspaceFree:
		// A tool that needs no workspace runs without one, on a node that
		// does not keep it too (docs/spec.md §7).
		ws = nil
	case errors.As(err, &unusable):
		// The call runs nowhere: it fails with what is wrong, once.
		t = refusal(t, fmt.Errorf("the session's workspace cannot be used: %w", unusable))
	case err != nil:
		p.giveBack(req, time.Second, "the session's workspace could not be opened: "+err.Error())
		return
	default:
		defer ws.Close()
	}
	// A fleet-wide cap: the call waits for a slot before anything of it is
	// recorded or run (docs/spec.md §7).
	held, ok := p.takeSlot(req, ev, r)
	if !ok {
		return
	}
	defer held.release()
	if !core.MayRunUnclaimed(r, t) {
		// Pre-images of the files the call will mutate are stored before the
		// claim and recorded with it, so they are in the log before it runs.
		checkpoints, err := p.checkpoint(ev, r, t, ws)
		if err != nil {
			p.deps.log().Warn("tool actor: checkpoint failed", "class", p.class, "call", r.Call, "err", err)
			p.giveBack(req, time.Second, "the files it mutates could not be checkpointed")
			return
		}
		h.begun = true
		p.runClaimed(req, ev, r, t, ws, pid, held, checkpoints)
		return
	}
	// Nothing is recorded before such a call runs, so ask first whether its
	// request is still current: a request the session no longer waits on
	// (already settled, or superseded by a new owner's) is dropped without
	// running. A request its session actor handed over the moment it was
	// durable is current by construction; should it go stale before it
	// runs, the call is read-only and safe, and its outcome is refused
	// (outcome.handle checks again).
	if !freshLocal(req) {
		if err := p.ask(pid, func(ch chan error) Message { return checkRequest{req: *r, requestID: ev.ID, reply: ch} }); err != nil {
			p.settleRefused(req, err)
			return
		}
	}
	h.begun = true
	p.runUnclaimed(req, ev, r, t, ws, pid, held)
}

// runClaimed claims a call, with the checkpoints of the files it will
// mutate, and runs it once the claim is durable; then reports its outcome
// to the actor that serves the session. A request whose claim its session
// recorded with it (claimedLocal) runs at once: the claim was durable
// before the request was handed over.
func (p *Pool) runClaimed(req Request, ev events.Event, r *events.ToolCallRequested, t *tool.Tool, ws *workspace.Dir, pid *actor.PID, held slotHeld, checkpoints []events.FileCheckpointed) {
	switch {
	case claimedLocal(req):
		if len(checkpoints) > 0 || t.ClaimsWhenTaken {
			// The tool changed since the session claimed the call: its
			// claim holds no checkpoint and names no external worker.
			p.lose(req, "its tool's declarations changed after it was claimed")
			return
		}
	case t.ClaimsWhenTaken:
		p.runTaken(req, ev, r, t, ws, pid, held, checkpoints)
		return
	default:
		// The claim: the call runs only once ToolCallStarted is durable, and the
		// session refuses a second claim of the same attempt.
		err := p.ask(pid, func(ch chan error) Message {
			return claim{req: *r, requestID: ev.ID, worker: p.deps.Node, checkpoints: checkpoints, queued: held.queued, reply: ch}
		})
		if err != nil {
			p.settleRefused(req, err)
			return
		}
	}
	_ = req.Ack()
	faults.Hit(faults.AfterClaim)
	p.deps.Metrics.waited(p.class, p.deps.Clock.Now().Sub(ev.Time))
	handed := false
	defer p.untrackUnless(&handed, ev, r)
	out, report := p.run(ev, r, t, ws, pid, held, nil)
	held.release() // the call has ended: its process is gone
	faults.Hit(faults.AfterReturn)
	handed = p.report(ev, r, pid, out, report)
}

// report hands a claimed attempt's outcome to the actor that serves its
// session now, and runs the after-tool hooks on what the log records;
// report false (the node stopping, the call cancelled) hands nothing. It
// reports whether it handed the outcome over.
func (p *Pool) report(ev events.Event, r *events.ToolCallRequested, pid *actor.PID, out core.Outcome, report bool) bool {
	if !report {
		return false
	}
	// To the actor that serves the session now: the one that claimed the
	// call may have stopped while it ran (the node lost its lease for a
	// moment, or an append failed), and its successor, which left the call
	// to this node because it still ran here, waits for this.
	if cur, err := p.deps.Sessions.Route(ev.Tenant, ev.Session); err == nil {
		pid = cur
	}
	o := outcome{ref: r.CallRef, attempt: r.Attempt, out: out, from: p, key: keyOf(ev.Tenant, ev.Session, r.CallRef)}
	if p.deps.After == nil {
		p.send(pid, o)
		return true
	}
	// After-tool hooks are told what the log records, once it does.
	if res, err := p.settle(pid, o); err == nil && res != nil {
		p.deps.After.After(p.runCtx, ev, r, *res)
	}
	return true
}

// runTaken runs a call of a tool that claims it as an external worker takes
// it (tool.Tool.ClaimsWhenTaken, harness tools): its claim, naming the
// worker, is recorded when the worker takes the attempt, and the task goes
// to the worker only once that is durable. A claim the session refuses
// hands nothing out; an attempt no
// worker took within its time ran nowhere, and is claimed then, by this
// node, with the outcome the tool gave (not sent).
func (p *Pool) runTaken(req Request, ev events.Event, r *events.ToolCallRequested, t *tool.Tool, ws *workspace.Dir, pid *actor.PID, held slotHeld, checkpoints []events.FileCheckpointed) {
	var mu sync.Mutex
	var claimed bool
	var refused error
	claimAs := func(worker string) error {
		return p.ask(pid, func(ch chan error) Message {
			return claim{req: *r, requestID: ev.ID, worker: p.deps.Node, takenBy: worker, checkpoints: checkpoints, queued: held.queued, reply: ch}
		})
	}
	p.deps.Metrics.waited(p.class, p.deps.Clock.Now().Sub(ev.Time))
	handed := false
	defer p.untrackUnless(&handed, ev, r)
	out, report := p.run(ev, r, t, ws, pid, held, func(worker string) error {
		err := claimAs(worker)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			refused = err
			return err
		}
		claimed = true
		_ = req.Ack()
		faults.Hit(faults.AfterClaim)
		return nil
	})
	held.release()
	mu.Lock()
	taken, why := claimed, refused
	mu.Unlock()
	switch {
	case why != nil:
		p.settleRefused(req, why) // nothing was handed out
		return
	case !taken && !report:
		_ = req.Nak(0) // stopping, nothing handed out: the next owner requests it again
		return
	case !taken:
		// No worker took it: nothing ran. Its claim, by this node, goes
		// before its outcome, as for every claimed call.
		if err := claimAs(""); err != nil {
			p.settleRefused(req, err)
			return
		}
		_ = req.Ack()
	}
	faults.Hit(faults.AfterReturn)
	handed = p.report(ev, r, pid, out, report)
}

// slotHeld is the slot of a fleet-wide cap a call holds, if any.
type slotHeld struct {
	// deadline is the end of the call's run, fixed when the slot was
	// taken (the slot lasts until it, plus a grace); zero without a slot
	// or for a call without a timeout.
	deadline time.Time
	// lease goes to the call's tool (CapSlot.Lease); nil without.
	lease tool.Lease
	// queued is how long the call waited for the slot.
	queued  time.Duration
	release func()
}

// takeSlot waits, for a call of a tool with a fleet-wide cap, until a slot
// is free and takes it; for any other call it returns at once. It
// reports false, having settled the request, when no slot could be taken
// (the node stops, or the caps' bucket failed): nothing ran.
func (p *Pool) takeSlot(req Request, ev events.Event, r *events.ToolCallRequested) (slotHeld, bool) {
	none := slotHeld{release: func() {}}
	if r.FleetCap < 1 || p.deps.Caps == nil {
		return none, true
	}
	start := time.Now()
	p.deps.Metrics.capWaiting(r.Name, 1)
	slot, err := p.deps.Caps.Acquire(p.fetchCtx, ev.Tenant, ev.Session, r)
	p.deps.Metrics.capWaiting(r.Name, -1)
	if err != nil {
		if p.fetchCtx.Err() == nil {
			p.deps.log().Warn("tool actor: fleet cap failed", "class", p.class, "tool", r.Name, "err", err)
		}
		p.giveBack(req, time.Second, "no slot of its tool's fleet-wide cap could be taken")
		return none, false
	}
	queued := time.Since(start)
	p.deps.Metrics.capWaited(r.Name, queued)
	var once sync.Once
	return slotHeld{deadline: slot.Deadline, lease: slot.Lease, queued: queued, release: func() { once.Do(slot.Release) }}, true
}

// send gives a session actor m: straight, when the actor is inside an
// activation (it may be waiting for this very message: handoff), else
// through its inbox.
func (p *Pool) send(pid *actor.PID, m Message) {
	if !p.deps.handoffs.offer(pid, m) {
		p.engine.Send(pid, m)
	}
}

// errNoAnswer is a session actor's silence (it stopped under the worker).
var errNoAnswer = errors.New("no answer from the session")

// ask sends the message mk builds to a session actor and waits for its
// answer, at most claimTimeout and never past the pool's stop.
func (p *Pool) ask(pid *actor.PID, mk func(chan error) Message) error {
	ch := make(chan error, 1)
	p.send(pid, mk(ch))
	err, ok := awaitReply(p.runCtx.Done(), ch)
	if !ok {
		return errNoAnswer
	}
	return err
}

// awaitReply waits for a session actor's reply on ch, at most claimTimeout
// and never past done; false when none came.
func awaitReply[T any](done <-chan struct{}, ch <-chan T) (T, bool) {
	var zero T
	t := claimTimer()
	defer releaseClaimTimer(t)
	select {
	case v := <-ch:
		return v, true
	case <-done:
		return zero, false
	case <-t.C:
		return zero, false
	}
}

// claimTimers are stopped timers for awaitReply: a timer and its channel
// per wait would cost every call three allocations.
var claimTimers sync.Pool

// claimTimer returns a timer due in claimTimeout.
func claimTimer() *time.Timer {
	if t, ok := claimTimers.Get().(*time.Timer); ok {
		t.Reset(claimTimeout)
		return t
	}
	return time.NewTimer(claimTimeout)
}

// releaseClaimTimer stops t and keeps it for the next wait. Since Go 1.23
// a stopped timer's channel holds no stale value, so a reused one fires
// only for its own wait.
func releaseClaimTimer(t *time.Timer) {
	t.Stop()
	claimTimers.Put(t)
}

// settle sends an outcome to a session actor and waits, at most
// claimTimeout and never past the pool's stop, until what it decided is
// durable: the reply is the attempt's result as the log records it (nil
// when it records nothing for this outcome).
func (p *Pool) settle(pid *actor.PID, o outcome) (*events.Result, error) {
	o.reply = make(chan settledReply, 1)
	p.send(pid, o)
	r, ok := awaitReply(p.runCtx.Done(), o.reply)
	if !ok {
		return nil, errNoAnswer
	}
	return r.result, r.err
}

// giveBack gives back a request that will not run now, to come back after
// delay. A request whose claim is durable with it (claimedLocal) cannot be
// claimed again: it fails instead, saying why it did not run (lose).
func (p *Pool) giveBack(req Request, delay time.Duration, why string) {
	if claimedLocal(req) {
		p.lose(req, why)
		return
	}
	_ = req.Nak(delay)
}

// lose settles a call whose claim its session recorded with its request and
// that will not run here: nothing of it ran, so it fails, saying why (a
// safe call is tried again, by its retry policy; a never call's failure is
// final, and the model may ask again). Should the node not record that (it
// may not act for the session now), the session's next owner settles the
// claimed call as lost (core.Recover).
func (p *Pool) lose(req Request, why string) {
	ev, r := req.Event(), req.Call()
	p.deps.log().Warn("tool actor: a call claimed with its request cannot run here; it fails, having not run", "class", p.class,
		"tenant", ev.Tenant, "session", ev.Session, "call", r.Call, "tool", r.Name, "attempt", r.Attempt, "why", why)
	if pid, err := p.deps.Sessions.Route(ev.Tenant, ev.Session); err == nil {
		p.send(pid, outcome{ref: r.CallRef, attempt: r.Attempt, out: notRun(why)})
	}
	_ = req.Ack()
}

// notRun is the outcome of a claimed call that did not run, and why.
func notRun(why string) core.Outcome {
	return core.Outcome{Err: "the call did not run: " + why}
}

// settleRefused settles a request the session would not let run: nothing
// ran, so it comes back unless it can never be served here.
func (p *Pool) settleRefused(req Request, err error) {
	switch {
	case errors.Is(err, core.ErrStaleClaim):
		_ = req.Ack() // already claimed, settled or superseded: a redelivery
	case errors.Is(err, ErrNotOwner):
		var no *NotOwnerError
		if errors.As(err, &no) && no.Owner == "" {
			_ = req.Nak(time.Second) // nobody can own it now: ask again later
			return
		}
		// Another node owns the session now; it requested the call again
		// from its own workers when it took the session (docs/spec.md §7).
		_ = req.Ack()
	case errors.Is(err, ErrRetired):
		_ = req.Nak(0) // the session has a new actor: ask there
	case errors.Is(err, errNoAnswer):
		_ = req.Nak(0)
	default:
		_ = req.Nak(500 * time.Millisecond)
	}
}

// run executes one claimed attempt. report is false when the node is
// stopping and the call was cancelled: its outcome is then unknown here.
// The call counts as running (Running) until the session has its outcome
// (Pool.reported), or its caller hands none over.
//
// A call without a slot of a fleet cap runs for its timeout from now; one
// with a slot runs until the deadline the slot was taken for, and its tool
// gets the slot's lease.
func (p *Pool) run(ev events.Event, r *events.ToolCallRequested, t *tool.Tool, wsDir *workspace.Dir, pid *actor.PID, held slotHeld, claim tool.Claim) (core.Outcome, bool) {
	ws := ""
	ctx := p.runCtx
	if wsDir != nil {
		ws = wsDir.Path()
		ctx = workspace.NewContext(ctx, wsDir)
	}
	ctx = tool.WithCall(ctx, tool.Call{
		Tenant: ev.Tenant, Session: ev.Session, Turn: r.Turn, ID: r.Call, Index: r.Index,
		Attempt: r.Attempt, IdempotencyKey: r.IdempotencyKey, Workspace: ws,
		Escalate: r.Escalate, MaxOutput: p.deps.Outputs.maxOutput(ev.Tenant), SpillDir: p.deps.Outputs.SpillDir,
	})
	ctx = tool.WithRuntime(ctx, &callRuntime{engine: p.engine, pid: pid, direct: &p.deps.handoffs, ref: r.CallRef, tools: p.deps.Tools})
	if claim != nil {
		ctx = tool.WithClaim(ctx, claim)
	}
	if held.lease != nil {
		ctx = tool.WithLease(ctx, held.lease)
	}
	ctx, interrupt := context.WithCancelCause(ctx)
	defer interrupt(nil)
	switch {
	case !held.deadline.IsZero():
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, held.deadline)
		defer cancel()
	case r.TimeoutMS > 0:
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(r.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	key := keyOf(ev.Tenant, ev.Session, r.CallRef)
	start := time.Now()
	p.mu.Lock()
	p.running[key] = runningCall{interrupt: interrupt, attempt: r.Attempt, run: CallRun{Start: start}}
	if r.TimeoutMS <= 0 {
		p.patient[key] = true
	}
	p.mu.Unlock()

	p.deps.Metrics.running(p.class, 1)
	if faults.Enabled {
		go func() { time.Sleep(50 * time.Millisecond); faults.Hit(faults.DuringTool) }()
	}
	res, err := runSafely(ctx, t, r.Arguments)
	p.mu.Lock()
	if c, ok := p.running[key]; ok && c.attempt == r.Attempt {
		c.run.Ended = true
		p.running[key] = c
	}
	p.mu.Unlock()
	if res.Full != nil {
		defer res.Full.Close() // kept (or not) by capOutput below
	}
	took := time.Since(start)
	p.deps.Metrics.running(p.class, -1)
	p.deps.Metrics.handled(r.Name, took)

	if p.runCtx.Err() != nil || errors.Is(context.Cause(ctx), errShutdown) {
		return core.Outcome{}, false
	}
	if err != nil {
		// The model sees workspace-relative paths, never the node's layout.
		msg := tool.RedactError(err.Error())
		if ws != "" {
			msg = strings.ReplaceAll(msg, ws+string(os.PathSeparator), "")
			msg = strings.ReplaceAll(msg, ws, ".")
		}
		return core.RunFailure{Err: err, Deadline: errors.Is(ctx.Err(), context.DeadlineExceeded),
			Interrupted: errors.Is(context.Cause(ctx), errInterrupted), Message: msg, Duration: took}.Outcome(), true
	}
	parts, truncated, ref, err := p.capOutput(ev, res)
	if err != nil {
		return core.Outcome{Err: err.Error(), Duration: took}, true
	}
	var touched []string
	if t.MutatedPaths != nil {
		touched = append(touched, t.MutatedPaths(r.Arguments)...)
	}
	if t.TouchedPaths != nil {
		touched = append(touched, t.TouchedPaths(r.Arguments)...)
	}
	if wsDir != nil {
		touched = workspaceRel(wsDir, touched)
	}
	return core.Outcome{OK: true, Content: parts, Truncated: truncated, FullOutput: ref, Touched: touched, Duration: took, State: res.State}, true
}

// maxCheckpoint bounds the pre-image kept for one file.
const maxCheckpoint = 64 << 20

// checkpoint stores the pre-image of every file the call declares it will
// mutate (or notes its absence) and returns the events that record them.
// Files are read through the workspace's os.Root (docs/security.md,
// "Workspace"): a path that leads out, even through a directory swapped for
// a link while this runs, is not read.
func (p *Pool) checkpoint(ev events.Event, r *events.ToolCallRequested, t *tool.Tool, ws *workspace.Dir) ([]events.FileCheckpointed, error) {
	if t.MutatedPaths == nil || ws == nil {
		return nil, nil
	}
	var out []events.FileCheckpointed
	seen := map[string]bool{}
	for i, path := range t.MutatedPaths(r.Arguments) {
		rel, err := ws.Rel(path)
		if err != nil || seen[rel] {
			continue // the tool refuses such a path itself; nothing to keep
		}
		seen[rel] = true
		cp := events.FileCheckpointed{Path: rel}
		data, info, err := preImage(ws, rel)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			out = append(out, cp) // absent: a rewind removes it
			continue
		case errors.Is(err, errNoPreImage), workspace.Escaped(err):
			continue // not a regular file here, or not inside: the tool decides
		case err != nil:
			return nil, err
		}
		sum := sha256.Sum256(data)
		cp.Existed, cp.Size, cp.Mode, cp.SHA256 = true, int64(len(data)), uint32(info.Mode().Perm()), hex.EncodeToString(sum[:])
		cp.Object = fmt.Sprintf("%s/%s/ckpt/%s/%d", ev.Tenant, ev.Session, ev.ID, i)
		if _, err := p.deps.Objects.Put(p.fetchCtx, cp.Object, bytes.NewReader(data)); err != nil {
			return nil, err
		}
		out = append(out, cp)
	}
	return out, nil
}

// errNoPreImage: the path names something that is not checkpointed (a
// directory, a link, a device, a file over maxCheckpoint).
var errNoPreImage = errors.New("no pre-image")

// preImage reads the regular file rel of ws, not following a final link:
// the entry is looked at, opened (non-blocking: a FIFO swapped in cannot
// hang the worker), and must still be the same file. The error matches
// fs.ErrNotExist when there is no entry, errNoPreImage when it is not a
// regular file of at most maxCheckpoint bytes.
func preImage(ws *workspace.Dir, rel string) ([]byte, fs.FileInfo, error) {
	info, err := ws.Root().Lstat(rel)
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > maxCheckpoint {
		return nil, nil, errNoPreImage
	}
	f, err := ws.Root().OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !os.SameFile(fi, info) {
		return nil, nil, errNoPreImage // swapped since the look: not this file
	}
	data, err := io.ReadAll(io.LimitReader(f, maxCheckpoint+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > maxCheckpoint {
		return nil, nil, errNoPreImage
	}
	return data, info, nil
}

// workspaceRel puts declared paths into the workspace-relative form the
// log records (an absolute path inside the workspace loses the node's
// layout), dropping any that are not inside.
func workspaceRel(ws *workspace.Dir, paths []string) []string {
	out := paths[:0:0]
	for _, p := range paths {
		if rel, err := ws.Rel(p); err == nil {
			out = append(out, rel)
		}
	}
	return out
}

// refusal stands in for t when a call must not run (the session's
// workspace cannot be opened, its handling failed before it began): same
// name and declarations, no declared paths (nothing to checkpoint), and a
// run that fails, permanently, with why.
func refusal(t *tool.Tool, why error) *tool.Tool {
	refusal := *t
	refusal.MutatedPaths, refusal.TouchedPaths = nil, nil
	refusal.Run = func(context.Context, json.RawMessage) (tool.Result, error) {
		return tool.Result{}, tool.Permanent(why)
	}
	return &refusal
}

// runSafely runs a tool, turning a panic into an error result.
func runSafely(ctx context.Context, t *tool.Tool, args []byte) (res tool.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("tool %s panicked: %v", t.Name, v)
		}
	}()
	return t.Run(ctx, args)
}

// capOutput converts a tool result to result parts and applies the output
// caps, keeping the full output in the object store when it cuts (or saying
// in the cut result that it was not kept, when the tenant's quota is used
// up). A result whose Full is set shows only the start of it; the full
// output is then read from Full, never held in memory.
func (p *Pool) capOutput(ev events.Event, res tool.Result) ([]events.Part, bool, *events.OutputRef, error) {
	parts := make([]events.Part, len(res.Parts))
	for i, rp := range res.Parts {
		parts[i] = events.Part{Type: rp.Type, Text: rp.Text, JSON: rp.JSON, MIME: rp.MIME, Data: rp.Data}
	}
	// An image too large to travel in an event (a result is stored twice in
	// one message, once completed and once committed, and a message holds at
	// most 1 MiB) is kept in the object store and named instead.
	inline := 0
	for i, part := range parts {
		if part.Type != "image" {
			continue
		}
		if inline += len(part.Data); inline > MaxImageBytes {
			obj := fmt.Sprintf("%s/image-%d", outputName(ev), i)
			kept := fmt.Sprintf("kept as %s", obj)
			if err := p.quota(ev.Tenant); err != nil {
				kept = "not kept: " + err.Error()
			} else if _, err := p.deps.Objects.Put(p.runCtx, obj, bytes.NewReader(part.Data)); err != nil {
				return nil, false, nil, fmt.Errorf("storing a large image: %w", err)
			}
			parts[i] = events.Part{Type: "text", Text: fmt.Sprintf("[image %s of %d bytes: the result's images exceed %d bytes inline; %s]", part.MIME, len(part.Data), MaxImageBytes, kept)}
			inline -= len(part.Data)
		}
	}
	var total core.Totals
	var open func() (io.ReadCloser, error)
	if res.Full != nil {
		total = core.Totals{Bytes: res.Full.Size(), Lines: res.Full.Lines()}
		open = res.Full.Open
		if !total.Over(p.deps.Outputs.MaxBytes, p.deps.Outputs.MaxLines) {
			// A tool may hand over a Full that fits the caps after all:
			// then it is the result.
			text, err := readAll(open)
			if err != nil {
				return nil, false, nil, fmt.Errorf("reading the output: %w", err)
			}
			return append([]events.Part{{Type: "text", Text: strings.ToValidUTF8(text, "\uFFFD")}}, imagesOf(parts)...), false, nil, nil
		}
	} else {
		all := core.Text(parts)
		if total = core.Measure(all); !total.Over(p.deps.Outputs.MaxBytes, p.deps.Outputs.MaxLines) {
			return parts, false, nil, nil
		}
		open = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(all)), nil }
	}
	if err := p.quota(ev.Tenant); err != nil {
		return core.Cut(parts, p.deps.Outputs.MaxBytes, p.deps.Outputs.MaxLines, total, core.NotKept(err.Error())), true, nil, nil
	}
	name := outputName(ev)
	return p.keepFull(name, total, open, core.Cut(parts, p.deps.Outputs.MaxBytes, p.deps.Outputs.MaxLines, total, core.KeptAs(name)))
}

// outputName names the objects a call's outputs are kept in: named only
// when one is kept, as most results stay within the caps.
func outputName(ev events.Event) string { return ev.Tenant + "/" + ev.Session + "/" + ev.ID }

// keepFull stores a cut result's full output, streamed from open, under
// name, and returns the cut parts with its reference.
func (p *Pool) keepFull(name string, total core.Totals, open func() (io.ReadCloser, error), cut []events.Part) ([]events.Part, bool, *events.OutputRef, error) {
	r, err := open()
	if err != nil {
		return nil, false, nil, fmt.Errorf("reading the full output: %w", err)
	}
	defer r.Close()
	size, err := p.deps.Objects.Put(p.runCtx, name, r)
	if err != nil {
		return nil, false, nil, fmt.Errorf("storing the full output: %w", err)
	}
	return cut, true, &events.OutputRef{Store: p.deps.Outputs.Store, Object: name, Bytes: size, Lines: total.Lines}, nil
}

// quota reports why the tenant may not keep another full output, or nil.
func (p *Pool) quota(tenant string) error {
	if p.deps.Quota == nil {
		return nil
	}
	return p.deps.Quota.KeepOutput(tenant)
}

// readAll reads what open gives.
func readAll(open func() (io.ReadCloser, error)) (string, error) {
	r, err := open()
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

func imagesOf(parts []events.Part) []events.Part {
	var out []events.Part
	for _, p := range parts {
		if p.Type != "text" && p.Type != "json" {
			out = append(out, p)
		}
	}
	return out
}

// runUnclaimed runs a read-only, safe call straight away and reports its
// claim and outcome together; the request is acked once both are durable, so
// a crash before then redelivers it and it simply runs again.
func (p *Pool) runUnclaimed(req Request, ev events.Event, r *events.ToolCallRequested, t *tool.Tool, ws *workspace.Dir, pid *actor.PID, held slotHeld) {
	p.deps.Metrics.waited(p.class, p.deps.Clock.Now().Sub(ev.Time))
	// A harness tool's worker is named in the claim recorded with the
	// outcome (nothing waits on it: the call may run twice).
	var takenBy string
	defer p.reported(keyOf(ev.Tenant, ev.Session, r.CallRef), r.Attempt) // after settle's answer
	out, report := p.run(ev, r, t, ws, pid, held, func(worker string) error { takenBy = worker; return nil })
	held.release()
	out.Queued, out.TakenBy = held.queued, takenBy
	if !report {
		_ = req.Nak(0)
		return
	}
	if cur, err := p.deps.Sessions.Route(ev.Tenant, ev.Session); err == nil {
		pid = cur // the actor serving the session now (see handle)
	}
	res, err := p.settle(pid, outcome{ref: r.CallRef, attempt: r.Attempt, out: out, unclaimed: true, requestID: ev.ID, worker: p.deps.Node})
	var no *NotOwnerError
	switch {
	case err == nil, errors.Is(err, core.ErrStaleClaim):
		_ = req.Ack() // settled, here or by another worker
		if res != nil && p.deps.After != nil {
			p.deps.After.After(p.runCtx, ev, r, *res)
		}
	case errors.As(err, &no) && no.Owner != "":
		_ = req.Ack() // another node owns the session and requested it again
	default:
		_ = req.Nak(0) // nothing recorded: run it again
	}
}
