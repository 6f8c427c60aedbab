package natslog_test

import (
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/israce"
)

// TestPackingAnAppendAllocatesItsMessageOnly holds the packing of a
// one-call turn's events into one message to the message itself (its
// struct, subject and headers, and the slices Append hands on): the events'
// bytes are those events.Encode attached, copied into a pooled buffer, and
// the list of them is on the stack.
func TestPackingAnAppendAllocatesItsMessageOnly(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	l := openLog(t, startServer(t))
	evs := mk("t", "s", 0, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeToolCallCompleted, events.TypeTurnCompleted)
	for i, ev := range evs {
		p, err := events.Decode(ev)
		if err != nil {
			t.Fatal(err)
		}
		evs[i] = events.Encode(ev, p) // as the session actor mints them
	}
	if err := natslog.PackAppend(l, "t", "s", 0, evs); err != nil {
		t.Fatal(err)
	}
	got := testing.AllocsPerRun(200, func() {
		if err := natslog.PackAppend(l, "t", "s", 0, evs); err != nil {
			t.Fatal(err)
		}
	})
	if got > 7 {
		t.Fatalf("packing %d events allocates %v times, want at most 7", len(evs), got)
	}
}
