package actors

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"
	"github.com/oklog/ulid/v2"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/gopool"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/workspace"
)

// testNode is what a node gives the actors, for tests: the tools by name,
// a fresh workspace per call, the real clock, and a registry that spawns a
// session's actor on its engine when first routed to (and again once it
// stopped).
type testNode struct {
	t      *testing.T
	engine *actor.Engine

	mu      sync.Mutex
	tools   map[string]*tool.Tool
	pids    map[string]*actor.PID
	spawned int
	// reviveAfter, when positive, rebuilds an actor that gave up during a
	// turn after that pause, as the node does.
	reviveAfter time.Duration
	deps        *Deps
	// wrap, if set, wraps each session actor (to watch its inbox).
	wrap func(actor.Receiver) actor.Receiver
}

var (
	_ Rules      = (*testNode)(nil)
	_ Tools      = (*testNode)(nil)
	_ Workspaces = (*testNode)(nil)
	_ Clock      = (*testNode)(nil)
	_ Sessions   = (*testNode)(nil)
)

// newTestNode returns a test node on its own engine (with a dead-letter
// handler that refuses what reaches a stopped actor, as the node's does)
// and the Deps of the actors it runs, on log, with tools.
func newTestNode(t *testing.T, log events.Log, tools ...*tool.Tool) *testNode {
	t.Helper()
	e, err := actor.NewEngine(actor.NewEngineConfig())
	if err != nil {
		t.Fatal(err)
	}
	refuseDeadLetters(e)
	n := &testNode{t: t, engine: e, tools: map[string]*tool.Tool{}, pids: map[string]*actor.PID{}}
	for _, tl := range tools {
		n.tools[tl.Name] = tl
	}
	// The session actors handle their messages, and append, on the pool's
	// workers, as on a node.
	goroutines := gopool.New(0)
	t.Cleanup(goroutines.Close)
	n.deps = &Deps{Log: log, Rules: n, Tools: n, Workspaces: n, Clock: n, Sessions: n, Goroutines: goroutines,
		Outputs: Outputs{MaxBytes: 1 << 20, MaxLines: 1000},
		// Two test nodes of one test share these, so both believe they
		// own a session: the log's guard decides.
		Node: "n1", Incarnation: "i1"}
	return n
}

// openOn routes to session id on n, opens it, and returns its actor.
func openOn(t *testing.T, n *testNode, id string) *actor.PID {
	t.Helper()
	pid, _ := n.Route("default", id)
	open := make(chan error, 1)
	n.engine.Send(pid, OpenSession{Workspace: "w", Reply: open})
	if err := <-open; err != nil {
		t.Fatal(err)
	}
	return pid
}

// refuseDeadLetters answers messages to a stopped actor, as the node does.
func refuseDeadLetters(e *actor.Engine) {
	e.Subscribe(e.SpawnFunc(func(c *actor.Context) {
		if dl, ok := c.Message().(actor.DeadLetterEvent); ok {
			Refuse(dl.Message, ErrSessionUnavailable)
		}
	}, "deadletters"))
}

func (n *testNode) Settings(string, string) Settings {
	return Settings{Cap: 8, ParallelToolCalls: true, MaxAttempts: 1, Plan: core.PlanInput{
		Lookup: func(name string) (*tool.Tool, bool) { return n.Resolve("", name) },
	}}
}

func (n *testNode) Resolve(_, name string) (*tool.Tool, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	tl, ok := n.tools[name]
	return tl, ok
}

func (n *testNode) Searchable() []*tool.Tool { return nil }

func (n *testNode) Workspace(string, string) (*workspace.Dir, error) {
	return workspace.OpenDir(n.t.TempDir())
}

func (n *testNode) Now() time.Time { return time.Now() }
func (n *testNode) NewID() string  { return ulid.Make().String() }

func (n *testNode) Route(tenant, session string) (*actor.PID, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := tenant + "/" + session
	if pid, ok := n.pids[k]; ok {
		return pid, nil
	}
	var pid *actor.PID
	stopped := func() {
		n.mu.Lock()
		if n.pids[k] == pid {
			delete(n.pids, k)
		}
		n.mu.Unlock()
	}
	n.spawned++ // each actor its own id: a stopped one's may linger a moment
	produce := NewSession(n.deps, tenant, session, stopped)
	if wrap := n.wrap; wrap != nil {
		inner := produce
		produce = func() actor.Receiver { return wrap(inner()) }
	}
	// No restarts, as the node spawns them: a session actor handles its
	// own panics (Session.crashed).
	pid = n.engine.Spawn(produce, "session", actor.WithID(fmt.Sprintf("%s-%d", session, n.spawned)), actor.WithMaxRestarts(0))
	n.pids[k] = pid
	return pid, nil
}

func (n *testNode) Passivate(tenant, session string, pid *actor.PID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pids[tenant+"/"+session] == pid {
		delete(n.pids, tenant+"/"+session)
	}
}

func (n *testNode) Revive(tenant, session string) {
	if n.reviveAfter > 0 {
		time.AfterFunc(n.reviveAfter, func() { _, _ = n.Route(tenant, session) })
	}
}

// startPools starts the node's tool actors, one per class with 4 workers,
// as the Calls the session actors hand their requests to.
func (n *testNode) startPools(classes ...string) *Pools {
	slots := map[tool.Concurrency]Slots{}
	for _, c := range classes {
		slots[tool.Concurrency(c)] = Slots{Workers: 4}
	}
	p := NewPools(n.deps, slots)
	n.deps.Calls = p
	p.Spawn(n.engine)
	n.t.Cleanup(func() { p.Stop(time.Second) })
	return p
}
