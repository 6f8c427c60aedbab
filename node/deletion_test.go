package node_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
)

// TestDeletionCutShortIsFinishedAtStart: a node killed after it recorded a
// deletion's receipt and before it removed the session (the receipt
// written here by hand) serves nothing of the session once it starts
// again, and removes what is left of it.
func TestDeletionCutShortIsFinishedAtStart(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	s := openSession(t, n)
	submit(t, n, s, "t1", nap("a", 1))
	ctx := context.Background()
	if err := n.CloseSession(ctx, "default", s, "done"); err != nil {
		t.Fatal(err)
	}
	js := jsOf(t, n)
	d, err := natslog.OpenDeletions(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(nil)
	if _, _, err := d.Append(ctx, "default", s, func(prev string, num uint64) ([]byte, error) {
		return events.Deletion{Tenant: "default", Session: s, N: num, Prev: prev, Deleted: time.Now().UTC(), By: "dpo", Reason: events.DeletedOnRequest}.Sign(key).Encode(), nil
	}); err != nil {
		t.Fatal(err)
	}
	js.Conn().Close()
	n.Close()

	n = startNode(t, dir, nil, tt)
	defer n.Close()
	if _, err := n.Transcript(ctx, "default", s); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("the deleted session's transcript after the restart: %v, want ErrNotFound", err)
	}
	// Removed by the node itself, not by a DELETE: no message of the
	// session is left, nor its index entry.
	js = jsOf(t, n)
	idx, _ := js.KeyValue(ctx, natslog.DefaultIndexBucket)
	stream, _ := js.Stream(ctx, natslog.DefaultStream)
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter("cs.ev.default."+s+".>"))
		_, ierr := idx.Get(ctx, "default."+s)
		if err == nil && len(info.State.Subjects) == 0 && errors.Is(ierr, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session was not removed: %d subjects left, index %v", len(info.State.Subjects), ierr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := n.DeleteSession(ctx, "default", s, "dpo", events.DeletedOnRequest); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("DELETE again: %v, want ErrNotFound", err)
	}
	list, err := n.Deletions(ctx, "default", 0, 10)
	if err != nil || len(list) != 1 {
		t.Fatalf("receipts %d, %v: want the one, not a second", len(list), err)
	}
}
