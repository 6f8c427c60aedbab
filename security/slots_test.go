package security

// One tenant must not hold the node's workers (docs/security.md,
// "Resources"; docs/spec.md §10): each concurrency class's workers are shared
// between the tenants with calls waiting, each tenant held to
// limits.workers_per_tenant. The attacks run against a real node process
// with a pool of 4 workers per class, and judge by the order of the events
// in the log, never by how fast anything ran.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
)

// slotsConfig is two tenants (acme, umbrella) on a node with 4 workers of
// each class, each tenant allowed 2 of them.
func slotsConfig() map[string]any {
	four := map[string]any{"exclusive": 4, "parallel_safe": 4, "isolated_background": 4}
	two := map[string]any{"exclusive": 2, "parallel_safe": 2, "isolated_background": 2}
	return twoTenants(map[string]any{"limits": map[string]any{"workers": four, "workers_per_tenant": two}})
}

// holdFor is how long each of umbrella's calls sleeps: the time a test that
// fails takes to see it.
const holdFor = 8 * time.Second

// eventsAs reads a session's events with token.
func eventsAs(t *testing.T, p *testnode.Proc, token, session string) []events.Event {
	t.Helper()
	var raw []byte
	code, err := p.DoAs(token, "GET", "/v1/sessions/"+session+"/events?follow=false", nil, &raw)
	if err != nil || code != http.StatusOK {
		t.Fatalf("events of %s: %d %v %s", session, code, err, raw)
	}
	var out []events.Event
	dec := json.NewDecoder(bytes.NewReader(raw))
	for dec.More() {
		var ev events.Event
		if err := dec.Decode(&ev); err != nil {
			t.Fatalf("events of %s: %v", session, err)
		}
		out = append(out, ev)
	}
	return out
}

// postAs posts a turn of calls to session with token without waiting for
// it (?wait=0).
func postAs(t *testing.T, p *testnode.Proc, token, session, turn string, calls []map[string]any) {
	t.Helper()
	var raw []byte
	code, err := p.DoAs(token, "POST", "/v1/sessions/"+session+"/turns?wait=0", map[string]any{"id": turn, "calls": calls}, &raw)
	if err != nil || (code != http.StatusAccepted && code != http.StatusOK) {
		t.Fatalf("post turn %s: %d %v %s", turn, code, err, raw)
	}
}

// sleeper is a shell call of umbrella's that holds a worker for holdFor.
func sleeper(id string, background bool) map[string]any {
	return one(id, "shell", map[string]any{"command": fmt.Sprintf("sleep %d", int(holdFor.Seconds())),
		"timeout_ms": (holdFor + 30*time.Second).Milliseconds(), "background": background})
}

// hold is what umbrella's sessions show at a moment: how many of its calls
// started, and when the first of them ended (zero while none has).
type hold struct {
	started   []time.Time
	firstDone time.Time
}

func holdOf(t *testing.T, p *testnode.Proc, sessions []string) hold {
	t.Helper()
	var h hold
	for _, s := range sessions {
		for _, ev := range eventsAs(t, p, umbrellaToken, s) {
			switch ev.Type {
			case events.TypeToolCallStarted:
				h.started = append(h.started, ev.Time)
			case events.TypeToolCallCompleted, events.TypeToolCallFailed, events.TypeToolCallIndeterminate:
				if h.firstDone.IsZero() || ev.Time.Before(h.firstDone) {
					h.firstDone = ev.Time
				}
			}
		}
	}
	return h
}

// startedBy counts the times at or before at.
func startedBy(ts []time.Time, at time.Time) int {
	n := 0
	for _, s := range ts {
		if !s.After(at) {
			n++
		}
	}
	return n
}

// waitHolding waits until umbrella has at least n calls started, and a
// moment more, so that every worker it can take it has taken.
func waitHolding(t *testing.T, p *testnode.Proc, sessions []string, n int) hold {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		h := holdOf(t, p, sessions)
		if len(h.started) >= n {
			time.Sleep(500 * time.Millisecond)
			return holdOf(t, p, sessions)
		}
		if time.Now().After(deadline) {
			t.Fatalf("umbrella has %d calls started after 30 s, want %d\n%s", len(h.started), n, tail(p.Stderr(), 3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOneTenantCannotHoldTheExclusiveWorkers: umbrella posts 8 long shell
// calls (one per session: an exclusive call is a barrier in its session)
// on a node with 4 exclusive workers, 2 per tenant; then acme posts a
// write and a read. Acme's turn must complete before any of umbrella's
// calls ends, and umbrella must hold no more than its 2 workers meanwhile.
// Before the fix umbrella's calls took all 4 workers and acme's write
// waited behind every one of them, first in first out.
func TestOneTenantCannotHoldTheExclusiveWorkers(t *testing.T) {
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: slotsConfig()})
	var held []string
	for i := range 8 {
		s := mustOpen(t, p, umbrellaToken, "")
		held = append(held, s)
		postAs(t, p, umbrellaToken, s, "hold", []map[string]any{sleeper(fmt.Sprint("h", i), false)})
	}
	before := waitHolding(t, p, held, 2)

	acme := mustOpen(t, p, acmeToken, "")
	postAs(t, p, acmeToken, acme, "work", []map[string]any{
		one("w", "write", map[string]any{"path": "a.txt", "content": "acme's\n"}),
		one("r", "read", map[string]any{"path": "a.txt"}),
	})
	var received, completed time.Time
	for completed.IsZero() {
		for _, ev := range eventsAs(t, p, acmeToken, acme) {
			switch ev.Type {
			case events.TypeTurnReceived:
				received = ev.Time
			case events.TypeTurnCompleted:
				completed = ev.Time
			}
		}
		if !completed.IsZero() {
			break
		}
		if h := holdOf(t, p, held); !h.firstDone.IsZero() {
			t.Fatalf("umbrella's first call ended (at %s) before acme's write+read turn completed: acme waited behind umbrella's %d running calls (of 4 workers, 2 per tenant)",
				h.firstDone.Format(time.StampMilli), len(before.started))
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := holdOf(t, p, held)
	if !h.firstDone.IsZero() && !completed.Before(h.firstDone) {
		t.Fatalf("acme's turn completed at %s, after umbrella's first call ended at %s", completed.Format(time.StampMilli), h.firstDone.Format(time.StampMilli))
	}
	if n := startedBy(h.started, completed); n != 2 {
		t.Fatalf("umbrella had %d calls started while acme's turn ran, want its 2 workers (limits.workers_per_tenant)", n)
	}
	t.Logf("acme's write+read turn took %s (TurnReceived to TurnCompleted) while umbrella held %d of the 4 exclusive workers and had %d calls waiting",
		completed.Sub(received), startedBy(h.started, completed), 8-startedBy(h.started, completed))
}

// TestOneTenantCannotHoldTheBackgroundWorkers: umbrella queues 40
// background shells (ten times the 4 background workers); acme's one
// background job must start, and end, before any of umbrella's ends. Before
// the fix acme's job waited behind all 40, ten rounds of holdFor.
func TestOneTenantCannotHoldTheBackgroundWorkers(t *testing.T) {
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: slotsConfig()})
	s := mustOpen(t, p, umbrellaToken, "")
	var calls []map[string]any
	for i := range 40 {
		calls = append(calls, sleeper(fmt.Sprint("b", i), true))
	}
	postAs(t, p, umbrellaToken, s, "flood", calls)
	held := []string{s}
	before := waitHolding(t, p, held, 2)

	acme := mustOpen(t, p, acmeToken, "")
	postAs(t, p, acmeToken, acme, "job", []map[string]any{one("j", "shell", map[string]any{"command": "echo acme", "background": true})})
	var requested, started, done time.Time
	for done.IsZero() {
		for _, ev := range eventsAs(t, p, acmeToken, acme) {
			switch ev.Type {
			case events.TypeToolCallRequested:
				requested = ev.Time
			case events.TypeToolCallStarted:
				started = ev.Time
			case events.TypeToolCallCompleted, events.TypeToolCallFailed:
				done = ev.Time
			}
		}
		if !done.IsZero() {
			break
		}
		if h := holdOf(t, p, held); !h.firstDone.IsZero() {
			t.Fatalf("umbrella's first background call ended (at %s) before acme's job did (started: %v): acme's job waited behind umbrella's %d running and %d queued",
				h.firstDone.Format(time.StampMilli), !started.IsZero(), len(before.started), 40-len(before.started))
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := holdOf(t, p, held)
	if !h.firstDone.IsZero() && !done.Before(h.firstDone) {
		t.Fatalf("acme's job ended at %s, after umbrella's first call ended at %s", done.Format(time.StampMilli), h.firstDone.Format(time.StampMilli))
	}
	if n := startedBy(h.started, done); n != 2 {
		t.Fatalf("umbrella had %d background calls started while acme's job ran, want its 2 workers", n)
	}
	t.Logf("acme's background job started %s after its request and ended %s after, while umbrella held %d of the 4 background workers with %d queued",
		started.Sub(requested), done.Sub(requested), startedBy(h.started, done), 40-startedBy(h.started, done))
}
