package events_test

import (
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/israce"
)

// TestEncodeAllocatesThreeTimesAnEvent holds Encode, on the session actor's
// path for every event it decides, to three allocations: one buffer for the
// payload's bytes and the event's, the attached encoding, and the hash.
func TestEncodeAllocatesThreeTimesAnEvent(t *testing.T) {
	if israce.Enabled {
		t.Skip("the race detector allocates on its own")
	}
	env := events.Event{
		ID: "01JCALLSHEET0000000000000A", Tenant: "default", Session: "s1", Seq: 7,
		Time: time.Date(2026, 12, 2, 11, 0, 0, 123456789, time.UTC), Type: events.TypeToolCallStarted,
		Causation: "01JCALLSHEET0000000000000B", Prev: events.Genesis("default", "s1"),
	}
	// Boxed once, as a draft holds its payload.
	var payload any = events.ToolCallStarted{CallRef: events.CallRef{Turn: "t1", Call: "c1"}, Attempt: 1, Worker: "n1"}
	events.Encode(env, payload) // the scratch buffer's pool filled
	got := testing.AllocsPerRun(200, func() { events.Encode(env, payload) })
	if got > 3 {
		t.Fatalf("Encode allocates %v times an event, want at most 3", got)
	}
}
