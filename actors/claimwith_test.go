package actors

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// countAppends passes every append to the log it wraps and keeps the event
// types of each one the log stored, in order, by session.
type countAppends struct {
	events.Log
	mu      sync.Mutex
	batches map[string][][]events.Type
}

func (l *countAppends) Append(ctx context.Context, tenant, session string, expected uint64, evs []events.Event) error {
	if err := l.Log.Append(ctx, tenant, session, expected, evs); err != nil {
		return err
	}
	types := make([]events.Type, len(evs))
	for i, ev := range evs {
		types[i] = ev.Type
	}
	l.mu.Lock()
	if l.batches == nil {
		l.batches = map[string][][]events.Type{}
	}
	l.batches[session] = append(l.batches[session], types)
	l.mu.Unlock()
	return nil
}

// since returns the batches of session stored after its first n.
func (l *countAppends) since(session string, n int) [][]events.Type {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches[session][n:])
}

// count is how many appends of session were stored.
func (l *countAppends) count(session string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.batches[session])
}

// countingTool is a side-effecting, never-replayed tool (a claimed call)
// that counts its runs and waits for release, if set, before it returns.
func countingTool(t *testing.T, name string, runs *atomic.Int32, release <-chan struct{}) *tool.Tool {
	t.Helper()
	tl, err := tool.New(name, "a side effect", func(ctx context.Context, _ noArgs) (tool.Result, error) {
		runs.Add(1)
		if release != nil {
			select {
			case <-release:
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}
		return tool.Text("done"), nil
	}, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	return tl
}

// submitOn sends a turn of one call of tool name to session id and returns
// the channel its completion is answered on.
func submitOn(n *testNode, id, turn, name string) chan TurnReply {
	pid, _ := n.Route("default", id)
	reply := make(chan TurnReply, 1)
	n.engine.Send(pid, SubmitTurn{ID: turn, Wait: true, Reply: reply,
		Calls: []events.CallSpec{{ID: "c", Name: name, Arguments: json.RawMessage(`{}`)}}})
	return reply
}

func awaitTurn(t *testing.T, reply chan TurnReply) TurnReply {
	t.Helper()
	select {
	case r := <-reply:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatal("the turn did not complete within 30s")
	}
	return TurnReply{}
}

// flat is the event types of batches, in order.
func flat(batches [][]events.Type) []events.Type {
	var out []events.Type
	for _, b := range batches {
		out = append(out, b...)
	}
	return out
}

// claimedCallEvents are the events of a one-call turn of a claimed call
// that completes.
var claimedCallEvents = []events.Type{events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted,
	events.TypeToolCallCompleted, events.TypeResultCommitted, events.TypeTurnCompleted}

// TestClaimedCallRecordsItsClaimWithItsRequest: a side-effecting call that
// runs at once on this node (its class has a free worker, nothing to
// checkpoint, no fleet cap) costs its turn two appends on a real JetStream,
// not three: the turn with its request and its claim, then the outcome and
// the commit. The log holds the same events in the same order as on the
// three-append path, the claim is durable before the call runs, and the
// call runs once.
func TestClaimedCallRecordsItsClaimWithItsRequest(t *testing.T) {
	log := &countAppends{Log: newLog(t)}
	var runs atomic.Int32
	n := newTestNode(t, log, countingTool(t, "mutate", &runs, nil))
	n.startPools("exclusive")
	openOn(t, n, "s1")
	before := log.count("s1")

	awaitTurn(t, submitOn(n, "s1", "t1", "mutate"))
	got := log.since("s1", before)
	if len(got) != 2 {
		t.Fatalf("the turn took %d appends %v, want 2", len(got), got)
	}
	if !slices.Contains(got[0], events.TypeToolCallRequested) || !slices.Contains(got[0], events.TypeToolCallStarted) {
		t.Errorf("first append %v, want the request and its claim together", got[0])
	}
	if f := flat(got); !slices.Equal(f, claimedCallEvents) {
		t.Errorf("events %v, want %v", f, claimedCallEvents)
	}
	if r := runs.Load(); r != 1 {
		t.Errorf("the call ran %d times, want 1", r)
	}
}

// TestClaimedCallFallsBack: a side-effecting call whose claim cannot be
// decided with its request takes the path with the claim asked for by the
// tool actor: three appends, the same events in the same order, one run.
// Its tool declares files it will mutate (they are checkpointed before the
// claim), or no worker of its class is free when its request goes out.
func TestClaimedCallFallsBack(t *testing.T) {
	cases := []struct {
		name string
		// prepare returns the tool to call, after setting up the node.
		prepare func(t *testing.T, n *testNode, runs *atomic.Int32) string
	}{
		{name: "files to checkpoint", prepare: func(t *testing.T, n *testNode, runs *atomic.Int32) string {
			tl := countingTool(t, "write", runs, nil)
			tl.MutatedPaths = func(json.RawMessage) []string { return []string{"out.txt"} }
			n.tools[tl.Name] = tl
			n.startPools("exclusive")
			return "write"
		}},
		{name: "no free worker", prepare: func(t *testing.T, n *testNode, runs *atomic.Int32) string {
			n.tools["mutate"] = countingTool(t, "mutate", runs, nil)
			var held atomic.Int32
			release := make(chan struct{})
			n.tools["hold"] = countingTool(t, "hold", &held, release)
			// One worker, held by another session's call until the
			// request of the call under test is durable.
			p := NewPools(n.deps, map[tool.Concurrency]Slots{"exclusive": {Workers: 1}})
			n.deps.Calls = p
			p.Spawn(n.engine)
			t.Cleanup(func() { p.Stop(time.Second) })
			openOn(t, n, "s0")
			done := submitOn(n, "s0", "t0", "hold")
			for held.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			t.Cleanup(func() { awaitTurn(t, done) })
			go func() {
				// Free the worker once the request waits for it.
				for p.queues["exclusive"].Len() == 0 {
					time.Sleep(time.Millisecond)
				}
				close(release)
			}()
			return "mutate"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := &countAppends{Log: newLog(t)}
			var runs atomic.Int32
			n := newTestNode(t, log)
			name := tc.prepare(t, n, &runs)
			openOn(t, n, "s1")
			before := log.count("s1")

			awaitTurn(t, submitOn(n, "s1", "t1", name))
			got := log.since("s1", before)
			if len(got) != 3 {
				t.Fatalf("the turn took %d appends %v, want 3", len(got), got)
			}
			want := claimedCallEvents
			if name == "write" {
				want = slices.Insert(slices.Clone(want), 2, events.TypeFileCheckpointed)
			}
			if f := flat(got); !slices.Equal(f, want) {
				t.Errorf("events %v, want %v", f, want)
			}
			if r := runs.Load(); r != 1 {
				t.Errorf("the call ran %d times, want 1", r)
			}
		})
	}
}

// holdClaims stores every append, but waits, before storing the first one
// that holds a ToolCallStarted, until release is closed, having closed
// holding.
type holdClaims struct {
	events.Log
	once             sync.Once
	holding, release chan struct{}
}

func (l *holdClaims) Append(ctx context.Context, tenant, session string, expected uint64, evs []events.Event) error {
	for _, ev := range evs {
		if ev.Type == events.TypeToolCallStarted {
			l.once.Do(func() {
				close(l.holding)
				<-l.release
			})
		}
	}
	return l.Log.Append(ctx, tenant, session, expected, evs)
}

// TestClaimedCallWhoseHandoffFails: the node's tool actors stop while the
// append of a request and its claim is under way, so once it is durable the
// call cannot be handed to the worker taken for it. It never runs, and it
// fails saying so (not indeterminate: this node knows nothing of it ran),
// and the turn completes.
func TestClaimedCallWhoseHandoffFails(t *testing.T) {
	log := &holdClaims{Log: newLog(t), holding: make(chan struct{}), release: make(chan struct{})}
	var runs atomic.Int32
	n := newTestNode(t, log, countingTool(t, "mutate", &runs, nil))
	pools := n.startPools("exclusive")
	openOn(t, n, "s1")

	done := submitOn(n, "s1", "t1", "mutate")
	select {
	case <-log.holding:
	case <-time.After(10 * time.Second):
		t.Fatal("no append held a claim: the claim did not go out with its request")
	}
	pools.Stop(time.Second)
	close(log.release)
	awaitTurn(t, done)

	evs, err := log.Read(context.Background(), "default", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []events.Type
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	want := []events.Type{events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted,
		events.TypeToolCallFailed, events.TypeResultCommitted, events.TypeTurnCompleted}
	if i := slices.Index(types, events.TypeTurnReceived); i < 0 || !slices.Equal(types[i:], want) {
		t.Errorf("events %v, want %v after the session's opening", types, want)
	}
	for _, ev := range evs {
		p, err := events.Decode(ev)
		if err != nil {
			t.Fatal(err)
		}
		if f, ok := p.(*events.ToolCallFailed); ok && (!f.Final || !strings.Contains(f.Error, "did not run")) {
			t.Errorf("%+v: want a final failure saying the call did not run", f)
		}
	}
	if r := runs.Load(); r != 0 {
		t.Errorf("the call ran %d times, want 0", r)
	}
}

// TestClaimRecordedWithALostAppendAnswerSettlesAsLost: the append of a
// request and its claim is stored, but its answers are lost, so the
// session actor gives up (freeing the worker taken for the call) and is
// rebuilt from the log, where the call is claimed and runs nowhere: it is
// settled as lost (never-replayed: indeterminate) and never runs.
func TestClaimRecordedWithALostAppendAnswerSettlesAsLost(t *testing.T) {
	forLogs(t, func(t *testing.T, base events.Log) {
		log := &loseAnswer{Log: base}
		var runs atomic.Int32
		n := newTestNode(t, log, countingTool(t, "mutate", &runs, nil))
		n.reviveAfter = 100 * time.Millisecond
		pools := n.startPools("exclusive")
		openOn(t, n, "s1")
		submitOn(n, "s1", "t1", "mutate")
		deadline := time.Now().Add(30 * time.Second)
		for !turnCompleted(t, log, "default", "s1") {
			if time.Now().After(deadline) {
				t.Fatal("the turn never completed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		evs, _ := log.Read(context.Background(), "default", "s1", 0)
		started, indeterminate := 0, 0
		for _, ev := range evs {
			switch ev.Type {
			case events.TypeToolCallStarted:
				started++
			case events.TypeToolCallIndeterminate:
				indeterminate++
			}
		}
		if started != 1 || indeterminate != 1 {
			t.Errorf("%d ToolCallStarted and %d ToolCallIndeterminate, want 1 and 1", started, indeterminate)
		}
		if r := runs.Load(); r != 0 {
			t.Errorf("the call ran %d times, want 0", r)
		}
		// The worker taken for it was freed.
		q := pools.queues["exclusive"]
		q.mu.Lock()
		held := q.fair.held
		q.mu.Unlock()
		if held != 0 {
			t.Errorf("%d workers still held", held)
		}
	})
}

// lease is a Fleet of one node whose lease can lapse: while it has, Gate
// refuses.
type lease struct{ lapsed atomic.Bool }

func (l *lease) Gate() error {
	if l.lapsed.Load() {
		return errors.New("the node's lease lapsed")
	}
	return nil
}
func (l *lease) Place(string, string, Owner) Placement      { return Placement{Take: true} }
func (l *lease) Owned(string, string, uint64, bool, string) {}

// lapseAfterClaim stores every append; once it stored the first that holds
// a ToolCallStarted, the node's lease lapses for a while.
type lapseAfterClaim struct {
	events.Log
	lease *lease
	once  sync.Once
}

func (l *lapseAfterClaim) Append(ctx context.Context, tenant, session string, expected uint64, evs []events.Event) error {
	if err := l.Log.Append(ctx, tenant, session, expected, evs); err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Type == events.TypeToolCallStarted {
			l.once.Do(func() {
				l.lease.lapsed.Store(true)
				time.AfterFunc(time.Second, func() { l.lease.lapsed.Store(false) })
			})
		}
	}
	return nil
}

// TestClaimedCallWhenTheLeaseLapses: the node's lease lapses just as the
// append of a request and its claim is stored, so the tool actor may not
// start the call: it never runs, and it settles as a claimed call whose
// node was lost (never-replayed: indeterminate) once the node may act
// again.
func TestClaimedCallWhenTheLeaseLapses(t *testing.T) {
	fleet := &lease{}
	log := &lapseAfterClaim{Log: newLog(t), lease: fleet}
	var runs atomic.Int32
	n := newTestNode(t, log, countingTool(t, "mutate", &runs, nil))
	n.deps.Fleet = fleet
	n.reviveAfter = 100 * time.Millisecond
	n.startPools("exclusive")
	openOn(t, n, "s1")
	submitOn(n, "s1", "t1", "mutate")
	deadline := time.Now().Add(30 * time.Second)
	for !turnCompleted(t, log, "default", "s1") {
		if time.Now().After(deadline) {
			t.Fatal("the turn never completed")
		}
		time.Sleep(20 * time.Millisecond)
		if !fleet.lapsed.Load() {
			// Once it holds its lease again the node brings back its
			// sessions that stopped mid-work (node's onLeaseRegained):
			// a message to the session does.
			pid, _ := n.Route("default", "s1")
			n.engine.Send(pid, GetTurn{ID: "t1", Reply: make(chan TurnReply, 1)})
		}
	}
	evs, _ := log.Read(context.Background(), "default", "s1", 0)
	var types []events.Type
	for _, ev := range evs {
		types = append(types, ev.Type)
	}
	if !slices.Contains(types, events.TypeToolCallIndeterminate) || slices.Contains(types, events.TypeToolCallCompleted) {
		t.Errorf("events %v, want the call indeterminate", types)
	}
	if r := runs.Load(); r != 0 {
		t.Errorf("the call ran %d times, want 0", r)
	}
}
