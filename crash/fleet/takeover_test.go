package fleet

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testnode"
)

// takeoverBound is docs/spec.md §7's bound on how long a call that meets a
// takeover waits for the new owner (api's moveWait), plus the slack of a
// loaded machine.
const takeoverBound = 30*time.Second + 10*time.Second

// answer is what a client got for one request.
type answer struct {
	what       string
	code       int
	node       string
	retryAfter string
	body       []byte
	took       time.Duration
	err        error
}

// post sends a turn to p with a plain HTTP client, keeping the answer's
// status, headers and body.
func post(p *testnode.Proc, s, what, body string) answer {
	start := time.Now()
	req, err := http.NewRequest("POST", p.Base+"/v1/sessions/"+s+"/turns", strings.NewReader(body))
	if err != nil {
		return answer{what: what, err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if p.Token != "" {
		req.Header.Set("Authorization", "Bearer "+p.Token)
	}
	resp, err := (&http.Client{Timeout: 2 * takeoverBound}).Do(req)
	if err != nil {
		return answer{what: what, err: err, took: time.Since(start)}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{what: what, code: resp.StatusCode, node: resp.Header.Get("X-Callsheet-Node"), retryAfter: resp.Header.Get("Retry-After"), body: b, took: time.Since(start), err: err}
}

// TestTurnMeetsTakeover kills -9 the owner of a session while a turn of it,
// posted to another node, runs there, and posts a second turn to a third
// node just after the kill, before the fleet took the session over. Each
// answer is either the turn served by the new owner (200, within the
// documented bound, its call settled by its replay policy) or a 503 with
// Retry-After and a plain message telling the client to retry with the same
// turn id: never NATS's own text, never another status.
func TestTurnMeetsTakeover(t *testing.T) {
	bin := nodeBinary(t)
	w := newWorld(t, bin, true, nil, "")
	n1, n2, n3 := w.f.Proc("n1"), w.f.Proc("n2"), w.f.Proc("n3")
	s := w.open(t, n1)
	if owner, _, _ := w.status(s); owner != "n1" {
		t.Fatalf("the session opened on n1 is owned by %q", owner)
	}
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		answers[0] = post(n2, s, "t1 via n2, posted before the kill", `{"id": "t1", "calls": [{"id": "c1", "name": "slow_safe", "arguments": {}}]}`)
	}()
	time.Sleep(1500 * time.Millisecond) // t1 runs on n1 (slow_safe sleeps 3 s)
	down := time.Now()
	n1.Kill()
	t.Logf("killed n1 at %s", down.Format("15:04:05.000"))
	wg.Add(1)
	go func() {
		defer wg.Done()
		answers[1] = post(n3, s, "t2 via n3, posted after the kill", `{"id": "t2", "calls": [{"id": "c2", "name": "bump_safe", "arguments": {}}]}`)
	}()
	wg.Wait()
	w.dropNode("n1")
	for _, a := range answers {
		t.Logf("%s: %d from %q after %s, Retry-After %q: %s", a.what, a.code, a.node, a.took.Round(time.Millisecond), a.retryAfter, a.body)
		if a.err != nil {
			t.Errorf("%s: %v", a.what, a.err)
			continue
		}
		if strings.Contains(strings.ToLower(string(a.body)), "nats") {
			t.Errorf("%s: the answer shows NATS's own text: %s", a.what, a.body)
		}
		switch a.code {
		case http.StatusOK:
			if a.node == "n1" || a.node == "" {
				t.Errorf("%s: served by %q, want the new owner", a.what, a.node)
			}
			if a.took > takeoverBound {
				t.Errorf("%s: served after %s, beyond the bound %s", a.what, a.took, takeoverBound)
			}
			var tv struct{ Results []struct{ Outcome string } }
			if err := json.Unmarshal(a.body, &tv); err != nil || len(tv.Results) != 1 || tv.Results[0].Outcome != "ok" {
				t.Errorf("%s: want one ok result (a safe call runs again on the new owner): %s", a.what, a.body)
			}
		case http.StatusServiceUnavailable:
			if sec, err := strconv.Atoi(a.retryAfter); err != nil || sec <= 0 {
				t.Errorf("%s: 503 with Retry-After %q, want a number of seconds", a.what, a.retryAfter)
			}
			var e struct {
				Error struct{ Code, Message string }
			}
			if err := json.Unmarshal(a.body, &e); err != nil || !strings.Contains(e.Error.Message, "retry with the same turn id") {
				t.Errorf("%s: 503 without the plain message to retry with the same turn id: %s", a.what, a.body)
			}
		default:
			t.Errorf("%s: %d, want 200 from the new owner or 503 with Retry-After", a.what, a.code)
		}
	}
	if owner, epoch, _ := w.status(s); owner == "n1" || owner == "" || epoch < 2 {
		t.Fatalf("after the kill the session is owned by %q at epoch %d, want a survivor at epoch 2 or later", owner, epoch)
	} else {
		t.Logf("taken over by %s at epoch %d, %s after the kill", owner, epoch, time.Since(down).Round(time.Millisecond))
	}
}
