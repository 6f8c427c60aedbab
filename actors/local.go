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
// Safe for concurrent use. Offer never blocks (a session actor calls it).
type LocalRequests struct {
	class string
	ready chan struct{} // has a token while queue may be non-empty

	mu      sync.Mutex
	queue   []*localRequest
	known   map[string]bool // ids queued, in a worker's hands, or due back after a Nak
	stopped bool
}

// NewLocalRequests returns the empty source of class.
func NewLocalRequests(class string) *LocalRequests {
	return &LocalRequests{class: class, ready: make(chan struct{}, 1), known: map[string]bool{}}
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

// push queues req; the caller holds mu.
func (l *LocalRequests) push(req *localRequest) {
	l.queue = append(l.queue, req)
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Next returns the oldest queued request, waiting until there is one, ctx
// ends or the source stops.
func (l *LocalRequests) Next(ctx context.Context) (Request, error) {
	for {
		l.mu.Lock()
		switch {
		case l.stopped:
			l.mu.Unlock()
			return nil, ErrSourceStopped
		case len(l.queue) > 0:
			req := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			if len(l.queue) > 0 {
				select { // another worker may take the next one at once
				case l.ready <- struct{}{}:
				default:
				}
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

// Len reports how many requests wait for a worker.
func (l *LocalRequests) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// Stop drops every queued request and refuses new ones: the node is going
// away, and the sessions' next owners request their unclaimed calls again.
func (l *LocalRequests) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.queue = nil
	l.known = map[string]bool{}
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// forget settles a request for good: a later offer of it queues it again.
func (l *LocalRequests) forget(id string) {
	l.mu.Lock()
	delete(l.known, id)
	l.mu.Unlock()
}

// requeue puts a request a worker gave back at the end of the queue.
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
// asks the session whether it is still current).
type localRequest struct {
	src   *LocalRequests
	ev    events.Event
	call  *events.ToolCallRequested
	fresh bool
	once  sync.Once
}

func (r *localRequest) Event() events.Event             { return r.ev }
func (r *localRequest) Call() *events.ToolCallRequested { return r.call }

func (r *localRequest) Ack() error { r.once.Do(func() { r.src.forget(r.ev.ID) }); return nil }

func (r *localRequest) Nak(delay time.Duration) error {
	r.once.Do(func() {
		again := &localRequest{src: r.src, ev: r.ev, call: r.call}
		if delay <= 0 {
			r.src.requeue(again)
			return
		}
		time.AfterFunc(delay, func() { r.src.requeue(again) })
	})
	return nil
}

// freshLocal reports whether req was handed over by its session actor the
// moment it became durable (LocalRequests.Offer).
func freshLocal(req Request) bool {
	l, ok := req.(*localRequest)
	return ok && l.fresh
}
