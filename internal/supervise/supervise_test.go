package supervise

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestCloseCancelsAndWaits: Close cancels what runs, waits for it to end,
// stops pending timers, and refuses what comes after.
func TestCloseCancelsAndWaits(t *testing.T) {
	g := New()
	var ended, fired atomic.Bool
	started := make(chan struct{})
	if !g.Go(func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond)
		ended.Store(true)
	}) {
		t.Fatal("Go refused on an open group")
	}
	g.After(time.Hour, func(context.Context) { fired.Store(true) })
	<-started
	g.Close()
	if !ended.Load() {
		t.Fatal("Close returned before its goroutine ended")
	}
	if g.Go(func(context.Context) { t.Error("ran after Close") }) {
		t.Fatal("Go accepted after Close")
	}
	g.After(0, func(context.Context) { fired.Store(true) })
	time.Sleep(20 * time.Millisecond)
	if fired.Load() {
		t.Fatal("a timer fired after Close")
	}
	g.Close()
}

// TestAfterRunsUnderTheGroup: a timer's function runs after its delay, and
// Close waits for it.
func TestAfterRunsUnderTheGroup(t *testing.T) {
	g := New()
	done := make(chan struct{})
	start := time.Now()
	g.After(30*time.Millisecond, func(context.Context) { close(done) })
	<-done
	if time.Since(start) < 30*time.Millisecond {
		t.Fatalf("ran after %s", time.Since(start))
	}
	g.Close()
}

// TestEachBoundsTheFanOut: never more than limit at once, every item once.
func TestEachBoundsTheFanOut(t *testing.T) {
	var running, peak, done atomic.Int64
	items := make([]int, 40)
	Each(context.Background(), 4, items, func(context.Context, int) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		done.Add(1)
	})
	if done.Load() != 40 || peak.Load() > 4 {
		t.Fatalf("ran %d of 40, at most %d at once; want 40, at most 4", done.Load(), peak.Load())
	}
}
