package events_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

func sampleCheckpoint(key ed25519.PrivateKey) events.Checkpoint {
	return events.SignCheckpoint(key, events.Checkpoint{Chain: events.Chain2, Tenant: "acme", Session: "S1", Seq: 7,
		Hash: strings.Repeat("ab", 32), Time: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), Signed: time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC), Node: "n1"})
}

// TestCheckpointSignsTheHeadMessage: a checkpoint's signature is of the
// same bytes as a HeadSigned of its head, so it verifies as one; any change
// to what it names fails.
func TestCheckpointSignsTheHeadMessage(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	cp := sampleCheckpoint(key)
	if err := cp.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(pub, events.Chain2.HeadMessage("acme", "S1", 7, cp.Hash), mustBase64(t, cp.Signature)) {
		t.Fatal("the signature is not of the head message")
	}
	for name, change := range map[string]func(*events.Checkpoint){
		"seq":     func(c *events.Checkpoint) { c.Seq++ },
		"hash":    func(c *events.Checkpoint) { c.Hash = strings.Repeat("cd", 32) },
		"session": func(c *events.Checkpoint) { c.Session = "S2" },
		"tenant":  func(c *events.Checkpoint) { c.Tenant = "other" },
		"rule":    func(c *events.Checkpoint) { c.Chain = events.Chain1 },
	} {
		c := cp
		change(&c)
		if err := c.Verify(pub); !errors.Is(err, events.ErrBadSignature) {
			t.Errorf("%s changed: Verify = %v", name, err)
		}
	}
}

// FuzzParseCheckpoint: whatever a witness file or the store holds,
// ParseCheckpoint accepts only checkpoints of the documented shape, and
// what it accepts encodes and parses back the same.
func FuzzParseCheckpoint(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	b, _ := json.Marshal(sampleCheckpoint(key))
	f.Add(b)
	f.Add([]byte(`{"chain":"callsheet-chain-2","tenant":"t","session":"s","seq":1,"hash":"","key":"k","signature":""}`))
	f.Add([]byte(`{"chain":"callsheet-chain-9"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		cp, err := events.ParseCheckpoint(b)
		if err != nil {
			return
		}
		if cp.Seq == 0 || cp.Tenant == "" || cp.Session == "" || len(cp.Hash) != events.HashLen {
			t.Fatalf("accepted %+v", cp)
		}
		again, err := json.Marshal(cp)
		if err != nil {
			t.Fatal(err)
		}
		back, err := events.ParseCheckpoint(again)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", again, err)
		}
		if b2, _ := json.Marshal(back); !bytes.Equal(b2, again) {
			t.Fatalf("round trip:\n%s\n%s", again, b2)
		}
	})
}

func mustBase64(t *testing.T, s string) []byte {
	t.Helper()
	var out []byte
	if err := json.Unmarshal([]byte(`"`+s+`"`), &out); err != nil {
		t.Fatal(err)
	}
	return out
}
