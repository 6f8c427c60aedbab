package actors

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/logtest"
	"github.com/callsheet/callsheet/events/memlog"
)

func memLog(t *testing.T) *memlog.Log {
	t.Helper()
	l, err := memlog.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// queueEvents queues evs, each with callbacks that note their id in after or
// failed.
func queueEvents(o *outbox, evs []events.Event, after, failed *[]string) {
	for _, ev := range evs {
		id := ev.ID
		o.queue(pending{ev: ev, after: func() { *after = append(*after, id) }, fail: func(error) { *failed = append(*failed, id) }})
	}
}

func storedIDs(t *testing.T, l events.Log) []string {
	t.Helper()
	evs, err := l.Read(context.Background(), "t1", "s1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

// TestOutboxOneAppendAtATime checks the pipeline's order: what is queued
// while an append is in flight waits for it and goes out as the next
// append, guarded on the events the first one stored, and the callbacks run
// only for stored events, in order.
func TestOutboxOneAppendAtATime(t *testing.T) {
	l := memLog(t)
	ctx := context.Background()
	var o outbox
	var after, failed []string
	first := logtest.Events("t1", "s1", 0, events.TypeSessionOpened, events.TypeTurnReceived)
	queueEvents(&o, first, &after, &failed)
	run := o.start(ctx, l, "t1", "s1", nil)
	if run == nil {
		t.Fatal("start with queued events returned no append")
	}
	second := logtest.Events("t1", "s1", 2, events.TypeSessionClosed)
	queueEvents(&o, second, &after, &failed)
	if again := o.start(ctx, l, "t1", "s1", nil); again != nil {
		t.Fatal("a second append started while one is in flight")
	}
	if o.idle() || o.isDurable(1) {
		t.Fatal("outbox idle, or seq 1 durable, before the append returned")
	}
	stored, _, err := o.done(run())
	if err != nil {
		t.Fatal(err)
	}
	if got := idsOf(stored); !slices.Equal(got, idsOf(first)) {
		t.Fatalf("first append stored %v, want %v", got, idsOf(first))
	}
	if !o.isDurable(2) || o.isDurable(3) {
		t.Fatalf("durable up to %d after the first append, want 2", o.durable)
	}
	run = o.start(ctx, l, "t1", "s1", nil)
	if run == nil {
		t.Fatal("the queued event did not go out once the first append returned")
	}
	stored, _, err = o.done(run())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range stored {
		p.after()
	}
	if !o.idle() || !o.isDurable(3) {
		t.Fatal("outbox not idle with everything stored")
	}
	if got, want := storedIDs(t, l), idsOf(slices.Concat(first, second)); !slices.Equal(got, want) {
		t.Fatalf("log holds %v, want %v", got, want)
	}
	if !slices.Equal(after, idsOf(second)) || len(failed) != 0 {
		t.Fatalf("after=%v failed=%v, want after=%v", after, failed, idsOf(second))
	}
}

// TestOutboxConflictFailsEverything checks that a refused append is not
// retried and that fail tells every waiter, in flight and queued, while no
// after callback runs: the actor acts on nothing that is not durable.
func TestOutboxConflictFailsEverything(t *testing.T) {
	l := memLog(t)
	ctx := context.Background()
	// Another writer got there first.
	if err := l.Append(ctx, "t1", "s1", 0, logtest.Events("t1", "s1", 0, events.TypeSessionOpened)); err != nil {
		t.Fatal(err)
	}
	var o outbox
	var after, failed []string
	mine := logtest.Events("t1", "s1", 0, events.TypeSessionOpened)
	queueEvents(&o, mine, &after, &failed)
	run := o.start(ctx, l, "t1", "s1", nil)
	late := logtest.Events("t1", "s1", 1, events.TypeTurnReceived)
	queueEvents(&o, late, &after, &failed)
	begun := time.Now()
	_, _, err := o.done(run())
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("append over another writer's event: err=%v, want %v", err, events.ErrConflict)
	}
	if took := time.Since(begun); took > 5*time.Second {
		t.Fatalf("a conflict took %s: it must not be retried", took)
	}
	o.fail(err)
	if len(after) != 0 || !slices.Equal(failed, idsOf(slices.Concat(mine, late))) {
		t.Fatalf("after=%v failed=%v, want no after and every waiter failed", after, failed)
	}
	if !o.idle() {
		t.Fatal("outbox holds events after fail")
	}
}

// TestOutboxGateStopsAppends checks that an append the gate refuses
// publishes nothing: a node that may not act must not write.
func TestOutboxGateStopsAppends(t *testing.T) {
	l := memLog(t)
	var o outbox
	var after, failed []string
	queueEvents(&o, logtest.Events("t1", "s1", 0, events.TypeSessionOpened), &after, &failed)
	errGate := errors.New("lease lost")
	run := o.start(context.Background(), l, "t1", "s1", func() error { return errGate })
	if _, _, err := o.done(run()); !errors.Is(err, errGate) {
		t.Fatalf("gated append: err=%v, want %v", err, errGate)
	}
	if got := storedIDs(t, l); len(got) != 0 {
		t.Fatalf("a gated append stored %v", got)
	}
}

func idsOf[T interface{ ~[]events.Event | ~[]pending }](x T) []string {
	var out []string
	switch v := any(x).(type) {
	case []events.Event:
		for _, ev := range v {
			out = append(out, ev.ID)
		}
	case []pending:
		for _, p := range v {
			out = append(out, p.ev.ID)
		}
	}
	return out
}
