package natslog_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

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
	if list[0].Revision == 0 || list[0].Revision == list[1].Revision || time.Since(list[0].Created) > time.Minute {
		t.Fatalf("List's revisions and times: %+v", list)
	}

	// DeleteAt removes the entry it was given, not one written since.
	if gone, err := ia.DeleteAt(ctx, "t0", "s2", list[0].Revision+100); gone || err != nil {
		t.Fatalf("DeleteAt a later revision = %v, %v; want the entry kept, no error", gone, err)
	}
	if gone, err := ia.DeleteAt(ctx, "t0", "s2", list[0].Revision); !gone || err != nil {
		t.Fatalf("DeleteAt its revision = %v, %v", gone, err)
	}
	if _, err := ia.Get(ctx, "t0", "s2"); !errors.Is(err, events.ErrNotFound) {
		t.Fatalf("Get after DeleteAt: %v, want %v", err, events.ErrNotFound)
	}
	if list, err := ia.List(ctx); err != nil || len(list) != 1 {
		t.Fatalf("List after DeleteAt = %+v, %v", list, err)
	}
}
