package natslog_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/replay"
)

// TestChainCoversEventsStoredByReference: an event stored by reference
// keeps its link, and its hash is that of its resolved payload; a stub
// rewritten to name another payload object (stored under its own digest,
// so the log's digest check passes) breaks the chain at that event.
func TestChainCoversEventsStoredByReference(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	evs := bigTurn("t", "s", 1<<20)
	if err := events.Link(evs); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
		t.Fatal(err)
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range evs {
		want, _ := events.Hash(evs[i])
		h, err := events.Hash(got[i])
		if err != nil || h != want || got[i].Prev != evs[i].Prev {
			t.Fatalf("seq %d read back: prev %q hash %s (%v), want prev %q hash %s", evs[i].Seq, got[i].Prev, h, err, evs[i].Prev, want)
		}
	}
	if chainProblem(replay.Verify("t", "s", got)) != "" {
		t.Fatalf("chain problems in a sound log: %v", replay.Verify("t", "s", got))
	}

	// Someone with the server's credentials stores another payload under
	// its own digest and points the TurnReceived's stub at it.
	raw := rawMessages(t, js, "t", "s")
	var msg int
	var stubs []map[string]any
	for i, m := range raw {
		if strings.Contains(string(m), `"type":"TurnReceived"`) {
			msg = i
			if err := json.Unmarshal(splitPackOf(m), &stubs); err != nil {
				t.Fatal(err)
			}
		}
	}
	var stub map[string]any
	for _, s := range stubs {
		if s["type"] == "TurnReceived" {
			stub = s
		}
	}
	if stub == nil || stub["data_ref"] == nil || stub["prev"] == nil {
		t.Fatalf("the TurnReceived is not a stub with its link: %v", stub)
	}
	forged := events.Payload(events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "c1", Name: "write", Arguments: json.RawMessage(`{"path":"big","content":"forged"}`)}}})
	sum := sha256.Sum256(forged)
	digest := hex.EncodeToString(sum[:])
	obs, err := js.ObjectStore(ctx, natslog.DefaultPayloadBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, "t/s/"+digest, forged); err != nil {
		t.Fatal(err)
	}
	ref := stub["data_ref"].(map[string]any)
	ref["object"], ref["sha256"], ref["bytes"] = "t/s/"+digest, digest, len(forged)
	data, _ := json.Marshal(stubs)
	if len(stubs) == 1 {
		data, _ = json.Marshal(stubs[0])
	}
	st, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	subjects := make([]string, len(raw))
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			break
		}
		for i, r := range raw {
			if string(r) == string(m.Data) {
				subjects[i] = m.Subject
				if i >= msg {
					if err := st.DeleteMsg(ctx, seq); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	raw[msg] = data
	for i, m := range raw[msg:] {
		if _, err := js.Publish(ctx, subjects[msg+i], m, jetstream.WithExpectStream(natslog.DefaultStream)); err != nil {
			t.Fatal(err)
		}
	}
	l2 := openLog(t, e) // a reader without the first log's cache
	got, err = l2.Read(ctx, "t", "s", 0)
	if err != nil {
		t.Fatalf("the forged reference should pass the digest check: %v", err)
	}
	if p := chainProblem(replay.Verify("t", "s", got)); !strings.Contains(p, "seq 2 (TurnReceived) was changed") {
		t.Fatalf("the chain missed a payload swapped behind its stub: %q\n%v", p, replay.Verify("t", "s", got))
	}
}

// splitPackOf returns a message as a JSON array of its events.
func splitPackOf(m []byte) []byte {
	if len(m) > 0 && m[0] == '[' {
		return m
	}
	return append(append([]byte{'['}, m...), ']')
}

// chainProblem returns the first problem the chain reports, or "".
func chainProblem(ps []replay.Problem) string {
	for _, p := range ps {
		if strings.Contains(p.Message, "chain") || strings.Contains(p.Message, "was changed") || strings.Contains(p.Message, "hash link") {
			return p.String()
		}
	}
	return ""
}
