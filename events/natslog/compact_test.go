package natslog_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events/natslog"
)

// snapBodies returns the session's snapshot chunks as stored, in order.
func snapBodies(t *testing.T, js jetstream.JetStream, tenant, session string) [][]byte {
	t.Helper()
	var out [][]byte
	for k := 0; ; k++ {
		m := snapChunk(t, js, tenant, session, k)
		if m == nil {
			return out
		}
		out = append(out, m.Data)
	}
}

// fromScratch drops the session's snapshot and has a Log that never saw it
// compact it again: the snapshot a compaction must leave.
func fromScratch(t *testing.T, js jetstream.JetStream, l *natslog.Log, tenant, session string) [][]byte {
	t.Helper()
	st, err := js.Stream(context.Background(), natslog.DefaultSnapshotStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(context.Background(), jetstream.WithPurgeSubject(fmt.Sprintf("%s_snap.%s.%s.>", natslog.DefaultSubjectPrefix, tenant, session))); err != nil {
		t.Fatal(err)
	}
	if err := l.Compact(ctxT(t), tenant, session); err != nil {
		t.Fatal(err)
	}
	return snapBodies(t, js, tenant, session)
}

// sameSnapshot fails unless got and want are the same chunks byte for byte.
func sameSnapshot(t *testing.T, what string, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d chunks, want %d", what, len(got), len(want))
	}
	for k := range want {
		if !bytes.Equal(got[k], want[k]) {
			t.Fatalf("%s: chunk %d differs (%d bytes, want %d)", what, k, len(got[k]), len(want[k]))
		}
	}
}

// TestCompactReadsTheBatch: compacting after a batch reads what the batch
// added, not the session's snapshot again, and writes little more than the
// batch in the long run (counted in the bytes the Log's connection received
// and sent), and leaves the snapshot a compaction from scratch writes.
func TestCompactReadsTheBatch(t *testing.T) {
	e := startServer(t)
	js, nc := connect(t, e)
	l, err := natslog.New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := ctxT(t)
	evs := chained(t, "acme", "s", 330, 2<<10) // about 700 KB: one chunk
	appendSpread(t, l, "acme", "s", evs[:300])
	if err := l.Compact(ctx, "acme", "s"); err != nil {
		t.Fatal(err)
	}
	snap := 0
	for _, b := range snapBodies(t, js, "acme", "s") {
		snap += len(b)
	}
	var sent uint64
	for i := 300; i < len(evs); i += 3 {
		appendSpread(t, l, "acme", "s", evs[i:i+3])
		before := nc.Stats()
		if err := l.Compact(ctx, "acme", "s"); err != nil {
			t.Fatal(err)
		}
		after := nc.Stats()
		// The batch is 3 events of about 2 KiB; the snapshot is 100 times that.
		if got := after.InBytes - before.InBytes; got > 64<<10 {
			t.Fatalf("compacting a batch of 3 events received %d bytes (the snapshot is %d)", got, snap)
		}
		sent += after.OutBytes - before.OutBytes
	}
	// Rewriting the last chunk each time would send the snapshot 10 times;
	// the last chunk stays within 32 KiB and is folded into the one before
	// once every 32 KiB (twice here).
	if sent > 4*uint64(snap) {
		t.Fatalf("10 compactions of 3 events over a %d-byte snapshot sent %d bytes", snap, sent)
	}
	got := snapBodies(t, js, "acme", "s")
	sameSnapshot(t, "after compacting batch by batch", got, fromScratch(t, js, openLog(t, e), "acme", "s"))
	read, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	if err != nil {
		t.Fatal(err)
	}
	sameEvents(t, "read from the snapshot compacted batch by batch", read, evs)
}

// TestCompactStaleCache: a Log whose remembered snapshot was overwritten by
// another writer (a second node's compaction or read), dropped (a reader
// that rejected it), or evicted (WithSnapshotCache) compacts from the
// snapshot as stored, and leaves the snapshot a compaction from scratch
// writes, across chunks.
func TestCompactStaleCache(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	a := openLog(t, e)
	b := openLog(t, e)
	tiny := openLog(t, e, natslog.WithSnapshotCache(1)) // remembers nothing
	evs := chained(t, "acme", "s", 40, 100<<10)         // 4 MB: several chunks
	appendSpread(t, a, "acme", "s", evs[:10])
	for _, step := range []struct {
		what string
		do   func()
	}{
		{"a compacts", func() { must(t, a.Compact(ctx, "acme", "s")) }},
		{"b compacts over a's", func() { must(t, b.Compact(ctx, "acme", "s")) }},
		{"a compacts over b's", func() { must(t, a.Compact(ctx, "acme", "s")) }},
		{"a reader writes over a's", func() {
			_, err := openLog(t, e).Read(ctx, "acme", "s", 0)
			must(t, err)
		}},
		{"a compacts over the reader's", func() { must(t, a.Compact(ctx, "acme", "s")) }},
		{"the snapshot is dropped under a", func() {
			st, err := js.Stream(ctx, natslog.DefaultSnapshotStream)
			must(t, err)
			must(t, st.Purge(ctx, jetstream.WithPurgeSubject(natslog.DefaultSubjectPrefix+"_snap.acme.s.>")))
		}},
		{"a compacts over nothing", func() { must(t, a.Compact(ctx, "acme", "s")) }},
		{"tiny compacts", func() { must(t, tiny.Compact(ctx, "acme", "s")) }},
		{"tiny compacts again", func() { must(t, tiny.Compact(ctx, "acme", "s")) }},
	} {
		step.do()
		got := snapBodies(t, js, "acme", "s")
		if len(got) == 0 {
			continue // dropped
		}
		// Every chunk written is a prefix of the log, which this step does
		// not change: compacted after the next batch it must be whole.
		seqs, _ := logMsgs(t, js, "acme", "s")
		next := len(seqs)
		if next < len(evs) {
			appendSpread(t, a, "acme", "s", evs[next:min(next+3, len(evs))])
		}
		must(t, a.Compact(ctx, "acme", "s"))
		sameSnapshot(t, step.what+", then a compacts a batch", snapBodies(t, js, "acme", "s"), fromScratch(t, js, openLog(t, e), "acme", "s"))
	}
	read, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	must(t, err)
	seqs, _ := logMsgs(t, js, "acme", "s")
	sameEvents(t, "read after every writer", read, evs[:len(seqs)])
}

// TestCompactTipOfAnotherLog: a Log that remembers a session's snapshot
// tip does not extend the snapshot with a log that is no longer the one the
// snapshot copies (the stream made again, the session's history another):
// the tip's last message is not the log's at its stream sequence, and the
// compaction writes the new log's snapshot from scratch.
func TestCompactTipOfAnotherLog(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	a := openLog(t, e)
	appendSpread(t, a, "acme", "s", chained(t, "acme", "s", 30, 0)[:20])
	must(t, a.Compact(ctx, "acme", "s"))
	must(t, js.DeleteStream(ctx, natslog.DefaultStream))
	b := openLog(t, e)
	evs := chained(t, "acme", "s", 30, 1) // the same stream sequences, other data
	appendSpread(t, b, "acme", "s", evs[:25])
	must(t, a.Compact(ctx, "acme", "s"))
	got := snapBodies(t, js, "acme", "s")
	sameSnapshot(t, "compacted over another log", got, fromScratch(t, js, openLog(t, e), "acme", "s"))
	read, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	must(t, err)
	sameEvents(t, "read after compacting over another log", read, evs[:25])
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestCompactNewSessionReadsNoPayloads: the first compaction of a session
// (no snapshot yet, no tip remembered) copies the log's messages as stored:
// a payload stored by reference is not fetched from the object store, and
// the snapshot is the one a compaction from scratch leaves.
func TestCompactNewSessionReadsNoPayloads(t *testing.T) {
	e := startServer(t)
	js, _ := connect(t, e)
	ctx := ctxT(t)
	w := openLog(t, e)
	evs := bigTurn("acme", "s", 1200<<10) // two events by reference, 1.2 MiB each
	must(t, w.Append(ctx, "acme", "s", 0, evs))
	cjs, nc := connect(t, e)
	c, err := natslog.New(ctx, cjs)
	must(t, err)
	defer c.Close()
	before := nc.Stats()
	must(t, c.Compact(ctx, "acme", "s"))
	if got := nc.Stats().InBytes - before.InBytes; got > 64<<10 {
		t.Fatalf("the first compaction of a session received %d bytes: it fetched payloads stored by reference", got)
	}
	got := snapBodies(t, js, "acme", "s")
	if len(got) == 0 {
		t.Fatal("the first compaction wrote no snapshot")
	}
	sameSnapshot(t, "first compaction", got, fromScratch(t, js, openLog(t, e), "acme", "s"))
	read, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	must(t, err)
	sameEvents(t, "read from the first compaction's snapshot", read, evs)
}

// TestCompactWithoutTipAsksOnce: a Log that does not remember a session's
// snapshot tip (a restart, an eviction) compacts a session whose snapshot
// is current with two requests: the snapshot's chunks and the log's last
// message, each asked for once.
func TestCompactWithoutTipAsksOnce(t *testing.T) {
	e := startServer(t)
	ctx := ctxT(t)
	w := openLog(t, e)
	appendSpread(t, w, "acme", "s", chained(t, "acme", "s", 20, 0))
	must(t, w.Compact(ctx, "acme", "s"))
	js, nc := connect(t, e)
	tiny, err := natslog.New(ctx, js, natslog.WithSnapshotCache(1)) // remembers no tip
	must(t, err)
	defer tiny.Close()
	before := nc.Stats().OutMsgs
	must(t, tiny.Compact(ctx, "acme", "s"))
	if got := nc.Stats().OutMsgs - before; got != 2 {
		t.Fatalf("compacting a current snapshot without its tip sent %d requests, want 2 (its chunks, the log's last message)", got)
	}
}

// TestCompactDecodesNothing: a compaction copies the log's messages into
// the snapshot as stored, so what it allocates beyond fetching them does
// not grow with the events packed in each message (a one-call turn packs
// five): the snapshot is checked event by event where it is read, not
// where it is written. The floor is the same messages fetched with one
// plain batched direct get, measured in the same test (the client's and the
// embedded server's allocations for each reply are in both).
func TestCompactDecodesNothing(t *testing.T) {
	e := startServer(t)
	ctx := ctxT(t)
	w := openLog(t, e)
	const msgs, perMsg = 100, 8
	all := chained(t, "acme", "s", 2*msgs*perMsg, 200)
	evs, more := all[:msgs*perMsg], all[msgs*perMsg:]
	for i := 0; i < len(evs); i += perMsg {
		must(t, w.Append(ctx, "acme", "s", uint64(i), evs[i:i+perMsg]))
	}
	mallocs := func(f func()) uint64 {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.Mallocs - before.Mallocs
	}
	_, nc := connect(t, e)
	floor := mallocs(func() {
		if got := directGetAll(t, nc, natslog.DefaultStream, natslog.DefaultSubjectPrefix+".acme.s.>", msgs); got != msgs {
			t.Fatalf("the floor's direct get returned %d messages, want %d", got, msgs)
		}
	})
	c := openLog(t, e)
	first := mallocs(func() { must(t, c.Compact(ctx, "acme", "s")) })
	for i := 0; i < len(more); i += perMsg {
		must(t, w.Append(ctx, "acme", "s", more[i].Seq-1, more[i:i+perMsg]))
	}
	second := mallocs(func() { must(t, c.Compact(ctx, "acme", "s")) })
	// Decoding eight events cost about 85 allocations a message; the
	// compaction's own work beyond the floor (the log's last message, the
	// snapshot's writes, both sides of each) about 25.
	for _, c := range []struct {
		what string
		n    uint64
	}{{"the first compaction", first}, {"a compaction from the tip", second}} {
		if c.n > floor+40*msgs {
			t.Errorf("%s of %d messages allocated %d times, the plain direct get of them %d: it decodes the events it copies", c.what, msgs, c.n, floor)
		} else {
			t.Logf("%s of %d messages: %d allocations, the plain direct get of them %d", c.what, msgs, c.n, floor)
		}
	}
	read, err := openLog(t, e).Read(ctx, "acme", "s", 0)
	must(t, err)
	sameEvents(t, "read from the snapshot", read, all)
}

// directGetAll fetches up to n messages matching filter from stream with
// one batched direct get, decoding nothing, and says how many came.
func directGetAll(t *testing.T, nc *nats.Conn, stream, filter string, n int) int {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	must(t, err)
	defer func() { _ = sub.Unsubscribe() }()
	req := fmt.Sprintf(`{"seq":1,"next_by_subj":%q,"batch":%d}`, filter, n)
	must(t, nc.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, []byte(req)))
	got := 0
	for {
		m, err := sub.NextMsg(10 * time.Second)
		must(t, err)
		if m.Header.Get("Status") != "" {
			return got
		}
		got++
	}
}
