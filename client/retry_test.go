package client

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"", 0, false},
		{"2", 2 * time.Second, true},
		{" 0 ", 0, true},
		{"-1", 0, false},
		{"1.5", 0, false},
		{"99999999999", 0, false}, // out of range: not a wait we take
		{now.Add(3 * time.Second).Format(http.TimeFormat), 3 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Wednesday, 02-Dec-26 05:00:04 GMT", 4 * time.Second, true}, // RFC 850
		{"soon", 0, false},
	} {
		got, ok := retryAfter(http.Header{"Retry-After": {c.v}}, now)
		if got != c.want || ok != c.ok {
			t.Errorf("Retry-After %q: %s %t, want %s %t", c.v, got, ok, c.want, c.ok)
		}
	}
}

// FuzzRetryAfter: any header value gives no wait or a wait ≥ 0, and
// delay-seconds read as themselves.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"1", "120", "Wed, 02 Dec 2026 05:00:02 GMT", "Wednesday, 02-Dec-26 05:00:04 GMT", "Wed Dec  2 05:00:02 2026", "-3", "", "1e3"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d, ok := retryAfter(http.Header{"Retry-After": {v}}, now)
		if d < 0 || !ok && d != 0 {
			t.Fatalf("%q: %s %t", v, d, ok)
		}
		if n, err := strconv.ParseUint(v, 10, 32); err == nil && (!ok || d != time.Duration(n)*time.Second) {
			t.Fatalf("%q: %s %t, want %d s", v, d, ok, n)
		}
	})
}
