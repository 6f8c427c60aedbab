package events_test

import (
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// FuzzUnmarshalDecode feeds arbitrary bytes to Unmarshal and whatever it
// accepts to Decode: neither may panic, an accepted envelope is complete, and
// an accepted event survives Marshal/Unmarshal.
func FuzzUnmarshalDecode(f *testing.F) {
	seed := events.Event{
		ID: "01J0000000000000000000000A", Tenant: "t", Session: "s", Seq: 1,
		Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: events.TypeToolCallRequested,
		Data: events.Payload(events.ToolCallRequested{Name: "read", Concurrency: "parallel_safe"}),
	}
	b, _ := events.Marshal(seed)
	f.Add(b)
	f.Add([]byte(`{"id":"x","tenant":"t","session":"s","seq":3,"type":"ResultCommitted","data":{"result":{"outcome":"ok","content":[{"type":"text","text":"hi"}]}}}`))
	f.Add([]byte(`{"id":"x","tenant":"t","session":"s","seq":1,"type":"Nope","data":null}`))
	f.Add([]byte(`{"id":"x","tenant":"t","session":"s","seq":1,"type":"RetryScheduled","data":{"delay_ns":"soon"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := events.Unmarshal(b)
		if err != nil {
			return
		}
		if ev.ID == "" || ev.Type == "" || ev.Tenant == "" || ev.Session == "" || ev.Seq == 0 {
			t.Fatalf("Unmarshal accepted an incomplete envelope: %+v", ev)
		}
		if _, err := events.Decode(ev); err != nil {
			return
		}
		again, err := events.Marshal(ev)
		if err != nil {
			t.Fatalf("Marshal of accepted event: %v", err)
		}
		ev2, err := events.Unmarshal(again)
		if err != nil {
			t.Fatalf("re-Unmarshal: %v", err)
		}
		if ev2.ID != ev.ID || ev2.Seq != ev.Seq || ev2.Type != ev.Type {
			t.Fatalf("round trip changed the envelope: %+v → %+v", ev, ev2)
		}
	})
}
