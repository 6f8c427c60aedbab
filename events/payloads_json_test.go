package events_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/internal/gen"
)

// filler fills values of any payload type from a fuzzer's bytes, biased
// toward what encoding/json and the canonical encoding treat specially:
// strings it escapes, invalid UTF-8, nil against empty slices, floats at
// its format's cut-offs, -0, NaN, raw JSON with whitespace, HTML, repeated
// or non-ASCII member names, and text that is not JSON.
type filler struct{ b []byte }

var (
	fillStrings = []string{"", "a", "<", ">", "&", `"`, `\`, "/", "\u2028", "\u2029", "\x00", "\x01", "\x1f", "\x7f",
		"\b\f\n\r\t", "é", "\U0001F600", "\xff", "\xe2\x80", "\xe2\x80\xa8", "\xed\xa0\x80", "\ufffd", "\ue000", "read_only", "01JDXK0S4Q1V6C7Y8Z9A0B1C2D"}
	fillRaw = []string{`null`, `true`, `false`, `{}`, `[]`, `0`, `-0`, `1.50e2`, `1E400`, `-1e-400`, `12345678901234567891`,
		` { "b" : 1 , "a" : [ 1 , 2 ] } `, `{"a":"<\u003c&>` + "\u2028\u2029" + `"}`, "\"\u2028\xff\"", `"\ud800"`, `"\ud83d\ude00"`,
		`{"a":1,"a":2}`, `{"é":1,"e":2,"\ud83d\ude00":3,"\ue000":4}`, `{"z":{"y":[{"x":"\t\/"}]}}`, `1e-7`, `0.000001`, `100E-2`,
		"\t[\n1\r]\n", `[1,`, ``, ` `, `{"a"}`, `nul`, `"\x"`, `01`, `{"a":1}{}`, "\"\x01\""}
	fillFloats = []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1.0 / 3, 1e20, 1e21, 999999999999999900000, 1e-6, 1e-7,
		9.999999999999999e-7, 5e-324, math.MaxFloat64, 123456789.125, 12.5, math.NaN(), math.Inf(1), math.Inf(-1)}
	rawMessageType = reflect.TypeFor[json.RawMessage]()
)

func (f *filler) byte() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *filler) u64() uint64 {
	var w [8]byte
	n := copy(w[:], f.b)
	f.b = f.b[n:]
	return binary.LittleEndian.Uint64(w[:])
}

func (f *filler) bytes(n int) []byte {
	n = min(n, len(f.b))
	b := f.b[:n:n]
	f.b = f.b[n:]
	return b
}

func (f *filler) string() string {
	switch c := f.byte(); c % 4 {
	case 0:
		return ""
	case 1:
		return fillStrings[int(f.byte())%len(fillStrings)]
	case 2:
		return string(f.bytes(int(c >> 2)))
	default:
		var s strings.Builder
		for range 1 + c>>6 {
			s.WriteString(fillStrings[int(f.byte())%len(fillStrings)])
			s.Write(f.bytes(int(f.byte() % 8)))
		}
		return s.String()
	}
}

func (f *filler) fill(v reflect.Value, depth int) {
	t := v.Type()
	if t == rawMessageType {
		switch c := f.byte(); c % 4 {
		case 0: // nil
		case 1:
			v.SetBytes([]byte{})
		case 2:
			v.SetBytes([]byte(fillRaw[int(f.byte())%len(fillRaw)]))
		default:
			v.SetBytes(bytes.Clone(f.bytes(int(c >> 2))))
		}
		return
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(f.string())
	case reflect.Bool:
		v.SetBool(f.byte()&1 == 1)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		switch c := f.byte(); c % 4 {
		case 0:
		case 1:
			v.SetInt(int64(int8(f.byte())))
		case 2:
			v.SetInt([]int64{math.MinInt64, math.MaxInt64, -1, 1 << 53, 1<<53 + 1}[int(c>>2)%5])
		default:
			v.SetInt(int64(f.u64()))
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		switch c := f.byte(); c % 3 {
		case 0:
		case 1:
			v.SetUint(uint64(f.byte()))
		default:
			v.SetUint(f.u64())
		}
	case reflect.Float64:
		if c := f.byte(); c%2 == 0 {
			v.SetFloat(fillFloats[int(c>>1)%len(fillFloats)])
		} else {
			v.SetFloat(math.Float64frombits(f.u64()))
		}
	case reflect.Slice:
		c := f.byte()
		if t.Elem().Kind() == reflect.Uint8 {
			switch c % 3 {
			case 0:
			case 1:
				v.SetBytes([]byte{})
			default:
				v.SetBytes(bytes.Clone(f.bytes(int(c >> 2))))
			}
			return
		}
		if c%3 == 0 || depth > 4 {
			return // nil
		}
		n := 0
		if c%3 == 2 {
			n = 1 + int(c>>2)%3
		}
		s := reflect.MakeSlice(t, n, n)
		for i := range n {
			f.fill(s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Pointer:
		if f.byte()%2 == 0 || depth > 4 {
			return
		}
		p := reflect.New(t.Elem())
		f.fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				f.fill(v.Field(i), depth+1)
			}
		}
	default:
		panic("filler: no case for " + t.String())
	}
}

// sortedPayloadTypes is payloadTypes in a fixed order.
func sortedPayloadTypes() []events.Type {
	typs := make([]events.Type, 0, len(payloadTypes))
	for typ := range payloadTypes {
		typs = append(typs, typ)
	}
	slices.Sort(typs)
	return typs
}

// checkPayloadEncoders holds the generated encoders of p to the
// definitions: appendPayloadJSON to json.Marshal (the same bytes, or both
// refusing), appendPayloadCanonical to the canonical encoding of
// json.Marshal's bytes, Payload to json.Marshal, and the hash Encode keeps
// to the hash of the same event computed from its bytes.
func checkPayloadEncoders(t *testing.T, typ events.Type, p any) {
	t.Helper()
	want, werr := json.Marshal(p)
	got, ok := events.AppendPayloadJSON(nil, p)
	if ok != (werr == nil) {
		t.Fatalf("%T %+v: generated encoder ok=%v, json.Marshal error %v", p, p, ok, werr)
	}
	if werr != nil {
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%T: the generated encoder writes\n%q\njson.Marshal writes\n%q", p, got, want)
	}
	if pl := events.Payload(p); !bytes.Equal(pl, want) {
		t.Fatalf("%T: Payload writes\n%q\njson.Marshal writes\n%q", p, pl, want)
	}
	wantCanon, cerr := events.Canonical(want)
	gotCanon, cok := events.AppendPayloadCanonical(nil, p)
	if cok != (cerr == nil) {
		t.Fatalf("%T %q: generated canonical encoder ok=%v, Canonical of its JSON: %v", p, want, cok, cerr)
	}
	if !bytes.Equal(gotCanon, wantCanon) {
		t.Fatalf("%T %q: the generated canonical encoder writes\n%q\nCanonical of its JSON is\n%q", p, want, gotCanon, wantCanon)
	}
	env := events.Event{ID: "01JDXK0S4Q1V6C7Y8Z9A0B1C2D", Tenant: "acme", Session: "s", Seq: 9,
		Time: time.Date(2026, 12, 1, 9, 0, 0, 5, time.UTC), Type: typ, Causation: "c", Prev: events.Genesis("acme", "s")}
	ev := events.Encode(env, p)
	// Chain1: the hash computed from the payload's value, and from the
	// event's bytes.
	fast, ok := events.HashedAtEncode(ev)
	if !ok {
		t.Fatalf("%T: Encode kept no hash", p)
	}
	if h, err := events.Chain1.Hash(ev); err != nil || h != fast {
		t.Fatalf("%T: Chain1.Hash=%s (%v), Encode kept %s", p, h, err, fast)
	}
	slow, err := events.Chain1.Hash(unencoded(ev))
	if err != nil || slow != fast {
		t.Fatalf("%T %q: Encode hashed %s, the event's bytes hash %s (%v)", p, ev.Data, fast, slow, err)
	}
	// Chain2: the SHA-256 of the stored bytes, the same for the event read
	// back from them, whose encoding is the stored bytes again.
	stored, err := events.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(stored)
	h2, err := events.Hash(ev)
	if err != nil || h2 != hex.EncodeToString(sum[:]) {
		t.Fatalf("%T: Hash=%s (%v), SHA-256 of the stored bytes %x", p, h2, err, sum)
	}
	back, err := events.Unmarshal(stored)
	if err != nil {
		t.Fatalf("%T: the stored event does not read back: %v\n%q", p, err, stored)
	}
	if again, err := events.Marshal(back); err != nil || !bytes.Equal(again, stored) {
		t.Fatalf("%T: the event read back encodes as\n%q (%v)\nnot as stored\n%q", p, again, err, stored)
	}
	if hb, err := events.Hash(back); err != nil || hb != h2 {
		t.Fatalf("%T: the event read back hashes %s (%v), as minted %s", p, hb, err, h2)
	}
}

// unencoded is ev as an event read back from the log is: the same fields,
// no encoding attached.
func unencoded(ev events.Event) events.Event {
	return events.Event{ID: ev.ID, Tenant: ev.Tenant, Session: ev.Session, Seq: ev.Seq, Time: ev.Time, Type: ev.Type,
		Causation: ev.Causation, Prev: ev.Prev, Data: bytes.Clone(ev.Data)}
}

// FuzzPayloadJSONAsMarshal holds the generated encoders of every payload
// type (and of every type they hold) to json.Marshal and to the canonical
// encoding of its bytes, and the hash Encode computes from the payload's
// value to the hash computed from the event's bytes, on values filled from
// the fuzzer's bytes (the first picks the type), by value and by pointer.
func FuzzPayloadJSONAsMarshal(f *testing.F) {
	typs := sortedPayloadTypes()
	for i := range typs {
		f.Add(append([]byte{byte(i)}, bytes.Repeat([]byte{2, 7, 0xff}, 100)...))
		f.Add(append([]byte{byte(i)}, bytes.Repeat([]byte{3, 0x41, 9, 2, 0x80, 1}, 100)...))
		seed := make([]byte, 512)
		for j := range seed {
			seed[j] = byte(i*131 + j*j*7 + j>>3)
		}
		seed[0] = byte(i)
		f.Add(seed)
	}
	f.Add([]byte{})
	f.Add([]byte("\x04\x02\x05\x02\x09\x01\x03\x02\x0c\x01\x00\x02\x14\x02\x1a\x03\x03" + strings.Repeat("\x06\x0e\x16\x1e\x22\x24", 40)))
	f.Fuzz(func(t *testing.T, b []byte) {
		fl := &filler{b: b}
		typ := typs[int(fl.byte())%len(typs)]
		p := payloadTypes[typ]()
		fl.fill(reflect.ValueOf(p).Elem(), 0)
		checkPayloadEncoders(t, typ, p)
		checkPayloadEncoders(t, typ, reflect.ValueOf(p).Elem().Interface())
	})
}

// TestEveryPayloadTypeIsGenerated: each event type's payload, and a nil
// pointer to it, has a generated encoder, so none falls back to reflection
// unseen; a value of another type has none and is left to json.Marshal.
func TestEveryPayloadTypeIsGenerated(t *testing.T) {
	for _, typ := range sortedPayloadTypes() {
		p := payloadTypes[typ]()
		for _, v := range []any{p, reflect.ValueOf(p).Elem().Interface(), reflect.Zero(reflect.TypeOf(p)).Interface()} {
			if _, ok := events.AppendPayloadJSON(nil, v); !ok {
				t.Errorf("%s: no generated encoder for a %T: add it to gen.Roots and run go generate ./events", typ, v)
			}
			checkPayloadEncoders(t, typ, v)
		}
	}
	for _, v := range []any{nil, json.RawMessage(`{"a":1}`), map[string]int{"a": 1}, struct{ A int }{1}} {
		if b, ok := events.AppendPayloadJSON(nil, v); ok {
			t.Errorf("%T has a generated encoder (it wrote %q)", v, b)
		}
		if got, want := events.Payload(v), mustMarshal(t, v); !bytes.Equal(got, want) {
			t.Errorf("Payload(%T)=%s, want json.Marshal's %s", v, got, want)
		}
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGeneratedEncodersAreCurrent fails when a payload type changed (a
// field added, renamed, retagged, or its type changed) and
// payloads_json.go was not generated again: the file must be what the
// generator writes for the types as they are now.
func TestGeneratedEncodersAreCurrent(t *testing.T) {
	want, err := gen.Source()
	if err != nil {
		t.Fatalf("the generator refuses the payload types: %v", err)
	}
	got, err := os.ReadFile("payloads_json.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("events/payloads_json.go is stale: a payload type changed since it was generated; run go generate ./events")
	}
}

// TestPayloadEncodersEdges runs the edges the fuzzer is seeded with as
// named cases, so a failure names its value.
func TestPayloadEncodersEdges(t *testing.T) {
	cases := []struct {
		typ events.Type
		p   any
	}{
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: math.Copysign(0, -1)}},
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: 1e21}},
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: 1e-7}},
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: 999999999999999900000}},
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: 5e-324}},
		{events.TypeToolCallStarted, events.ToolCallStarted{QueuedMS: math.NaN()}},
		{events.TypeToolCallFailed, events.ToolCallFailed{DurationMS: math.Inf(-1)}},
		{events.TypeToolCallCompleted, events.ToolCallCompleted{Content: []events.Part{{Type: "text", Text: "a<b>&\u2028\u2029\xff\x00\x7f\"\\", Data: []byte{}},
			{JSON: json.RawMessage(" [ \"<\" , 1.50e2 , {\"b\":1,\"a\":2} ] "), Data: []byte{0, 1, 2, 0xff}}}, FullOutput: &events.OutputRef{}, Touched: []string{}}},
		{events.TypeToolCallCompleted, events.ToolCallCompleted{Content: []events.Part{{JSON: json.RawMessage(`[1,`)}}}},
		{events.TypeToolCallCompleted, events.ToolCallCompleted{Content: []events.Part{{JSON: json.RawMessage{}}}}},
		{events.TypeAnswerReceived, events.AnswerReceived{Answer: json.RawMessage{}}},
		{events.TypeAnswerReceived, events.AnswerReceived{Answer: json.RawMessage(`{"é":1,"e":2,"\ud83d\ude00":3,"\ue000":4,"e":5}`)}},
		{events.TypeTurnReceived, events.TurnReceived{Calls: []events.CallSpec{{Arguments: json.RawMessage(`"{\"a\":12345678901234567891}"`)}}, Plan: []events.PlanEntry{{Labels: []string{}, Blocked: events.BlockDenied}}}},
		{events.TypeRetryScheduled, events.RetryScheduled{Delay: -time.Second}},
		{events.TypeFileCheckpointed, events.FileCheckpointed{Mode: math.MaxUint32, Size: math.MinInt64}},
		{events.TypeHeadSigned, events.HeadSigned{Seq: math.MaxUint64}},
		{events.TypeWorkspaceRewound, events.WorkspaceRewound{Restored: []string{}}},
	}
	for _, c := range cases {
		checkPayloadEncoders(t, c.typ, c.p)
		checkPayloadEncoders(t, c.typ, events.Pointer(c.p))
	}
}

// TestChangedEventIsHashedAfresh attacks the hash Encode keeps: an event
// changed in any way after Encode must hash as what it is now, never as
// what it was when encoded.
func TestChangedEventIsHashedAfresh(t *testing.T) {
	base := events.Event{ID: "01JDXK0S4Q1V6C7Y8Z9A0B1C2D", Tenant: "acme", Session: "s1", Seq: 3,
		Time: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Type: events.TypeToolCallCompleted, Causation: "c", Prev: strings.Repeat("0", 64)}
	payload := events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t", Call: "c"}, Attempt: 1,
		Content: []events.Part{{Type: "text", Text: "output"}}, DurationMS: 1.5}
	for _, c := range append(envelopeChanges(events.TypeToolCallFailed), []eventChange{
		{"data replaced", func(e *events.Event) {
			e.Data = events.Payload(events.ToolCallCompleted{Content: []events.Part{{Type: "text", Text: "forged"}}})
		}},
		{"data changed in place", func(e *events.Event) {
			i := bytes.Index(e.Data, []byte(`"output"`))
			copy(e.Data[i:], `"OUTPUT"`)
		}},
		{"data emptied", func(e *events.Event) { e.Data = nil }},
	}...) {
		t.Run(c.name, func(t *testing.T) {
			ev := events.Encode(base, payload)
			kept1, ok := events.HashedAtEncode(ev)
			if !ok {
				t.Fatal("Encode kept no hash")
			}
			kept2, _ := events.Chain2.Hash(ev)
			c.change(&ev)
			for _, ch := range []struct {
				chain events.Chain
				kept  string
			}{{events.Chain1, kept1}, {events.Chain2, kept2}} {
				got, err := ch.chain.Hash(ev)
				if err != nil {
					t.Fatal(err)
				}
				want, err := ch.chain.Hash(unencoded(ev))
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s: Hash=%s, the changed event's bytes hash %s", ch.chain, got, want)
				}
				if got == ch.kept {
					t.Fatalf("%s: Hash returned the hash kept for the event as it was, %s", ch.chain, ch.kept)
				}
			}
		})
	}
}
