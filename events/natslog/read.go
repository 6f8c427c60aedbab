package natslog

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/events"
)

// readBatch is how many messages one direct get returns at most.
const readBatch = 256

// lagRetry is the pause before asking again when a direct get is answered by
// a replica that has not yet stored what the leader reported.
const lagRetry = 2 * time.Millisecond

// storedEvent is an event and its stream sequence. ref is set for an event
// stored by reference whose Data lastStored left unresolved.
type storedEvent struct {
	ev   events.Event
	sseq uint64
	ref  *PayloadRef
	msg  []byte // the whole message's data, where lastStored set it
}

// lastStored asks the stream leader (not a direct-get replica) for the last
// message matching filter, so every acknowledged append is visible.
func (l *Log) lastStored(ctx context.Context, filter string) (storedEvent, bool, error) {
	m, found, err := leaderGet(ctx, l.nc, l.api, l.cfg.stream, lastBySubject{filter})
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("get last message of %s: %w", filter, err)
		}
		return storedEvent{}, false, err
	}
	// Only the last event, not resolved: the guard needs its Seq only
	// (Last resolves what it returns).
	last, err := decodeLastStored(m.Data)
	if err != nil {
		return storedEvent{}, false, fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, m.Sequence, err)
	}
	return storedEvent{ev: last.ev, sseq: m.Sequence, ref: last.ref, msg: m.Data}, true, nil
}

// logMsg is one message of the log as a direct get returned it: its stream
// sequence, its data as stored, and its events (or, unresolved, stored).
type logMsg struct {
	sseq   uint64
	data   []byte
	evs    []events.Event
	stored []stored
}

// directBatch returns up to n messages matching filter from stream sequence
// start on, with one batched direct get, their events resolved.
func (l *Log) directBatch(ctx context.Context, start uint64, filter string, n int) ([]logMsg, error) {
	return l.directGet(ctx, start, filter, n, 0, decodeResolved)
}

// decodeAs is how far directGet decodes the messages it returns.
type decodeAs int

const (
	decodeRaw      decodeAs = iota // not at all: data and sseq (a compaction copies them as stored)
	decodeStoredAs                 // events as stored, references not fetched (logMsg.stored)
	decodeResolved                 // events with their payloads fetched (logMsg.evs)
)

// directGet returns up to n messages matching filter from stream sequence
// start on, with one batched direct get of at most maxBytes (0: the
// server's default), decoded as as says.
func (l *Log) directGet(ctx context.Context, start uint64, filter string, n, maxBytes int, as decodeAs) ([]logMsg, error) {
	inbox := l.nc.NewRespInbox()
	sub, err := l.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, _ := json.Marshal(struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes,omitempty"`
	}{start, filter, n, maxBytes})
	if err := l.nc.PublishRequest(l.api+"DIRECT.GET."+l.cfg.stream, inbox, req); err != nil {
		return nil, err
	}
	var out []logMsg
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("direct get %s from %d: %w", filter, start, err)
		}
		switch st := m.Header.Get("Status"); st {
		case "":
		case "204", "404": // end of batch, or nothing from start on
			return out, nil
		case "503":
			return nil, fmt.Errorf("direct get %s: %w", filter, jetstream.ErrNoStreamResponse)
		default:
			return nil, fmt.Errorf("direct get %s from %d: status %s %s", filter, start, st, m.Header.Get("Description"))
		}
		sseq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("direct get %s: bad %s header %q", filter, jetstream.SequenceHeader, m.Header.Get(jetstream.SequenceHeader))
		}
		switch as {
		case decodeRaw:
			out = append(out, logMsg{sseq: sseq, data: m.Data})
			continue
		case decodeStoredAs:
			ss, err := decodeStored(m.Data)
			if err != nil {
				return nil, fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, sseq, err)
			}
			out = append(out, logMsg{sseq: sseq, data: m.Data, stored: ss})
			continue
		}
		evs, err := l.decodeMsg(ctx, m.Data)
		if err != nil {
			return nil, fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, sseq, err)
		}
		out = append(out, logMsg{sseq: sseq, data: m.Data, evs: evs})
	}
}

// read returns up to limit (0 = all) events of the session with Seq > after,
// as of the session's last message when the read started, and brings the
// session's snapshot up to date when it read at least snapMinTail messages
// past it (snapshot.go).
func (l *Log) read(ctx context.Context, tenant, session string, after uint64, limit int) ([]storedEvent, error) {
	return l.readSnap(ctx, tenant, session, after, limit, snapMinTail, true, false, nil)
}

// readSnap is read, extending the snapshot after minTail messages read from
// the log past it; useSnap false reads the log alone, and again says the
// snapshot was rejected once already; loaded, when set, is the snapshot
// as the caller just loaded it (loadSnapshot), not asked for again. A read
// that starts from a cached
// position past after reads the log's tail alone too: it is recent, and
// short.
func (l *Log) readSnap(ctx context.Context, tenant, session string, after uint64, limit, minTail int, useSnap, again bool, loaded *snapLoad) ([]storedEvent, error) {
	key, filter := sessionKey(tenant, session), l.sessionFilter(tenant, session)
	want := limit
	start := uint64(1)
	if p, ok := l.cached(key); ok && p.seq <= after {
		start, useSnap = p.sseq+1, false // every event with Seq > after is past p
	}
	last, found, err := l.lastStored(ctx, filter)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, nil
	}
	l.remember(key, position{seq: last.ev.Seq, sseq: last.sseq})
	if last.ev.Seq <= after {
		return nil, nil
	}
	var (
		out  []storedEvent
		snap snapPrefix
	)
	if useSnap {
		var chunks []snapChunk
		var guard uint64
		if loaded != nil {
			chunks, guard = loaded.chunks, loaded.guard
		} else if chunks, guard, err = l.loadSnapshot(ctx, tenant, session); err != nil {
			chunks = nil // the log alone
		}
		if snap, err = l.snapEvents(ctx, tenant, session, chunks, last.sseq); err != nil {
			return nil, err
		}
		if snap.bad || snap.upto == last.sseq && !bytes.Equal(snap.last, last.msg) {
			return l.snapRejected(ctx, tenant, session, after, want, minTail, again)
		}
		snap.chunks, snap.guard = chunks, guard
		for _, se := range snap.evs {
			if se.ev.Seq > after && (limit == 0 || len(out) < limit) {
				out = append(out, se)
			}
		}
		if snap.upto == last.sseq {
			if !snap.cut {
				l.tips.put(key, tipOf(snap.chunks, snap.guard, snap.upto, snap.last))
			}
			return out, nil // checked against last above
		}
		if snap.upto > 0 {
			// Read the snapshot's last message again: it must be the log's.
			start = snap.upto
		}
	}
	if limit > 0 && len(out) == limit {
		limit = -1 // full from the snapshot: check it, then stop
	}
	var tail []snapEntry
	checked := snap.upto == 0
	// extend writes the tail into the snapshot, once the snapshot's last
	// message was matched in the log, and remembers the snapshot's tip.
	extend := func() {
		if !useSnap || snap.cut {
			return
		}
		tip := tipOf(snap.chunks, snap.guard, snap.upto, snap.last)
		if len(tail) >= minTail {
			// Best effort: a snapshot that is not written is written by a
			// later read.
			var err error
			if tip, err = l.extendSnapshot(ctx, tenant, session, tip, tail); err != nil {
				return
			}
		}
		if tip.upto > 0 {
			l.tips.put(key, tip)
		}
	}
	for start <= last.sseq {
		batch, err := l.directBatch(ctx, start, filter, readBatch)
		if err != nil {
			return nil, err
		}
		if len(batch) == 0 {
			// A replica behind the leader answered; wait for it.
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("read %s/%s: stream seq %d not yet readable: %w", tenant, session, last.sseq, ctx.Err())
			case <-time.After(lagRetry):
			}
			continue
		}
		for _, m := range batch {
			if m.sseq > last.sseq {
				extend()
				return out, nil
			}
			start = m.sseq + 1
			if !checked {
				if m.sseq != snap.upto || !bytes.Equal(m.data, snap.last) {
					return l.snapRejected(ctx, tenant, session, after, want, minTail, again)
				}
				checked = true
				if limit < 0 {
					extend() // nothing read past it: remembers the tip
					return out, nil
				}
				continue
			}
			tail = append(tail, snapEntry{sseq: m.sseq, data: m.data})
			for _, ev := range m.evs {
				if ev.Seq > after {
					out = append(out, storedEvent{ev: ev, sseq: m.sseq})
					if limit > 0 && len(out) == limit {
						extend()
						return out, nil
					}
				}
			}
		}
	}
	extend()
	return out, nil
}

// snapRejected reads the session from the log alone after its snapshot
// turned out not to be this log's (a stream made again, a chunk damaged or
// forged). It drops the snapshot first, so that this read writes it again
// from the start; a second rejection, or a failed drop, reads the log
// without it.
func (l *Log) snapRejected(ctx context.Context, tenant, session string, after uint64, limit, minTail int, again bool) ([]storedEvent, error) {
	rebuild := !again && l.dropSnapshot(ctx, tenant, session) == nil
	return l.readSnap(ctx, tenant, session, after, limit, minTail, rebuild, true, nil)
}

// Read returns the session's events with Seq > after, in order, as stored
// when the read started. A session without events gives an empty slice and
// no error. Errors wrap ErrInvalidID, or the server's error.
func (l *Log) Read(ctx context.Context, tenant, session string, after uint64) ([]events.Event, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return nil, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	stored, err := l.read(ctx, tenant, session, after, 0)
	if err != nil {
		return nil, fmt.Errorf("read %s/%s after %d: %w", tenant, session, after, err)
	}
	out := make([]events.Event, len(stored))
	for i, se := range stored {
		out[i] = se.ev
	}
	return out, nil
}

// Scan bounds: one batch of a scan holds at most scanBatch messages of at
// most scanBytes bytes in all, and a payload stored by reference is fetched
// only when its event is handed on, so a scan holds about one batch and one
// payload at a time.
const (
	scanBatch = 64
	scanBytes = 4 << 20
)

// Scan calls fn with the session's events with Seq > after, in order, as
// stored when the scan started, reading the log in batches (scanBatch
// messages, scanBytes bytes) with a timeout each (WithTimeout), so a session
// of any size is read in bounded memory and time per batch: Read holds the
// whole session. Scan reads the log alone, not the session's snapshot. It
// stops at fn's first error and returns it; other errors wrap ErrInvalidID
// or are the server's. A session without events calls fn never.
func (l *Log) Scan(ctx context.Context, tenant, session string, after uint64, fn func(events.Event) error) error {
	if err := ValidateIDs(tenant, session); err != nil {
		return err
	}
	key, filter := sessionKey(tenant, session), l.sessionFilter(tenant, session)
	lctx, cancel := l.withTimeout(ctx)
	last, found, err := l.lastStored(lctx, filter)
	cancel()
	if err != nil || !found || last.ev.Seq <= after {
		return err
	}
	start := uint64(1)
	if p, ok := l.cached(key); ok && p.seq <= after {
		start = p.sseq + 1 // every event with Seq > after is past p
	}
	l.remember(key, position{seq: last.ev.Seq, sseq: last.sseq})
	return l.scan(ctx, tenant, session, after, start, last.sseq, fn)
}

// scan is Scan from stream sequence start (1, or past a position known to
// hold no event with Seq > after) up to the session's message at stream
// sequence last.
func (l *Log) scan(ctx context.Context, tenant, session string, after, start, last uint64, fn func(events.Event) error) error {
	filter := l.sessionFilter(tenant, session)
	for start <= last {
		bctx, cancel := l.withTimeout(ctx)
		batch, err := l.directGet(bctx, start, filter, scanBatch, scanBytes, decodeStoredAs)
		cancel()
		if err != nil {
			return fmt.Errorf("scan %s/%s from stream seq %d: %w", tenant, session, start, err)
		}
		if len(batch) == 0 {
			// A replica behind the leader answered; wait for it.
			select {
			case <-ctx.Done():
				return fmt.Errorf("scan %s/%s: stream seq %d not yet readable: %w", tenant, session, last, ctx.Err())
			case <-time.After(lagRetry):
			}
			continue
		}
		for _, m := range batch {
			if m.sseq > last {
				return nil
			}
			start = m.sseq + 1
			for _, st := range m.stored {
				if st.ev.Seq <= after {
					continue
				}
				rctx, cancel := l.withTimeout(ctx)
				ev, err := l.resolve(rctx, st)
				cancel()
				if err != nil {
					return fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, m.sseq, err)
				}
				if err := fn(ev); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// Watch delivers the session's events with Seq > after, in order, then live
// ones, on a channel of capacity WithWatchBuffer. The channel closes when ctx
// ends, Close is called, or the log fails (a lost consumer or an undecodable
// event); the goroutine behind it has ended by then or ends promptly, and
// deletes the watch's consumer on the server as it ends. Errors wrap
// ErrInvalidID or ErrClosed, or are the server's.
func (l *Log) Watch(ctx context.Context, tenant, session string, after uint64) (<-chan events.Event, error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return nil, err
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{l.sessionFilter(tenant, session)},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	key := sessionKey(tenant, session)
	// The history, if any, is scanned in bounded batches by the watch's
	// goroutine up to the session's last message as of now (histEnd), and
	// the consumer starts after it, so a session of any size is watched in
	// bounded memory.
	var histAfter, histStart, histEnd uint64
	if p, ok := l.cached(key); ok && p.seq <= after {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, p.sseq+1
	} else {
		lctx, lcancel := l.withTimeout(ctx)
		last, found, err := l.lastStored(lctx, l.sessionFilter(tenant, session))
		lcancel()
		if err != nil {
			return nil, fmt.Errorf("watch %s/%s: %w", tenant, session, err)
		}
		if found {
			l.remember(key, position{seq: last.ev.Seq, sseq: last.sseq})
			if last.ev.Seq > after {
				histAfter, histStart, histEnd = after, 1, last.sseq
			}
			after = max(after, last.ev.Seq)
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, last.sseq+1
		}
	}
	cctx, ccancel := l.withTimeout(ctx)
	cons, err := l.js.OrderedConsumer(cctx, l.cfg.stream, cfg)
	ccancel()
	if err != nil {
		return nil, fmt.Errorf("watch %s/%s: %w", tenant, session, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("watch %s/%s: %w", tenant, session, err)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		it.Stop()
		return nil, ErrClosed
	}
	l.wg.Add(1) // under mu, so Close cannot be waiting yet
	l.mu.Unlock()
	out := make(chan events.Event, l.cfg.watchBuffer)
	wctx, wcancel := context.WithCancel(ctx)
	stopOnClose := context.AfterFunc(l.ctx, wcancel)
	stopIter := context.AfterFunc(wctx, it.Stop)
	go func() {
		defer l.wg.Done()
		// Runs after the iterator stopped (the last defer below), so no
		// reset can swap the consumer meanwhile.
		defer l.dropConsumer(cons)
		defer close(out)
		defer stopOnClose()
		defer wcancel()
		defer func() {
			if stopIter() { // else the AfterFunc has stopped it already
				it.Stop()
			}
		}()
		if histEnd > 0 {
			err := l.scan(wctx, tenant, session, histAfter, histStart, histEnd, func(ev events.Event) error {
				select {
				case out <- ev:
					return nil
				case <-wctx.Done():
					return wctx.Err()
				}
			})
			if err != nil {
				return // ended, or the log failed: the channel closes
			}
		}
		last := after
		for {
			m, err := it.Next()
			if err != nil {
				return // stopped, or the consumer is lost: the channel closes
			}
			evs, err := l.decodeMsg(wctx, m.Data())
			if err != nil {
				return
			}
			for _, ev := range evs {
				if ev.Seq <= last {
					continue
				}
				last = ev.Seq
				select {
				case out <- ev:
				case <-wctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// dropConsumer deletes a finished watch's ordered consumer on the server.
// nats.go's Stop leaves it there until its inactivity threshold (5 minutes),
// so every SSE client that went away would hold a consumer that long
// (docs/operations.md, "Event streams"). A consumer already gone is fine; a
// failure only leaves it to the threshold. The watch's own context has
// ended by now, so this has its own short timeout.
func (l *Log) dropConsumer(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), watchDropTimeout)
	defer cancel()
	_ = l.js.DeleteConsumer(ctx, l.cfg.stream, info.Name)
}

// watchDropTimeout bounds deleting a finished watch's consumer, which Close
// waits for.
const watchDropTimeout = 2 * time.Second

// Last returns the session's last stored event; ok is false for a session
// without events. A node uses it at start to find the sessions with work
// left without reading every log.
func (l *Log) Last(ctx context.Context, tenant, session string) (ev events.Event, ok bool, err error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return events.Event{}, false, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	st, ok, err := l.lastStored(ctx, l.sessionFilter(tenant, session))
	if err != nil || !ok {
		return events.Event{}, ok, err
	}
	ev, err = l.resolve(ctx, stored{ev: st.ev, ref: st.ref})
	return ev, err == nil, err
}

// First returns the session's first stored event; ok is false for a session
// without events. It reads one message (the session's first), so the rule
// a session is chained by (events.ChainOf) is found without reading its log.
func (l *Log) First(ctx context.Context, tenant, session string) (ev events.Event, ok bool, err error) {
	if err := ValidateIDs(tenant, session); err != nil {
		return events.Event{}, false, err
	}
	ctx, cancel := l.withTimeout(ctx)
	defer cancel()
	filter := l.sessionFilter(tenant, session)
	m, found, err := leaderGet(ctx, l.nc, l.api, l.cfg.stream, nextBySubject{1, filter})
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("get first message of %s: %w", filter, err)
		}
		return events.Event{}, false, err
	}
	ss, err := decodeStored(m.Data)
	if err != nil {
		return events.Event{}, false, fmt.Errorf("stream %s seq %d: %w", l.cfg.stream, m.Sequence, err)
	}
	ev, err = l.resolve(ctx, ss[0])
	return ev, err == nil, err
}
