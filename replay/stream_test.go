package replay

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

func added(turn string, from int, calls ...string) events.CallsAdded {
	b := events.CallsAdded{Turn: turn, From: from}
	for i, c := range calls {
		b.Calls = append(b.Calls, events.CallSpec{ID: c, Name: "read", Arguments: json.RawMessage(`{}`)})
		b.Plan = append(b.Plan, events.PlanEntry{Index: from + i, Name: "read"})
	}
	return b
}

// streamedLog is a sound log of one streamed turn of two batches, the
// first call running before the second batch.
func streamedLog() *builder {
	a, b := ref("t1", "a", 0), ref("t1", "b", 1)
	var l builder
	l.add(events.TypeSessionOpened, events.SessionOpened{Workspace: "w"}).
		add(events.TypeTurnOpened, events.TurnOpened{Turn: "t1", ParallelToolCalls: true, Cap: 8}).
		add(events.TypeCallsAdded, added("t1", 0, "a")).
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: a, Name: "read", Attempt: 1}).
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: a, Attempt: 1, Worker: "w1"}).
		add(events.TypeCallsAdded, added("t1", 1, "b")).
		add(events.TypeToolCallRequested, events.ToolCallRequested{CallRef: b, Name: "read", Attempt: 1}).
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: b, Attempt: 1, Worker: "w1"}).
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: a, Attempt: 1}).
		add(events.TypeResultCommitted, committed(a, events.OutcomeOK)).
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: b, Attempt: 1}).
		add(events.TypeResultCommitted, committed(b, events.OutcomeOK))
	return &l
}

// TestVerifyStreamedTurns: a streamed turn's events verify clean; an open
// one is a warning; a batch or an end that does not fit is an error naming
// what is wrong.
func TestVerifyStreamedTurns(t *testing.T) {
	l := streamedLog()
	ps := Verify(tenant, session, chain(l.evs))
	if Failed(ps) || len(ps) != 1 || !strings.Contains(ps[0].Message, "still open for more calls") {
		t.Fatalf("open streamed turn: %v, want one warning that it is open", ps)
	}
	l.add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: events.EndedByHarness, Calls: 2}).
		add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t1"})
	if ps := Verify(tenant, session, chain(l.evs)); len(ps) != 0 {
		t.Fatalf("ended streamed turn: %v, want no problems", ps)
	}
	damaged := []struct {
		name string
		edit func(b *builder)
		want string
	}{
		{"a batch past the calls", func(b *builder) { b.add(events.TypeCallsAdded, added("t1", 3, "c")) }, "from index 3; it holds 2 calls"},
		{"completed while open", func(b *builder) { b.add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t1"}) }, "completed while open"},
		{"ended with another count", func(b *builder) {
			b.add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: "end", Calls: 5})
		}, "ended with 5 calls, it holds 2"},
		{"a batch after the end", func(b *builder) {
			b.add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: "end", Calls: 2}).add(events.TypeCallsAdded, added("t1", 2, "c"))
		}, "after it ended"},
		{"ended twice", func(b *builder) {
			b.add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: "end", Calls: 2}).add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: "end", Calls: 2})
		}, "ended twice"},
		{"a batch of a posted turn", func(b *builder) {
			b.add(events.TypeTurnEnded, events.TurnEnded{Turn: "t1", Reason: "end", Calls: 2}).add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t1"}).
				add(events.TypeTurnReceived, received("t2", "p")).add(events.TypeCallsAdded, added("t2", 1, "q"))
		}, "posted whole"},
		{"a plan out of place", func(b *builder) {
			c := added("t1", 2, "c")
			c.Plan[0].Index = 0
			b.add(events.TypeCallsAdded, c)
		}, "names index 0, want 2"},
	}
	for _, d := range damaged {
		b := streamedLog()
		d.edit(b)
		ps := Verify(tenant, session, chain(b.evs))
		if !Failed(ps) || !strings.Contains(joined(ps), d.want) {
			t.Errorf("%s: %v, want an error saying %q", d.name, ps, d.want)
		}
	}
}

func joined(ps []Problem) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, "; ")
}
