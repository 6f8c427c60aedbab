package events_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

func sampleEvent() events.Event {
	return events.Event{
		ID: "01J0000000000000000000000A", Tenant: "acme", Session: "01J00000000000000000000SES", Seq: 2,
		Time: time.Date(2026, 12, 1, 9, 4, 5, 123456789, time.UTC), Type: events.TypeToolCallCompleted,
		Causation: "01J00000000000000000000CAU", Prev: events.Genesis("acme", "01J00000000000000000000SES"),
		Data: events.Payload(events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t1", Call: "c1"}, Attempt: 1,
			Content: []events.Part{{Type: "text", Text: "<b>&</b> \u2028 é"}}}),
	}
}

// TestHashIgnoresEncoding: the hash is of the event's value, so re-encoding
// the stored JSON (key order, whitespace, escapes, number spelling) keeps it.
func TestHashIgnoresEncoding(t *testing.T) {
	ev := sampleEvent()
	h, err := events.Hash(ev)
	if err != nil || len(h) != events.HashLen {
		t.Fatalf("Hash = %q, %v", h, err)
	}
	stored, _ := events.Marshal(ev)
	back, err := events.Unmarshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	var loose map[string]any
	_ = json.Unmarshal(back.Data, &loose)
	back.Data, _ = json.MarshalIndent(loose, "", "  ")
	back.Data = json.RawMessage(strings.Replace(string(back.Data), `"attempt": 1`, `"attempt": 1.0e0`, 1))
	if h2, err := events.Hash(back); err != nil || h2 != h {
		t.Fatalf("re-encoded event hashes %s (%v), want %s", h2, err, h)
	}
}

// TestHashCoversEveryMember: changing any envelope member, or any byte of
// the payload's value, changes the hash.
func TestHashCoversEveryMember(t *testing.T) {
	base := sampleEvent()
	h0, _ := events.Hash(base)
	changes := map[string]func(*events.Event){
		"id":        func(e *events.Event) { e.ID += "x" },
		"tenant":    func(e *events.Event) { e.Tenant = "acme2" },
		"session":   func(e *events.Event) { e.Session += "x" },
		"seq":       func(e *events.Event) { e.Seq++ },
		"time":      func(e *events.Event) { e.Time = e.Time.Add(time.Nanosecond) },
		"type":      func(e *events.Event) { e.Type = events.TypeToolCallFailed },
		"causation": func(e *events.Event) { e.Causation = "" },
		"prev":      func(e *events.Event) { e.Prev = strings.Repeat("0", events.HashLen) },
		"no prev":   func(e *events.Event) { e.Prev = "" },
		"data":      func(e *events.Event) { e.Data = json.RawMessage(strings.Replace(string(e.Data), "é", "e", 1)) },
		"big int": func(e *events.Event) {
			e.Data = json.RawMessage(`{"id":12345678901234567891}`)
		},
	}
	seen := map[string]string{h0: "base"}
	for name, change := range changes {
		ev := base
		change(&ev)
		h, err := events.Hash(ev)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if other, ok := seen[h]; ok {
			t.Errorf("changing %s gives the hash of %s", name, other)
		}
		seen[h] = name
	}
	big := base
	big.Data = json.RawMessage(`{"id":12345678901234567890}`)
	h1, _ := events.Hash(big)
	if seen[h1] != "" {
		t.Errorf("two integers a double cannot tell apart hash alike")
	}
}

func TestGenesisBindsTenantAndSession(t *testing.T) {
	a, b, c := events.Genesis("t", "s1"), events.Genesis("t", "s2"), events.Genesis("t2", "s1")
	if a == b || a == c || len(a) != events.HashLen {
		t.Fatalf("genesis links %s %s %s", a, b, c)
	}
	if events.Genesis("t", "s1") != a {
		t.Fatal("Genesis is not deterministic")
	}
}

func TestHashRefusesBadData(t *testing.T) {
	ev := sampleEvent()
	ev.Data = json.RawMessage(`{"a":`)
	if _, err := events.Hash(ev); err == nil {
		t.Fatal("Hash of an event whose data is not JSON succeeded")
	}
	ev.Data = nil
	if _, err := events.Hash(ev); err != nil {
		t.Fatalf("Hash of an event without data: %v", err)
	}
}

func BenchmarkHash(b *testing.B) {
	small := sampleEvent()
	bigText := strings.Repeat("line of tool output, with \"quotes\" and tabs\t\n", 1100)
	big := sampleEvent()
	big.Data = events.Payload(events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t1", Call: "c1"}, Attempt: 1,
		Content: []events.Part{{Type: "text", Text: bigText}}})
	for _, c := range []struct {
		name string
		ev   events.Event
	}{{"small", small}, {"50KB", big}} {
		b.Run(c.name, func(b *testing.B) {
			enc, _ := events.Marshal(c.ev)
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := events.Hash(c.ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestWorkedExample checks the example of docs/events.md ("A worked
// example"): its genesis link, canonical envelopes and hashes.
func TestWorkedExample(t *testing.T) {
	const session = "01JDXK0S4P8W2N3M4K5J6H7G8F"
	lines := []string{
		`{"id":"01JDXK0S4Q1V6C7Y8Z9A0B1C2D","tenant":"acme","session":"01JDXK0S4P8W2N3M4K5J6H7G8F","seq":1,"time":"2026-12-01T09:00:00.12Z","type":"SessionOpened","prev":"b23a2543fbba0ee6a9caabbdd13c28b3f7ffb906dde7b078b85c77695ab06be7","data":{"workspace":"demo"}}`,
		`{"id":"01JDXK0T0A1B2C3D4E5F6G7H8J","tenant":"acme","session":"01JDXK0S4P8W2N3M4K5J6H7G8F","seq":2,"time":"2026-12-01T09:00:01.000000005Z","type":"TurnReceived","prev":"44f0de88afc6a400d1a84f0d30856f6611e9210fd33969fe5e212a9783168c33","data":{"turn":"t1","calls":[{"id":"c1","name":"read","arguments":{"path":"a\u003cb.md","limit":1.50e2,"id":12345678901234567891}}],"parallel_tool_calls":true,"cap":8,"plan":[]}}`,
	}
	canon := []string{
		`{"data":{"workspace":"demo"},"id":"01JDXK0S4Q1V6C7Y8Z9A0B1C2D","prev":"b23a2543fbba0ee6a9caabbdd13c28b3f7ffb906dde7b078b85c77695ab06be7","seq":1,"session":"01JDXK0S4P8W2N3M4K5J6H7G8F","tenant":"acme","time":"2026-12-01T09:00:00.12Z","type":"SessionOpened"}`,
		`{"data":{"calls":[{"arguments":{"id":12345678901234567891,"limit":150,"path":"a<b.md"},"id":"c1","name":"read"}],"cap":8,"parallel_tool_calls":true,"plan":[],"turn":"t1"},"id":"01JDXK0T0A1B2C3D4E5F6G7H8J","prev":"44f0de88afc6a400d1a84f0d30856f6611e9210fd33969fe5e212a9783168c33","seq":2,"session":"01JDXK0S4P8W2N3M4K5J6H7G8F","tenant":"acme","time":"2026-12-01T09:00:01.000000005Z","type":"TurnReceived"}`,
	}
	hashes := []string{"44f0de88afc6a400d1a84f0d30856f6611e9210fd33969fe5e212a9783168c33", "b2e2a9ae92b410cc8bd72912332662f32f30e650e748cfcd9dc09a06a7875fea"}
	if g := events.Genesis("acme", session); g != "b23a2543fbba0ee6a9caabbdd13c28b3f7ffb906dde7b078b85c77695ab06be7" {
		t.Fatalf("genesis %s", g)
	}
	for i, l := range lines {
		ev, err := events.Unmarshal([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		c, err := events.AppendEnvelope(nil, ev)
		if err != nil || string(c) != canon[i] {
			t.Fatalf("event %d canonical:\n got %s\nwant %s", i+1, c, canon[i])
		}
		if h, _ := events.Hash(ev); h != hashes[i] {
			t.Fatalf("event %d hash %s, want %s", i+1, h, hashes[i])
		}
	}
}
