package natslog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// chained makes n linked events of a session, from Seq 1, as the session
// actor writes them; pad adds that many bytes of text to each.
func chained(t *testing.T, tenant, session string, n, pad int) []events.Event {
	t.Helper()
	types := make([]events.Type, n)
	types[0] = events.TypeSessionOpened
	for i := 1; i < n; i++ {
		types[i] = events.TypeTurnReceived
	}
	evs := mk(tenant, session, 0, types...)
	for i := 1; i < n; i++ {
		evs[i].Data = events.Payload(events.TurnReceived{Turn: fmt.Sprintf("t%d-%s", i, strings.Repeat("x", pad))})
	}
	if err := events.Link(evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

// appendSpread appends evs one event per append, each after an event of
// another session, so the session's messages are spread through the log.
func appendSpread(t *testing.T, l *natslog.Log, tenant, session string, evs []events.Event) {
	t.Helper()
	ctx := ctxT(t)
	for i, ev := range evs {
		noise := fmt.Sprintf("noise-%s-%d", session, ev.Seq)
		if err := l.Append(ctx, tenant, noise, 0, mk(tenant, noise, 0, events.TypeSessionOpened)); err != nil {
			t.Fatal(err)
		}
		if err := l.Append(ctx, tenant, session, ev.Seq-1, evs[i:i+1]); err != nil {
			t.Fatalf("append seq %d: %v", ev.Seq, err)
		}
	}
}

// sameEvents fails unless got are want, field by field and byte for byte.
func sameEvents(t *testing.T, what string, got, want []events.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		g, _ := json.Marshal(got[i])
		w, _ := json.Marshal(want[i])
		if !bytes.Equal(g, w) {
			t.Fatalf("%s: event %d =\n%s\nwant\n%s", what, i, g, w)
		}
	}
}

// snapChunk returns the session's snapshot chunk k as stored, or nil.
func snapChunk(t *testing.T, js jetstream.JetStream, tenant, session string, k int) *jetstream.RawStreamMsg {
	t.Helper()
	st, err := js.Stream(context.Background(), natslog.DefaultSnapshotStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetLastMsgForSubject(context.Background(), fmt.Sprintf("%s_snap.%s.%s.%d", natslog.DefaultSubjectPrefix, tenant, session, k))
	if err != nil {
		return nil
	}
	return m
}

// logMsgs returns the session's log messages: stream sequences and data.
func logMsgs(t *testing.T, js jetstream.JetStream, tenant, session string) ([]uint64, [][]byte) {
	t.Helper()
	st, err := js.Stream(context.Background(), natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	var datas [][]byte
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(context.Background(), seq)
		if err != nil {
			break
		}
		if strings.HasPrefix(m.Subject, fmt.Sprintf("%s.%s.%s.", natslog.DefaultSubjectPrefix, tenant, session)) {
			seqs, datas = append(seqs, seq), append(datas, m.Data)
		}
	}
	return seqs, datas
}

// TestSnapshotReadIsTheLog: the first read of a spread session writes its
// snapshot; reads from it, and from it and a tail appended since, give the
// log's events exactly, and a long enough tail extends the snapshot.
func TestSnapshotReadIsTheLog(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 60, 0)
	appendSpread(t, l, "acme", "s", evs[:40])

	if snapChunk(t, js, "acme", "s", 0) != nil {
		t.Fatal("a snapshot exists before any read")
	}
	got, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "first read", got, evs[:40])
	c := snapChunk(t, js, "acme", "s", 0)
	if c == nil {
		t.Fatal("the first read of a 40-message session wrote no snapshot")
	}
	if !bytes.Contains(c.Data, []byte(evs[39].ID)) {
		t.Fatal("the snapshot does not hold the session's last event")
	}
	got, err = openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read from the snapshot", got, evs[:40])
	got, err = openLog(t, e).Read(ctx, "acme", "s", 25)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read after 25 from the snapshot", got, evs[25:40])

	appendSpread(t, l, "acme", "s", evs[40:])
	got, err = openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read from the snapshot and a tail", got, evs)
	if c := snapChunk(t, js, "acme", "s", 0); !bytes.Contains(c.Data, []byte(evs[59].ID)) {
		t.Fatal("a 20-message tail did not extend the snapshot")
	}
	got, err = openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read from the extended snapshot", got, evs)
}

// TestSnapshotIsUsed: once a snapshot is written, a read takes the
// session's history from it and not from the log's blocks: a message deleted
// from the middle of the log since is still read.
func TestSnapshotIsUsed(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 20, 0)
	appendSpread(t, l, "acme", "s", evs)
	if err := l.Compact(ctx, "acme", "s"); err != nil {
		t.Fatal(err)
	}
	seqs, _ := logMsgs(t, js, "acme", "s")
	st, _ := js.Stream(ctx, natslog.DefaultStream)
	if err := st.DeleteMsg(ctx, seqs[10]); err != nil {
		t.Fatal(err)
	}
	got, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read after Compact", got, evs)
}

// TestSnapshotForgedIsNotRead: a chunk that is not a copy of the log (its
// events changed, re-linked, of another session, cut, or garbage) never
// reaches a reader: the read gives the log's events and writes the snapshot
// again.
func TestSnapshotForgedIsNotRead(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 20, 0)
	appendSpread(t, l, "acme", "s", evs)
	other := chained(t, "acme", "o", 20, 0)
	appendSpread(t, l, "acme", "o", other)
	seqs, datas := logMsgs(t, js, "acme", "s")
	oseqs, odatas := logMsgs(t, js, "acme", "o")

	changed := func(i int, f func(*events.Event)) [][]byte {
		out := append([][]byte(nil), datas...)
		ev, err := events.Unmarshal(datas[i])
		if err != nil {
			t.Fatal(err)
		}
		f(&ev)
		if out[i], err = events.Marshal(ev); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// relinked changes event 5 and re-links every event after it, as a
	// forger who knows the chain would.
	relinked := func() [][]byte {
		cp := append([]events.Event(nil), evs...)
		cp[5].Data = events.Payload(events.TurnReceived{Turn: "forged"})
		if err := events.Link(cp); err != nil {
			t.Fatal(err)
		}
		out := make([][]byte, len(cp))
		for i := range cp {
			out[i], _ = events.Marshal(cp[i])
		}
		return out
	}
	cases := map[string][]byte{
		"changed data":  natslog.EncodeSnapshot(seqs, changed(5, func(ev *events.Event) { ev.Data = events.Payload(events.TurnReceived{Turn: "forged"}) })),
		"changed last":  natslog.EncodeSnapshot(seqs, changed(19, func(ev *events.Event) { ev.Data = events.Payload(events.TurnReceived{Turn: "forged"}) })),
		"re-linked":     natslog.EncodeSnapshot(seqs, relinked()),
		"other session": natslog.EncodeSnapshot(oseqs, odatas),
		"dropped event": natslog.EncodeSnapshot(append(seqs[:5:5], seqs[6:]...), append(datas[:5:5], datas[6:]...)),
		"wrong seqs":    natslog.EncodeSnapshot(oseqs, datas),
		"garbage":       []byte("CSS1\x05\x03abc"),
		"not a chunk":   []byte(`{"forged":true}`),
	}
	subj := fmt.Sprintf("%s_snap.acme.s.0", natslog.DefaultSubjectPrefix)
	for name, body := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := js.Publish(ctx, subj, body); err != nil {
				t.Fatal(err)
			}
			got, err := openLog(t, e).Read(ctx, "acme", "s", 0)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, "read over a forged snapshot", got, evs)
			c := snapChunk(t, js, "acme", "s", 0)
			if c == nil || bytes.Equal(c.Data, body) {
				t.Fatal("the forged chunk is still the snapshot after a read")
			}
			got, err = openLog(t, e).Read(ctx, "acme", "s", 0)
			if err != nil {
				t.Fatal(err)
			}
			sameEvents(t, "read from the rewritten snapshot", got, evs)
		})
	}
}

// TestSnapshotChunks: a session larger than one message is snapshotted in
// several chunks, and read back whole, also across a tail.
func TestSnapshotChunks(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "big", 30, 150<<10) // 30 × 150 KiB: several 1 MiB chunks
	appendSpread(t, l, "acme", "big", evs[:20])
	if err := l.Compact(ctx, "acme", "big"); err != nil {
		t.Fatal(err)
	}
	if snapChunk(t, js, "acme", "big", 1) == nil {
		t.Fatal("a 3 MB session fit in one chunk")
	}
	appendSpread(t, l, "acme", "big", evs[20:])
	got, err := openLog(t, e).Read(ctx, "acme", "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read across chunks and a tail", got, evs)
	got, err = openLog(t, e).Read(ctx, "acme", "big", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read from the extended chunks", got, evs)
}

// TestSnapshotConcurrentReaders: readers that write the same session's
// snapshot at once leave one consistent snapshot.
func TestSnapshotConcurrentReaders(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 30, 0)
	appendSpread(t, l, "acme", "s", evs)
	errs := make(chan error, 4)
	for range 4 {
		r := openLog(t, e)
		go func() {
			got, err := r.Read(ctx, "acme", "s", 0)
			if err == nil && len(got) != len(evs) {
				err = fmt.Errorf("read %d events, want %d", len(got), len(evs))
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	got, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read after concurrent snapshot writers", got, evs)
}

// TestWatchFromSnapshot: a watch from the start delivers the history (from
// the snapshot) and then live events, each once and in order.
func TestWatchFromSnapshot(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 30, 0)
	appendSpread(t, l, "acme", "s", evs[:25])
	if err := l.Compact(ctx, "acme", "s"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := openLog(t, e).Watch(wctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	appendSpread(t, l, "acme", "s", evs[25:]) // live: after the watch started
	var got []events.Event
	for len(got) < len(evs) {
		select {
		case ev := <-ch:
			got = append(got, ev)
		case <-time.After(10 * time.Second):
			t.Fatalf("watch: %d events of %d, then nothing", len(got), len(evs))
		}
	}
	sameEvents(t, "watch", got, evs)
}

// TestGroupCommitConcurrentSessions: many sessions appending at once through
// the group committer each get exactly their own events, in order.
func TestGroupCommitConcurrentSessions(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e, natslog.WithGroupCommit(2))
	ctx := ctxT(t)
	const sessions, appends = 32, 10
	want := make([][]events.Event, sessions)
	errs := make(chan error, sessions)
	for s := range sessions {
		want[s] = chained(t, "acme", fmt.Sprintf("g%d", s), appends, 0)
		go func() {
			for i, ev := range want[s] {
				if err := l.Append(ctx, "acme", ev.Session, ev.Seq-1, want[s][i:i+1]); err != nil {
					errs <- fmt.Errorf("session %s seq %d: %w", ev.Session, ev.Seq, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for s := range sessions {
		got, err := openLog(t, e).Read(ctx, "acme", fmt.Sprintf("g%d", s), 0)
		if err != nil {
			t.Fatal(err)
		}
		sameEvents(t, fmt.Sprintf("session g%d", s), got, want[s])
	}
	t.Logf("%d group commits for %d appends", natslog.GroupCommits(l), sessions*appends)
}

// TestSnapshotTipHoldsItsChunk: the tip a compaction leaves in memory holds
// about the size of the session's last chunk, not the room the compaction
// made for appending to it, so a small idle session's tip stays small.
func TestSnapshotTipHoldsItsChunk(t *testing.T) {
	e := startServer(t)
	l := openLog(t, e)
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 6, 0)
	if err := l.Append(ctx, "acme", "s", 0, evs[:3]); err != nil {
		t.Fatal(err)
	}
	for i, upto := range []int{3, 6} {
		if i > 0 {
			if err := l.Append(ctx, "acme", "s", 3, evs[3:upto]); err != nil {
				t.Fatal(err)
			}
		}
		if err := l.Compact(ctx, "acme", "s"); err != nil {
			t.Fatal(err)
		}
		if l.CachedTips() != 1 {
			t.Fatalf("after compaction %d: %d tips cached, want 1", i+1, l.CachedTips())
		}
		if got := natslog.TipBytes(l); got > 4<<10 {
			t.Fatalf("after compaction %d: the tip of %d events counts %d bytes, want at most 4 KiB", i+1, upto, got)
		}
	}
}
