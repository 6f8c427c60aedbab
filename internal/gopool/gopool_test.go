package gopool

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestGoRunsEachOnceConcurrently: every function runs exactly once, and a
// function that blocks does not hold up the others (Go never queues).
func TestGoRunsEachOnceConcurrently(t *testing.T) {
	p := New(time.Minute)
	release := make(chan struct{})
	var blocked sync.WaitGroup
	blocked.Add(1)
	p.Go(func() { blocked.Done(); <-release })
	blocked.Wait()
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 1000 {
		wg.Add(1)
		p.Go(func() { ran.Add(1); wg.Done() })
	}
	wg.Wait() // would hang if a function waited behind the blocked one
	if got := ran.Load(); got != 1000 {
		t.Fatalf("ran %d functions, want 1000", got)
	}
	close(release)
	p.Close()
}

// TestWorkersAreReused: a worker that finished a function waits for the
// next one, and runs it, instead of ending.
func TestWorkersAreReused(t *testing.T) {
	p := New(time.Hour)
	defer p.Close()
	for i := range 100 {
		done := make(chan struct{})
		f := func() { close(done) }
		if i == 0 {
			p.Go(f)
		} else {
			select {
			case p.work <- f: // only a waiting worker takes it
			case <-time.After(30 * time.Second):
				t.Fatalf("function %d: no worker waited for it", i)
			}
		}
		<-done
	}
	if got := p.started.Load(); got != 1 {
		t.Fatalf("started %d workers for 100 functions one after another, want 1", got)
	}
}

// TestCloseWaitsAndEndsWorkers: Close returns after every running function
// has returned and the idle workers have ended.
func TestCloseWaitsAndEndsWorkers(t *testing.T) {
	p := New(time.Hour)
	var done atomic.Bool
	started := make(chan struct{})
	p.Go(func() { close(started); time.Sleep(50 * time.Millisecond); done.Store(true) })
	<-started
	p.Close()
	if !done.Load() {
		t.Fatal("Close returned before the running function did")
	}
}

// TestIdleWorkersEnd: a worker with nothing to do ends after the idle time.
func TestIdleWorkersEnd(t *testing.T) {
	p := New(time.Millisecond)
	p.Go(func() {})
	ended := make(chan struct{})
	go func() { p.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("an idle worker did not end")
	}
	p.Close()
}

// TestGoAfterClose: a function handed over after Close still runs.
func TestGoAfterClose(t *testing.T) {
	p := New(time.Minute)
	p.Close()
	done := make(chan struct{})
	p.Go(func() { close(done) })
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("a function given after Close never ran")
	}
}
