package client

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// retryPolicy is how a request that may be sent again is: for For after
// its first failure, at most Max times (-1: no cap), waiting what the
// answer's Retry-After says (and up to a tenth more) or else Backoff
// doubling to MaxBackoff, jittered down by up to half, so that clients
// refused together do not come back together.
type retryPolicy struct {
	For        time.Duration
	Backoff    time.Duration
	MaxBackoff time.Duration
	Max        int
}

// retryState is one request's retries.
type retryState struct {
	p     retryPolicy
	first time.Time // of the first failure; zero before it
	tries int
	next  time.Duration
}

func (p retryPolicy) start() *retryState { return &retryState{p: p, next: p.Backoff} }

// retryable reports whether an answer says to come back: a 503 (a node
// answers it before it acts, and during a takeover), or a 429 that names
// when (a limit that waiting does not lift names no Retry-After).
func retryable(status int, h http.Header) bool {
	if status == http.StatusServiceUnavailable {
		return true
	}
	_, ok := retryAfter(h, time.Now())
	return status == http.StatusTooManyRequests && ok
}

// gateway reports whether an answer came from a proxy whose upstream failed
// (502, 504): the request may or may not have reached the node, as with a
// dropped connection, so it is sent again only where a drop would be.
func gateway(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusGatewayTimeout
}

// wait sleeps before the next try of a request that failed, and reports
// whether to try again: false once the budget is spent, when the wait would
// end past it or past ctx's deadline, or when ctx ends meanwhile.
func (r *retryState) wait(ctx context.Context, h http.Header) bool {
	now := time.Now()
	if r.first.IsZero() {
		r.first = now
	}
	if r.p.Max >= 0 && r.tries >= r.p.Max {
		return false
	}
	d, ok := retryAfter(h, now)
	if ok {
		d = max(d, r.p.Backoff)
		d += rand.N(d/10 + 1) // later by up to a tenth, never sooner
	} else {
		d = r.next/2 + rand.N(r.next/2+1)
		r.next = min(2*r.next, r.p.MaxBackoff)
	}
	if now.Add(d).After(r.first.Add(r.p.For)) {
		return false
	}
	if dl, ok := ctx.Deadline(); ok && now.Add(d).After(dl) {
		return false
	}
	r.tries++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// progressed starts the budget afresh: the request got somewhere (an event
// stream yielded events) before it failed again.
func (r *retryState) progressed() {
	r.first, r.tries, r.next = time.Time{}, 0, r.p.Backoff
}

// retryAfter reads a Retry-After header: delay-seconds, or an HTTP-date
// (RFC 9110 §10.2.3), from now. A date in the past is no wait.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(0, t.Sub(now)), true
	}
	return 0, false
}
