package actors

import (
	"sync"

	"github.com/anthdm/hollywood/actor"
)

// handoff lets a tool actor give a session actor a message straight, while
// the actor is inside an activation (a Receive), instead of through its
// hollywood inbox: hollywood starts a new goroutine, whose stack grows again,
// for each burst of messages to an idle actor, and a read-only call's
// outcome would otherwise arrive just after the actor went idle
// (docs/performance.md, "Latency").
//
// The session actor opens it when it hands a call to a tool actor before
// the call's request is durable (Session.decide), may wait on it for that
// call's outcome while it holds the append the outcome is to join
// (Session.flush), and closes it before its Receive returns, serving what
// was handed over meanwhile. A message offered while it is closed is
// refused and goes through the inbox: nothing handed over is left unserved.
// Safe for concurrent use.
type handoff struct {
	pid  *actor.PID
	wake chan struct{} // a token once something was handed over

	mu   sync.Mutex
	open bool
	got  []Message
}

func newHandoff(pid *actor.PID) *handoff {
	return &handoff{pid: pid, wake: make(chan struct{}, 1)}
}

// offer hands m over if the actor is inside an activation with the handoff
// open, and reports whether it did; false: send m to the actor's inbox.
func (h *handoff) offer(m Message) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.open {
		return false
	}
	h.got = append(h.got, m)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return true
}

// start opens the handoff.
func (h *handoff) start() {
	h.mu.Lock()
	h.open = true
	h.mu.Unlock()
}

// take returns what was handed over since the last take.
func (h *handoff) take() []Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	got := h.got
	h.got = nil
	return got
}

// close refuses further offers and returns what was handed over and not
// yet taken, for the actor to serve before it leaves its activation.
func (h *handoff) close() []Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.open = false
	got := h.got
	h.got = nil
	return got
}

// isOpen reports whether offers are taken now.
func (h *handoff) isOpen() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// handoffs finds the open handoff of a session actor by its PID.
type handoffs struct{ m sync.Map } // actor id → *handoff

func (hs *handoffs) add(h *handoff) { hs.m.Store(h.pid.ID, h) }

func (hs *handoffs) remove(h *handoff) { hs.m.CompareAndDelete(h.pid.ID, h) }

// offer hands m straight to the actor pid if it is inside an activation
// with its handoff open (handoff.offer).
func (hs *handoffs) offer(pid *actor.PID, m Message) bool {
	v, ok := hs.m.Load(pid.ID)
	if !ok {
		return false
	}
	h := v.(*handoff)
	return h.pid.Equals(pid) && h.offer(m)
}
