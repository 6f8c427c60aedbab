package projections_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// noopSession returns a session of n events made of one-call turns of a
// no-op read-only tool, shaped as the node writes them (the bench's probe):
// the events the replay/fold row of go run ./bench folds.
func noopSession(n int) []events.Event {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var evs []events.Event
	add := func(typ events.Type, p any) {
		evs = append(evs, events.Event{ID: fmt.Sprintf("01M8RDK208VXWJHVNQ69B%05d", len(evs)), Tenant: "default", Session: "s",
			Seq: uint64(len(evs) + 1), Time: at, Type: typ, Data: events.Payload(p)})
	}
	add(events.TypeSessionOpened, events.SessionOpened{Workspace: "/w"})
	for t := 0; len(evs) < n; t++ {
		turn := fmt.Sprintf("01M8RDK208VXWJHVNQ6TURN%03d", t)
		ref := events.CallRef{Turn: turn, Call: "call_1", Index: 0}
		args := json.RawMessage(`{"text":"hello"}`)
		add(events.TypeTurnReceived, events.TurnReceived{Turn: turn, Calls: []events.CallSpec{{ID: "call_1", Name: "noop", Arguments: args}},
			ParallelToolCalls: true, Cap: 8, Plan: []events.PlanEntry{{Index: 0, Name: "noop", Effect: "read_only", Replay: "safe",
				Concurrency: "parallel_safe", TimeoutMS: 120000, Rule: "default"}}})
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: ref, Name: "noop", Arguments: args, Attempt: 1, Effect: "read_only",
			Replay: "safe", Concurrency: "parallel_safe", IdempotencyKey: turn + "/call_1", TimeoutMS: 120000, Node: "n1"})
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: ref, Attempt: 1, Worker: "n1/parallel_safe/3"})
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: ref, Attempt: 1, Content: []events.Part{{Type: "text", Text: "ok"}}, DurationMS: 0.01})
		add(events.TypeResultCommitted, events.ResultCommitted{CallRef: ref, Result: events.Result{ID: "call_1", Name: "noop", Outcome: events.OutcomeOK,
			Content: []events.Part{{Type: "text", Text: "ok"}}, Attempts: 1}})
		add(events.TypeTurnCompleted, events.TurnCompleted{Turn: turn})
	}
	return evs[:n]
}

// BenchmarkFold folds 100-event sessions of no-op calls, as the replay/fold
// row of go run ./bench does.
func BenchmarkFold(b *testing.B) {
	evs := noopSession(100)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := projections.Fold(evs[0].Session, evs); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(evs))/b.Elapsed().Seconds(), "events/s")
}
