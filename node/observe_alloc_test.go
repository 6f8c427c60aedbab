package node

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/israce"
)

// TestObservingATurnWithInfoOffAllocatesLittle: the observer sees every
// turn received and completed; with its log lines off (a level above
// Info, no tracer), wording them costs nothing, and what is left is the
// turn's own record.
func TestObservingATurnWithInfoOffAllocatesLittle(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	o := newObserver(slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})), nil, "n1")
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	head := events.Event{Tenant: "default", Session: "01JDZ8Q6W4M5Y7K0V3N2B1C9XA", Time: now}
	received, completed := head, head
	received.ID, received.Seq, received.Type = "01JDZ8Q6W4M5Y7K0V3N2B1C9XB", 1, events.TypeTurnReceived
	completed.ID, completed.Seq, completed.Type = "01JDZ8Q6W4M5Y7K0V3N2B1C9XC", 2, events.TypeTurnCompleted
	received = events.Encode(received, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "c1", Name: "noop"}}})
	completed = events.Encode(completed, events.TurnCompleted{Turn: "t1"})
	// The turn's record: its turnObs, its outcomes map, its call ids and
	// the calls keptTurn reads them from.
	const want = 4
	if got := testing.AllocsPerRun(100, func() {
		o.received(received)
		o.completed(completed)
	}); got > want {
		t.Fatalf("observing a turn with Info off allocates %v times, want at most %d", got, want)
	}
}
