package natslog_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// TestScanIsRead: Scan hands on exactly the events Read returns, from the
// start and after any seq, for a session spread through the log over many
// batches, with events stored by reference among them; it stops at fn's
// first error, and a session without events calls fn never.
func TestScanIsRead(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxFor(t, 2*time.Minute)
	evs := chained(t, "acme", "s", 150, 40_000) // 40 KB each: batches end by bytes, not only by count
	appendSpread(t, l, "acme", "s", evs)
	big := bigTurn("acme", "b", 2<<20) // over a message: stored by reference
	if err := l.Append(ctx, "acme", "b", 0, big); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		session string
		after   uint64
		want    []events.Event
	}{{"s", 0, evs}, {"s", 77, evs[77:]}, {"s", 150, nil}, {"b", 0, big}, {"b", 1, big[1:]}, {"none", 0, nil}} {
		var got []events.Event
		reader := openLog(t, e) // no cached position
		if err := reader.Scan(ctx, "acme", tc.session, tc.after, func(ev events.Event) error { got = append(got, ev); return nil }); err != nil {
			t.Fatalf("scan %s after %d: %v", tc.session, tc.after, err)
		}
		sameEvents(t, "scan", got, tc.want)
		read, err := reader.Read(ctx, "acme", tc.session, tc.after)
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, "read", read, tc.want)
		// Again, with the position now cached.
		got = nil
		if err := reader.Scan(ctx, "acme", tc.session, tc.after, func(ev events.Event) error { got = append(got, ev); return nil }); err != nil {
			t.Fatal(err)
		}
		sameEvents(t, "scan with a cached position", got, tc.want)
	}
	stop := errors.New("enough")
	n := 0
	if err := l.Scan(ctx, "acme", "s", 0, func(events.Event) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) || n != 3 {
		t.Fatalf("scan stopped by fn: %v after %d events, want fn's error after 3", err, n)
	}
}

// TestWatchLongHistory: a watch of a session whose history spans many
// batches delivers all of it, then live events, in order.
func TestWatchLongHistory(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxFor(t, 2*time.Minute)
	evs := chained(t, "acme", "s", 160, 40_000)
	appendSpread(t, l, "acme", "s", evs[:150])
	for _, after := range []uint64{0, 100} {
		wctx, cancel := context.WithCancel(ctx)
		ch, err := openLog(t, e).Watch(wctx, "acme", "s", after)
		if err != nil {
			t.Fatal(err)
		}
		if after == 0 {
			appendSpread(t, l, "acme", "s", evs[150:]) // live
		}
		var got []events.Event
		for len(got) < len(evs)-int(after) {
			select {
			case ev := <-ch:
				got = append(got, ev)
			case <-time.After(10 * time.Second):
				t.Fatalf("watch after %d: %d events, then nothing", after, len(got))
			}
		}
		cancel()
		sameEvents(t, "watch", got, evs[after:])
	}
}
