package actors

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

func localReq(id string) (events.Event, *events.ToolCallRequested) {
	return tenantReq("t", id)
}

func tenantReq(tenant, id string) (events.Event, *events.ToolCallRequested) {
	return events.Event{ID: id, Tenant: tenant, Session: "s", Type: events.TypeToolCallRequested},
		&events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: id}, Attempt: 1}
}

func nextWithin(t *testing.T, l *LocalRequests, d time.Duration) (Request, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return l.Next(ctx)
}

// TestLocalRequestsOneOfferUntilSettled: a request offered twice (fresh from
// its append, then again by a rebuilt actor) is queued once, and once a
// worker settled it a new offer queues it again.
func TestLocalRequestsOneOfferUntilSettled(t *testing.T) {
	l := NewLocalRequests("parallel_safe", Slots{Workers: 4})
	ev, r := localReq("a")
	if !l.Offer(ev, r, true) {
		t.Fatal("first offer refused")
	}
	if l.Offer(ev, r, false) {
		t.Fatal("second offer of a queued request accepted")
	}
	req, err := nextWithin(t, l, time.Second)
	if err != nil || req.Event().ID != "a" || !freshLocal(req) {
		t.Fatalf("Next = %v, %v; want fresh a", req, err)
	}
	if l.Offer(ev, r, false) {
		t.Fatal("offer of a request in a worker's hands accepted")
	}
	if _, err := nextWithin(t, l, 50*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next on an empty source = %v, want a timeout", err)
	}
	_ = req.Ack()
	if !l.Offer(ev, r, false) {
		t.Fatal("offer after the ack refused")
	}
}

// TestLocalRequestsNakComesBack: a Nak gives the request back, at once or
// after its delay, and no longer fresh (the next worker asks the session).
func TestLocalRequestsNakComesBack(t *testing.T) {
	l := NewLocalRequests("exclusive", Slots{Workers: 4})
	for _, delay := range []time.Duration{0, 100 * time.Millisecond} {
		ev, r := localReq("n" + delay.String())
		l.Offer(ev, r, true)
		req, _ := nextWithin(t, l, time.Second)
		start := time.Now()
		_ = req.Nak(delay)
		_ = req.Nak(0) // settling twice gives it back once
		again, err := nextWithin(t, l, 5*time.Second)
		if err != nil || again.Event().ID != ev.ID {
			t.Fatalf("after Nak(%s): %v, %v", delay, again, err)
		}
		if time.Since(start) < delay {
			t.Errorf("Nak(%s) came back after %s", delay, time.Since(start))
		}
		if freshLocal(again) {
			t.Errorf("a request given back is still fresh")
		}
		if l.Len() != 0 {
			t.Errorf("%d queued after taking the one given back, want 0", l.Len())
		}
		_ = again.Ack()
	}
}

// TestLocalRequestsStop: a stopped source drops what it holds, refuses
// offers, and ends a waiting Next.
func TestLocalRequestsStop(t *testing.T) {
	l := NewLocalRequests("exclusive", Slots{Workers: 4})
	ev, r := localReq("a")
	l.Offer(ev, r, true)
	done := make(chan error, 1)
	l2 := NewLocalRequests("exclusive", Slots{Workers: 4})
	go func() { _, err := l2.Next(context.Background()); done <- err }()
	l.Stop()
	l2.Stop()
	if err := <-done; !errors.Is(err, ErrSourceStopped) {
		t.Fatalf("waiting Next after Stop = %v, want ErrSourceStopped", err)
	}
	if _, err := nextWithin(t, l, time.Second); !errors.Is(err, ErrSourceStopped) {
		t.Fatalf("Next after Stop = %v", err)
	}
	if l.Offer(ev, r, true) {
		t.Fatal("offer to a stopped source accepted")
	}
}

// loseAnswer stores every append, but reports the appends holding the first
// request it sees as failed, for as many tries as the session actor makes
// (appendAttempts): what lost acknowledgements do, so the actor gives up
// and reloads although the request is in the log.
type loseAnswer struct {
	events.Log
	mu    sync.Mutex
	first string
	lost  int
}

func (l *loseAnswer) Append(ctx context.Context, tenant, session string, expected uint64, evs []events.Event) error {
	if err := l.Log.Append(ctx, tenant, session, expected, evs); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ev := range evs {
		if ev.Type == events.TypeToolCallRequested && l.first == "" {
			l.first = ev.ID
		}
		if ev.ID == l.first && l.lost < appendAttempts {
			l.lost++
			return errors.New("nats: timeout (the answer was lost; the append is stored)")
		}
	}
	return nil
}

// TestRequestWhoseAppendAnswerWasLostStillRuns: the append that stores a
// request is stored, but its answers are lost, so the session actor never
// hands the request over and gives up. Nobody sends the session anything
// more: the actor asks to be rebuilt (Sessions.Revive), and the rebuilt actor
// (same process, same ownership: nothing requests the call again) hands
// over the request it finds current in the log; the call runs exactly once.
// Without either the turn never completes. The tool declares the files it
// mutates (none), so its claim is asked for once the request is durable,
// not recorded with it (Session.handover; for a claim recorded with its
// request see TestClaimRecordedWithALostAppendAnswerSettlesAsLost).
func TestRequestWhoseAppendAnswerWasLostStillRuns(t *testing.T) {
	forLogs(t, func(t *testing.T, base events.Log) { testRequestWhoseAppendAnswerWasLostStillRuns(t, base) })
}

func testRequestWhoseAppendAnswerWasLostStillRuns(t *testing.T, base events.Log) {
	log := &loseAnswer{Log: base}
	var runs atomic.Int32
	mutate, err := tool.New("mutate", "a side effect", func(context.Context, noArgs) (tool.Result, error) {
		runs.Add(1)
		return tool.Text("done"), nil
	}, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	mutate.MutatedPaths = func(json.RawMessage) []string { return nil }
	n := newTestNode(t, log, mutate)
	// As the node does (Sessions.Revive): rebuild an actor that gave up.
	n.reviveAfter = 100 * time.Millisecond
	n.startPools("exclusive")
	e := n.engine

	p := openOn(t, n, "s1")
	// The turn's only message: its caller hears that the actor gave up;
	// nobody sends the session anything after that.
	e.Send(p, SubmitTurn{ID: "t1", Reply: make(chan TurnReply, 1),
		Calls: []events.CallSpec{{ID: "c", Name: "mutate", Arguments: json.RawMessage(`{}`)}}})
	deadline := time.Now().Add(30 * time.Second)
	for !turnCompleted(t, log, "default", "s1") {
		if time.Now().After(deadline) {
			t.Fatal("the turn never completed: nothing rebuilt the actor, or its request was never handed to the tool actor")
		}
		time.Sleep(20 * time.Millisecond)
	}
	log.mu.Lock()
	lost := log.lost
	log.mu.Unlock()
	if lost < appendAttempts {
		t.Fatalf("%d append answers lost, want %d: the actor did not give up, so the test tested nothing", lost, appendAttempts)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times, want 1", n)
	}
}

// turnCompleted reports whether the session's log holds a TurnCompleted.
func turnCompleted(t *testing.T, log events.Log, tenant, session string) bool {
	t.Helper()
	evs, err := log.Read(context.Background(), tenant, session, 0)
	if err != nil {
		return false
	}
	for _, ev := range evs {
		if ev.Type == events.TypeTurnCompleted {
			return true
		}
	}
	return false
}

// refuseRequests refuses, without storing anything, every append that
// holds a request: the log never records one.
type refuseRequests struct{ events.Log }

func (l refuseRequests) Append(ctx context.Context, tenant, session string, expected uint64, evs []events.Event) error {
	for _, ev := range evs {
		if ev.Type == events.TypeToolCallRequested {
			return errors.New("nats: no response from stream (nothing stored)")
		}
	}
	return l.Log.Append(ctx, tenant, session, expected, evs)
}

// TestOnlyReadOnlyCallsRunBeforeTheirRequestIsDurable: a read-only, safe
// call's request goes to the tool actor as soon as it is decided (its events
// may be batched: docs/spec.md §4), but a side-effecting call must not run
// unless its request, then its claim, are in the log. With a log that never
// stores a request, the read-only tool may run; the side-effecting one must
// never. Two layers hold this: such a request goes to the tool actor only
// once durable (Session.handover), and the tool actor runs it only after a
// claim, which is durable only after the request (unclaimedOK); the test
// fails with both broken (seen), either alone still holds it.
func TestOnlyReadOnlyCallsRunBeforeTheirRequestIsDurable(t *testing.T) {
	forLogs(t, func(t *testing.T, base events.Log) { testOnlyReadOnlyCallsRunBeforeTheirRequestIsDurable(t, base) })
}

func testOnlyReadOnlyCallsRunBeforeTheirRequestIsDurable(t *testing.T, base events.Log) {
	log := refuseRequests{Log: base}
	var reads, writes atomic.Int32
	look, err := tool.New("look", "reads", func(context.Context, noArgs) (tool.Result, error) {
		reads.Add(1)
		return tool.Text("seen"), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	mutate, err := tool.New("mutate", "a side effect", func(context.Context, noArgs) (tool.Result, error) {
		writes.Add(1)
		return tool.Text("done"), nil
	}, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, log, look, mutate)
	n.startPools("exclusive", "parallel_safe")
	e := n.engine
	openOn(t, n, "s1")
	for _, name := range []string{"look", "mutate"} {
		reply := make(chan TurnReply, 1)
		p, _ := n.Route("default", "s1")
		e.Send(p, SubmitTurn{ID: "t-" + name, Wait: true, Reply: reply,
			Calls: []events.CallSpec{{ID: "c", Name: name, Arguments: json.RawMessage(`{}`)}}})
		select {
		case r := <-reply:
			if r.Err == nil {
				t.Fatalf("turn of %s answered %+v although its request was never stored", name, r.Turn)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("turn of %s: no answer", name)
		}
		// The actor gave up; the next turn goes to a fresh one.
		waitGone(t, n, "default", "s1", p)
	}
	time.Sleep(200 * time.Millisecond) // a wrongly dispatched call would have run by now
	if n := writes.Load(); n != 0 {
		t.Fatalf("the side-effecting tool ran %d times although its request was never in the log", n)
	}
	t.Logf("the read-only tool ran %d times (allowed: nothing durable is needed before it runs)", reads.Load())
}

// waitGone waits until the registry no longer routes the session to pid
// (the actor stopped).
func waitGone(t *testing.T, n *testNode, tenant, session string, pid *actor.PID) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.mu.Lock()
		cur := n.pids[tenant+"/"+session]
		n.mu.Unlock()
		if cur != pid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the session actor did not stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLocalRequestsShareWorkers: Next hands a request out only with a
// worker, and a tenant only up to its cap; Done frees the worker for the
// tenant whose turn it is; a request given back comes back behind its
// tenant's others and is held to the same cap.
func TestLocalRequestsShareWorkers(t *testing.T) {
	l := NewLocalRequests("exclusive", Slots{Workers: 2, PerTenant: func(string) int { return 1 }})
	for _, id := range []string{"b1", "b2", "b3", "a1"} {
		ev, r := tenantReq(id[:1], id)
		l.Offer(ev, r, true)
	}
	next := func(want string) Request {
		t.Helper()
		req, err := nextWithin(t, l, time.Second)
		if err != nil || req.Event().ID != want {
			t.Fatalf("Next = %v, %v; want %s", req, err, want)
		}
		return req
	}
	b1 := next("b1")
	a1 := next("a1") // b holds its cap of 1: a's request goes first
	if req, err := nextWithin(t, l, 50*time.Millisecond); err == nil {
		t.Fatalf("Next = %s with both workers held", req.Event().ID)
	}
	_ = b1.Ack()
	l.Done(b1)
	l.Done(b1) // a second Done frees nothing more
	b2 := next("b2")
	if req, err := nextWithin(t, l, 50*time.Millisecond); err == nil {
		t.Fatalf("Next = %s with both workers held after a double Done", req.Event().ID)
	}
	_ = b2.Nak(0) // given back: behind b3, and b still holds its worker until Done
	l.Done(a1)
	if req, err := nextWithin(t, l, 50*time.Millisecond); err == nil {
		t.Fatalf("Next = %s: b holds its cap until Done", req.Event().ID)
	}
	l.Done(b2)
	next("b3")
	if l.Len() != 1 {
		t.Fatalf("Len = %d, want 1 (b2 given back)", l.Len())
	}
}

// TestLocalRequestsReconsider: a Next waiting while a tenant's only
// requests are held back by its share takes one once the share is raised
// and Reconsider called, with no other request or Done to wake it.
func TestLocalRequestsReconsider(t *testing.T) {
	var share atomic.Int64
	share.Store(1)
	l := NewLocalRequests("exclusive", Slots{Workers: 2, PerTenant: func(string) int { return int(share.Load()) }})
	for _, id := range []string{"a1", "a2"} {
		ev, r := tenantReq("a", id)
		l.Offer(ev, r, true)
	}
	if req, err := nextWithin(t, l, time.Second); err != nil || req.Event().ID != "a1" {
		t.Fatalf("Next = %v, %v; want a1", req, err)
	}
	got := make(chan Request, 1)
	go func() {
		req, _ := nextWithin(t, l, 10*time.Second)
		got <- req
	}()
	select {
	case req := <-got:
		t.Fatalf("Next = %v while a holds its share of 1", req)
	case <-time.After(50 * time.Millisecond):
	}
	share.Store(2)
	l.Reconsider()
	if req := <-got; req == nil || req.Event().ID != "a2" {
		t.Fatalf("Next after the share was raised = %v, want a2 (the waiting Next looked again)", req)
	}
}
