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

// TestKeptIsThePayloadWhileTheEventIsAsEncoded: Kept gives the payload
// Encode was given, as a value or through a pointer, and nothing once the
// event changed, for another type, or for an event read back.
func TestKeptIsThePayloadWhileTheEventIsAsEncoded(t *testing.T) {
	env := events.Event{ID: "e1", Tenant: "default", Session: "s1", Seq: 1, Time: time.Unix(0, 0).UTC(), Type: events.TypeTurnCompleted}
	want := events.TurnCompleted{Turn: "t1"}
	for _, payload := range []any{want, &want} {
		ev := events.Encode(env, payload)
		if got, ok := events.Kept[events.TurnCompleted](ev); !ok || got.Turn != want.Turn {
			t.Fatalf("Kept of an event encoded from %T = %+v, %v; want %+v, true", payload, got, ok, want)
		}
		if _, ok := events.Kept[events.TurnReceived](ev); ok {
			t.Fatal("Kept gave a TurnCompleted's payload as a TurnReceived")
		}
		changed := ev
		changed.Seq++
		if _, ok := events.Kept[events.TurnCompleted](changed); ok {
			t.Fatal("Kept gave the payload of an event changed since Encode")
		}
		b, err := events.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		read, err := events.Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := events.Kept[events.TurnCompleted](read); ok {
			t.Fatal("Kept gave a payload for an event read back")
		}
	}
}
