package projections_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// streamed is a session with one streamed turn: two batches, the first
// call running before the second arrived, then the end.
func streamed() *builder {
	b := newBuilder()
	b.add(events.TypeSessionOpened, 0, events.SessionOpened{Workspace: "demo"})
	b.add(events.TypeTurnOpened, 10, events.TurnOpened{Turn: "t1", ParallelToolCalls: true, Cap: 8})
	b.add(events.TypeCallsAdded, 10, events.CallsAdded{Turn: "t1", From: 0,
		Calls: []events.CallSpec{{ID: "a", Name: "read", Arguments: json.RawMessage(`{"path":"a"}`)}},
		Plan:  []events.PlanEntry{{Index: 0, Name: "read", Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe"}}})
	b.add(events.TypeToolCallRequested, 11, events.ToolCallRequested{CallRef: ref("t1", "a", 0), Name: "read", Attempt: 1})
	b.add(events.TypeToolCallStarted, 12, events.ToolCallStarted{CallRef: ref("t1", "a", 0), Attempt: 1, Worker: "N1"})
	b.add(events.TypeCallsAdded, 400, events.CallsAdded{Turn: "t1", From: 1,
		Calls: []events.CallSpec{{ID: "b", Name: "read", Arguments: json.RawMessage(`{"path":"b"}`)}, {ID: "x", Name: "nope", Arguments: json.RawMessage(`{}`)}},
		Plan: []events.PlanEntry{{Index: 1, Name: "read", Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe"},
			{Index: 2, Name: "nope", Blocked: events.BlockUnavailable, Reason: "no tool nope"}}})
	b.add(events.TypeToolCallRequested, 400, events.ToolCallRequested{CallRef: ref("t1", "b", 1), Name: "read", Attempt: 1})
	b.add(events.TypeDispatchBlocked, 400, events.DispatchBlocked{CallRef: ref("t1", "x", 2), Name: "nope", Category: events.BlockUnavailable, Reason: "no tool nope"})
	b.add(events.TypeToolCallCompleted, 600, events.ToolCallCompleted{CallRef: ref("t1", "a", 0), Attempt: 1, DurationMS: 588})
	b.add(events.TypeResultCommitted, 600, events.ResultCommitted{CallRef: ref("t1", "a", 0), Result: events.Result{ID: "a", Name: "read", Outcome: events.OutcomeOK, Attempts: 1}})
	b.add(events.TypeToolCallStarted, 1000, events.ToolCallStarted{CallRef: ref("t1", "b", 1), Attempt: 1, Worker: "N1"})
	b.add(events.TypeToolCallCompleted, 1000, events.ToolCallCompleted{CallRef: ref("t1", "b", 1), Attempt: 1, DurationMS: 599})
	b.add(events.TypeResultCommitted, 1000, events.ResultCommitted{CallRef: ref("t1", "b", 1), Result: events.Result{ID: "b", Name: "read", Outcome: events.OutcomeOK, Attempts: 1}})
	b.add(events.TypeResultCommitted, 1000, events.ResultCommitted{CallRef: ref("t1", "x", 2), Result: events.Result{ID: "x", Name: "nope", Outcome: events.OutcomeBlocked, Block: events.BlockUnavailable}})
	b.add(events.TypeTurnEnded, 1100, events.TurnEnded{Turn: "t1", Reason: events.EndedByHarness, Calls: 3})
	b.add(events.TypeTurnCompleted, 1100, events.TurnCompleted{Turn: "t1"})
	return b
}

// TestStreamedTurnFolds: the transcript of a streamed turn is its commits,
// as a posted turn's; the audit places each call where its batch put it,
// with when it arrived, the batches and the end; the summary counts its
// calls.
func TestStreamedTurnFolds(t *testing.T) {
	evs := streamed().evs
	tr, err := projections.Fold("S1", evs)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Turns) != 1 || tr.Turns[0].Status != projections.StatusComplete || len(tr.Turns[0].Results) != 3 || tr.Turns[0].Results[2].ID != "x" {
		t.Fatalf("transcript %+v, want t1 complete with a, b, x", tr)
	}
	a := projections.FoldAudit("acme", "S1", evs)
	if len(a.Turns) != 1 || len(a.Marks) != 0 {
		t.Fatalf("audit turns %d marks %+v, want one turn and no marks", len(a.Turns), a.Marks)
	}
	t1 := a.Turns[0]
	if !t1.Streamed || len(t1.Calls) != 3 || len(t1.Batches) != 2 || t1.Batches[1].From != 1 || t1.Batches[1].Calls != 2 ||
		t1.Ended == nil || t1.Ended.Reason != events.EndedByHarness || t1.Ended.Calls != 3 || t1.Status != projections.StatusComplete || len(t1.Marks) != 0 {
		t.Fatalf("turn %+v: want streamed, 3 calls in 2 batches, ended by the harness, complete", t1)
	}
	if c := t1.Calls[1]; c.ID != "b" || c.Index != 1 || c.Arrived.Seq != 6 || c.Plan.Concurrency != "parallel_safe" || c.Result == nil {
		t.Fatalf("call b %+v: want index 1, arrived at seq 6, planned, committed", c)
	}
	if c := t1.Calls[2]; c.Blocked == nil || c.Arrived.Seq != 6 {
		t.Fatalf("call x %+v: want blocked, arrived with b", c)
	}
	s := projections.FoldSummary("acme", "S1", evs)
	if s.Turns != 1 || s.Calls != 3 || strings.Join(s.Tools, ",") != "nope,read" {
		t.Fatalf("summary turns %d calls %d tools %v, want 1, 3, nope and read", s.Turns, s.Calls, s.Tools)
	}
}

// TestStreamedTurnMarks: batches and ends that do not fit the turn are
// marked on it, not folded into it.
func TestStreamedTurnMarks(t *testing.T) {
	b := newBuilder()
	b.add(events.TypeSessionOpened, 0, events.SessionOpened{Workspace: "demo"})
	b.add(events.TypeTurnReceived, 1, events.TurnReceived{Turn: "p", Cap: 1, Calls: []events.CallSpec{{ID: "c", Name: "read"}}, Plan: []events.PlanEntry{{Index: 0, Name: "read"}}})
	b.add(events.TypeCallsAdded, 2, events.CallsAdded{Turn: "p", From: 1, Calls: []events.CallSpec{{ID: "d", Name: "read"}}})
	b.add(events.TypeTurnEnded, 3, events.TurnEnded{Turn: "p", Reason: "end"})
	b.add(events.TypeTurnOpened, 4, events.TurnOpened{Turn: "s", Cap: 1})
	b.add(events.TypeCallsAdded, 5, events.CallsAdded{Turn: "s", From: 0, Calls: []events.CallSpec{{ID: "e", Name: "read"}}})
	b.add(events.TypeCallsAdded, 5, events.CallsAdded{Turn: "s", From: 2, Calls: []events.CallSpec{{ID: "g", Name: "read"}}})
	b.add(events.TypeTurnEnded, 6, events.TurnEnded{Turn: "s", Reason: "end"})
	b.add(events.TypeCallsAdded, 7, events.CallsAdded{Turn: "s", From: 1, Calls: []events.CallSpec{{ID: "f", Name: "read"}}})
	b.add(events.TypeTurnEnded, 8, events.TurnEnded{Turn: "s", Reason: "timeout"})
	b.add(events.TypeTurnOpened, 9, events.TurnOpened{Turn: "s"})
	a := projections.FoldAudit("acme", "S1", b.evs)
	want := [][]string{
		{"posted whole", "posted whole"},
		{"from index 2 to turn \"s\", which holds 1", "after it ended", "already ended", "already received"},
	}
	for i, w := range want {
		ms := a.Turns[i].Marks
		if len(ms) != len(w) {
			t.Fatalf("turn %s marks %+v, want %d", a.Turns[i].Turn, ms, len(w))
		}
		for j, m := range ms {
			if !strings.Contains(m.Problem, w[j]) {
				t.Errorf("turn %s mark %d says %q, want %q", a.Turns[i].Turn, j, m.Problem, w[j])
			}
		}
		if len(a.Turns[i].Calls) != 1 {
			t.Errorf("turn %s holds %d calls, want 1", a.Turns[i].Turn, len(a.Turns[i].Calls))
		}
	}
}
