package actors

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/callsheet/callsheet/events"
)

// LocalRequests is the request source of one concurrency class on the node
// that owns the sessions: the session actors hand it each request of theirs
// the moment the request is durable (Calls.Offer, Pools), and the class's Pool
// takes them from it, without a round trip through JetStream
// (docs/architecture.md, "How a call reaches its tool actor").
//
// Nothing is lost by keeping the hand-off in memory. Only a session's owner
// runs its calls (docs/spec.md §7), and a request is offered only after it
// is in the log, so the log holds every request the queue holds. When this
// process dies, the session's next owner (another node, or this node's next
// process: a new incarnation) requests every unclaimed call again (core's
// reissue). When the session's actor stops and is rebuilt in the same
// process, it offers again every request of its log that is still current
// (Session.onLoaded); an offer of a request already queued or in a worker's
// hands is ignored. The claim in the log, not this queue, keeps a call from
// running twice.
//
// It also holds the class's workers: Next hands a request out only with a
// worker for it, which Done frees, and shares them between tenants
// (fairQueue): a freed worker goes to the tenant served least recently
// among those with a request waiting and fewer than their cap of workers,
// which takes its oldest request (docs/spec.md §10).
//
// Safe for concurrent use. Offer never blocks (a session actor calls it).
type LocalRequests struct {
	class string
	ready chan struct{} // has a token while a request may be handed out

	mu    sync.Mutex
	fair  *fairQueue[*localRequest]
	known map[string]bool // ids queued, in a worker's hands, or due back after a Nak
	// claimed are requests whose claim went into the log with them, each
	// with the worker taken for it when it was decided (take): Next hands
	// them out first.
	claimed []*localRequest
	stopped bool
}

// Slots bound how many calls of one concurrency class a node runs at once:
// Workers in all, and at most PerTenant(tenant) of one tenant's.
type Slots struct {
	// Workers is how many calls of the class run at once; at least 1.
	Workers int
	// PerTenant returns how many of the Workers one tenant may hold,
	// taken within 1..Workers; asked whenever a worker is handed out, so
	// it may change while the node runs. Nil: all of them.
	PerTenant func(tenant string) int
}

// NewLocalRequests returns the empty source of class, with its workers.
func NewLocalRequests(class string, slots Slots) *LocalRequests {
	return &LocalRequests{class: class, ready: make(chan struct{}, 1), known: map[string]bool{},
		fair: newFairQueue[*localRequest](slots.Workers, slots.PerTenant)}
}

// ErrSourceStopped is returned by LocalRequests.Next once the source stopped.
var ErrSourceStopped = errors.New("actors: the request source stopped")

// Offer queues a durable request of this class. fresh says the session
// actor offers it the moment it became durable, so it is the request its
// attempt waits on: a worker need not ask again before running a call that
// needs no claim (its outcome is still refused if the request went stale
// meanwhile). It reports whether the request was queued: false when it is
// already known here or the source stopped.
func (l *LocalRequests) Offer(ev events.Event, r *events.ToolCallRequested, fresh bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.known[ev.ID] {
		return false
	}
	l.known[ev.ID] = true
	l.push(&localRequest{src: l, ev: ev, call: r, fresh: fresh})
	return true
}

// push queues req behind its tenant's others; the caller holds mu.
func (l *LocalRequests) push(req *localRequest) {
	l.fair.push(req.ev.Tenant, req)
	l.signal()
}

// signal wakes a waiting Next; the caller holds mu.
func (l *LocalRequests) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Next returns the next request with a worker taken for it, which Done
// frees: the oldest of the tenant whose turn it is. It waits until a
// worker is free and a tenant under its cap has a request, ctx ends or the
// source stops.
func (l *LocalRequests) Next(ctx context.Context) (Request, error) {
	for {
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			return nil, ErrSourceStopped
		}
		if len(l.claimed) > 0 {
			req := l.claimed[0]
			l.claimed[0] = nil
			l.claimed = l.claimed[1:]
			if len(l.claimed) > 0 || l.fair.ready() {
				l.signal()
			}
			l.mu.Unlock()
			return req, nil
		}
		if _, req, ok := l.fair.pop(); ok {
			req.holds = true
			if l.fair.ready() {
				l.signal() // another worker may take the next one at once
			}
			l.mu.Unlock()
			return req, nil
		}
		l.mu.Unlock()
		select {
		case <-l.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Done frees the worker Next took for req, once the call is over (settled,
// or given back); a second Done, or one for a request Next did not hand
// out, changes nothing.
func (l *LocalRequests) Done(req Request) {
	r, ok := req.(*localRequest)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.holds {
		r.holds = false
		l.fair.release(r.ev.Tenant)
		l.signal()
	}
}

// Reconsider has a waiting Next look again at the requests waiting: a
// tenant's share (Slots.PerTenant) changed, and a request held back by the
// old one may now take a free worker.
func (l *LocalRequests) Reconsider() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fair.ready() {
		l.signal()
	}
}

// Len reports how many requests wait for a worker.
func (l *LocalRequests) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fair.queued
}

// Stop drops every queued request and refuses new ones: the node is going
// away, and the sessions' next owners request their unclaimed calls again.
func (l *LocalRequests) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.fair.drop()
	for _, req := range l.claimed {
		l.fair.release(req.ev.Tenant)
	}
	l.claimed = nil
	l.known = map[string]bool{}
	l.signal()
}

// heldWorker is a worker of a class taken for a request as its session
// decides it (LocalRequests.take), so that the request's claim goes into
// the log with it (Session.claimWithRequests); the zero value holds none.
// Exactly one of hand and release is called for a worker held.
type heldWorker struct {
	src    *LocalRequests
	tenant string
}

// held reports whether w holds a worker.
func (w heldWorker) held() bool { return w.src != nil }

// take takes a worker for a request of tenant's that its session is about
// to claim, if one is free now with no request waiting and tenant under
// its share; the zero heldWorker if not (the request then takes today's
// path: offered once durable, claimed by the worker that takes it).
func (l *LocalRequests) take(tenant string) heldWorker {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || !l.fair.take(tenant) {
		return heldWorker{}
	}
	return heldWorker{src: l, tenant: tenant}
}

// hand gives the worker its request, durable with its claim: the next
// Next hands it out. It reports false, having freed the worker, when the
// source stopped or already knows the request: then it will not run here.
func (w heldWorker) hand(ev events.Event, r *events.ToolCallRequested) bool {
	l := w.src
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.known[ev.ID] {
		l.fair.release(w.tenant)
		if l.fair.ready() {
			l.signal()
		}
		return false
	}
	l.known[ev.ID] = true
	l.claimed = append(l.claimed, &localRequest{src: l, ev: ev, call: r, fresh: true, claimed: true, holds: true})
	l.signal()
	return true
}

// release frees the worker: its request's append failed, or its claim was
// not decided after all.
func (w heldWorker) release() {
	l := w.src
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fair.release(w.tenant)
	if l.fair.ready() {
		l.signal()
	}
}

// forget settles a request for good: a later offer of it queues it again.
func (l *LocalRequests) forget(id string) {
	l.mu.Lock()
	delete(l.known, id)
	l.mu.Unlock()
}

// requeue puts a request a worker gave back at the end of its tenant's
// queue.
func (l *LocalRequests) requeue(req *localRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || !l.known[req.ev.ID] {
		return
	}
	l.push(req)
}

// localRequest is a request handed over in memory. Ack forgets it; Nak
// queues it again after the delay, no longer fresh (whoever takes it next
// asks the session whether it is still current), except a claimed one,
// which Nak forgets too: its claim is in the log, so it can never be
// claimed again, and whoever gives it back settles it (Pool.giveBack).
type localRequest struct {
	src   *LocalRequests
	ev    events.Event
	call  *events.ToolCallRequested
	fresh bool
	// claimed: its claim is durable with it (heldWorker.hand).
	claimed bool
	once    sync.Once
	holds   bool // a worker was taken for it and not yet freed (src.mu)
}

func (r *localRequest) Event() events.Event             { return r.ev }
func (r *localRequest) Call() *events.ToolCallRequested { return r.call }

func (r *localRequest) Ack() error { r.once.Do(func() { r.src.forget(r.ev.ID) }); return nil }

func (r *localRequest) Nak(delay time.Duration) error {
	r.once.Do(func() {
		if r.claimed {
			r.src.forget(r.ev.ID)
			return
		}
		again := &localRequest{src: r.src, ev: r.ev, call: r.call}
		if delay <= 0 {
			r.src.requeue(again)
			return
		}
		time.AfterFunc(delay, func() { r.src.requeue(again) })
	})
	return nil
}

// claimedLocal reports whether req's claim went into the log with it, so
// it runs without asking for one (heldWorker.hand).
func claimedLocal(req Request) bool {
	l, ok := req.(*localRequest)
	return ok && l.claimed
}

// freshLocal reports whether req was handed over by its session actor the
// moment it became durable (LocalRequests.Offer).
func freshLocal(req Request) bool {
	l, ok := req.(*localRequest)
	return ok && l.fresh
}
