package events_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

func sampleDeletion(key ed25519.PrivateKey) events.Deletion {
	return events.Deletion{Tenant: "acme", Session: "S1", N: 1, Prev: events.DeletionGenesis("acme"),
		Deleted: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), By: "dpo@acme.example", Reason: events.DeletedOnRequest, Node: "n1",
		Chain: events.Chain2, LastSeq: 42, LastHash: strings.Repeat("ab", 32), Opened: time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)}.Sign(key)
}

// TestDeletionReceipt: a receipt is stored as its canonical encoding, whose
// SHA-256 (sha256sum of the stored line) links the next one; its
// signature is of that encoding without the signature, so any change to
// what it says fails to verify.
func TestDeletionReceipt(t *testing.T) {
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	d := sampleDeletion(key)
	b := d.Encode()
	if canon, err := events.Canonical(b); err != nil || !bytes.Equal(canon, b) {
		t.Fatalf("stored form is not canonical: %s", b)
	}
	sum := sha256.Sum256(b)
	if events.DeletionHash(b) != hex.EncodeToString(sum[:]) {
		t.Fatal("DeletionHash is not the SHA-256 of the stored bytes")
	}
	back, err := events.ParseDeletion(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(pub); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back.Encode(), b) {
		t.Fatalf("parsed and encoded again:\n%s\n%s", back.Encode(), b)
	}
	for name, change := range map[string]func(*events.Deletion){
		"by":        func(d *events.Deletion) { d.By = "eve" },
		"session":   func(d *events.Deletion) { d.Session = "S2" },
		"tenant":    func(d *events.Deletion) { d.Tenant = "other" },
		"last hash": func(d *events.Deletion) { d.LastHash = strings.Repeat("cd", 32) },
		"prev":      func(d *events.Deletion) { d.Prev = strings.Repeat("cd", 32) },
		"when":      func(d *events.Deletion) { d.Deleted = d.Deleted.Add(time.Second) },
		"reason":    func(d *events.Deletion) { d.Reason = events.DeletedByRetention },
	} {
		c := back
		change(&c)
		if err := c.Verify(pub); !errors.Is(err, events.ErrBadDeletion) {
			t.Errorf("%s changed: Verify = %v", name, err)
		}
	}
	if events.DeletionGenesis("acme") == events.DeletionGenesis("globex") {
		t.Fatal("two tenants share a genesis link")
	}
}

// FuzzParseDeletion: whatever the deletions log or an export holds,
// ParseDeletion accepts only receipts of the documented shape, and what it
// accepts encodes and parses back the same.
func FuzzParseDeletion(f *testing.F) {
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	f.Add(sampleDeletion(key).Encode())
	f.Add([]byte(`{"kind":"callsheet-deletion-1","tenant":"t","session":"s","n":1,"prev":"","by":"x","reason":"requested","deleted":"2026-01-01T00:00:00Z","key":"k","signature":""}`))
	f.Add([]byte(`{"kind":"callsheet-deletion-9"}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := events.ParseDeletion(b)
		if err != nil {
			if !errors.Is(err, events.ErrBadDeletion) {
				t.Fatalf("error %v does not wrap ErrBadDeletion", err)
			}
			return
		}
		if d.N == 0 || d.Tenant == "" || d.Session == "" || len(d.Prev) != events.HashLen {
			t.Fatalf("accepted %+v", d)
		}
		again := d.Encode()
		back, err := events.ParseDeletion(again)
		if err != nil {
			t.Fatalf("%s does not parse back: %v", again, err)
		}
		if !bytes.Equal(back.Encode(), again) {
			t.Fatalf("round trip:\n%s\n%s", again, back.Encode())
		}
	})
}
