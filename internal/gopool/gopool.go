package gopool

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultIdle is how long a worker waits for its next function.
const DefaultIdle = 2 * time.Second

// Pool runs functions on reused goroutines. It is safe for concurrent use;
// its owner calls Close once nothing calls Go any more.
type Pool struct {
	work   chan func()
	idle   time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	started atomic.Int64 // workers started, for tests
}

// New returns a pool whose workers end after idle without work
// (DefaultIdle when idle ≤ 0).
func New(idle time.Duration) *Pool {
	if idle <= 0 {
		idle = DefaultIdle
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Pool{work: make(chan func()), idle: idle, ctx: ctx, cancel: cancel}
}

// Go runs f on a waiting worker, or on a new one if none waits: it never
// waits for a busy worker. After Close, f runs on a goroutine of its own,
// which Close does not wait for.
func (p *Pool) Go(f func()) {
	select {
	case p.work <- f:
		return
	default:
	}
	if p.ctx.Err() != nil {
		go f()
		return
	}
	p.wg.Add(1)
	p.started.Add(1)
	go p.worker(f)
}

func (p *Pool) worker(f func()) {
	defer p.wg.Done()
	t := time.NewTimer(p.idle)
	defer t.Stop()
	for {
		f()
		t.Reset(p.idle)
		select {
		case f = <-p.work:
		case <-t.C:
			return
		case <-p.ctx.Done():
			return
		}
	}
}

// Close ends the waiting workers and waits until every function started by
// Go has returned.
func (p *Pool) Close() {
	p.cancel()
	p.wg.Wait()
}
