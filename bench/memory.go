package main

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/node"
)

// heap returns the live heap after the process settles and two collections.
func heap() uint64 {
	time.Sleep(200 * time.Millisecond) // let actors and acks settle
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func perItem(before, after uint64, n int) float64 {
	return (float64(after) - float64(before)) / float64(n)
}

// benchIdleSessions opens sessions through the node API and divides the live
// heap they add by their number. A tenth are opened first and not counted,
// so caches that fill once (block buffers, maps) are not charged to them.
func benchIdleSessions(ctx context.Context, s *suite) ([]sample, error) {
	n := s.cfg.IdleSessions
	warm := max(n/10, 1)
	// Room for every session it opens: the default limit of one tenant's
	// open sessions (limits.sessions_per_tenant, 10,000) is the size of the
	// full run, and the warm-up opens a tenth more.
	room := func(o *node.Options) {
		cfg := *o.Config
		cfg.Limits.SessionsPerTenant = max(cfg.Limits.SessionsPerTenant, warm+n)
		o.Config = &cfg
	}
	r, err := startNode(ctx, config.DurabilityInterval, room)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.open(ctx, warm, 32); err != nil {
		return nil, err
	}
	before := heap()
	if err := r.open(ctx, warm+n, 32); err != nil {
		return nil, err
	}
	after := heap()
	live := sample{name: "memory/session/idle-live", value: perItem(before, after, n), unit: "B", better: Lower,
		conditions: fmt.Sprintf("interval; live heap (after GC) added by %d sessions just opened via OpenSession, their actors still in memory; embedded JetStream included", n)}

	// The steady state of an idle session: its actor passivated (the node
	// keeps only its index record; the log holds the rest).
	r2, err := startNode(ctx, config.DurabilityInterval, room, func(o *node.Options) { o.IdleTimeout = 200 * time.Millisecond })
	if err != nil {
		return nil, err
	}
	defer r2.close()
	passivated := func() {
		deadline := time.Now().Add(60 * time.Second)
		for r2.n.LiveSessions() > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(1500 * time.Millisecond) // retired actors stop after a 1 s grace
	}
	if err := r2.open(ctx, warm, 32); err != nil {
		return nil, err
	}
	passivated()
	before = heap()
	if err := r2.open(ctx, warm+n, 32); err != nil {
		return nil, err
	}
	passivated()
	after = heap()
	return []sample{live, {name: "memory/session/idle", value: perItem(before, after, n), unit: "B", better: Lower,
		conditions: fmt.Sprintf("interval; live heap (after GC) added by %d idle sessions after their actors passivated (idle timeout 200ms), embedded JetStream included; target ≤ 4 KiB", n)}}, nil
}

// benchInflight holds calls of the block tool running, one per session, and
// divides the live heap they add by their number; after releasing them it
// reports what each completed turn leaves in its live session.
func benchInflight(ctx context.Context, s *suite) ([]sample, error) {
	r, err := startNode(ctx, config.DurabilityInterval)
	if err != nil {
		return nil, err
	}
	defer r.close()
	k := s.cfg.InflightCalls
	if err := r.open(ctx, k, 32); err != nil {
		return nil, err
	}
	before := heap()
	each := func(f func(i int) error) error {
		var eg errgroup.Group
		eg.SetLimit(16)
		for i := range k {
			eg.Go(func() error { return f(i) })
		}
		return eg.Wait()
	}
	turnID := func(i int) string { return "t" + strconv.Itoa(i) }
	if err := each(func(i int) error {
		_, err := r.n.SubmitTurn(ctx, tenant, r.sessions[i], turnID(i), oneCall(toolBlock), false)
		return err
	}); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(time.Minute)
	for r.block.running.Load() < int64(k) {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d blocked calls started within a minute", r.block.running.Load(), k)
		}
		time.Sleep(5 * time.Millisecond)
	}
	during := heap()
	r.block.open()
	if err := each(func(i int) error {
		_, err := r.n.SubmitTurn(ctx, tenant, r.sessions[i], turnID(i), oneCall(toolBlock), true)
		return err
	}); err != nil {
		return nil, err
	}
	after := heap()
	return []sample{
		{name: "memory/call/inflight", value: perItem(before, during, k), unit: "B", better: Lower,
			conditions: fmt.Sprintf("interval; live heap added by %d running calls (one per session, tool blocked until released): turn state, claim, tool actor goroutine", k)},
		{name: "memory/call/completed-turn", value: perItem(before, after, k), unit: "B", better: Lower,
			conditions: fmt.Sprintf("interval; live heap a completed one-call turn leaves in its (still open) session, %d sessions", k)},
	}, nil
}

// benchLongSession runs one-call turns in one session, one at a time, and
// divides the live heap they add by their number: what a session that keeps
// working holds for each turn it completed while its actor stays in memory.
// A tenth as many turns run first and are not counted, so caches that fill
// once are not charged to them.
func benchLongSession(ctx context.Context, s *suite) ([]sample, error) {
	r, err := startNode(ctx, config.DurabilityInterval)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.open(ctx, 1, 1); err != nil {
		return nil, err
	}
	n := max(s.cfg.SessionTurns, 10)
	for range n / 10 {
		if err := r.call(ctx, 0); err != nil {
			return nil, err
		}
	}
	before := heap()
	for range n {
		if err := r.call(ctx, 0); err != nil {
			return nil, err
		}
	}
	after := heap()
	return []sample{{name: "memory/turn/long-session", value: perItem(before, after, n), unit: "B", better: Lower,
		conditions: fmt.Sprintf("interval; live heap (after GC) %d one-call no-op turns add to their one open session, one at a time, after %d not counted; embedded JetStream included", n, n/10)}}, nil
}
