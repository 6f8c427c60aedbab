package actors

import (
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
)

// Pools are a node's tool actors: one Pool per concurrency class, each fed
// by its class's LocalRequests. They are the Calls the session actors hand
// their durable requests to. Safe for concurrent use once started.
type Pools struct {
	deps    *Deps
	classes []decl.Class
	pools   map[decl.Class]*Pool
	queues  map[decl.Class]*LocalRequests
	pids    []*actor.PID
	engine  *actor.Engine
}

var (
	_ Calls       = (*Pools)(nil)
	_ workerTaker = (*Pools)(nil)
)

// NewPools returns the tool actors of the classes in slots, each running
// at most its Workers of calls at once, shared between tenants as Slots
// says. Spawn starts them.
func NewPools(deps *Deps, slots map[decl.Class]Slots) *Pools {
	p := &Pools{deps: deps, pools: map[decl.Class]*Pool{}, queues: map[decl.Class]*LocalRequests{}}
	for _, c := range decl.Classes() {
		s, ok := slots[c]
		if !ok {
			continue
		}
		q := NewLocalRequests(string(c), s)
		p.classes = append(p.classes, c)
		p.queues[c] = q
		p.pools[c] = NewPool(deps, string(c), q)
	}
	return p
}

// Spawn starts each pool's actor on e.
func (p *Pools) Spawn(e *actor.Engine) {
	p.engine = e
	for _, c := range p.classes {
		p.pids = append(p.pids, e.Spawn(p.pools[c].Producer(), "tools", actor.WithID(string(c)), actor.WithInboxSize(16)))
	}
}

// Offer queues a durable request for the tool actor of its class (an
// undeclared class is exclusive: decl.Class.OrStrictest). A class with no
// tool actor here leaves the call to the session's next owner, which
// requests it again.
func (p *Pools) Offer(ev events.Event, r *events.ToolCallRequested, fresh bool) {
	q, ok := p.queues[r.Concurrency.OrStrictest()]
	if !ok {
		p.deps.log().Error("a request's concurrency class has no tool actor; the call waits until the session's next owner requests it again", "event", ev.ID, "session", ev.Session, "class", r.Concurrency)
		return
	}
	q.Offer(ev, r, fresh)
}

// takeWorker takes a worker of r's class for it as its session decides
// it, while one is free and no request waits (LocalRequests.take), and the
// class's tool actor is fetching; the zero heldWorker otherwise.
func (p *Pools) takeWorker(tenant string, r *events.ToolCallRequested) heldWorker {
	c := r.Concurrency.OrStrictest()
	q, ok := p.queues[c]
	if !ok || p.pools[c].fetchCtx.Err() != nil {
		return heldWorker{}
	}
	return q.take(tenant)
}

// Running reports whether a tool actor here runs the call now.
func (p *Pools) Running(tenant, session string, ref events.CallRef) bool {
	for _, c := range p.classes {
		if p.pools[c].Running(tenant, session, ref) {
			return true
		}
	}
	return false
}

// Run reports how far a call handed to a tool actor here got (Pool.Run).
func (p *Pools) Run(tenant, session string, ref events.CallRef) (CallRun, bool) {
	for _, c := range p.classes {
		if r, ok := p.pools[c].Run(tenant, session, ref); ok {
			return r, true
		}
	}
	return CallRun{}, false
}

// Reconsider has every class look again at its requests waiting, after
// the tenants' shares of the workers changed (LocalRequests.Reconsider).
func (p *Pools) Reconsider() {
	for _, c := range p.classes {
		p.queues[c].Reconsider()
	}
}

// Interrupt cancels the context of the call, on whichever tool actor runs
// it.
func (p *Pools) Interrupt(tenant, session string, ref events.CallRef) {
	for _, c := range p.classes {
		if p.pools[c].Interrupt(tenant, session, ref) {
			return
		}
	}
}

// Stop stops fetching, lets running calls finish within grace, then
// cancels them (Pool.Stop), and drops the requests still queued: the
// sessions' next owners request them again.
func (p *Pools) Stop(grace time.Duration) {
	for _, c := range p.classes {
		p.pools[c].Stop(grace)
	}
	for _, c := range p.classes {
		p.queues[c].Stop()
	}
}

// Poison stops the pools' actors and waits for them (after Stop).
func (p *Pools) Poison() {
	if p.engine == nil {
		return
	}
	for _, pid := range p.pids {
		<-p.engine.Poison(pid).Done()
	}
}
