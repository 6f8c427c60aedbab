// Package supervise gives a component one owner for the goroutines it
// starts beside its main work (retries, watches, timers, fan-outs): they
// run under the Group's context, and Close cancels it and waits for them,
// so none outlives the component (litestream's store.go: the owner holds
// the cancel func and the wait).
package supervise

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Group owns goroutines. Its methods are safe for concurrent use; once
// Close is called it starts nothing more.
type Group struct {
	ctx    context.Context
	cancel context.CancelFunc
	eg     errgroup.Group

	mu     sync.Mutex
	closed bool
	timers map[*time.Timer]struct{}
}

// New returns an open Group.
func New() *Group {
	g := &Group{timers: map[*time.Timer]struct{}{}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	return g
}

// Context is the Group's context, cancelled by Close.
func (g *Group) Context() context.Context { return g.ctx }

// Go runs f in a goroutine the Group owns, with the Group's context; it
// reports false, and runs nothing, once the Group is closed.
func (g *Group) Go(f func(ctx context.Context)) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.eg.Go(func() error { f(g.ctx); return nil })
	return true
}

// After runs f, as Go does, once d has passed; Close stops the wait.
func (g *Group) After(d time.Duration, f func(ctx context.Context)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		g.mu.Lock()
		delete(g.timers, t)
		g.mu.Unlock()
		g.Go(f)
	})
	g.timers[t] = struct{}{}
}

// Close cancels the Group's context, stops its pending timers, and waits
// for its goroutines to end. Later calls return at once.
func (g *Group) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	for t := range g.timers {
		t.Stop()
	}
	g.timers = nil
	g.mu.Unlock()
	g.cancel()
	_ = g.eg.Wait()
}

// Each runs f for every item, at most limit at once (errgroup.SetLimit),
// and returns when all have ended: a bounded fan-out whose goroutines the
// caller owns for its duration.
func Each[T any](ctx context.Context, limit int, items []T, f func(ctx context.Context, item T)) {
	var eg errgroup.Group
	eg.SetLimit(max(limit, 1))
	for _, it := range items {
		eg.Go(func() error { f(ctx, it); return nil })
	}
	_ = eg.Wait()
}
