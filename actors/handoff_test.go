package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// inboxOutcomes counts the outcomes a session actor receives through its
// hollywood inbox.
type inboxOutcomes struct {
	actor.Receiver
	n *atomic.Int32
}

func (r inboxOutcomes) Receive(c *actor.Context) {
	if _, ok := c.Message().(outcome); ok {
		r.n.Add(1)
	}
	r.Receiver.Receive(c)
}

// lookTool is a read-only, safe, parallel-safe tool that counts its runs
// in started (if set), waits for gate (nil: not at all) and answers "seen".
func lookTool(t *testing.T, gate <-chan struct{}, started *atomic.Int32) *tool.Tool {
	t.Helper()
	look, err := tool.New("look", "reads", func(ctx context.Context, _ noArgs) (tool.Result, error) {
		if started != nil {
			started.Add(1)
		}
		if gate != nil {
			select {
			case <-gate:
			case <-ctx.Done():
				return tool.Result{}, ctx.Err()
			}
		}
		return tool.Text("seen"), nil
	}, tool.WithGuidelines("test"), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}))
	if err != nil {
		t.Fatal(err)
	}
	return look
}

// handoffNode opens session s1 on a node whose session actors count the
// outcomes reaching their inbox.
func handoffNode(t *testing.T, log events.Log, linger time.Duration, tools ...*tool.Tool) (*testNode, *atomic.Int32) {
	t.Helper()
	var inbox atomic.Int32
	n := newTestNode(t, log, tools...)
	n.deps.ReadLinger = linger
	n.wrap = func(r actor.Receiver) actor.Receiver { return inboxOutcomes{Receiver: r, n: &inbox} }
	n.startPools("exclusive", "parallel_safe")
	openOn(t, n, "s1")
	return n, &inbox
}

// submitLook runs a turn of one look call and checks its result.
func submitLook(t *testing.T, n *testNode, turn string) {
	t.Helper()
	reply := make(chan TurnReply, 1)
	pid, _ := n.Route("default", "s1")
	n.engine.Send(pid, SubmitTurn{ID: turn, Wait: true, Reply: reply,
		Calls: []events.CallSpec{{ID: "c", Name: "look", Arguments: json.RawMessage(`{}`)}}})
	select {
	case r := <-reply:
		if r.Err != nil {
			t.Fatalf("turn %s: %v", turn, r.Err)
		}
		if len(r.Turn.Results) != 1 || r.Turn.Results[0].Outcome != events.OutcomeOK || len(r.Turn.Results[0].Content) != 1 || r.Turn.Results[0].Content[0].Text != "seen" {
			t.Fatalf("turn %s answered %+v, want its one call's result \"seen\"", turn, r.Turn)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("turn %s: no answer", turn)
	}
}

// TestReadOnlyOutcomeHandedStraightToItsActor: the outcome of a read-only
// call handed to the tool actor before its request was durable reaches the
// session actor that waits for it without going through its inbox (no
// second activation of the actor for the call), and the turn is recorded
// whole.
func TestReadOnlyOutcomeHandedStraightToItsActor(t *testing.T) {
	forLogs(t, func(t *testing.T, log events.Log) {
		// A linger far longer than the call: the actor always waits.
		n, inbox := handoffNode(t, log, time.Minute, lookTool(t, nil, nil))
		const turns = 10
		for i := range turns {
			submitLook(t, n, fmt.Sprintf("t%d", i))
		}
		if got := inbox.Load(); got != 0 {
			t.Fatalf("%d of %d outcomes went through the session actor's inbox, want none: the waiting actor takes them straight", got, turns)
		}
		evs, err := log.Read(context.Background(), "default", "s1", 0)
		if err != nil {
			t.Fatal(err)
		}
		completed := 0
		for _, ev := range evs {
			if ev.Type == events.TypeTurnCompleted {
				completed++
			}
		}
		if completed != turns {
			t.Fatalf("the log records %d completed turns, want %d", completed, turns)
		}
	})
}

// TestReadOnlyOutcomeAfterTheLingerGoesThroughTheInbox: a read-only call
// that outlasts the linger is not waited for: its request goes out alone,
// and its outcome, which comes once the actor left its activation, goes
// through the inbox and completes the turn.
func TestReadOnlyOutcomeAfterTheLingerGoesThroughTheInbox(t *testing.T) {
	forLogs(t, func(t *testing.T, log events.Log) {
		gate := make(chan struct{})
		n, inbox := handoffNode(t, log, 20*time.Millisecond, lookTool(t, gate, nil))
		// The request is appended alone once the linger is over; the call
		// ends after that.
		time.AfterFunc(300*time.Millisecond, func() { close(gate) })
		submitLook(t, n, "slow")
		if got := inbox.Load(); got != 1 {
			t.Fatalf("%d outcomes went through the inbox, want 1 (the actor had stopped waiting)", got)
		}
	})
}

// TestHandoffTakesOnlyWhileOpen: a closed handoff refuses (the sender uses
// the inbox); what an open one took is returned by take or, at the latest,
// by close, and never twice.
func TestHandoffTakesOnlyWhileOpen(t *testing.T) {
	pid := actor.NewPID("local", "session/s1-1")
	var hs handoffs
	h := newHandoff(pid)
	hs.add(h)
	m := GetTurn{ID: "a"}
	if hs.offer(pid, m) {
		t.Fatal("a closed handoff took a message")
	}
	h.start()
	if hs.offer(actor.NewPID("local", "session/s1-2"), m) {
		t.Fatal("a message for another actor was taken")
	}
	if !hs.offer(pid, m) || !hs.offer(pid, GetTurn{ID: "b"}) {
		t.Fatal("an open handoff refused a message")
	}
	select {
	case <-h.wake:
	default:
		t.Fatal("no wake-up after a hand-over")
	}
	if got := h.take(); len(got) != 2 {
		t.Fatalf("take returned %d messages, want 2", len(got))
	}
	if !hs.offer(pid, GetTurn{ID: "c"}) {
		t.Fatal("an open handoff refused a message")
	}
	if got := h.close(); len(got) != 1 || got[0].(GetTurn).ID != "c" {
		t.Fatalf("close returned %v, want the one message not taken", got)
	}
	if hs.offer(pid, m) || len(h.close()) != 0 {
		t.Fatal("a closed handoff took a message")
	}
	hs.remove(h)
	h.start()
	if hs.offer(pid, m) {
		t.Fatal("a removed handoff took a message")
	}
}

// TestReadOnlyCallWaitingToStartIsStillBatched: the linger is for a
// read-only call's run, not its wait for a worker. A call queued behind
// busy workers for ten lingers, which then returns at once, still has its
// turn recorded in one append with its request; so a node under load
// appends no more often per call than an idle one.
func TestReadOnlyCallWaitingToStartIsStillBatched(t *testing.T) {
	const linger = 10 * time.Millisecond
	log := &countAppends{Log: newLog(t)}
	gate := make(chan struct{})
	var started atomic.Int32
	n, _ := handoffNode(t, log, linger, lookTool(t, gate, &started))
	// Every worker of the class (startPools: 4) busy with another session's call.
	for i := range 4 {
		s := fmt.Sprintf("busy%d", i)
		pid := openOn(t, n, s)
		n.engine.Send(pid, SubmitTurn{ID: "t", Reply: make(chan TurnReply, 1),
			Calls: []events.CallSpec{{ID: "c", Name: "look", Arguments: json.RawMessage(`{}`)}}})
	}
	for deadline := time.Now().Add(10 * time.Second); started.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 4 calls started", started.Load())
		}
	}
	before := log.count("s1")
	time.AfterFunc(10*linger, func() { close(gate) })
	submitLook(t, n, "queued")
	batches := log.since("s1", before)
	if len(batches) != 1 || batches[0][0] != events.TypeTurnReceived || batches[0][len(batches[0])-1] != events.TypeTurnCompleted {
		t.Fatalf("the queued call's turn went out in %d appends %v, want one from TurnReceived to TurnCompleted", len(batches), batches)
	}
}
