package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBackoffDelay: exponential from Initial, capped at Max, jittered
// within its bounds; a factor below 1 is a fixed wait.
func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond, Factor: 2}
	for n, want := range []time.Duration{10, 10, 20, 40, 50, 50} {
		if n == 0 {
			continue
		}
		if got := b.Delay(n); got != want*time.Millisecond {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want*time.Millisecond)
		}
	}
	if got := (Backoff{Initial: time.Second}).Delay(5); got != time.Second {
		t.Errorf("fixed Delay(5) = %s, want 1s", got)
	}
	j := Backoff{Initial: 100 * time.Millisecond, Factor: 1, Jitter: 0.2}
	for range 200 {
		if d := j.Delay(3); d < 80*time.Millisecond || d > 120*time.Millisecond {
			t.Fatalf("jittered Delay = %s, want within ±20%% of 100ms", d)
		}
	}
}

// TestDo: Do stops at success, at a Permanent error (unmarked), at its
// attempts, and when its context ends while it waits.
func TestDo(t *testing.T) {
	ctx := context.Background()
	fast := Backoff{Initial: time.Millisecond}
	boom := errors.New("boom")
	calls := 0
	if err := Do(ctx, fast, 0, func(_ context.Context, n int) error {
		calls++
		if n < 3 {
			return boom
		}
		return nil
	}); err != nil || calls != 3 {
		t.Fatalf("Do = %v after %d calls, want nil after 3", err, calls)
	}
	calls = 0
	if err := Do(ctx, fast, 0, func(context.Context, int) error { calls++; return Permanent(boom) }); err != boom || calls != 1 {
		t.Fatalf("permanent: Do = %v after %d calls, want boom itself after 1", err, calls)
	}
	calls = 0
	if err := Do(ctx, fast, 4, func(context.Context, int) error { calls++; return boom }); !errors.Is(err, boom) || calls != 4 {
		t.Fatalf("bounded: Do = %v after %d calls, want boom after 4", err, calls)
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Do(cctx, Backoff{Initial: time.Hour}, 0, func(context.Context, int) error { return boom })
	if !errors.Is(err, boom) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("ended context: Do = %v after %s, want boom and the deadline, at once", err, time.Since(start))
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
}
