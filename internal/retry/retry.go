// Package retry is callsheet's one way of trying something again: an
// exponential Backoff, and Do, which calls a function until it succeeds,
// says it never will (Permanent), runs out of attempts, or its context
// ends.
package retry

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between tries: Initial after the first failure,
// multiplied by Factor after each one (Factor below 1 counts as 1: a fixed
// wait), at most Max (0: no cap), each wait spread by ±Jitter (0.2 is
// ±20%) so that many callers do not retry in step. The zero value waits
// nothing.
type Backoff struct {
	Initial, Max time.Duration
	Factor       float64
	Jitter       float64
}

// Delay is the wait after failed attempt n (n ≥ 1) before the next:
// Initial·Factor^(n-1), capped at Max, jittered.
func (b Backoff) Delay(n int) time.Duration {
	d := float64(b.Initial) * math.Pow(max(b.Factor, 1), float64(max(n-1, 0)))
	if b.Max > 0 {
		d = min(d, float64(b.Max))
	}
	if b.Jitter > 0 {
		d *= 1 - b.Jitter + 2*b.Jitter*rand.Float64()
	}
	return time.Duration(d)
}

// permanent marks an error Do does not retry.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// Permanent marks err as one no retry can fix: Do returns it (unmarked) at
// once. nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Do calls f with attempt 1, 2, ... until it returns nil or a Permanent
// error, attempts calls were made (0: no bound), or ctx ends, waiting
// b.Delay(n) after failed attempt n. It returns nil, or f's last error
// (Permanent's mark removed); when ctx ends while it waits, f's last error
// joined with ctx's.
func Do(ctx context.Context, b Backoff, attempts int, f func(ctx context.Context, attempt int) error) error {
	for n := 1; ; n++ {
		err := f(ctx, n)
		var p permanent
		switch {
		case err == nil:
			return nil
		case errors.As(err, &p):
			return p.error
		case attempts > 0 && n >= attempts, ctx.Err() != nil:
			return err
		}
		if !Sleep(ctx, b.Delay(n)) {
			return errors.Join(err, ctx.Err())
		}
	}
}

// Sleep waits d, or until ctx ends; it reports whether it waited d.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
