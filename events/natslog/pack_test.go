package natslog_test

import (
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// TestRequestPackedWithItsTurn: a Log stores a turn's request packed with
// the events around it, as one message on the log subject, and reads every
// event back in order: a request is an event like any other (nothing
// dispatches it; the session actor hands it to its worker itself).
func TestRequestPackedWithItsTurn(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		e := startServer(t)
		js, _ := connect(t, e)
		l := openLog(t, e, mode)
		evs := mk("t", "s", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeSessionClosed)
		if err := l.Append(ctxT(t), "t", "s", 0, evs); err != nil {
			t.Fatal(err)
		}
		if n := streamMsgs(t, js); n != 1 {
			t.Errorf("%d messages stored, want 1", n)
		}
		got, err := l.Read(ctxT(t), "t", "s", 0)
		if err != nil {
			t.Fatal(err)
		}
		if want := ids(evs); len(got) != len(want) {
			t.Fatalf("read %v, want %v", ids(got), want)
		}
		for i := range got {
			if got[i].ID != evs[i].ID {
				t.Fatalf("read %v, want %v", ids(got), ids(evs))
			}
		}
	})
}

// TestReadsRequestsOnTheirOldSubjects: a log written when requests were
// dispatched holds each request (with the events before it) on a subject
// of its class and node, cs.ev.T.S.req.CLASS[.NODE]; every read still
// returns those events in order with the others.
func TestReadsRequestsOnTheirOldSubjects(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e, natslog.WithSequentialAppends(true))
	ctx := ctxT(t)
	evs := mk("t", "s", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted)
	if err := l.Append(ctx, "t", "s", 0, evs[:1]); err != nil {
		t.Fatal(err)
	}
	var packed []byte
	for i, ev := range evs[1:3] {
		b, err := events.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			packed = append(packed, '[')
		} else {
			packed = append(packed, ',')
		}
		packed = append(packed, b...)
	}
	packed = append(packed, ']')
	if _, err := js.Publish(ctx, natslog.DefaultSubjectPrefix+".t.s.req.parallel_safe.n1", packed); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "t", "s", 3, evs[3:]); err != nil {
		t.Fatalf("append after the old request subject: %v", err)
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(evs) {
		t.Fatalf("read %v, want %v", ids(got), ids(evs))
	}
	for i := range got {
		if got[i].ID != evs[i].ID {
			t.Fatalf("read %v, want %v", ids(got), ids(evs))
		}
	}
}
