package natslog_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

func TestRequestsByClass(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	// Requests of every class across two tenants, stored before any consumer
	// exists: DeliverAll must still hand them out.
	var want []string
	classes := []string{natslog.ClassExclusive, natslog.ClassParallelSafe, natslog.ClassIsolatedBackground}
	for _, tenant := range []string{"t1", "t2"} {
		var seq uint64
		for i := range 6 {
			ev := request(tenant, "s", seq+1, classes[i%3])
			if err := l.Append(ctx, tenant, "s", seq, []events.Event{ev}); err != nil {
				t.Fatal(err)
			}
			seq++
			if classes[i%3] == natslog.ClassParallelSafe {
				want = append(want, ev.ID)
			}
		}
	}
	rc, err := l.Consumer(ctx, natslog.ClassParallelSafe, "", natslog.WithAckWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	got, err := rc.Fetch(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var gotIDs []string
	for _, r := range got {
		gotIDs = append(gotIDs, r.Event.ID)
		if r.Call.Concurrency != natslog.ClassParallelSafe || r.Delivered != 1 {
			t.Fatalf("request %s: class %q delivered %d, want %q once", r.Event.ID, r.Call.Concurrency, r.Delivered, natslog.ClassParallelSafe)
		}
	}
	if !slices.Equal(gotIDs, want) {
		t.Fatalf("fetched %v, want %v", gotIDs, want)
	}
	// Nak the first: it comes back, marked as a redelivery.
	if err := got[0].Nak(0); err != nil {
		t.Fatal(err)
	}
	for _, r := range got[1:] {
		if err := r.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	again, err := rc.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.Event.ID != want[0] || again.Delivered != 2 {
		t.Fatalf("redelivered %s (delivered %d), want %s delivered 2", again.Event.ID, again.Delivered, want[0])
	}
	if err := again.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing left for this class.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if r, err := rc.Next(short); err == nil {
		t.Fatalf("got %s after all were acked, want none", r.Event.ID)
	}
	if _, err := l.Consumer(ctx, "sometimes", ""); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("bad class err=%v, want %v", err, natslog.ErrInvalidOption)
	}
	if _, err := l.Consumer(ctx, natslog.ClassExclusive, "", natslog.WithMaxAckPending(0)); !errors.Is(err, natslog.ErrInvalidOption) {
		t.Fatalf("bad option err=%v, want %v", err, natslog.ErrInvalidOption)
	}
}

func TestObjects(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	obs, err := l.Objects(ctx, "cs_outputs")
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 KB: several chunks
	size, digest, err := obs.Put(ctx, "acme/s1/call-1", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if size != int64(len(data)) || !strings.HasPrefix(digest, "SHA-256=") {
		t.Fatalf("Put = %d, %q; want %d, SHA-256=…", size, digest, len(data))
	}
	got, err := obs.Get(ctx, "acme/s1/call-1")
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Get = %d bytes, %v; want the %d put", len(got), err, len(data))
	}
	r, err := obs.Open(ctx, "acme/s1/call-1")
	if err != nil {
		t.Fatal(err)
	}
	streamed, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || !bytes.Equal(streamed, data) {
		t.Fatalf("Open+ReadAll = %d bytes, %v", len(streamed), err)
	}
	if _, err := obs.Get(ctx, "acme/s1/nope"); !errors.Is(err, natslog.ErrObjectNotFound) {
		t.Fatalf("Get missing err=%v, want %v", err, natslog.ErrObjectNotFound)
	}
	if _, err := obs.Open(ctx, "acme/s1/nope"); !errors.Is(err, natslog.ErrObjectNotFound) {
		t.Fatalf("Open missing err=%v, want %v", err, natslog.ErrObjectNotFound)
	}
}

func TestIndex(t *testing.T) {
	e := startServer(t)
	ctx := ctxT(t)
	a, b := openLog(t, e), openLog(t, e)
	ia, err := a.Index(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ib, err := b.Index(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ia.Create(ctx, "t1", "s1", []byte(`{"workspace":"w1"}`)); err != nil {
		t.Fatal(err)
	}
	if err := ib.Create(ctx, "t1", "s1", []byte(`{}`)); !errors.Is(err, natslog.ErrSessionExists) {
		t.Fatalf("second Create err=%v, want %v", err, natslog.ErrSessionExists)
	}
	if err := ib.Create(ctx, "t0", "s2", nil); err != nil {
		t.Fatal(err)
	}
	info, err := ib.Get(ctx, "t1", "s1")
	if err != nil || string(info) != `{"workspace":"w1"}` {
		t.Fatalf("Get = %q, %v", info, err)
	}
	if _, err := ia.Get(ctx, "t1", "nope"); !errors.Is(err, events.ErrNotFound) {
		t.Fatalf("Get missing err=%v, want %v", err, events.ErrNotFound)
	}
	if err := ia.Create(ctx, "t.1", "s", nil); !errors.Is(err, natslog.ErrInvalidID) {
		t.Fatalf("Create bad id err=%v, want %v", err, natslog.ErrInvalidID)
	}
	list, err := ia.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Tenant != "t0" || list[0].Session != "s2" || list[1].Tenant != "t1" || string(list[1].Info) != `{"workspace":"w1"}` {
		t.Fatalf("List = %+v", list)
	}
}

// A poison message on a request subject is terminated and skipped.
func TestRequestsSkipUndecodable(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	if _, err := js.Publish(ctx, "cs.ev.t.s.req.exclusive", []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "t", "other", 0, []events.Event{request("t", "other", 1, natslog.ClassExclusive)}); err != nil {
		t.Fatal(err)
	}
	rc, err := l.Consumer(ctx, natslog.ClassExclusive, "")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rc.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Event.Session != "other" {
		t.Fatalf("got request of session %s, want the decodable one of session other", r.Event.Session)
	}
}
