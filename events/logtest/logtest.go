// Package logtest is the conformance suite of events.Log: one set of tests
// that every implementation passes (events/memlog in memory, events/natslog on
// a real embedded JetStream), so that what the actors rely on is the
// contract, not one implementation's habits. A test of an implementation
// calls Run with a function that opens a fresh, empty Log.
//
// It checks ordering, the append guard (events.ErrConflict), idempotent
// re-sends (a retried append stores nothing twice, and resumes a stored
// prefix), the refusal of invalid events, session isolation, and Watch
// (history, then live events, and the channel closes with its context).
package logtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
)

// Open returns a fresh, empty Log for one test; the implementation's test
// closes it in t.Cleanup.
type Open func(t *testing.T) events.Log

// Run runs every conformance test against the Logs open returns.
func Run(t *testing.T, open Open) {
	tests := []struct {
		name string
		f    func(t *testing.T, l events.Log)
	}{
		{"AppendReadInOrder", testAppendReadInOrder},
		{"ReadUnknownSession", testReadUnknownSession},
		{"GuardRefusesStaleView", testGuardRefusesStaleView},
		{"ConcurrentAppendersOneWins", testConcurrentAppendersOneWins},
		{"ResentAppendStoredOnce", testResentAppendStoredOnce},
		{"RetryResumesStoredPrefix", testRetryResumesStoredPrefix},
		{"InvalidEventsRefused", testInvalidEventsRefused},
		{"SessionsIsolated", testSessionsIsolated},
		{"WatchHistoryThenLive", testWatchHistoryThenLive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.f(t, open(t)) })
	}
}

var counter atomic.Uint64

// ID returns a fresh event id (unique in the test binary).
func ID() string { return fmt.Sprintf("LT%024d", counter.Add(1)) }

// Events makes events of a session continuing after seq after, one per
// type; a ToolCallRequested is of class parallel_safe for no node.
func Events(tenant, session string, after uint64, types ...events.Type) []events.Event {
	out := make([]events.Event, len(types))
	for i, typ := range types {
		var data any = events.SessionClosed{}
		switch typ {
		case events.TypeSessionOpened:
			data = events.SessionOpened{Workspace: "ws"}
		case events.TypeTurnReceived:
			data = events.TurnReceived{Turn: "t1"}
		case events.TypeToolCallRequested:
			data = events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: fmt.Sprintf("c%d", i)}, Name: "x", Attempt: 1, Concurrency: "parallel_safe"}
		}
		out[i] = event(tenant, session, after+1+uint64(i), typ, data)
	}
	return out
}

func event(tenant, session string, seq uint64, typ events.Type, data any) events.Event {
	return events.Event{ID: ID(), Tenant: tenant, Session: session, Seq: seq, Type: typ,
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Data: events.Payload(data)}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func ids(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func mustAppend(t *testing.T, l events.Log, tenant, session string, after uint64, evs []events.Event) {
	t.Helper()
	if err := l.Append(ctxT(t), tenant, session, after, evs); err != nil {
		t.Fatalf("append after %d: %v", after, err)
	}
}

func read(t *testing.T, l events.Log, tenant, session string, after uint64) []events.Event {
	t.Helper()
	evs, err := l.Read(ctxT(t), tenant, session, after)
	if err != nil {
		t.Fatalf("read %s/%s after %d: %v", tenant, session, after, err)
	}
	return evs
}

func testAppendReadInOrder(t *testing.T, l events.Log) {
	a := Events("t1", "s1", 0, events.TypeSessionOpened)
	b := Events("t1", "s1", 1, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeSessionClosed)
	c := Events("t1", "s1", 4, events.TypeSessionClosed, events.TypeSessionClosed)
	mustAppend(t, l, "t1", "s1", 0, a)
	mustAppend(t, l, "t1", "s1", 1, b)
	mustAppend(t, l, "t1", "s1", 4, c)
	all := slices.Concat(a, b, c)
	got := read(t, l, "t1", "s1", 0)
	if !slices.Equal(ids(got), ids(all)) {
		t.Fatalf("read ids %v, want %v", ids(got), ids(all))
	}
	for i, ev := range got {
		w := all[i]
		if ev.Seq != w.Seq || ev.Type != w.Type || string(ev.Data) != string(w.Data) || !ev.Time.Equal(w.Time) || ev.Tenant != w.Tenant || ev.Session != w.Session {
			t.Fatalf("event %d read as %+v, want %+v", i, ev, w)
		}
	}
	if got := read(t, l, "t1", "s1", 4); !slices.Equal(ids(got), ids(c)) {
		t.Fatalf("read after 4: %v, want %v", ids(got), ids(c))
	}
	if got := read(t, l, "t1", "s1", 6); len(got) != 0 {
		t.Fatalf("read after the last: %d events, want none", len(got))
	}
}

func testReadUnknownSession(t *testing.T, l events.Log) {
	if got := read(t, l, "t1", "nobody", 0); len(got) != 0 {
		t.Fatalf("read of an unknown session: %d events, want none", len(got))
	}
}

func testGuardRefusesStaleView(t *testing.T, l events.Log) {
	mustAppend(t, l, "t1", "s1", 0, Events("t1", "s1", 0, events.TypeSessionOpened, events.TypeTurnReceived))
	// A writer that last saw seq 1 (another appended seq 2 since).
	stale := Events("t1", "s1", 1, events.TypeSessionClosed)
	if err := l.Append(ctxT(t), "t1", "s1", 1, stale); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append after a stale seq: err=%v, want %v", err, events.ErrConflict)
	}
	// A writer that thinks the session is empty.
	fresh := Events("t1", "s1", 0, events.TypeSessionOpened)
	if err := l.Append(ctxT(t), "t1", "s1", 0, fresh); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append to an existing session as if new: err=%v, want %v", err, events.ErrConflict)
	}
	// A writer ahead of the log.
	ahead := Events("t1", "s1", 5, events.TypeSessionClosed)
	if err := l.Append(ctxT(t), "t1", "s1", 5, ahead); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append after a seq never stored: err=%v, want %v", err, events.ErrConflict)
	}
	if got := read(t, l, "t1", "s1", 0); len(got) != 2 {
		t.Fatalf("%d events stored, want 2: a refused append stores nothing", len(got))
	}
}

func testConcurrentAppendersOneWins(t *testing.T, l events.Log) {
	mustAppend(t, l, "t1", "s1", 0, Events("t1", "s1", 0, events.TypeSessionOpened))
	const writers = 8
	var wg sync.WaitGroup
	errs := make([]error, writers)
	batches := make([][]events.Event, writers)
	for i := range writers {
		batches[i] = Events("t1", "s1", 1, events.TypeTurnReceived, events.TypeSessionClosed)
	}
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = l.Append(ctxT(t), "t1", "s1", 1, batches[i])
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("writers %d and %d both appended after seq 1", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, events.ErrConflict):
			t.Fatalf("writer %d: err=%v, want nil or %v", i, err, events.ErrConflict)
		}
	}
	if won < 0 {
		t.Fatal("no writer appended")
	}
	got := read(t, l, "t1", "s1", 1)
	if !slices.Equal(ids(got), ids(batches[won])) {
		t.Fatalf("stored %v, want the winner's %v", ids(got), ids(batches[won]))
	}
}

func testResentAppendStoredOnce(t *testing.T, l events.Log) {
	evs := Events("t1", "s1", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested)
	mustAppend(t, l, "t1", "s1", 0, evs)
	// The same append again, as a retry after a lost acknowledgement.
	mustAppend(t, l, "t1", "s1", 0, evs)
	// And its tail alone.
	mustAppend(t, l, "t1", "s1", 1, evs[1:])
	if got := read(t, l, "t1", "s1", 0); !slices.Equal(ids(got), ids(evs)) {
		t.Fatalf("stored %v, want %v once", ids(got), ids(evs))
	}
	// The same seqs with other ids are a conflict, not a re-send.
	other := Events("t1", "s1", 1, events.TypeTurnReceived, events.TypeToolCallRequested)
	if err := l.Append(ctxT(t), "t1", "s1", 1, other); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("other events at stored seqs: err=%v, want %v", err, events.ErrConflict)
	}
}

func testRetryResumesStoredPrefix(t *testing.T, l events.Log) {
	mustAppend(t, l, "t1", "s1", 0, Events("t1", "s1", 0, events.TypeSessionOpened))
	evs := Events("t1", "s1", 1, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeSessionClosed)
	// Only the first part reached the log (a sequential append cut short).
	mustAppend(t, l, "t1", "s1", 1, evs[:1])
	mustAppend(t, l, "t1", "s1", 1, evs)
	got := read(t, l, "t1", "s1", 1)
	if !slices.Equal(ids(got), ids(evs)) {
		t.Fatalf("after resuming: %v, want %v", ids(got), ids(evs))
	}
}

func testInvalidEventsRefused(t *testing.T, l events.Log) {
	good := Events("t1", "s1", 0, events.TypeSessionOpened)
	wrongSession := Events("t1", "s2", 0, events.TypeSessionOpened)
	wrongSeq := Events("t1", "s1", 3, events.TypeSessionOpened)
	noID := Events("t1", "s1", 0, events.TypeSessionOpened)
	noID[0].ID = ""
	for _, tt := range []struct {
		name            string
		tenant, session string
		after           uint64
		evs             []events.Event
	}{
		{"event of another session", "t1", "s1", 0, wrongSession},
		{"seq not after expected", "t1", "s1", 0, wrongSeq},
		{"no id", "t1", "s1", 0, noID},
		{"tenant not a token", "t.1", "s1", 0, good},
		{"session not a token", "t1", "s 1", 0, good},
	} {
		err := l.Append(ctxT(t), tt.tenant, tt.session, tt.after, tt.evs)
		if err == nil || errors.Is(err, events.ErrConflict) {
			t.Errorf("%s: err=%v, want an invalid-event error (not a conflict)", tt.name, err)
		}
	}
	if got := read(t, l, "t1", "s1", 0); len(got) != 0 {
		t.Fatalf("%d events stored by invalid appends, want none", len(got))
	}
}

func testSessionsIsolated(t *testing.T, l events.Log) {
	a := Events("t1", "s1", 0, events.TypeSessionOpened, events.TypeTurnReceived)
	b := Events("t1", "s2", 0, events.TypeSessionOpened)
	c := Events("t2", "s1", 0, events.TypeSessionOpened)
	mustAppend(t, l, "t1", "s1", 0, a)
	mustAppend(t, l, "t1", "s2", 0, b)
	mustAppend(t, l, "t2", "s1", 0, c)
	for _, tt := range []struct {
		tenant, session string
		want            []events.Event
	}{{"t1", "s1", a}, {"t1", "s2", b}, {"t2", "s1", c}} {
		if got := read(t, l, tt.tenant, tt.session, 0); !slices.Equal(ids(got), ids(tt.want)) {
			t.Fatalf("%s/%s: %v, want %v", tt.tenant, tt.session, ids(got), ids(tt.want))
		}
	}
}

func testWatchHistoryThenLive(t *testing.T, l events.Log) {
	first := Events("t1", "s1", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeSessionClosed)
	mustAppend(t, l, "t1", "s1", 0, first)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch, err := l.Watch(ctx, "t1", "s1", 1)
	if err != nil {
		t.Fatal(err)
	}
	live := Events("t1", "s1", 3, events.TypeSessionClosed, events.TypeSessionClosed)
	mustAppend(t, l, "t1", "s1", 3, live)
	// Another session's events never show.
	mustAppend(t, l, "t1", "s2", 0, Events("t1", "s2", 0, events.TypeSessionOpened))
	want := ids(slices.Concat(first[1:], live))
	var got []string
	for len(got) < len(want) {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %v, want %v", got, want)
			}
			got = append(got, ev.ID)
		case <-ctxT(t).Done():
			t.Fatalf("watch gave %v, want %v", got, want)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("watch gave %v, want %v", got, want)
	}
	cancel()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			t.Fatalf("watch delivered %s (seq %d) after everything, want it closed", ev.ID, ev.Seq)
		case <-deadline:
			t.Fatal("watch did not close after its context ended")
		}
	}
}
