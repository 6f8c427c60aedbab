package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/config"
)

// groupSessions are the numbers of sessions writing at once in groupcommit.
var groupSessions = []int{1, 16, 64, 256}

// groupMsgBytes is one message's payload: about a one-call turn's second
// message (claim, outcome, commit, turn completion; docs/performance.md).
const groupMsgBytes = 1300

// benchGroupCommit asks whether several sessions' appends that are ready
// together should share one write with fsync (issue 14 item 2): n sessions
// each append guarded messages in a loop (the guard is the session's last
// stream sequence, as natslog's), either each as its own guarded publish (R1
// fsyncs each message on its own) or through one committer that takes every
// append waiting and stores them as one atomic batch spanning the sessions'
// subjects (nats-server 2.12+; the commit is fsynced once). The floor is the
// separate publishes: a ratio over 1 means the batch pays.
func benchGroupCommit(ctx context.Context, s *suite) ([]sample, error) {
	return groupCommitRows(ctx, s, config.DurabilityFsync)
}

// benchGroupCommitInterval asks the same without fsync: whether one atomic
// batch costs the server less than the separate guarded publishes it
// replaces, where no fsync is shared.
func benchGroupCommitInterval(ctx context.Context, s *suite) ([]sample, error) {
	return groupCommitRows(ctx, s, config.DurabilityInterval)
}

func groupCommitRows(ctx context.Context, s *suite, durability string) ([]sample, error) {
	var out []sample
	for _, n := range groupSessions {
		sep, err := groupRun(ctx, s, durability, n, false)
		if err != nil {
			return nil, fmt.Errorf("separate, %d sessions: %w", n, err)
		}
		bat, err := groupRun(ctx, s, durability, n, true)
		if err != nil {
			return nil, fmt.Errorf("batched, %d sessions: %w", n, err)
		}
		stored := "SyncAlways"
		if durability != config.DurabilityFsync {
			stored = "synced on the server's interval"
		}
		out = append(out, sample{
			name: fmt.Sprintf("groupcommit/%s/s%d", durability, n), value: bat.rate, unit: "appends/s", better: Higher, floor: sep.rate,
			conditions: fmt.Sprintf("%d sessions appending guarded %d B messages, %s, R1; value: one committer storing every waiting append as one atomic batch (mean %.1f appends per batch, p50 append %.0f µs); floor: each a guarded publish of its own (p50 %.0f µs)", n, groupMsgBytes, stored, bat.perBatch, bat.p50, sep.p50),
		})
	}
	return out, nil
}

type groupResult struct {
	rate     float64 // appends per second
	perBatch float64 // appends per write
	p50      float64 // µs per append
}

// groupAppend is one session's append waiting for the committer.
type groupAppend struct {
	msg  *nats.Msg
	done chan groupAck
}

type groupAck struct {
	seq uint64
	err error
}

func groupRun(ctx context.Context, s *suite, durability string, n int, batched bool) (groupResult, error) {
	srv, err := startServer(durability)
	if err != nil {
		return groupResult{}, err
	}
	defer srv.close()
	if _, err := srv.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "GROUP", Subjects: []string{"gc.>"}, Storage: jetstream.FileStorage, AllowAtomicPublish: true,
	}); err != nil {
		return groupResult{}, err
	}
	payload := make([]byte, groupMsgBytes)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	var writes atomic.Int64
	queue := make(chan groupAppend, n)
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	var cwg sync.WaitGroup
	if batched {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			groupCommitter(cctx, srv.nc, queue, &writes)
		}()
	}
	appendOne := func(m *nats.Msg) (uint64, error) {
		if !batched {
			writes.Add(1)
			ack, err := srv.js.PublishMsg(cctx, m)
			if err != nil {
				return 0, err
			}
			return ack.Sequence, nil
		}
		a := groupAppend{msg: m, done: make(chan groupAck, 1)}
		select {
		case queue <- a:
		case <-cctx.Done():
			return 0, cctx.Err()
		}
		select {
		case r := <-a.done:
			return r.seq, r.err
		case <-cctx.Done():
			return 0, cctx.Err()
		}
	}
	warm := s.cfg.Duration / 5
	var count atomic.Int64
	var measuring atomic.Bool
	lat := make([][]time.Duration, n)
	errc := make(chan error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			subj := fmt.Sprintf("gc.T.s%d.log", w)
			guard := fmt.Sprintf("gc.T.s%d.>", w)
			var last uint64
			for cctx.Err() == nil {
				m := nats.NewMsg(subj)
				m.Data = payload
				m.Header.Set("Nats-Expected-Last-Subject-Sequence", strconv.FormatUint(last, 10))
				m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", guard)
				t0 := time.Now()
				seq, err := appendOne(m)
				if err != nil {
					if cctx.Err() == nil {
						errc <- err
					}
					return
				}
				last = seq
				if measuring.Load() {
					count.Add(1)
					lat[w] = append(lat[w], time.Since(t0))
				}
			}
		}()
	}
	select {
	case <-time.After(warm):
	case err := <-errc:
		return groupResult{}, err
	}
	measuring.Store(true)
	w0 := writes.Load()
	start := time.Now()
	select {
	case <-time.After(s.cfg.Duration):
	case err := <-errc:
		return groupResult{}, err
	}
	measuring.Store(false)
	took, got, nw := time.Since(start), count.Load(), writes.Load()-w0
	stop()
	wg.Wait()
	cwg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	r := groupResult{rate: float64(got) / took.Seconds(), p50: us(percentile(all, 0.5))}
	if nw > 0 {
		r.perBatch = float64(got) / float64(nw)
	}
	return r, nil
}

// groupCommitter stores every append waiting in queue as one atomic batch
// (one alone as a plain guarded publish) and answers each with its stream
// sequence: a batch's messages are stored contiguously, ending at the
// commit's. A refused batch (one stale guard refuses all) is answered with
// the error for every append in it.
func groupCommitter(ctx context.Context, nc *nats.Conn, queue chan groupAppend, writes *atomic.Int64) {
	for {
		var batch []groupAppend
		select {
		case a := <-queue:
			batch = append(batch, a)
		case <-ctx.Done():
			return
		}
	drain:
		for len(batch) < 1000 {
			select {
			case a := <-queue:
				batch = append(batch, a)
			default:
				break drain
			}
		}
		writes.Add(1)
		last, err := groupPublish(ctx, nc, batch)
		for i, a := range batch {
			a.done <- groupAck{seq: last - uint64(len(batch)-1-i), err: err}
		}
	}
}

func groupPublish(ctx context.Context, nc *nats.Conn, batch []groupAppend) (uint64, error) {
	if len(batch) > 1 {
		var b [16]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		for i, a := range batch {
			a.msg.Header.Set("Nats-Batch-Id", id)
			a.msg.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
			if i < len(batch)-1 {
				if err := nc.PublishMsg(a.msg); err != nil {
					return 0, err
				}
			}
		}
		batch[len(batch)-1].msg.Header.Set("Nats-Batch-Commit", "1")
	}
	resp, err := nc.RequestMsgWithContext(ctx, batch[len(batch)-1].msg)
	if err != nil {
		return 0, err
	}
	var ack struct {
		Error *struct {
			Code        int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Seq   uint64 `json:"seq"`
		Count int    `json:"count"`
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, err
	}
	if ack.Error != nil {
		return 0, fmt.Errorf("error %d: %s", ack.Error.Code, ack.Error.Description)
	}
	if len(batch) > 1 && ack.Count != len(batch) {
		return 0, errors.New("batch ack counts " + strconv.Itoa(ack.Count) + " messages, want " + strconv.Itoa(len(batch)))
	}
	return ack.Seq, nil
}
