package natslog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Group commit: the appends of several sessions that are in flight together
// share one write (docs/performance.md, "Group commit").
//
// Why: with SyncAlways an R1 file store fsyncs every message on its own, so
// however many sessions append at once the log stores about one message per
// fsync. An atomic batch (Nats-Batch-Id …) may span subjects, and the server
// fsyncs its commit once (nats-server 2.15.2 stream.go, the R1 commit path
// with coalesceSync). A batch has a fixed cost too (the server stages it in
// a file store of its own), so it pays only when enough appends wait:
// bench groupcommit/fsync measured 0.43× the separate publishes with 16
// sessions (8 appends a batch), 2.2× with 64 and 8× with 256.
//
// How: an Append counts itself in flight; when at least cfg.group appends
// are, it hands its messages to the Log's committer goroutine instead of
// publishing them. The committer takes every append waiting (up to MaxAppend
// messages) and, when they are at least minGroupBatch, publishes them as one
// atomic batch: each append's messages in order, its first message carrying
// its own session guard (Nats-Expected-Last-Subject-Sequence on its session
// filter) and every message its own Nats-Msg-Id, so each append is checked
// exactly as alone; a batch holds at most one append of a session (the
// server caches a guard's check within a batch, so two appends guarded on
// the same last sequence would both pass). The batch is all or nothing: when it is refused (one
// stale guard, one duplicate id) or fails, every append in it is published
// again on its own, where a refusal is settled as always (Log.settle). Fewer
// waiting than minGroupBatch are published on their own too.

// groupQueue bounds the appends waiting for the committer; an Append that
// finds it full waits (its context bounds the wait).
const groupQueue = 4096

// minGroupBatch is the fewest appends the committer stores as one batch;
// fewer waiting are published on their own, at once.
func (l *Log) minGroupBatch() int { return max(2, l.cfg.group/2) }

// groupItem is one Append waiting for the committer.
type groupItem struct {
	key  string // the session's, tenant.session
	msgs []*nats.Msg
	done chan groupDone
}

// groupDone is the committer's answer: the append's ack, or alone when the
// append must be published on its own.
type groupDone struct {
	ack   pubAck
	alone bool
}

// publish stores one append's guarded messages: on their own (one message,
// or an atomic batch of them), or in a group commit when enough appends are
// in flight.
func (l *Log) publish(ctx context.Context, key string, msgs []*nats.Msg) (pubAck, error) {
	if l.group == nil {
		return l.publishAlone(ctx, msgs)
	}
	n := l.inflight.Add(1)
	defer l.inflight.Add(-1)
	if n < int64(l.cfg.group) {
		return l.publishAlone(ctx, msgs)
	}
	it := groupItem{key: key, msgs: msgs, done: make(chan groupDone, 1)}
	select {
	case l.group <- it:
	case <-ctx.Done():
		return pubAck{}, ctx.Err()
	case <-l.ctx.Done():
		return pubAck{}, ErrClosed
	}
	select {
	case d := <-it.done:
		if d.alone {
			return l.publishAlone(ctx, msgs)
		}
		return d.ack, nil
	case <-l.ctx.Done():
		return pubAck{}, ErrClosed
	case <-ctx.Done():
		// The batch may still be stored: a retried Append settles it, as
		// after a lost acknowledgement.
		return pubAck{}, ctx.Err()
	}
}

func (l *Log) publishAlone(ctx context.Context, msgs []*nats.Msg) (pubAck, error) {
	if len(msgs) == 1 {
		return l.publishOne(ctx, msgs[0])
	}
	return l.publishBatch(ctx, msgs)
}

// commitGroups is the committer goroutine, owned by the Log: it ends when
// the Log is closed.
func (l *Log) commitGroups() {
	defer l.wg.Done()
	// held: taken from the queue but not in the batch (over its limit, or
	// of a session the batch has already): the next batch starts with it.
	var held []groupItem
	for {
		var batch []groupItem
		size := 0
		sessions := map[string]bool{}
		full := false
		add := func(it groupItem) {
			switch {
			case len(batch) > 0 && size+len(it.msgs) > MaxAppend:
				held, full = append(held, it), true
			case sessions[it.key]:
				held = append(held, it)
			default:
				sessions[it.key] = true
				batch, size = append(batch, it), size+len(it.msgs)
			}
		}
		if len(held) > 0 {
			h := held
			held = nil
			for _, it := range h {
				add(it)
			}
		} else {
			select {
			case it := <-l.group:
				add(it)
			case <-l.ctx.Done():
				return
			}
		}
	drain:
		for !full && size < MaxAppend {
			select {
			case it := <-l.group:
				add(it)
			default:
				break drain
			}
		}
		if len(batch) < l.minGroupBatch() {
			for _, it := range batch {
				it.done <- groupDone{alone: true}
			}
			continue
		}
		acks, err := l.commitGroup(batch, size)
		for i, it := range batch {
			if err != nil {
				it.done <- groupDone{alone: true}
				continue
			}
			it.done <- groupDone{ack: acks[i]}
		}
		if err == nil {
			l.groups.Add(1)
		}
	}
}

// commitGroup publishes the appends of batch (size messages in all) as one
// atomic batch and returns each append's ack: the stream sequence of its
// last message. A batch is stored contiguously, so the sequences count back
// from the commit's; a wrong count only makes the session's next guard miss
// the cache, and the server checks the guard anyway.
func (l *Log) commitGroup(batch []groupItem, size int) ([]pubAck, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.cfg.timeout)
	defer cancel()
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	k := 0
	var last *nats.Msg
	for _, it := range batch {
		for _, m := range it.msgs {
			k++
			// A copy: an append published alone after a refused batch
			// must not carry the batch's headers.
			c := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: make(nats.Header, len(m.Header)+3)}
			for h, v := range m.Header {
				c.Header[h] = v
			}
			c.Header[hdrBatchID] = []string{id}
			c.Header[hdrBatchSeq] = []string{strconv.Itoa(k)}
			if k == size {
				c.Header[hdrBatchCommit] = []string{"1"}
				last = c
				break
			}
			if err := l.nc.PublishMsg(c); err != nil {
				return nil, fmt.Errorf("group commit message %d: %w", k, err)
			}
		}
	}
	resp, err := l.nc.RequestMsgWithContext(ctx, last)
	if err != nil {
		return nil, fmt.Errorf("group commit: %w", err)
	}
	ack, err := decodeAck(resp.Data, l.ackPrefix, l.cfg.stream)
	if err != nil {
		return nil, fmt.Errorf("group commit: %w", err)
	}
	if ack.Count != size {
		return nil, fmt.Errorf("group commit: ack %q for %d messages", resp.Data, size)
	}
	acks := make([]pubAck, len(batch))
	end := 0
	for i, it := range batch {
		end += len(it.msgs)
		acks[i] = pubAck{Stream: ack.Stream, Sequence: ack.Sequence - uint64(size-end)}
	}
	return acks, nil
}

// groupStats is how many group commits the Log has stored, for tests.
func (l *Log) groupStats() int64 { return l.groups.Load() }
