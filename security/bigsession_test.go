package security

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testnode"
)

// bigSession makes a session of turns × calls write calls, each with
// content of size bytes (all of it in the log twice: the turn's request
// and the call's), and returns its id and how many events it holds.
func bigSession(t *testing.T, p *testnode.Proc, turns, calls, size int) (string, int) {
	t.Helper()
	s := open(t, p, "")
	content := strings.Repeat("0123456789abcdef", size/16)
	for i := range turns {
		var cs []any
		for j := range calls {
			cs = append(cs, map[string]any{"id": fmt.Sprintf("c%d-%d", i, j), "name": "write",
				"arguments": map[string]any{"path": fmt.Sprintf("f%d-%d.txt", i, j), "content": content}})
		}
		var tv struct{ Status string }
		if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns", map[string]any{"id": fmt.Sprintf("t%d", i), "calls": cs}, &tv); err != nil || code != http.StatusOK || tv.Status != "complete" {
			t.Fatalf("turn %d: %d %v %+v", i, code, err, tv)
		}
	}
	evs, err := p.Events(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, len(evs)
}

// get reads path whole, counting its bytes, and reports the node's peak
// RSS meanwhile (reset first).
func get(t *testing.T, p *testnode.Proc, path string) (code int, size int64, body []byte, peak int64) {
	t.Helper()
	resetPeak(t, p.PID())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.Base+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	var head strings.Builder
	size, err = io.Copy(&limitedWriter{w: &head, n: 1 << 20}, resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading: %v", path, err)
	}
	_, peak = memory(t, p.PID())
	return resp.StatusCode, size, []byte(head.String()), peak
}

// limitedWriter keeps the first n bytes written and counts the rest.
type limitedWriter struct {
	w io.Writer
	n int
}

func (l *limitedWriter) Write(b []byte) (int, error) {
	if l.n > 0 {
		k := min(len(b), l.n)
		_, _ = l.w.Write(b[:k])
		l.n -= k
	}
	return len(b), nil
}

// TestBigSessionReadsAreBounded: a session whose log holds 39 MiB (200
// write calls of 100 KiB, each in the log twice) is read whole, by another
// node of the fleet, through every route that reads a session: transcript,
// events, a followed event stream, the timeline. Each must answer 200 with
// all of it, while the reading node's peak RSS grows by less than 64 MiB
// (the log is read in bounded batches, never held whole), and the timeline
// page shows each argument cut, with a link to the whole of it.
func TestBigSessionReadsAreBounded(t *testing.T) {
	p := node(t, map[string]any{"durability": "interval"})
	turns, calls, size := 20, 10, 100<<10
	if n, err := strconv.Atoi(os.Getenv("CALLSHEET_BIG_SESSION_TURNS")); err == nil && n > 0 {
		turns = n // for figures: docs/security.md
	}
	s, n := bigSession(t, p, turns, calls, size)
	// Another node reads it, through the first one's NATS server: what the
	// reader holds is what the reads cost, apart from the server's own
	// caches of the log's blocks.
	url := regexp.MustCompile(`embedded JetStream at (nats://[^ ]+)`).FindStringSubmatch(p.Stderr())
	if url == nil {
		t.Fatalf("the node did not log its NATS URL:\n%s", p.Stderr())
	}
	p = node(t, nil, "--nats", url[1], "--nats-creds", filepath.Join(p.Data, "credentials", "nats.nk"), "--name", "reader")
	time.Sleep(time.Second) // start-up settles
	rss, _ := memory(t, p.PID())
	logBytes := 2 * turns * calls * size
	t.Logf("a session of %d events, %d write calls of %d KiB (%d MiB of log); the reading node's RSS %d MiB", n, turns*calls, size>>10, logBytes>>20, rss>>20)
	const bound = 64 << 20 // holding the session costs more than the log's bytes

	for _, path := range []string{"/v1/sessions/" + s + "/transcript", "/v1/sessions/" + s + "/events?follow=false", "/v1/sessions/" + s + "/timeline"} {
		code, got, head, peak := get(t, p, path)
		t.Logf("GET %s: %d, %d bytes, node peak RSS %d MiB", path, code, got, peak>>20)
		if code != http.StatusOK {
			t.Errorf("GET %s: %d %.300s", path, code, head)
		}
		if peak > rss+bound {
			t.Errorf("GET %s: node peak RSS %d MiB from %d MiB: the session was held whole", path, peak>>20, rss>>20)
		}
		if strings.Contains(path, "/timeline") {
			if got > int64(logBytes)/16 {
				t.Errorf("the timeline page is %d bytes: arguments are not cut", got)
			}
			link := regexp.MustCompile(`/v1/sessions/` + s + `/turns/[^/"]+/calls/[^/"]+/arguments`).FindString(string(head))
			if link == "" {
				t.Fatalf("the timeline page links no call's full arguments")
			}
			code, got, _, _ := get(t, p, link)
			if code != http.StatusOK || got < int64(size) {
				t.Errorf("GET %s: %d, %d bytes, want the whole arguments (over %d bytes)", link, code, got, size)
			}
		}
	}

	// A followed stream from the start: every event arrives, in order.
	resetPeak(t, p.PID())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", p.Base+"/v1/sessions/"+s+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 4<<20)
	seen := 0
	for seen < n && lines.Scan() {
		seen++
	}
	resp.Body.Close()
	_, peak := memory(t, p.PID())
	t.Logf("followed stream: %d of %d events, node peak RSS %d MiB", seen, n, peak>>20)
	if seen != n {
		t.Errorf("the followed stream delivered %d of %d events (%v)", seen, n, lines.Err())
	}
	if peak > rss+bound {
		t.Errorf("followed stream: node peak RSS %d MiB from %d MiB", peak>>20, rss>>20)
	}
}
