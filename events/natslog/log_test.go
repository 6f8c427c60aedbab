package natslog_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

func TestAppendReadRoundTrip(t *testing.T) { forModes(t, testAppendReadRoundTrip) }

func testAppendReadRoundTrip(t *testing.T, mode natslog.Option) {
	e := startServer(t)
	l := openLog(t, e, mode)
	ctx := ctxT(t)

	first := mk("acme", "s1", 0, events.TypeSessionOpened)
	if err := l.Append(ctx, "acme", "s1", 0, first); err != nil {
		t.Fatalf("append 1: %v", err)
	}
	rest := mk("acme", "s1", 1, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted)
	if err := l.Append(ctx, "acme", "s1", 1, rest); err != nil {
		t.Fatalf("append 3: %v", err)
	}
	want := append(slices.Clone(first), rest...)

	for _, l := range []*natslog.Log{l, openLog(t, e, mode)} { // warm and cold cache
		got, err := l.Read(ctx, "acme", "s1", 0)
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
		if len(got) != len(want) {
			t.Fatalf("read %d events, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i].ID != want[i].ID || got[i].Seq != want[i].Seq || got[i].Type != want[i].Type ||
				string(got[i].Data) != string(want[i].Data) || !got[i].Time.Equal(want[i].Time) {
				t.Fatalf("event %d = %+v, want %+v", i, got[i], want[i])
			}
		}
		tail, err := l.Read(ctx, "acme", "s1", 2)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := ids(tail), ids(want[2:]); !slices.Equal(got, want) {
			t.Fatalf("read after 2 = %v, want %v", got, want)
		}
		none, err := l.Read(ctx, "acme", "s1", 4)
		if err != nil || len(none) != 0 {
			t.Fatalf("read after last = %v, %v; want nothing", none, err)
		}
		empty, err := l.Read(ctx, "acme", "nosuch", 0)
		if err != nil || len(empty) != 0 {
			t.Fatalf("read of empty session = %v, %v; want nothing", empty, err)
		}
	}
}

func TestReadManyBatches(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	var seq uint64
	for seq < 700 {
		evs := mk("t", "long", seq, slices.Repeat([]events.Type{events.TypeTurnCompleted}, 100)...)
		if err := l.Append(ctx, "t", "long", seq, evs); err != nil {
			t.Fatalf("append after %d: %v", seq, err)
		}
		// Interleave another session so the filter matters.
		if err := l.Append(ctx, "t", "other", seq/100, mk("t", "other", seq/100, events.TypeTurnCompleted)); err != nil {
			t.Fatal(err)
		}
		seq += 100
	}
	got, err := openLog(t, e).Read(ctx, "t", "long", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 700 {
		t.Fatalf("read %d events, want 700", len(got))
	}
	for i, ev := range got {
		if ev.Seq != uint64(i+1) || ev.Session != "long" {
			t.Fatalf("event %d: seq %d session %s", i, ev.Seq, ev.Session)
		}
	}
}

func TestAppendConflict(t *testing.T) { forModes(t, testAppendConflict) }

func testAppendConflict(t *testing.T, mode natslog.Option) {
	e := startServer(t)
	l := openLog(t, e, mode)
	ctx := ctxT(t)
	if err := l.Append(ctx, "t", "s", 0, mk("t", "s", 0, events.TypeSessionOpened, events.TypeTurnReceived)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		log      *natslog.Log
		expected uint64
		n        int
	}{
		{name: "empty assumed, one event", log: l, expected: 0, n: 1},
		{name: "empty assumed, batch", log: l, expected: 0, n: 3},
		{name: "behind", log: l, expected: 1, n: 1},
		{name: "ahead", log: l, expected: 5, n: 1},
		{name: "behind, cold cache", log: openLog(t, e, mode), expected: 1, n: 2},
		{name: "ahead, cold cache", log: openLog(t, e, mode), expected: 3, n: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			types := slices.Repeat([]events.Type{events.TypeTurnCompleted}, tt.n)
			err := tt.log.Append(ctx, "t", "s", tt.expected, mk("t", "s", tt.expected, types...))
			if !errors.Is(err, events.ErrConflict) {
				t.Fatalf("Append err=%v, want %v", err, events.ErrConflict)
			}
		})
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil || len(got) != 2 {
		t.Fatalf("after conflicts: %d events, %v; want 2", len(got), err)
	}
}

// A writer on another node appends; this Log's cache is stale, and the server
// refuses the append with 10071.
func TestAppendConflictStaleCache(t *testing.T) {
	e := startServer(t)
	a, b := openLog(t, e), openLog(t, e)
	ctx := ctxT(t)
	if err := a.Append(ctx, "t", "s", 0, mk("t", "s", 0, events.TypeSessionOpened)); err != nil {
		t.Fatal(err)
	}
	if err := b.Append(ctx, "t", "s", 1, mk("t", "s", 1, events.TypeTurnReceived)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		err := a.Append(ctx, "t", "s", 1, mk("t", "s", 1, slices.Repeat([]events.Type{events.TypeTurnCompleted}, n)...))
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("%d events: Append err=%v, want %v", n, err, events.ErrConflict)
		}
		var apiErr *jetstream.APIError
		if n == 1 && (!errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence) {
			t.Fatalf("err=%v, want the server's code %d wrapped", err, jetstream.JSErrCodeStreamWrongLastSequence)
		}
	}
	// The refusal refreshed a's view: appending after 2 now works.
	if err := a.Append(ctx, "t", "s", 2, mk("t", "s", 2, events.TypeTurnCompleted)); err != nil {
		t.Fatalf("append after refresh: %v", err)
	}
}

func TestConcurrentAppendersOneWins(t *testing.T) { forModes(t, testConcurrentAppendersOneWins) }

func testConcurrentAppendersOneWins(t *testing.T, mode natslog.Option) {
	e := startServer(t)
	logs := []*natslog.Log{openLog(t, e, mode), openLog(t, e, mode), openLog(t, e, mode)}
	ctx := ctxT(t)
	var last uint64
	for round := range 40 {
		n := 1 + round%3 // single publishes and batches
		var wg sync.WaitGroup
		errs := make([]error, len(logs))
		batches := make([][]events.Event, len(logs))
		for i, l := range logs {
			batches[i] = mk("t", "race", last, slices.Repeat([]events.Type{events.TypeTurnCompleted}, n)...)
			wg.Go(func() { errs[i] = l.Append(ctx, "t", "race", last, batches[i]) })
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: appenders %d and %d both won", round, winner, i)
			case err == nil:
				winner = i
			case !errors.Is(err, events.ErrConflict):
				t.Fatalf("round %d: appender %d: err=%v, want %v", round, i, err, events.ErrConflict)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: no appender won: %v", round, errs)
		}
		got, err := logs[0].Read(ctx, "t", "race", last)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), ids(batches[winner])) {
			t.Fatalf("round %d: stored %v, want winner's %v", round, ids(got), ids(batches[winner]))
		}
		last += uint64(n)
	}
}

func TestResentAppendStoredOnce(t *testing.T) { forModes(t, testResentAppendStoredOnce) }

func testResentAppendStoredOnce(t *testing.T, mode natslog.Option) {
	e := startServer(t)
	l := openLog(t, e, mode)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	one := mk("t", "s", 0, events.TypeSessionOpened)
	batch := mk("t", "s", 1, events.TypeTurnReceived, events.TypeToolCallRequested, events.TypeToolCallStarted)
	if err := l.Append(ctx, "t", "s", 0, one); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "t", "s", 1, batch); err != nil {
		t.Fatal(err)
	}
	// Retries after a lost ack: same events, same expectedLast, warm and cold
	// caches, in and past the duplicate window's view of the session.
	for _, l := range []*natslog.Log{l, openLog(t, e, mode)} {
		if err := l.Append(ctx, "t", "s", 1, batch); err != nil {
			t.Fatalf("resend batch: %v", err)
		}
		if err := l.Append(ctx, "t", "s", 0, one); err != nil {
			t.Fatalf("resend single: %v", err)
		}
		if err := l.Append(ctx, "t", "s", 2, batch[1:]); err != nil {
			t.Fatalf("resend tail of batch: %v", err)
		}
	}
	// [opened], [received, request, started] (packed).
	if got := streamMsgs(t, js); got != 2 {
		t.Fatalf("stream holds %d messages, want 2", got)
	}
	// An id already stored, sent as a new event at a new seq, is a conflict.
	reused := mk("t", "s", 4, events.TypeTurnCompleted)
	reused[0].ID = one[0].ID
	if err := l.Append(ctx, "t", "s", 4, reused); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("reused id: err=%v, want %v", err, events.ErrConflict)
	}
}

func TestBatchIsAtomic(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	first := mk("t", "s", 0, events.TypeSessionOpened)
	if err := l.Append(ctx, "t", "s", 0, first); err != nil {
		t.Fatal(err)
	}
	// The batch's first event reuses a stored id (its message's id): the
	// server refuses all of it. (Events after the first of a packed run share
	// their message's id: ids are ULIDs, so only a retry repeats them.)
	bad := mk("t", "s", 1, events.TypeTurnReceived, events.TypeTurnCompleted, events.TypeTurnCompleted)
	bad[0].ID = first[0].ID
	if err := l.Append(ctx, "t", "s", 1, bad); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("err=%v, want %v", err, events.ErrConflict)
	}
	if got := streamMsgs(t, js); got != 1 {
		t.Fatalf("stream holds %d messages, want 1 (nothing of the refused batch)", got)
	}
	if err := l.Append(ctx, "t", "s", 1, mk("t", "s", 1, events.TypeTurnReceived, events.TypeTurnCompleted)); err != nil {
		t.Fatalf("append after refused batch: %v", err)
	}
}

func TestAppendInvalid(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	good := func() []events.Event { return mk("t", "s", 0, events.TypeSessionOpened) }
	tests := []struct {
		name            string
		tenant, session string
		evs             []events.Event
		wantErr         error
	}{
		{name: "dot in tenant", tenant: "a.b", session: "s", evs: good(), wantErr: natslog.ErrInvalidID},
		{name: "wildcard session", tenant: "t", session: "*", evs: good(), wantErr: natslog.ErrInvalidID},
		{name: "empty session", tenant: "t", session: "", evs: good(), wantErr: natslog.ErrInvalidID},
		{name: "wrong session", tenant: "t", session: "other", evs: good(), wantErr: natslog.ErrInvalidEvent},
		{name: "gap", tenant: "t", session: "s", evs: func() []events.Event { e := good(); e[0].Seq = 2; return e }(), wantErr: natslog.ErrInvalidEvent},
		{name: "no id", tenant: "t", session: "s", evs: func() []events.Event { e := good(); e[0].ID = ""; return e }(), wantErr: natslog.ErrInvalidEvent},
		{name: "nothing", tenant: "t", session: "s", evs: nil, wantErr: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := l.Append(ctx, tt.tenant, tt.session, 0, tt.evs)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("Append err=%v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestSessionsIsolated(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	want := map[[2]string][]string{}
	for _, tenant := range []string{"t1", "t2"} {
		for _, session := range []string{"a", "b", "a-b"} {
			evs := mk(tenant, session, 0, events.TypeSessionOpened, events.TypeToolCallRequested, events.TypeTurnCompleted)
			if err := l.Append(ctx, tenant, session, 0, evs); err != nil {
				t.Fatal(err)
			}
			want[[2]string{tenant, session}] = ids(evs)
		}
	}
	for k, w := range want {
		got, err := l.Read(ctx, k[0], k[1], 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), w) {
			t.Fatalf("%s/%s: read %v, want %v", k[0], k[1], ids(got), w)
		}
	}
}

func TestWatch(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := mk("t", "w", 0, events.TypeSessionOpened, events.TypeTurnReceived)
	if err := l.Append(ctx, "t", "w", 0, evs); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, "t", "noise", 0, mk("t", "noise", 0, events.TypeSessionOpened)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := openLog(t, e).Watch(wctx, "t", "w", 1)
	if err != nil {
		t.Fatal(err)
	}
	live := mk("t", "w", 2, events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeTurnCompleted)
	go func() {
		_ = l.Append(ctx, "t", "w", 2, live[:1])
		_ = l.Append(ctx, "t", "w", 3, live[1:])
	}()
	want := append([]events.Event{evs[1]}, live...)
	for i, w := range want {
		select {
		case got := <-ch:
			if got.ID != w.ID || got.Seq != w.Seq {
				t.Fatalf("watch event %d = %s seq %d, want %s seq %d", i, got.ID, got.Seq, w.ID, w.Seq)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("watch event %d: timed out", i)
		}
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("watch delivered after cancel, want the channel closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch channel not closed after cancel")
	}
}

func TestWatchEndsOnClose(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l, err := natslog.New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := l.Watch(context.Background(), "t", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-ch; ok {
		t.Fatal("watch delivered after Close")
	}
	if _, err := l.Watch(context.Background(), "t", "s", 0); !errors.Is(err, natslog.ErrClosed) {
		t.Fatalf("Watch after Close err=%v, want %v", err, natslog.ErrClosed)
	}
}

func TestOptionsInvalid(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	tests := []struct {
		name string
		opt  natslog.Option
	}{
		{"stream with dot", natslog.WithStream("a.b")},
		{"prefix with wildcard", natslog.WithSubjectPrefix("cs.*")},
		{"replicas 0", natslog.WithReplicas(0)},
		{"tiny dup window", natslog.WithDuplicateWindow(time.Millisecond)},
		{"watch buffer 0", natslog.WithWatchBuffer(0)},
		{"cache 0", natslog.WithCacheSize(0)},
		{"timeout 0", natslog.WithTimeout(0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := natslog.New(context.Background(), js, tt.opt); !errors.Is(err, natslog.ErrInvalidOption) {
				t.Fatalf("New err=%v, want %v", err, natslog.ErrInvalidOption)
			}
		})
	}
	l, err := natslog.New(context.Background(), js, natslog.WithStream("OTHER"), natslog.WithSubjectPrefix("x.y"), natslog.WithDuplicateWindow(time.Minute))
	if err != nil {
		t.Fatalf("New with valid options: %v", err)
	}
	defer l.Close()
	if err := l.Append(context.Background(), "t", "s", 0, mk("t", "s", 0, events.TypeSessionOpened)); err != nil {
		t.Fatal(err)
	}
}

// A sequential append cut short leaves a prefix; retrying stores the rest.
func TestRetryResumesStoredPrefix(t *testing.T) { forModes(t, testRetryResumesStoredPrefix) }

func testRetryResumesStoredPrefix(t *testing.T, mode natslog.Option) {
	e := startServer(t)
	l := openLog(t, e, mode)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	evs := mk("t", "s", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested)
	if err := l.Append(ctx, "t", "s", 0, evs[:1]); err != nil { // the part that got through
		t.Fatal(err)
	}
	if err := openLog(t, e, mode).Append(ctx, "t", "s", 0, evs); err != nil {
		t.Fatalf("retry: %v", err)
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	// [opened], then the rest packed in one message.
	if !slices.Equal(ids(got), ids(evs)) || streamMsgs(t, js) != 2 {
		t.Fatalf("stored %v (%d msgs), want %v", ids(got), streamMsgs(t, js), ids(evs))
	}
}

func TestAppendPacksRunsOfEventsIntoOneMessage(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	evs := mk("t", "s", 0, events.TypeSessionOpened, events.TypeTurnReceived, events.TypeToolCallRequested,
		events.TypeToolCallStarted, events.TypeToolCallCompleted, events.TypeResultCommitted, events.TypeTurnCompleted)
	evs[2].Data = json.RawMessage(`{"concurrency":"parallel_safe"}`)
	if err := l.Append(ctx, "t", "s", 0, evs); err != nil {
		t.Fatal(err)
	}
	// All seven, request included, in one message on the log subject.
	if got := streamMsgs(t, js); got != 1 {
		t.Fatalf("stream holds %d messages for 7 events, want 1", got)
	}
	got, err := l.Read(ctx, "t", "s", 0)
	if err != nil || len(got) != len(evs) {
		t.Fatalf("read %d events (%v), want %d", len(got), err, len(evs))
	}
	for i := range evs {
		if got[i].ID != evs[i].ID || got[i].Seq != evs[i].Seq {
			t.Fatalf("event %d = %s/%d, want %s/%d", i, got[i].ID, got[i].Seq, evs[i].ID, evs[i].Seq)
		}
	}
	if tail, _ := l.Read(ctx, "t", "s", 5); len(tail) != 2 || tail[0].Seq != 6 {
		t.Fatalf("read after 5 = %d events from %d, want 6 and 7", len(tail), tail[0].Seq)
	}
	last, ok, err := l.Last(ctx, "t", "s")
	if err != nil || !ok || last.Seq != 7 {
		t.Fatalf("Last = %d %v %v, want seq 7", last.Seq, ok, err)
	}
	// Appending after a packed message guards on it.
	if err := l.Append(ctx, "t", "s", 6, mk("t", "s", 6, events.TypeTurnReceived)); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("stale append after a pack: %v, want ErrConflict", err)
	}
	if err := l.Append(ctx, "t", "s", 7, mk("t", "s", 7, events.TypeTurnReceived)); err != nil {
		t.Fatal(err)
	}
}

// ephemeralConsumers counts the stream's consumers without a durable name,
// as the server lists them: a Watch's ordered consumer is one.
func ephemeralConsumers(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	s, err := js.Stream(context.Background(), natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	list := s.ListConsumers(context.Background())
	for ci := range list.Info() {
		if ci.Config.Durable == "" {
			n++
		}
	}
	if err := list.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitConsumers polls until the stream holds want ephemeral consumers, or
// fails after 10 s (the server would drop an abandoned one only after its
// 5-minute inactivity threshold).
func waitConsumers(t *testing.T, js jetstream.JetStream, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := ephemeralConsumers(t, js)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server lists %d ephemeral consumers, want %d", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWatchDeletesItsConsumer: the consumer behind a Watch is deleted on the
// server when the watch ends, by its context or by Close, rather than left
// for the server's inactivity threshold.
func TestWatchDeletesItsConsumer(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e)
	ctx := ctxT(t)
	if err := l.Append(ctx, "t", "w", 0, mk("t", "w", 0, events.TypeSessionOpened)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := l.Watch(wctx, "t", "w", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Watch(wctx, "t", "w", 0); err != nil { // a second watch, ended with the first
		t.Fatal(err)
	}
	<-ch
	waitConsumers(t, js, 2)
	cancel()
	waitConsumers(t, js, 0)

	// Close ends the watches it holds and deletes their consumers too.
	other := openLog(t, e)
	if _, err := other.Watch(ctx, "t", "w", 0); err != nil {
		t.Fatal(err)
	}
	waitConsumers(t, js, 1)
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	if n := ephemeralConsumers(t, js); n != 0 {
		t.Fatalf("after Close the server lists %d ephemeral consumers, want 0", n)
	}
}
