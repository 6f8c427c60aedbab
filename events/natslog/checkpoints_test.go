package natslog_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// TestCheckpointsMoveForwardOnly: the store keeps each session's latest
// checkpoint: a later head replaces it, an earlier one (a node that owned
// the session before, writing late) does not, and a value that is not one
// the writer trusts (forged with a later seq, or not a checkpoint) is
// replaced rather than obeyed. Watch delivers a tenant's latest, then new
// ones, and nothing of another tenant.
func TestCheckpointsMoveForwardOnly(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	store, err := l.Checkpoints(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(rand.Reader)
	trusted := func(cp events.Checkpoint) bool { return cp.Verify(pub) == nil }
	cp := func(tenant string, seq uint64) events.Checkpoint {
		return events.SignCheckpoint(key, events.Checkpoint{Chain: events.Chain2, Tenant: tenant, Session: "S1", Seq: seq,
			Hash: strings.Repeat("a", 64), Signed: time.Now().UTC()})
	}
	latest := func() uint64 {
		got, ok, err := store.Get(ctx, "acme", "S1")
		if err != nil || !ok {
			t.Fatalf("Get: %+v %v %v", got, ok, err)
		}
		return got.Seq
	}
	watch, err := store.Watch(ctx, "acme", "", true)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := store.Put(ctx, cp("acme", 5), 0, trusted)
	if err != nil {
		t.Fatal(err)
	}
	if rev, err = store.Put(ctx, cp("acme", 9), rev, trusted); err != nil || latest() != 9 {
		t.Fatalf("a later head: %v, latest %d", err, latest())
	}
	// A late writer that knows no revision, and one with a stale one.
	if _, err := store.Put(ctx, cp("acme", 7), 0, trusted); err != nil || latest() != 9 {
		t.Fatalf("an earlier head (no revision): %v, latest %d, want 9", err, latest())
	}
	if _, err := store.Put(ctx, cp("acme", 8), 1, trusted); err != nil || latest() != 9 {
		t.Fatalf("an earlier head (a stale revision): %v, latest %d, want 9", err, latest())
	}
	// Someone with the NATS credentials writes a forged one far ahead, then
	// garbage: the node's next checkpoint replaces each.
	kv, err := js.KeyValue(ctx, natslog.DefaultCheckpointBucket)
	if err != nil {
		t.Fatal(err)
	}
	forged := cp("acme", 1000)
	forged.Signature = cp("acme", 999).Signature
	b, _ := json.Marshal(forged)
	if _, err := kv.Put(ctx, "acme.S1", b); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Put(ctx, cp("acme", 10), 0, trusted); err != nil || latest() != 10 {
		t.Fatalf("after a forged checkpoint: %v, latest %d, want 10", err, latest())
	}
	if _, err := kv.Put(ctx, "acme.S1", []byte("not a checkpoint")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.Get(ctx, "acme", "S1"); err == nil || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("Get of garbage: %v", err)
	}
	if _, err := store.Put(ctx, cp("acme", 11), 0, trusted); err != nil || latest() != 11 {
		t.Fatalf("after garbage: %v, latest %d, want 11", err, latest())
	}
	if _, err := store.Put(ctx, cp("globex", 3), 0, trusted); err != nil {
		t.Fatal(err)
	}
	var seen []uint64
	for len(seen) == 0 || seen[len(seen)-1] != 11 {
		select {
		case c := <-watch:
			if c.Tenant != "acme" {
				t.Fatalf("acme's watch delivered %+v", c)
			}
			seen = append(seen, c.Seq)
		case <-time.After(5 * time.Second):
			t.Fatalf("watch delivered %v, want up to 11", seen)
		}
	}
	if _, err := store.Put(ctx, events.Checkpoint{Tenant: "a.b", Session: "S1", Seq: 1}, 0, trusted); !errors.Is(err, natslog.ErrInvalidID) {
		t.Fatalf("a tenant that is not a token: %v", err)
	}
}
