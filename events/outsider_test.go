package events_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/signing"
)

// hardPayloads are payloads a standard RFC 8785 library cannot read alike
// (the reason the chain hashes stored bytes): integers a double cannot
// hold, lone surrogate escapes, bytes that are not UTF-8, escapes of every
// kind, U+2028, numbers spelt every way.
var hardPayloads = []string{
	`{"workspace":"w"}`,
	`{"turn":"t1","calls":[{"id":"c1","name":"write","arguments":{"id":12345678901234567891,"big":-98765432109876543210987654321,"exp":1E400,"f":1.50e2,"z":-0.0}}],"parallel_tool_calls":true,"cap":8,"plan":[]}`,
	`{"turn":"t1","calls":[{"id":"c2","name":"write","arguments":{"lone":"\ud800","low":"\udc00 x","pair":"\ud83d\ude02","swapped":"\ude02\ud83d"}}],"parallel_tool_calls":true,"cap":8,"plan":[]}`,
	"{\"turn\":\"t1\",\"call\":\"c1\",\"index\":0,\"attempt\":1,\"content\":[{\"type\":\"text\",\"text\":\"caf\xc3\xa9 \xff\xfe \\u003c/script\\u003e \\u0026 \\u2028 \\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u0001\"}],\"truncated\":false}",
}

// hardLog returns a session of Chain2 events holding hardPayloads, linked,
// with its head signed by key.
func hardLog(t *testing.T, key ed25519.PrivateKey) []events.Event {
	t.Helper()
	var evs []events.Event
	for i, data := range hardPayloads {
		ev := events.Event{ID: fmt.Sprintf("01J%023d", i), Tenant: "acme", Session: "01JSESSION000000000000000S", Seq: uint64(i + 1),
			Time: time.Date(2026, 12, 1, 9, 0, i, 100*i+7, time.UTC), Type: events.TypeTurnReceived, Data: json.RawMessage(data)}
		if i == 0 {
			ev.Type = events.TypeSessionOpened
		} else {
			ev.Causation = evs[0].ID
		}
		evs = append(evs, ev)
	}
	if err := events.Link(evs); err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	h, _ := events.Hash(last)
	sig := events.SignHead(key, last.Tenant, last.Session, last.Seq, h, events.SignRequested, "alice")
	evs = append(evs, events.Event{ID: "01J00000000000000000000SIG", Tenant: last.Tenant, Session: last.Session, Seq: last.Seq + 1,
		Time: last.Time, Type: events.TypeHeadSigned, Prev: h, Data: events.Payload(sig)})
	return evs
}

func writeExport(t *testing.T, dir, name string, lines [][]byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func exportLines(t *testing.T, evs []events.Event) [][]byte {
	t.Helper()
	var out [][]byte
	for _, ev := range evs {
		b, err := events.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// TestChainInJavaScript checks the chain with software we did not write: a
// verifier in JavaScript written from docs/events.md alone (Node's crypto
// and the npm RFC 8785 library canonicalize) recomputes every link and the
// signature of a log whose events hold integers no double holds, lone
// surrogates, bytes that are not UTF-8 and escapes, exported as
// replay --export writes it and as the API's stream serves it; and names
// the event when one digit, one surrogate or one escape is changed. Under
// the old rule a standard JCS library fails on such events, and two lone
// surrogates hash alike (both are U+FFFD to the canonical encoding), so
// changing one into another went unseen.
func TestChainInJavaScript(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	pubFile := filepath.Join(dir, "signing.pub")
	if err := signing.WritePublicKey(pubFile, pub); err != nil {
		t.Fatal(err)
	}
	evs := hardLog(t, key)
	lines := exportLines(t, evs)
	good := writeExport(t, dir, "good.ndjson", lines)
	out, err := testnode.Outsider(t, "--pubkey", pubFile, good)
	last := evs[len(evs)-2]
	h, _ := events.Hash(evs[len(evs)-1])
	if err != nil || !strings.Contains(out, fmt.Sprintf("ok: %s: session %s of tenant acme, %d events, rule callsheet-chain-2, head seq %d hash %s, signed up to seq %d", good, last.Session, len(evs), len(evs), h, last.Seq)) {
		t.Fatalf("the outside verifier refuses a sound export: %v\n%s", err, out)
	}
	// The API's stream: the same members in its order, data last.
	var api [][]byte
	for _, ev := range evs {
		it := struct {
			Seq       uint64          `json:"seq"`
			ID        string          `json:"id"`
			Type      events.Type     `json:"type"`
			Time      time.Time       `json:"time"`
			Tenant    string          `json:"tenant"`
			Session   string          `json:"session"`
			Causation string          `json:"causation,omitempty"`
			Prev      string          `json:"prev,omitempty"`
			Data      json.RawMessage `json:"data"`
		}{ev.Seq, ev.ID, ev.Type, ev.Time, ev.Tenant, ev.Session, ev.Causation, ev.Prev, ev.Data}
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		api = append(api, b)
	}
	if out, err := testnode.Outsider(t, "--pubkey", pubFile, writeExport(t, dir, "api.ndjson", api)); err != nil || !strings.Contains(out, "exports: 1 ok, 0 failed") {
		t.Fatalf("the outside verifier refuses the API's lines: %v\n%s", err, out)
	}
	if out, err := exec.Command(python(t), chainScript, writeExport(t, dir, "api-py.ndjson", api)).CombinedOutput(); err != nil {
		t.Fatalf("the Python script refuses the API's lines: %v\n%s", err, out)
	}

	for _, c := range []struct {
		name     string
		seq      int // the changed event
		old, new string
	}{
		{"a digit of an integer no double holds", 2, "12345678901234567891", "12345678901234567890"},
		{"one lone surrogate for another", 3, `"\ud800"`, `"\udbff"`},
		{"a byte that is not UTF-8", 4, "\xff\xfe", "\xfe\xfe"},
		{"an escape of a control character", 4, `\u0001`, `\u0002`},
	} {
		t.Run(c.name, func(t *testing.T) {
			changed := bytes.Clone(lines[c.seq-1])
			if !bytes.Contains(changed, []byte(c.old)) {
				t.Fatalf("%q is not in line %d: %s", c.old, c.seq, changed)
			}
			changed = bytes.Replace(changed, []byte(c.old), []byte(c.new), 1)
			bad := append(append(append([][]byte{}, lines[:c.seq-1]...), changed), lines[c.seq:]...)
			out, err := testnode.Outsider(t, "--pubkey", pubFile, writeExport(t, dir, "bad.ndjson", bad))
			if err == nil || !strings.Contains(out, fmt.Sprintf("seq %d: the chain breaks here", c.seq+1)) {
				t.Fatalf("the outside verifier missed the change: %v\n%s", err, out)
			}
			if c.seq < len(evs)-1 {
				// Under the old rule, the same change to an event read back.
				ev, err := events.Unmarshal(changed)
				if err != nil {
					t.Fatal(err)
				}
				h1, _ := events.Chain1.Hash(evs[c.seq-1])
				h2, _ := events.Chain1.Hash(ev)
				t.Logf("%s: Chain1 sees it: %v", c.name, h1 != h2)
			}
		})
	}
}
