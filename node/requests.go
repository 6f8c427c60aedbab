package node

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/events"
)

// requests returns the request source of a concurrency class. Only the
// owner of a session runs its calls (docs/spec.md §7), and the owner is the
// node whose session actor appended the request, so the hand-off stays in
// this process: the session actors offer each request the moment it is
// durable (dispatch), and the class's tool actor takes it from memory, with
// no round trip through a JetStream consumer (docs/architecture.md, "How a
// call reaches its tool actor"; why nothing is lost: actors.LocalRequests).
func (n *Node) requests(class string) *actors.LocalRequests {
	src := actors.NewLocalRequests(class)
	if n.local == nil {
		n.local = map[string]*actors.LocalRequests{}
	}
	n.local[class] = src
	n.streams = append(n.streams, src)
	return src
}

// dispatch is the session actors' Deps.Dispatch: it queues a durable request
// for the tool actor of its class.
func (n *Node) dispatch(ev events.Event, r *events.ToolCallRequested, fresh bool) {
	class := r.Concurrency.OrStrictest()
	src, ok := n.local[string(class)]
	if !ok {
		n.logf("request %s of session %s: concurrency class %q has no tool actor; the call waits until the session's next owner requests it again", ev.ID, ev.Session, class)
		return
	}
	src.Offer(ev, r, fresh)
}

// dropOldConsumers deletes the JetStream request consumers an earlier
// version of callsheet kept for this node (one per class, replicated in a
// fleet): nothing reads them now, and each replicated consumer is a Raft
// group the servers keep. Best effort: a consumer left behind goes away by
// itself after its inactive threshold (24 h).
func (n *Node) dropOldConsumers(ctx context.Context, js jetstream.JetStream, stream string, classes []string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, c := range classes {
		err := js.DeleteConsumer(ctx, stream, "cs-req-"+c+"-"+n.opts.Name)
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			n.logf("dropping the old request consumer of class %s: %v (it expires by itself)", c, err)
		}
	}
}

// reviveAfter is how long a session actor that gave up waits before the node
// rebuilds it (Deps.Revive), and reviveTries how often the node tries while
// the rebuilt actor cannot load the log (a stream's leader election takes
// 4-9 s: docs/facts.md), the wait doubling from one try to the next.
const (
	reviveAfter = time.Second
	reviveTries = 5
)

// revive is the session actors' Deps.Revive: after reviveAfter, spawn the
// session's actor again, unless the node closed; while the new actor stops
// before it served (its log could not be read), try again, at most
// reviveTries times. The timers' goroutines are the runtime's and end with
// their functions; the rebuilt actor decides from the log whether this node
// still owns the session.
func (n *Node) revive(tenant, session string) {
	var try func(attempt int, wait time.Duration)
	try = func(attempt int, wait time.Duration) {
		time.AfterFunc(wait, func() {
			if n.isClosed() {
				return
			}
			if _, err := n.route(tenant, session); err != nil {
				if !errors.Is(err, ErrClosed) {
					n.logf("session %s/%s: rebuilding its actor: %v", tenant, session, err)
				}
				return
			}
			if attempt >= reviveTries {
				return
			}
			// Check back once the actor had time to load: if no actor
			// serves the session then, its load failed.
			time.AfterFunc(2*wait, func() {
				n.mu.Lock()
				_, alive := n.sessions[key(tenant, session)]
				n.mu.Unlock()
				if !alive && !n.isClosed() {
					try(attempt+1, wait*2)
				}
			})
		})
	}
	try(1, reviveAfter)
}
