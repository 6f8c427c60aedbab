package actors

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/tool"
)

// TestARetiredActorForwardsAnOutcome: a call's outcome that reaches the
// session's actor after it retired (the tool actor routed it there just
// before) goes on to the session's new actor, which settles the call with
// it; refused, it would be lost, and the turn would wait for a run that
// has already reported.
func TestARetiredActorForwardsAnOutcome(t *testing.T) {
	release := make(chan struct{})
	var runs atomic.Int32
	slow, err := tool.New("slow", "a side effect that waits to be released", func(ctx context.Context, _ noArgs) (tool.Result, error) {
		runs.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return tool.Text("ran"), nil
	}, tool.WithGuidelines("test"))
	if err != nil {
		t.Fatal(err)
	}
	n := newTestNode(t, newLog(t), slow)
	n.startPools("exclusive")
	t.Cleanup(func() { close(release) }) // before the pools stop: cleanups run last first
	e := n.engine
	old := openOn(t, n, "s1")
	e.Send(old, SubmitTurn{ID: "t1", Reply: make(chan TurnReply, 1),
		Calls: []events.CallSpec{{ID: "c", Name: "slow", Arguments: json.RawMessage(`{}`)}}})
	deadline := time.Now().Add(10 * time.Second)
	for runs.Load() == 0 { // it runs once its claim is durable
		if time.Now().After(deadline) {
			t.Fatal("the call never started")
		}
		time.Sleep(5 * time.Millisecond)
	}

	e.Send(old, Retire{})
	waitGone(t, n, "default", "s1", old)
	e.Send(old, outcome{ref: events.CallRef{Turn: "t1", Call: "c"}, attempt: 1,
		out: core.Outcome{OK: true, Content: []events.Part{{Type: "text", Text: "forwarded"}}}})

	reply := make(chan TurnReply, 1)
	cur, _ := n.Route("default", "s1")
	e.Send(cur, SubmitTurn{ID: "t1", Wait: true, Reply: reply})
	select {
	case r := <-reply:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if res := r.Turn.Results; len(res) != 1 || len(res[0].Content) != 1 || res[0].Content[0].Text != "forwarded" {
			t.Fatalf("results %+v, want the call settled with the forwarded outcome", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the turn did not complete: the outcome that reached the retired actor was lost")
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times, want once", n)
	}
}
