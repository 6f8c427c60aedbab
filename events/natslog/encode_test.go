package natslog_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// TestAppendStoresTheEncodingMarshalDefines appends events minted as the
// session actor mints them (events.Encode), events built by hand, and
// events changed after Encode, and reads every stored message back raw: each
// event must be stored as json.Marshal encodes it as appended (a stub and its
// object for the one over the reference threshold), requests as their
// payload holds them when appended, not as they were when they were
// encoded, and every message on the session's log subject.
func TestAppendStoresTheEncodingMarshalDefines(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		e := startServer(t)
		js, _ := connect(t, e)
		l := openLog(t, e, mode, natslog.WithRefThreshold(4<<10))
		ctx := ctxT(t)
		const tenant, session = "acme", "s1"
		at := time.Date(2026, 12, 1, 9, 0, 0, 120_000_000, time.UTC)
		var evs []events.Event
		// link is what the next event carries in Prev: the actor knows it
		// before it encodes the event.
		link := func() string {
			if len(evs) == 0 {
				return events.Genesis(tenant, session)
			}
			return mustHash(t, evs[len(evs)-1])
		}
		add := func(typ events.Type, payload any, change func(*events.Event)) {
			ev := events.Encode(events.Event{ID: newID(), Tenant: tenant, Session: session, Seq: uint64(len(evs) + 1), Time: at, Type: typ, Prev: link()}, payload)
			if _, ok := ev.Encoding(); !ok && len(ev.Data) < 256<<10 {
				t.Fatalf("event %d: no encoding attached", ev.Seq)
			}
			if change != nil {
				change(&ev)
			}
			evs = append(evs, ev)
		}
		req := func(conc, node string) events.ToolCallRequested {
			return events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: "c"}, Name: "read",
				Arguments: json.RawMessage(`{"path": "a<b&c>"}`), Attempt: 1, Concurrency: decl.Class(conc), Node: node}
		}
		add(events.TypeSessionOpened, events.SessionOpened{Workspace: "w"}, nil)
		add(events.TypeTurnReceived, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "c", Name: "read", Arguments: json.RawMessage(` {"path" : "a<b"} `)}}}, nil)
		add(events.TypeToolCallRequested, req(string(decl.ClassParallelSafe), "n1"), nil)
		add(events.TypeToolCallStarted, events.ToolCallStarted{CallRef: events.CallRef{Turn: "t1", Call: "c"}, Attempt: 1}, nil)
		// Encoded for one class, then changed to another: it must be stored
		// as it now is.
		add(events.TypeToolCallRequested, req(string(decl.ClassParallelSafe), "n1"), func(ev *events.Event) {
			ev.Data = events.Payload(req(string(decl.ClassIsolatedBackground), "n2"))
		})
		// Changed in place after Encode: the byte changes the class.
		add(events.TypeToolCallRequested, req(string(decl.ClassParallelSafe), ""), func(ev *events.Event) {
			i := bytes.Index(ev.Data, []byte(`"parallel_safe"`))
			copy(ev.Data[i:], `"exclusive"    `)
		})
		// An envelope field changed after Encode.
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t1", Call: "c"}, Attempt: 1}, func(ev *events.Event) {
			ev.Causation = evs[len(evs)-1].ID
		})
		// Over the reference threshold: a stub, and the payload in an object.
		add(events.TypeToolCallCompleted, events.ToolCallCompleted{CallRef: events.CallRef{Turn: "t1", Call: "c"}, Attempt: 1,
			Content: []events.Part{{Type: "text", Text: strings.Repeat("<tag> & \"quote\"\t\u2028é ", 400)}}}, nil)
		// Built by hand, with no encoding attached.
		evs = append(evs, events.Event{ID: newID(), Tenant: tenant, Session: session, Seq: uint64(len(evs) + 1), Time: at,
			Type: events.TypeTurnCompleted, Prev: link(), Data: json.RawMessage(` {"turn" : "t1", "x": "<"} `)})
		if err := l.Append(ctx, tenant, session, 0, evs); err != nil {
			t.Fatal(err)
		}

		byID := map[string]events.Event{}
		for _, ev := range evs {
			byID[ev.ID] = ev
		}
		st, err := js.Stream(ctx, natslog.DefaultStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seen, requests := 0, 0
		for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq; sseq++ {
			m, err := st.GetMsg(ctx, sseq)
			if err != nil {
				t.Fatal(err)
			}
			raws := []json.RawMessage{m.Data}
			if m.Data[0] == '[' {
				raws = nil
				if err := json.Unmarshal(m.Data, &raws); err != nil {
					t.Fatal(err)
				}
				var joined []byte
				for k, r := range raws {
					if k > 0 {
						joined = append(joined, ',')
					}
					joined = append(joined, r...)
				}
				if want := "[" + string(joined) + "]"; string(m.Data) != want {
					t.Fatalf("message %d is not its events joined: %s", sseq, m.Data)
				}
			}
			if want := natslog.DefaultSubjectPrefix + "." + tenant + "." + session + ".log"; m.Subject != want {
				t.Fatalf("message %d stored on %s, want %s", sseq, m.Subject, want)
			}
			for _, raw := range raws {
				stored, err := events.Unmarshal(raw)
				if err != nil {
					t.Fatal(err)
				}
				ev, ok := byID[stored.ID]
				if !ok {
					t.Fatalf("message %d holds an event %s never appended", sseq, stored.ID)
				}
				seen++
				want := mustMarshal(t, ev)
				if stored.Data == nil { // a stub
					want = mustMarshal(t, stubOf(t, ev))
					checkObject(t, ctx, js, tenant, session, ev)
				}
				if !bytes.Equal(raw, want) {
					t.Fatalf("event %d (%s) stored as\n%s\njson.Marshal writes\n%s", ev.Seq, ev.Type, raw, want)
				}
				if ev.Type == events.TypeToolCallRequested {
					requests++
				}
			}
		}
		if seen != len(evs) || requests != 3 {
			t.Fatalf("read back %d events and %d requests, appended %d and 3", seen, requests, len(evs))
		}
		got, err := l.Read(ctx, tenant, session, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got {
			hg, _ := events.Hash(got[i])
			hw, _ := events.Hash(evs[i])
			if hg != hw || i > 0 && got[i].Prev != mustHash(t, got[i-1]) {
				t.Fatalf("event %d: hash read back %s, appended %s; chain link %s", i+1, hg, hw, got[i].Prev)
			}
		}
	})
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustHash(t *testing.T, ev events.Event) string {
	t.Helper()
	h, err := events.Hash(ev)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// stubOf is the stub docs/events.md defines for an event stored by
// reference, built from its definition rather than from the log's code.
func stubOf(t *testing.T, ev events.Event) any {
	t.Helper()
	data := mustMarshal(t, ev.Data)
	return struct {
		ID        string             `json:"id"`
		Tenant    string             `json:"tenant"`
		Session   string             `json:"session"`
		Seq       uint64             `json:"seq"`
		Time      time.Time          `json:"time"`
		Type      events.Type        `json:"type"`
		Causation string             `json:"causation,omitempty"`
		Prev      string             `json:"prev,omitempty"`
		DataRef   natslog.PayloadRef `json:"data_ref"`
	}{ev.ID, ev.Tenant, ev.Session, ev.Seq, ev.Time, ev.Type, ev.Causation, ev.Prev, refOf(ev.Tenant, ev.Session, data)}
}

func refOf(tenant, session string, data []byte) natslog.PayloadRef {
	d := sha256Hex(data)
	return natslog.PayloadRef{Bucket: natslog.DefaultPayloadBucket, Object: tenant + "/" + session + "/" + d, SHA256: d, Bytes: len(data)}
}

// checkObject checks that the payload object of an event stored by
// reference holds its payload as json.Marshal writes it inline.
func checkObject(t *testing.T, ctx context.Context, js jetstream.JetStream, tenant, session string, ev events.Event) {
	t.Helper()
	obs, err := js.ObjectStore(ctx, natslog.DefaultPayloadBucket)
	if err != nil {
		t.Fatal(err)
	}
	want := mustMarshal(t, ev.Data)
	got, err := obs.GetBytes(ctx, refOf(tenant, session, want).Object)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("payload object of event %d holds %d bytes, want json.Marshal's %d", ev.Seq, len(got), len(want))
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
