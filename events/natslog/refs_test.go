package natslog_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// bigTurn is a session's opening, a turn whose call carries n bytes of
// arguments (escaping included: quotes, HTML characters, non-ASCII), and its
// request.
func bigTurn(tenant, session string, n int) []events.Event {
	// Mostly plain text, with what JSON escapes (quotes, backslashes, HTML
	// characters, control characters) and non-ASCII now and then.
	content := strings.ToValidUTF8(strings.Repeat("plain text of a file, line after line\t<é>&\"\\\n", n/44+1)[:n], "")
	args := events.Payload(map[string]string{"path": "big", "content": content})
	evs := mk(tenant, session, 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested)
	evs[1].Data = events.Payload(events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "c1", Name: "write", Arguments: args}}})
	evs[2].Data = events.Payload(events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: "c1"}, Name: "write", Arguments: args, Attempt: 1, Concurrency: decl.ClassExclusive})
	return evs
}

// rawMessages returns the session's stored messages as the stream holds them.
func rawMessages(t *testing.T, js jetstream.JetStream, tenant, session string) [][]byte {
	t.Helper()
	ctx := ctxT(t)
	c, err := js.OrderedConsumer(ctx, natslog.DefaultStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"cs.ev." + tenant + "." + session + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for {
		b, err := c.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			out = append(out, m.Data())
			n++
		}
		if n == 0 {
			return out
		}
	}
}

// TestLargeEventsGoByReference: events far over NATS's 1 MiB message
// payload are stored as stubs naming their payload in the object store, and
// every reader gets them back byte for byte. Before, Append failed with
// "maximum payload exceeded".
func TestLargeEventsGoByReference(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		e := startServer(t)
		l := openLog(t, e, mode)
		js, _ := connect(t, e)
		ctx := ctxT(t)
		evs := bigTurn("t", "s", 1200<<10)
		watch, err := l.Watch(ctx, "t", "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
			t.Fatalf("append of a 1.2 MiB turn: %v", err)
		}
		got, err := l.Read(ctx, "t", "s", 0)
		if err != nil || len(got) != len(evs) {
			t.Fatalf("read %d events (%v), want %d", len(got), err, len(evs))
		}
		for i := range evs {
			if !bytes.Equal(got[i].Data, evs[i].Data) || got[i].ID != evs[i].ID || got[i].Type != evs[i].Type || !got[i].Time.Equal(evs[i].Time) {
				t.Fatalf("event %d (%s) read back with %d bytes of data, want the %d appended", i, evs[i].Type, len(got[i].Data), len(evs[i].Data))
			}
		}
		for i := range evs {
			select {
			case ev := <-watch:
				if !bytes.Equal(ev.Data, evs[i].Data) {
					t.Fatalf("watched event %d with %d bytes of data, want %d", i, len(ev.Data), len(evs[i].Data))
				}
			case <-ctx.Done():
				t.Fatal("watch delivered nothing")
			}
		}
		last, ok, err := l.Last(ctx, "t", "s")
		if err != nil || !ok || !bytes.Equal(last.Data, evs[2].Data) {
			t.Fatalf("Last: %d bytes %v %v, want the request's %d", len(last.Data), ok, err, len(evs[2].Data))
		}
		// As stored: every message is well under 1 MiB; the two large
		// events are stubs whose objects are their payloads.
		obs, err := js.ObjectStore(ctx, natslog.DefaultPayloadBucket)
		if err != nil {
			t.Fatal(err)
		}
		stubs := 0
		for _, m := range rawMessages(t, js, "t", "s") {
			if len(m) > 64<<10 {
				t.Fatalf("a stored message is %d bytes", len(m))
			}
			for _, raw := range splitPack(t, m) {
				var s struct {
					Data    json.RawMessage
					DataRef *natslog.PayloadRef `json:"data_ref"`
					Seq     uint64
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatal(err)
				}
				if s.DataRef == nil {
					continue
				}
				stubs++
				if s.Data != nil {
					t.Fatalf("stub of seq %d also carries data", s.Seq)
				}
				payload, err := obs.GetBytes(ctx, s.DataRef.Object)
				if err != nil {
					t.Fatal(err)
				}
				sum := sha256.Sum256(payload)
				if hex.EncodeToString(sum[:]) != s.DataRef.SHA256 || s.DataRef.Object != "t/s/"+s.DataRef.SHA256 || s.DataRef.Bucket != natslog.DefaultPayloadBucket ||
					s.DataRef.Bytes != len(payload) || !bytes.Equal(payload, evs[s.Seq-1].Data) {
					t.Fatalf("stub %+v does not describe its object (%d bytes)", s.DataRef, len(payload))
				}
			}
		}
		if stubs != 2 {
			t.Fatalf("%d events stored by reference, want 2 (the turn and its request)", stubs)
		}
		// A retried append (its ack lost) stores nothing twice.
		if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
			t.Fatalf("retried append: %v", err)
		}
		// [opened, received, request] is one message on the request subject.
		if n := len(rawMessages(t, js, "t", "s")); n != 1 {
			t.Fatalf("after a retried append the session holds %d messages, want 1", n)
		}
	})
}

func splitPack(t *testing.T, m []byte) []json.RawMessage {
	t.Helper()
	if m[0] != '[' {
		return []json.RawMessage{m}
	}
	var out []json.RawMessage
	if err := json.Unmarshal(m, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestTamperedReferenceIsRefused: a payload that no longer matches its
// stub, or is gone, is an error wrapping ErrBadReference, never an event
// with other data.
func TestTamperedReferenceIsRefused(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	evs := bigTurn("t", "s", 1<<20)
	if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, natslog.DefaultPayloadBucket)
	if err != nil {
		t.Fatal(err)
	}
	lister, err := obs.List(ctx)
	if err != nil || len(lister) == 0 {
		t.Fatalf("payload objects: %d %v", len(lister), err)
	}
	name := lister[0].Name
	if !strings.HasPrefix(name, "t/s/") {
		t.Fatalf("object %q is not under its tenant and session", name)
	}
	forged := []byte(`{"turn":"t1","calls":[{"id":"c1","name":"shell","arguments":{"command":"rm -rf /"}}]}`)
	if _, err := obs.PutBytes(ctx, name, forged); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(ctx, "t", "s", 0); !errors.Is(err, natslog.ErrBadReference) {
		t.Fatalf("read over a changed payload: %v, want ErrBadReference", err)
	}
	if err := obs.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Read(ctx, "t", "s", 0); !errors.Is(err, natslog.ErrBadReference) {
		t.Fatalf("read over a deleted payload: %v, want ErrBadReference", err)
	}
}

// smallServer starts a JetStream server whose max_payload is maxPayload
// bytes and connects to it.
func smallServer(t *testing.T, maxPayload int32) jetstream.JetStream {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true, MaxPayload: maxPayload}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	return js
}

// TestSmallServerPayload: against a server whose max_payload is 64 KiB, the
// log packs and references within it.
func TestSmallServerPayload(t *testing.T) {
	js := smallServer(t, 64<<10)
	l, err := natslog.New(context.Background(), js, natslog.WithSequentialAppends(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t)
	// 200 events of 1 KiB each (200 KiB: packed in several messages), then a
	// 100 KiB turn (by reference).
	evs := mk("t", "s", 0, events.TypeSessionOpened)
	for i := 0; i < 200; i++ {
		ev := mk("t", "s", uint64(len(evs)), events.TypeDispatchBlocked)[0]
		ev.Data = events.Payload(events.DispatchBlocked{CallRef: events.CallRef{Turn: "t1", Call: fmt.Sprint(i), Index: i}, Name: "x", Category: "unavailable", Reason: strings.Repeat("r", 1024)})
		evs = append(evs, ev)
	}
	big := bigTurn("t", "s", 100<<10)[1]
	big.Seq = uint64(len(evs) + 1)
	evs = append(evs, big)
	if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
		t.Fatalf("append against a 64 KiB server: %v", err)
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil || len(got) != len(evs) || !bytes.Equal(got[len(got)-1].Data, big.Data) {
		t.Fatalf("read %d events (%v), want %d with the last whole", len(got), err, len(evs))
	}
}

// TestManyEventsInOneAppend: one decision may hold thousands of events (a
// turn of 1,000 blocked calls is 2,001): packed, they are a handful of
// messages, and a sequential append has no cap on them.
func TestManyEventsInOneAppend(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		e := startServer(t)
		l := openLog(t, e, mode)
		ctx := ctxT(t)
		evs := mk("t", "s", 0, events.TypeSessionOpened)
		for i := 0; i < 2500; i++ {
			evs = append(evs, mk("t", "s", uint64(len(evs)), events.TypeDispatchBlocked)[0])
		}
		if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
			t.Fatalf("append of %d events: %v", len(evs), err)
		}
		if got, err := l.Read(ctx, "t", "s", 0); err != nil || len(got) != len(evs) {
			t.Fatalf("read %d events (%v), want %d", len(got), err, len(evs))
		}
	})
	// An atomic append of more messages than a batch holds is refused:
	// against a server whose max_payload is 4 KiB, two of these events fill
	// a message.
	l, err := natslog.New(context.Background(), smallServer(t, 4<<10), natslog.WithSequentialAppends(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	ctx := ctxT(t)
	var evs []events.Event
	for i := 0; i < 2*natslog.MaxAppend+2; i++ {
		ev := mk("t", "s", uint64(len(evs)), events.TypeDispatchBlocked)[0]
		ev.Data = events.Payload(events.DispatchBlocked{CallRef: events.CallRef{Turn: "t1", Call: fmt.Sprint(i), Index: i}, Name: "x", Category: "unavailable", Reason: strings.Repeat("r", 600)})
		evs = append(evs, ev)
	}
	if err := l.Append(ctx, "t", "s", 0, evs); !errors.Is(err, natslog.ErrInvalidEvent) {
		t.Fatalf("atomic append of %d events: %v, want ErrInvalidEvent", len(evs), err)
	}
}
