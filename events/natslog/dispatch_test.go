package natslog_test

import (
	"errors"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// TestWithoutDispatchOneMessage: a Log opened WithDispatch(false) stores a
// turn's request packed with the events around it, as one message on the
// log subject, reads every event back in order, and refuses to open a
// request consumer (nothing would ever be delivered on it).
func TestWithoutDispatchOneMessage(t *testing.T) {
	forModes(t, func(t *testing.T, mode natslog.Option) {
		e := startServer(t)
		js, _ := connect(t, e)
		l := openLog(t, e, mode, natslog.WithDispatch(false))
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
		if _, err := l.Consumer(ctxT(t), natslog.ClassParallelSafe, ""); !errors.Is(err, natslog.ErrInvalidOption) {
			t.Errorf("Consumer on an undispatching Log = %v, want ErrInvalidOption", err)
		}
		if _, err := l.Requests(ctxT(t), events.Subscription{Class: natslog.ClassParallelSafe}); !errors.Is(err, natslog.ErrInvalidOption) {
			t.Errorf("Requests on an undispatching Log = %v, want ErrInvalidOption", err)
		}
	})
}
