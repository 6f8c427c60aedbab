package actors

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	"github.com/anthdm/hollywood/actor"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/memlog"
	"github.com/callsheet/callsheet/events/natslog"
)

// decideTurn opens session s1 on log and submits a one-call turn, so the
// session actor decides SessionOpened, OwnershipTaken, TurnReceived and
// ToolCallRequested, with causation, links and arguments to escape.
func decideTurn(t *testing.T, log events.Log) {
	t.Helper()
	n := newTestNode(t, log, mutateTool(t))
	e := n.engine
	pid := e.Spawn(NewSession(n.deps, "default", "s1", nil), "session", actor.WithID("s1"))
	open := make(chan error, 1)
	e.Send(pid, OpenSession{Workspace: "w", Reply: open})
	if err := <-open; err != nil {
		t.Fatal(err)
	}
	turn := make(chan TurnReply, 1)
	e.Send(pid, SubmitTurn{ID: "t1", Calls: []events.CallSpec{{ID: "c<1>", Name: "mutate", Arguments: json.RawMessage(` {"note" : "a<b & \u2028"} `)}}, Reply: turn})
	select {
	case r := <-turn:
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no turn reply")
	}
}

// TestDecidedEventsCarryTheirEncoding checks that the session actor mints
// each event with its encoding attached (events.Encode), and that the
// encoding is the definition's, json.Marshal of the event.
func TestDecidedEventsCarryTheirEncoding(t *testing.T) {
	log, err := memlog.New()
	if err != nil {
		t.Fatal(err)
	}
	decideTurn(t, log)
	evs, err := log.Read(context.Background(), "default", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) < 4 {
		t.Fatalf("%d events decided, want at least 4", len(evs))
	}
	for _, ev := range evs {
		got, ok := ev.Encoding()
		if !ok {
			t.Fatalf("event %d (%s) was decided without its encoding", ev.Seq, ev.Type)
		}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("event %d (%s): encoding\n%s\njson.Marshal\n%s", ev.Seq, ev.Type, got, want)
		}
	}
}

// TestDecidedEventsAreStoredAsMarshalled runs the same turn on the
// JetStream log and reads every stored message back raw: each event must be
// stored as json.Marshal encodes it, and its hash (the next event's link)
// must be the SHA-256 of the canonical encoding of those stored bytes.
func TestDecidedEventsAreStoredAsMarshalled(t *testing.T) {
	js := newJetStream(t)
	ctx := context.Background()
	log, err := natslog.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	decideTurn(t, log)

	st, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stored []json.RawMessage
	for sseq := info.State.FirstSeq; sseq <= info.State.LastSeq; sseq++ {
		m, err := st.GetMsg(ctx, sseq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Data[0] != '[' {
			stored = append(stored, m.Data)
			continue
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(m.Data, &raws); err != nil {
			t.Fatal(err)
		}
		stored = append(stored, raws...)
	}
	if len(stored) < 4 {
		t.Fatalf("%d events stored, want at least 4", len(stored))
	}
	var prev events.Event
	for i, raw := range stored {
		ev, err := events.Unmarshal(raw)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(raw, want) {
			t.Fatalf("event %d (%s) stored as\n%s\njson.Marshal writes\n%s", ev.Seq, ev.Type, raw, want)
		}
		// The chain's rule (Chain2): the SHA-256 of the stored bytes.
		sum := sha256.Sum256(raw)
		if h, _ := events.Hash(ev); h != hex.EncodeToString(sum[:]) {
			t.Fatalf("event %d: Hash %s, SHA-256 of its stored bytes %x", ev.Seq, h, sum)
		}
		link := events.Genesis("default", "s1")
		if i > 0 {
			link, _ = events.Hash(prev)
		}
		if ev.Prev != link {
			t.Fatalf("event %d carries link %s, want %s", ev.Seq, ev.Prev, link)
		}
		prev = ev
	}
}
