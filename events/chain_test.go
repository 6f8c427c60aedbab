package events_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
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

// TestChain2HashesTheStoredBytes: a Chain2 hash is the SHA-256 of the
// event's stored JSON, the same for the event read back from it, and
// another spelling of the same value (a number, an escape) is another
// hash, but for what Marshal writes back as stored: encoding/json's
// escapes of '<', '>' and '&' and its compact form.
func TestChain2HashesTheStoredBytes(t *testing.T) {
	ev := sampleEvent()
	h, err := events.Chain2.Hash(ev)
	if err != nil || len(h) != events.HashLen {
		t.Fatalf("Hash = %q, %v", h, err)
	}
	stored, _ := events.Marshal(ev)
	if sum := sha256.Sum256(stored); hex.EncodeToString(sum[:]) != h {
		t.Fatalf("Hash %s, SHA-256 of the stored bytes %x", h, sum)
	}
	back, err := events.Unmarshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	if hb, err := events.Chain2.Hash(back); err != nil || hb != h {
		t.Fatalf("read back: %s (%v), want %s", hb, err, h)
	}
	for _, respell := range [][2]string{{`"attempt":1`, `"attempt":1.0e0`}, {`"turn":"t1"`, `"turn":"\u00741"`}, {`"call":"c1"`, `"call":"c\u0031"`}} {
		other := back
		other.Data = json.RawMessage(strings.Replace(string(back.Data), respell[0], respell[1], 1))
		if string(other.Data) == string(back.Data) {
			t.Fatalf("%q is not in %s", respell[0], back.Data)
		}
		if ho, _ := events.Chain2.Hash(other); ho == h {
			t.Errorf("%s spelt %s hashes alike", respell[0], respell[1])
		}
	}
	for _, same := range [][2]string{{`\u003cb\u003e`, `<b>`}, {`"attempt":1`, `"attempt" : 1`}} {
		other := back
		other.Data = json.RawMessage(strings.Replace(string(back.Data), same[0], same[1], 1))
		if ho, _ := events.Chain2.Hash(other); ho != h {
			t.Errorf("%s spelt %s, which Marshal writes back as stored, hashes %s, want %s", same[0], same[1], ho, h)
		}
	}
}

// TestChain1HashIgnoresEncoding: a Chain1 hash is of the event's value, so
// re-encoding the stored JSON (key order, whitespace, escapes, number
// spelling) keeps it.
func TestChain1HashIgnoresEncoding(t *testing.T) {
	ev := sampleEvent()
	h, err := events.Chain1.Hash(ev)
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
	if h2, err := events.Chain1.Hash(back); err != nil || h2 != h {
		t.Fatalf("re-encoded event hashes %s (%v), want %s", h2, err, h)
	}
}

// TestHashCoversEveryMember: changing any envelope member, or any byte of
// the payload's value, changes the hash.
func TestHashCoversEveryMember(t *testing.T) {
	for _, chain := range []events.Chain{events.Chain1, events.Chain2} {
		t.Run(string(chain), func(t *testing.T) { hashCoversEveryMember(t, chain) })
	}
}

func hashCoversEveryMember(t *testing.T, chain events.Chain) {
	base := sampleEvent()
	h0, _ := chain.Hash(base)
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
		h, err := chain.Hash(ev)
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
	h1, _ := chain.Hash(big)
	if seen[h1] != "" {
		t.Errorf("two integers a double cannot tell apart hash alike")
	}
}

func TestGenesisBindsTenantAndSession(t *testing.T) {
	a, b, c := events.Genesis("t", "s1"), events.Genesis("t", "s2"), events.Genesis("t2", "s1")
	if a == b || a == c || len(a) != events.HashLen || a == events.Chain1.Genesis("t", "s1") {
		t.Fatalf("genesis links %s %s %s", a, b, c)
	}
	if events.Genesis("t", "s1") != a {
		t.Fatal("Genesis is not deterministic")
	}
}

func TestHashRefusesBadData(t *testing.T) {
	for _, chain := range []events.Chain{events.Chain1, events.Chain2} {
		ev := sampleEvent()
		ev.Data = json.RawMessage(`{"a":`)
		if _, err := chain.Hash(ev); !errors.Is(err, events.ErrCanonical) {
			t.Fatalf("%s: Hash of an event whose data is not JSON: %v", chain, err)
		}
		ev.Data = nil
		if _, err := chain.Hash(ev); err != nil {
			t.Fatalf("%s: Hash of an event without data: %v", chain, err)
		}
	}
	if _, err := events.Chain("callsheet-chain-9").Hash(sampleEvent()); !errors.Is(err, events.ErrUnknownChain) {
		t.Fatalf("an unknown rule: %v", err)
	}
}

// TestChainOf: a session's rule is the one its first event's genesis link
// names; a log without one (unchained, or linked before Chain2) is Chain1.
func TestChainOf(t *testing.T) {
	ev := sampleEvent()
	ev.Seq, ev.Prev = 1, events.Chain2.Genesis(ev.Tenant, ev.Session)
	for _, c := range []struct {
		prev string
		seq  uint64
		want events.Chain
	}{
		{events.Chain2.Genesis(ev.Tenant, ev.Session), 1, events.Chain2},
		{events.Chain1.Genesis(ev.Tenant, ev.Session), 1, events.Chain1},
		{"", 1, events.Chain1},
		{events.Chain2.Genesis(ev.Tenant, "other"), 1, events.Chain1},
		{events.Chain2.Genesis(ev.Tenant, ev.Session), 2, events.Chain1},
	} {
		e := ev
		e.Prev, e.Seq = c.prev, c.seq
		if got := events.ChainOf(ev.Tenant, ev.Session, e); got != c.want {
			t.Errorf("prev %q seq %d: %s, want %s", c.prev, c.seq, got, c.want)
		}
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

// TestWorkedExample checks the examples of docs/events.md ("A worked
// example"): Chain2's genesis link and hashes of two stored lines, and
// Chain1's genesis link, canonical envelopes and hashes of the same events
// as a session opened before Chain2 stored them.
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
	lines2 := []string{
		`{"id":"01JDXK0S4Q1V6C7Y8Z9A0B1C2D","tenant":"acme","session":"01JDXK0S4P8W2N3M4K5J6H7G8F","seq":1,"time":"2026-12-01T09:00:00.12Z","type":"SessionOpened","prev":"4788f37de7d031e0db39970096c8672a2a9698d69be76d3c1afe0b8ad3677a3e","data":{"workspace":"demo"}}`,
		`{"id":"01JDXK0T0A1B2C3D4E5F6G7H8J","tenant":"acme","session":"01JDXK0S4P8W2N3M4K5J6H7G8F","seq":2,"time":"2026-12-01T09:00:01.000000005Z","type":"TurnReceived","prev":"84d0ec2d8f76607ad3c1741380c835d12a63548f6b986212cbdc2d5e54418c25","data":{"turn":"t1","calls":[{"id":"c1","name":"read","arguments":{"path":"a\u003cb.md","limit":1.50e2,"id":12345678901234567891}}],"parallel_tool_calls":true,"cap":8,"plan":[]}}`,
	}
	hashes2 := []string{"84d0ec2d8f76607ad3c1741380c835d12a63548f6b986212cbdc2d5e54418c25", "4adecb0e653d3f2d8885ef3a20e6dfd3bcaead495f2f9b7db2abe9f91c44dc2b"}
	if g := events.Chain2.Genesis("acme", session); g != "4788f37de7d031e0db39970096c8672a2a9698d69be76d3c1afe0b8ad3677a3e" {
		t.Fatalf("Chain2 genesis %s", g)
	}
	for i, l := range lines2 {
		ev, err := events.Unmarshal([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := events.Marshal(ev); string(b) != l {
			t.Fatalf("event %d is stored as\n%s\nnot\n%s", i+1, b, l)
		}
		if h, _ := events.Hash(ev); h != hashes2[i] {
			t.Fatalf("event %d Chain2 hash %s, want %s", i+1, h, hashes2[i])
		}
	}
	if c := events.ChainOf("acme", session, mustUnmarshal(t, lines2[0])); c != events.Chain2 {
		t.Fatalf("the Chain2 example is read as %s", c)
	}
	if g := events.Chain1.Genesis("acme", session); g != "b23a2543fbba0ee6a9caabbdd13c28b3f7ffb906dde7b078b85c77695ab06be7" {
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
		if h, _ := events.Chain1.Hash(ev); h != hashes[i] {
			t.Fatalf("event %d hash %s, want %s", i+1, h, hashes[i])
		}
	}
}

func mustUnmarshal(t *testing.T, line string) events.Event {
	t.Helper()
	ev, err := events.Unmarshal([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// FuzzChain2HashAsMarshal holds the Chain2 hash of an event read back (no
// kept encoding: the fast layout) to its definition, the SHA-256 of
// json.Marshal's bytes, for any data and envelope strings, and to an error
// where json.Marshal refuses.
func FuzzChain2HashAsMarshal(f *testing.F) {
	for _, d := range []string{`{"a":1}`, `{"a": 1}`, `{"t":"<b>"}`, `{"t":"\u003cb\u003e"}`, "{\"t\":\"\u2028\"}", `{"a":`, ``, `null`,
		`[1,"x\\"y",{"k":"\\\\"}]`, "\"\xff\"", ` {"a":[1 , 2]} `, `{"n":12345678901234567891,"s":"\ud800"}`} {
		f.Add([]byte(d), "01J0000000000000000000000A", "acme")
	}
	f.Add([]byte(`{}`), "id<&>", "t\"x")
	f.Fuzz(func(t *testing.T, data []byte, id, tenant string) {
		ev := sampleEvent()
		ev.Data, ev.ID, ev.Tenant = data, id, tenant
		got, err := events.Chain2.Hash(ev)
		want, merr := json.Marshal(ev)
		if merr != nil {
			if err == nil {
				t.Fatalf("json.Marshal refuses the event (%v), Hash gives %s", merr, got)
			}
			return
		}
		if sum := sha256.Sum256(want); err != nil || got != hex.EncodeToString(sum[:]) {
			t.Fatalf("Hash %s (%v), SHA-256 of json.Marshal's bytes %x\n%q", got, err, sum, want)
		}
	})
}
