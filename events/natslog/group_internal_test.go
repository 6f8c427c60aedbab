package natslog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
)

// groupLog is a Log with group commit whose committer the test starts, so
// the test decides what waits in its queue.
func groupLog(t *testing.T) (*Log, jetstream.JetStream) {
	t.Helper()
	l, js := embeddedLog(t, true)
	l.cfg.group = 2
	l.group = make(chan groupItem, 16)
	return l, js
}

// embeddedLog is a Log on a server of its own, which the test's end stops.
func embeddedLog(t *testing.T, syncAlways bool) (*Log, jetstream.JetStream) {
	t.Helper()
	e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: t.TempDir(), SyncAlways: syncAlways})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	nc, err := e.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l, js
}

var groupIDs int

// groupAppend is what Append would hand the committer: the session's event
// seq after+1, guarded on stream sequence guard.
func groupAppend(t *testing.T, l *Log, session string, after, guard uint64) groupItem {
	t.Helper()
	groupIDs++
	ev := events.Event{ID: fmt.Sprintf("G%025d", groupIDs), Tenant: "acme", Session: session, Seq: after + 1,
		Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Type: events.TypeSessionOpened, Data: events.Payload(events.SessionOpened{Workspace: "w"})}
	msgs, _, _, _, err := l.encode("acme", session, after, []events.Event{ev})
	if err != nil {
		t.Fatal(err)
	}
	setGuard(msgs[0], guard, l.sessionFilter("acme", session))
	return groupItem{key: sessionKey("acme", session), msgs: msgs, done: make(chan groupDone, 1)}
}

func answer(t *testing.T, it groupItem) groupDone {
	t.Helper()
	select {
	case d := <-it.done:
		return d
	case <-time.After(30 * time.Second):
		t.Fatal("the committer did not answer")
		return groupDone{}
	}
}

// TestGroupCommitOneAppendPerSession: two appends of one session guarded on
// the same last sequence never share a batch (the server would let both
// pass the guard there): the second goes alone, and its guard refuses it.
func TestGroupCommitOneAppendPerSession(t *testing.T) {
	l, js := groupLog(t)
	ctx := context.Background()
	a1, b, a2, c := groupAppend(t, l, "a", 0, 0), groupAppend(t, l, "b", 0, 0), groupAppend(t, l, "a", 0, 0), groupAppend(t, l, "c", 0, 0)
	for _, it := range []groupItem{a1, b, a2, c} {
		l.group <- it
	}
	l.wg.Add(1)
	go l.commitGroups()
	st, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	for name, it := range map[string]groupItem{"a1": a1, "b": b, "c": c} {
		d := answer(t, it)
		if d.alone || d.ack.Sequence == 0 {
			t.Fatalf("append %s: %+v, want stored in the group", name, d)
		}
		// The ack's sequence is where the append's message is stored: the
		// session's next guard relies on it.
		m, err := st.GetMsg(ctx, d.ack.Sequence)
		if err != nil || m.Header.Get(hdrMsgID) != it.msgs[0].Header.Get(hdrMsgID) {
			t.Fatalf("append %s: stream seq %d holds %v (%v), want its message", name, d.ack.Sequence, m, err)
		}
	}
	if d := answer(t, a2); !d.alone {
		t.Fatalf("the second append of session a: %+v, want it sent alone", d)
	}
	if _, err := l.publishAlone(ctx, a2.msgs); !refused(err) {
		t.Fatalf("the second append of session a alone: %v, want refused by its guard", err)
	}
	got, err := l.Read(ctx, "acme", "a", 0)
	if err != nil || len(got) != 1 || got[0].ID != a1.msgs[0].Header.Get(hdrMsgID) {
		t.Fatalf("session a holds %v (%v), want only the first append's event", got, err)
	}
	if n := l.groupStats(); n != 1 {
		t.Fatalf("%d group commits, want 1", n)
	}
}

// TestGroupCommitStaleGuardRefusesTheBatch: one stale guard refuses the
// whole batch; every append in it is then sent alone, where the others are
// stored and the stale one refused.
func TestGroupCommitStaleGuardRefusesTheBatch(t *testing.T) {
	l, _ := groupLog(t)
	ctx := context.Background()
	first := groupAppend(t, l, "s", 0, 0)
	ack, err := l.publishAlone(ctx, first.msgs)
	if err != nil {
		t.Fatal(err)
	}
	stale := groupAppend(t, l, "s", 0, 0) // the session has an event now
	ok1, ok2 := groupAppend(t, l, "x", 0, 0), groupAppend(t, l, "y", 0, 0)
	for _, it := range []groupItem{ok1, stale, ok2} {
		l.group <- it
	}
	l.wg.Add(1)
	go l.commitGroups()
	for _, it := range []groupItem{ok1, stale, ok2} {
		if d := answer(t, it); !d.alone {
			t.Fatalf("after a refused batch: %+v, want every append sent alone", d)
		}
	}
	if n := l.groupStats(); n != 0 {
		t.Fatalf("%d group commits stored, want the refused one not counted", n)
	}
	for _, it := range []groupItem{ok1, ok2} {
		if _, err := l.publishAlone(ctx, it.msgs); err != nil {
			t.Fatalf("a good append alone after the batch was refused: %v", err)
		}
	}
	if _, err := l.publishAlone(ctx, stale.msgs); !refused(err) {
		t.Fatalf("the stale append alone: %v, want refused", err)
	}
	got, err := l.Read(ctx, "acme", "s", 0)
	if err != nil || len(got) != 1 {
		t.Fatalf("session s holds %d events (%v), want 1", len(got), err)
	}
	_ = ack
}
