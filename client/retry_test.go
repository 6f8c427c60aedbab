package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
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

// TestRetryRefusals: what an answer says about coming back is obeyed, by a
// real HTTP server counting the requests.
func TestRetryRefusals(t *testing.T) {
	for _, c := range []struct {
		name       string
		status     int
		retryAfter string
		want       int // requests
	}{
		{"a Retry-After past the budget ends the retries at once", 503, "3600", 1},
		{"a 429 without Retry-After is the caller's", 429, "", 1},
		{"a 429 with Retry-After is sent again", 429, "0", 3},
		{"a 503 without Retry-After is sent again", 503, "", 3},
		{"a 400 is the caller's", 400, "1", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) > 2 {
					_, _ = io.WriteString(w, `{"turn":"t","status":"complete"}`)
					return
				}
				if c.retryAfter != "" {
					w.Header().Set("Retry-After", c.retryAfter)
				}
				w.WriteHeader(c.status)
				_, _ = io.WriteString(w, `{"error":{"code":"x","message":"no"}}`)
			}))
			defer srv.Close()
			cl, err := New(srv.URL, WithBackoff(time.Millisecond, 10*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			_, err = cl.Session("s").Turn(context.Background(), nil, WithTurnID("t"))
			if got := int(n.Load()); got != c.want || (c.want == 3) != (err == nil) {
				t.Fatalf("%d requests, err %v; want %d", got, err, c.want)
			}
		})
	}
	// Opening a session has no id: never sent again.
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(503)
	}))
	defer srv.Close()
	cl, _ := New(srv.URL, WithBackoff(time.Millisecond, 10*time.Millisecond))
	if _, err := cl.OpenSession(context.Background(), SessionOptions{}); err == nil || n.Load() != 1 {
		t.Fatalf("open: %d requests, err %v; want 1 and the 503", n.Load(), err)
	}
}
