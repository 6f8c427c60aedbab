package events_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
)

// envelopeOf is ev without its payload: what the session actor hands
// Encode.
func envelopeOf(ev events.Event) events.Event {
	ev.Data = nil
	return ev
}

// mustStd is the definition Encode's bytes are held to: encoding/json's
// encoding of the event (the unexported encoding is not part of it).
func mustStd(t testing.TB, ev events.Event) []byte {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatalf("json.Marshal(%+v): %v", ev, err)
	}
	return b
}

// TestEncodeReproducesTheGoldenStreams re-mints every event of the golden
// streams from its decoded payload, chains them as the session actor does,
// and checks that the bytes Encode attaches are those the stream stores,
// that json.Marshal of the event agrees, and that the hash of each is the
// SHA-256 of the stored bytes (Chain2) and, under Chain1, of their
// canonical encoding: hashing the encoding and hashing the event's fields
// are the same rule.
func TestEncodeReproducesTheGoldenStreams(t *testing.T) {
	paths, _ := filepath.Glob("../projections/testdata/*.events.jsonl")
	if len(paths) == 0 {
		t.Fatal("no golden streams in ../projections/testdata")
	}
	n := 0
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		var prev events.Event
		for sc.Scan() {
			line := sc.Bytes()
			stored, err := events.Unmarshal(line)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			payload, err := events.Decode(stored)
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			// As stored (unchained, as the golden streams were written).
			ev := events.Encode(envelopeOf(stored), payload)
			got, ok := ev.Encoding()
			if !ok {
				t.Fatalf("%s seq %d: Encode attached no encoding", p, stored.Seq)
			}
			if !bytes.Equal(got, line) {
				t.Fatalf("%s seq %d: Encode wrote\n%s\nthe stream stores\n%s", p, stored.Seq, got, line)
			}
			if std := mustStd(t, ev); !bytes.Equal(std, line) {
				t.Fatalf("%s seq %d: json.Marshal writes\n%s\nthe stream stores\n%s", p, stored.Seq, std, line)
			}
			// Chained, as a node writes them now.
			env := envelopeOf(stored)
			if stored.Seq == 1 {
				env.Prev = events.Genesis(stored.Tenant, stored.Session)
			} else if env.Prev, err = events.Hash(prev); err != nil {
				t.Fatal(err)
			}
			ev = events.Encode(env, payload)
			b, err := events.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			if std := mustStd(t, ev); !bytes.Equal(b, std) {
				t.Fatalf("%s seq %d: Marshal returns\n%s\njson.Marshal\n%s", p, stored.Seq, b, std)
			}
			h, err := events.Hash(ev)
			if err != nil {
				t.Fatal(err)
			}
			if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != h {
				t.Fatalf("%s seq %d: Hash %s, SHA-256 of the stored bytes %x", p, stored.Seq, h, sum)
			}
			canon, err := events.Canonical(b)
			if err != nil {
				t.Fatal(err)
			}
			if sum, h1 := sha256.Sum256(canon), mustHash(t, events.Chain1, ev); hex.EncodeToString(sum[:]) != h1 {
				t.Fatalf("%s seq %d: Chain1 hash %s, SHA-256 of the canonical stored bytes %x", p, stored.Seq, h1, sum)
			}
			read, err := events.Unmarshal(b)
			if err != nil {
				t.Fatal(err)
			}
			if hr, _ := events.Hash(read); hr != h {
				t.Fatalf("%s seq %d: hash of the event read back %s, of the event minted %s", p, stored.Seq, hr, h)
			}
			prev = ev
			n++
		}
		f.Close()
	}
	if n < 50 {
		t.Fatalf("only %d golden events checked", n)
	}
}

func mustHash(t *testing.T, c events.Chain, ev events.Event) string {
	t.Helper()
	h, err := c.Hash(ev)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// encodeCases are envelopes and payloads at the edges of the plain layout:
// strings encoding/json escapes, times in other zones, requests.
func encodeCases() []struct {
	name    string
	ev      events.Event
	payload any
} {
	at := time.Date(2026, 12, 1, 9, 0, 0, 120_000_000, time.UTC)
	plain := events.Event{ID: "01JDXK0S4Q1V6C7Y8Z9A0B1C2D", Tenant: "acme", Session: "01JDXK0S4P8W2N3M4K5J6H7G8F", Seq: 7, Time: at,
		Type: events.TypeToolCallCompleted, Causation: "01JDXK0S4Q1V6C7Y8Z9A0B1C2C", Prev: strings.Repeat("ab", 32)}
	with := func(f func(*events.Event)) events.Event { ev := plain; f(&ev); return ev }
	result := events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t1", Call: "c<1>", Index: 2}, Attempt: 1,
		Content: []events.Part{{Type: "text", Text: "a <b> & \"c\"\t\u2028é\xff\x00"}, {Type: "json", JSON: json.RawMessage(` { "a" : [1, 2.50, 1e3] } `)}}}
	request := events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: "c"}, Name: "read",
		Arguments: json.RawMessage(`{"path": "a<b"}`), Attempt: 1, Concurrency: "parallel_safe", Node: "n-1"}
	cases := []struct {
		name    string
		ev      events.Event
		payload any
	}{
		{"plain", plain, result},
		{"no causation or prev", with(func(e *events.Event) { e.Causation, e.Prev = "", "" }), result},
		{"pointer payload", plain, &result},
		{"request", with(func(e *events.Event) { e.Type = events.TypeToolCallRequested }), request},
		{"request by pointer", with(func(e *events.Event) { e.Type = events.TypeToolCallRequested }), &request},
		{"html in id", with(func(e *events.Event) { e.ID = "a<b>&c" }), result},
		{"quote and backslash in tenant", with(func(e *events.Event) { e.Tenant = `a"b\c` }), result},
		{"control character in session", with(func(e *events.Event) { e.Session = "a\nb\x01" }), result},
		{"non-ASCII causation", with(func(e *events.Event) { e.Causation = "é\u2028\u2029" }), result},
		{"invalid UTF-8 prev", with(func(e *events.Event) { e.Prev = "\xff\xfe" }), result},
		{"odd type", with(func(e *events.Event) { e.Type = "Type<>" }), result},
		{"zone offset", with(func(e *events.Event) { e.Time = at.In(time.FixedZone("x", 5*3600+30*60)) }), result},
		{"negative offset", with(func(e *events.Event) { e.Time = at.In(time.FixedZone("y", -7*3600)) }), result},
		{"zero time", with(func(e *events.Event) { e.Time = time.Time{} }), result},
		{"local time with monotonic reading", with(func(e *events.Event) { e.Time = time.Now() }), result},
		{"nanoseconds", with(func(e *events.Event) { e.Time = time.Date(2026, 1, 2, 3, 4, 5, 1, time.UTC) }), result},
		{"max seq", with(func(e *events.Event) { e.Seq = ^uint64(0) }), result},
		{"nil payload", plain, nil},
		{"raw payload", plain, json.RawMessage(` {"x" : "<"} `)},
		{"empty payload struct", with(func(e *events.Event) { e.Type = events.TypeTurnCompleted }), events.TurnCompleted{}},
	}
	for typ, mk := range payloadTypes {
		cases = append(cases, struct {
			name    string
			ev      events.Event
			payload any
		}{"zero " + string(typ), with(func(e *events.Event) { e.Type = typ }), mk()})
	}
	return cases
}

// TestEncodeIsMarshal holds the encoding Encode attaches to the definition,
// json.Marshal's, for every payload type and at each edge of the plain
// layout; and Data to Payload's.
func TestEncodeIsMarshal(t *testing.T) {
	for _, c := range encodeCases() {
		t.Run(c.name, func(t *testing.T) {
			ev := events.Encode(c.ev, c.payload)
			if want := events.Payload(c.payload); !bytes.Equal(ev.Data, want) {
				t.Fatalf("Data=%s, want Payload's %s", ev.Data, want)
			}
			got, ok := ev.Encoding()
			if !ok {
				t.Fatal("Encode attached no encoding")
			}
			if want := mustStd(t, ev); !bytes.Equal(got, want) {
				t.Fatalf("Encode wrote\n%s\njson.Marshal writes\n%s", got, want)
			}
			if m, _ := events.Marshal(ev); !bytes.Equal(m, got) {
				t.Fatalf("Marshal=%s, want the attached encoding %s", m, got)
			}
		})
	}
}

// TestChangedEventIsEncodedAfresh attacks the cache: an event changed in
// any way after Encode (a field set, its payload replaced, cut, or changed
// in place) must not be stored with the bytes of what it was. Marshal must
// encode what it is now.
func TestChangedEventIsEncodedAfresh(t *testing.T) {
	base := events.Event{ID: "01JDXK0S4Q1V6C7Y8Z9A0B1C2D", Tenant: "acme", Session: "s1", Seq: 3,
		Time: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Type: events.TypeToolCallRequested, Causation: "c", Prev: strings.Repeat("0", 64)}
	payload := events.ToolCallRequested{CallRef: events.CallRef{Turn: "t", Call: "c"}, Name: "read", Concurrency: "parallel_safe", Node: "n1"}
	for _, c := range append(envelopeChanges(events.TypeToolCallStarted), []eventChange{
		{"data replaced", func(e *events.Event) {
			e.Data = events.Payload(events.ToolCallRequested{Name: "write", Concurrency: "exclusive", Node: "n2"})
		}},
		{"data cut", func(e *events.Event) { e.Data = e.Data[:len(e.Data)-2] }},
		{"data changed in place", func(e *events.Event) {
			i := bytes.Index(e.Data, []byte(`"parallel_safe"`))
			copy(e.Data[i:], `"exclusive"    `)
		}},
		{"data emptied", func(e *events.Event) { e.Data = nil }},
	}...) {
		t.Run(c.name, func(t *testing.T) {
			ev := events.Encode(base, payload)
			stale, ok := ev.Encoding()
			if !ok {
				t.Fatal("Encode attached no encoding")
			}
			stale = bytes.Clone(stale)
			c.change(&ev)
			if b, ok := ev.Encoding(); ok {
				t.Fatalf("Encoding() still answers %s after the change", b)
			}
			got, err := events.Marshal(ev)
			want, werr := json.Marshal(ev)
			if (err == nil) != (werr == nil) {
				t.Fatalf("Marshal error %v, json.Marshal error %v", err, werr)
			}
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("Marshal=%s, want json.Marshal's %s", got, want)
			}
			if bytes.Equal(got, stale) {
				t.Fatalf("Marshal returned the stale encoding %s", got)
			}
		})
	}
	// A copy unchanged keeps the encoding; a copy changed loses it, and the
	// original keeps its own.
	ev := events.Encode(base, payload)
	cp := ev
	cp.Seq++
	if _, ok := ev.Encoding(); !ok {
		t.Fatal("changing a copy dropped the original's encoding")
	}
	if _, ok := cp.Encoding(); ok {
		t.Fatal("a changed copy kept the encoding")
	}
}

// TestEncodeWithoutEncoding covers the events Encode leaves to Marshal: a
// payload over 256 KiB (it goes by reference, whose stub never holds the
// envelope) and an envelope json.Marshal refuses.
func TestEncodeWithoutEncoding(t *testing.T) {
	big := events.Encode(events.Event{ID: "x", Tenant: "t", Session: "s", Seq: 1, Type: events.TypeToolCallCompleted},
		events.ToolCallCompleted{Content: []events.Part{{Type: "text", Text: strings.Repeat("x", 256<<10)}}})
	if _, ok := big.Encoding(); ok {
		t.Fatal("a payload over 256 KiB kept its encoding")
	}
	if got, _ := events.Marshal(big); !bytes.Equal(got, mustStd(t, big)) {
		t.Fatal("Marshal of a large event differs from json.Marshal")
	}
	late := events.Encode(events.Event{ID: "x", Tenant: "t", Session: "s", Seq: 1, Type: events.TypeTurnCompleted,
		Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, events.TurnCompleted{})
	if _, ok := late.Encoding(); ok {
		t.Fatal("an event json.Marshal refuses has an encoding")
	}
	if _, err := events.Marshal(late); err == nil {
		t.Fatal("Marshal of a year-10000 event did not fail")
	}
}

// FuzzEncodeAsMarshal holds Encode's plain layout to json.Marshal on any
// envelope strings, sequence, time, zone and payload text.
func FuzzEncodeAsMarshal(f *testing.F) {
	f.Add("01JDXK0S4Q1V6C7Y8Z9A0B1C2D", "acme", "s", "c", strings.Repeat("ab", 32), uint64(1), int64(1764579600120000000), int32(0), "text", "parallel_safe")
	f.Add("a<b", "t\"", "s\\", "\u2028", "\xff", uint64(0), int64(-62135596800000000000/1e3), int32(-3600), "<&>\x00\t", "")
	f.Add("", "", "", "", "", ^uint64(0), int64(253402300799999999), int32(86399), "é\xfe", "n\xff")
	f.Add("x", "y", "z", "", "", uint64(42), int64(0), int32(19800), "\"quoted\"", "isolated_background")
	f.Fuzz(func(t *testing.T, id, tenant, session, causation, prev string, seq uint64, nanos int64, offset int32, text, conc string) {
		at := time.Unix(0, nanos).In(time.FixedZone("z", int(offset%(100*3600))))
		if offset == 0 {
			at = at.UTC()
		}
		env := events.Event{ID: id, Tenant: tenant, Session: session, Seq: seq, Time: at, Causation: causation, Prev: prev}
		for _, p := range []struct {
			typ     events.Type
			payload any
		}{
			{events.TypeToolCallCompleted, events.ToolCallCompleted{Content: []events.Part{{Type: "text", Text: text}}}},
			{events.TypeToolCallRequested, &events.ToolCallRequested{Name: text, Concurrency: decl.Class(conc), Node: text}},
			{events.Type(text), events.TurnCompleted{Turn: conc}},
		} {
			env.Type = p.typ
			ev := events.Encode(env, p.payload)
			want, werr := json.Marshal(ev)
			got, err := events.Marshal(ev)
			if (err == nil) != (werr == nil) {
				t.Fatalf("%+v: Marshal error %v, json.Marshal error %v", ev, err, werr)
			}
			if err != nil {
				if _, ok := ev.Encoding(); ok {
					t.Fatalf("%+v: an encoding attached to an event json.Marshal refuses", ev)
				}
				continue
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("Encode wrote\n%q\njson.Marshal writes\n%q", got, want)
			}
			if _, ok := ev.Encoding(); !ok {
				t.Fatalf("%+v: no encoding attached", ev)
			}
		}
	})
}

// eventChange is one way of changing an event after Encode.
type eventChange struct {
	name   string
	change func(*events.Event)
}

// envelopeChanges changes each envelope field in turn (to the type other
// for the type), each of which must make Encode's kept encoding and hash
// unusable.
func envelopeChanges(other events.Type) []eventChange {
	return []eventChange{
		{"id", func(e *events.Event) { e.ID = "other" }},
		{"tenant", func(e *events.Event) { e.Tenant = "evil" }},
		{"session", func(e *events.Event) { e.Session = "s2" }},
		{"seq", func(e *events.Event) { e.Seq++ }},
		{"time", func(e *events.Event) { e.Time = e.Time.Add(time.Nanosecond) }},
		{"time zone, same instant", func(e *events.Event) { e.Time = e.Time.In(time.FixedZone("x", 3600)) }},
		{"type", func(e *events.Event) { e.Type = other }},
		{"causation", func(e *events.Event) { e.Causation = "" }},
		{"prev", func(e *events.Event) { e.Prev = strings.Repeat("1", 64) }},
	}
}
