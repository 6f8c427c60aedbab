package actors

import (
	"context"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/logtest"
	"github.com/callsheet/callsheet/internal/israce"
)

// TestOutboxAppendAllocatesTheEventsAndTheRunOnly holds one append through
// the outbox, as a session actor makes it for a one-call turn (queue its
// events, start, done, hand the stored events on, recycle), to two
// allocations: the list of events the log stores and keeps, and the append
// to run. The list of pending events is reused.
func TestOutboxAppendAllocatesTheEventsAndTheRunOnly(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	l := memLog(t)
	evs := logtest.Events("t1", "s1", 0, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeToolCallCompleted, events.TypeTurnCompleted)
	var o outbox
	var kept []events.Event
	cycle := func() {
		o.reset(0)
		for _, ev := range evs {
			o.queue(pending{ev: ev})
		}
		if o.start(context.Background(), l, "t1", "s1", nil) == nil {
			t.Fatal("start with queued events returned no append")
		}
		stored, durable, err := o.done(nil)
		if err != nil || len(stored) != len(evs) || len(durable) != len(evs) {
			t.Fatalf("done: %d stored, %d events, err %v; want %d", len(stored), len(durable), err, len(evs))
		}
		kept = durable
		o.recycle(stored)
	}
	cycle()
	if got := testing.AllocsPerRun(200, cycle); got > 2 {
		t.Fatalf("an append through the outbox allocates %v times, want at most 2", got)
	}
	_ = kept
}
