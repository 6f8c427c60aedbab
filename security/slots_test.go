package security

// One tenant must not hold the node's workers (docs/security.md,
// "Resources"; docs/spec.md §10): each concurrency class's workers are shared
// between the tenants with calls waiting, each tenant held to
// limits.workers_per_tenant. The attacks run against a real node process
// with a pool of 4 workers per class, and judge by the order of the events
// in the log, never by how fast anything ran.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
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
	started, ended []time.Time
	firstDone      time.Time
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
				h.ended = append(h.ended, ev.Time)
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

// turnBeforeUmbrella waits for acme's turn in session to complete and
// fails the test if any call of umbrella's in held ends first, other than
// the ended it already had (calls that ended before acme posted). It
// returns when the turn was received and completed.
func turnBeforeUmbrella(t *testing.T, p *testnode.Proc, session, turn string, held []string, ended int, what string) (received, completed time.Time) {
	t.Helper()
	deadline := time.Now().Add(3 * holdFor)
	for {
		for _, ev := range eventsAs(t, p, acmeToken, session) {
			var of struct{ Turn string }
			if err := json.Unmarshal(ev.Data, &of); err != nil || of.Turn != turn {
				continue
			}
			switch ev.Type {
			case events.TypeTurnReceived:
				received = ev.Time
			case events.TypeTurnCompleted:
				completed = ev.Time
			}
		}
		h := holdOf(t, p, held)
		if !completed.IsZero() {
			if n := endedBy(h.ended, completed); n > ended {
				t.Fatalf("%s: one of umbrella's calls ended before acme's turn completed at %s (%d ended, %d before acme posted): acme waited behind umbrella's calls",
					what, completed.Format(time.StampMilli), n, ended)
			}
			return received, completed
		}
		if len(h.ended) > ended {
			t.Fatalf("%s: one of umbrella's calls ended (%d ended, %d before acme posted) and acme's turn had not completed: acme waited behind umbrella's %d started calls\n%s",
				what, len(h.ended), ended, len(h.started), tail(p.Stderr(), 3000))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: acme's turn not completed after %s", what, 3*holdFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// endedBy counts the times at or before at.
func endedBy(ts []time.Time, at time.Time) int { return startedBy(ts, at) }

// TestSerialHangingCallsCannotHoldTheWorkers: umbrella posts, in 6
// sessions, turns of 3 exclusive shells each (serial in their session),
// every one hanging until its timeout (holdFor); acme's write+read turn
// must complete while umbrella's first two hang, and again once those two
// timed out and umbrella's next two took the freed workers: a call killed
// at its timeout frees its worker, and umbrella still holds no more than
// its 2. Seen failing with the per-tenant cap off (every worker to whoever
// asked first): umbrella held all 4 and acme's turn waited for a timeout.
func TestSerialHangingCallsCannotHoldTheWorkers(t *testing.T) {
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: slotsConfig()})
	hang := func(id string) map[string]any {
		return one(id, "shell", map[string]any{"command": "sleep 600", "timeout_ms": holdFor.Milliseconds()})
	}
	var held []string
	for i := range 6 {
		s := mustOpen(t, p, umbrellaToken, "")
		held = append(held, s)
		postAs(t, p, umbrellaToken, s, "hang", []map[string]any{hang(fmt.Sprint("a", i)), hang(fmt.Sprint("b", i)), hang(fmt.Sprint("c", i))})
	}
	waitHolding(t, p, held, 2)

	acme := mustOpen(t, p, acmeToken, "")
	work := func(turn string) []map[string]any {
		return []map[string]any{
			one("w", "write", map[string]any{"path": turn + ".txt", "content": "acme's\n"}),
			one("r", "read", map[string]any{"path": turn + ".txt"}),
		}
	}
	postAs(t, p, acmeToken, acme, "one", work("one"))
	received, completed := turnBeforeUmbrella(t, p, acme, "one", held, 0, "while umbrella's first calls hang")
	h := holdOf(t, p, held)
	if n := startedBy(h.started, completed); n != 2 {
		t.Fatalf("umbrella had %d calls started while acme's first turn ran, want its 2 workers", n)
	}
	t.Logf("acme's turn took %s while umbrella's 2 calls hung with 16 queued", completed.Sub(received))

	// Umbrella's first two time out; its next two take the freed workers.
	h = waitHolding(t, p, held, 4)
	if len(h.ended) != 2 {
		t.Fatalf("umbrella has %d calls started and %d ended, want 2 ended (timed out) before its next 2 start", len(h.started), len(h.ended))
	}
	postAs(t, p, acmeToken, acme, "two", work("two"))
	received, completed = turnBeforeUmbrella(t, p, acme, "two", held, 2, "after umbrella's first calls timed out")
	h = holdOf(t, p, held)
	if n := startedBy(h.started, completed); n != 4 {
		t.Fatalf("umbrella had %d calls started by acme's second turn's end at %s, want 4 (2 timed out, 2 holding)", n, completed.Format(time.StampMilli))
	}
	t.Logf("acme's second turn took %s while umbrella's next 2 calls hung", completed.Sub(received))
}

// harnessStall registers token's harness tool "stall" of class, with
// timeout holdFor, and keeps a worker of the tenant taking its tasks and
// never answering them, until the test ends: each call hangs until its
// timeout.
func harnessStall(t *testing.T, p *testnode.Proc, token, class string) {
	t.Helper()
	schema := map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "integer"}}}
	reg := map[string]any{
		"description": "never answers", "guidelines": []string{"use to test"}, "input_schema": schema,
		"effect": "read_only", "replay": "never", "concurrency": class, "timeout": holdFor.String(),
	}
	var raw []byte
	if code, err := p.DoAs(token, "PUT", "/v1/tools/stall", reg, &raw); err != nil || code != http.StatusOK {
		t.Fatalf("register stall: %d %v %s", code, err, raw)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			var out json.RawMessage
			_, _ = p.DoCtx(ctx, token, "POST", "/v1/workers/poll", map[string]any{"worker": "stall-1", "tools": []string{"stall"}, "max": 16, "wait_ms": 500}, &out)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// TestHangingWorkerToolsCannotHoldTheWorkers: umbrella's harness tool's
// worker takes every task and never answers, so each of umbrella's 8 calls
// holds a worker until its timeout; acme's call of the same class must
// complete while they hang: exclusive (8 sessions, acme's write+read) and
// parallel_safe (8 parallel calls in one turn, acme's glob). Seen failing
// with the per-tenant cap off: umbrella's tasks held all 4 workers and
// acme's turn waited for the first of them to time out.
func TestHangingWorkerToolsCannotHoldTheWorkers(t *testing.T) {
	for _, tc := range []struct {
		class    string
		sessions int // umbrella's sessions, 8 calls in all
		acme     []map[string]any
	}{
		{"exclusive", 8, []map[string]any{
			one("w", "write", map[string]any{"path": "a.txt", "content": "acme's\n"}),
			one("r", "read", map[string]any{"path": "a.txt"}),
		}},
		{"parallel_safe", 1, []map[string]any{one("g", "glob", map[string]any{"pattern": "*"})}},
	} {
		t.Run(tc.class, func(t *testing.T) {
			p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: slotsConfig()})
			harnessStall(t, p, umbrellaToken, tc.class)
			var held []string
			for i := range tc.sessions {
				s := mustOpen(t, p, umbrellaToken, "")
				held = append(held, s)
				var calls []map[string]any
				for j := range 8 / tc.sessions {
					calls = append(calls, one(fmt.Sprint("s", i, "-", j), "stall", map[string]any{"n": j}))
				}
				postAs(t, p, umbrellaToken, s, "hang", calls)
			}
			waitHolding(t, p, held, 2)

			acme := mustOpen(t, p, acmeToken, "")
			postAs(t, p, acmeToken, acme, "work", tc.acme)
			received, completed := turnBeforeUmbrella(t, p, acme, "work", held, 0, tc.class)
			h := holdOf(t, p, held)
			if n := startedBy(h.started, completed); n != 2 {
				t.Fatalf("umbrella had %d tasks taken while acme's turn ran, want its 2 workers", n)
			}
			t.Logf("%s: acme's turn took %s while umbrella's worker held 2 tasks unanswered with 6 queued", tc.class, completed.Sub(received))
		})
	}
}

// TestTenantsFileShareOfTheWorkers: a tenant's own share from a
// tenants_file holds it (umbrella 1 of the 4 exclusive workers, below the
// node's 2 a tenant), and a share raised in the file applies at once to
// calls already waiting: rewritten with umbrella's share 3 and read on
// SIGHUP, umbrella's waiting calls take the free workers before any of its
// running ones ends. Seen failing without Pools.Reconsider: the raised share
// went unused until umbrella's first call ended, holdFor later.
func TestTenantsFileShareOfTheWorkers(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tenants.json")
	tenants := func(share int) map[string]any {
		own := map[string]any{"workers_per_tenant": map[string]any{"exclusive": share}}
		return map[string]any{"tenants": map[string]any{
			"acme":     map[string]any{"token": acmeToken},
			"umbrella": map[string]any{"token": umbrellaToken, "limits": own},
		}}
	}
	writeAtomically(t, file, tenants(1))
	cfg := slotsConfig()
	delete(cfg, "tenants")
	cfg["tenants_file"] = file
	p := node(t, cfg)
	var held []string
	for i := range 4 {
		s := mustOpen(t, p, umbrellaToken, "")
		held = append(held, s)
		postAs(t, p, umbrellaToken, s, "hold", []map[string]any{sleeper(fmt.Sprint("h", i), false)})
	}
	if h := waitHolding(t, p, held, 1); len(h.started) != 1 {
		t.Fatalf("umbrella has %d calls started, want its own share of 1 (tenants.umbrella.limits.workers_per_tenant)", len(h.started))
	}

	writeAtomically(t, file, tenants(3))
	raised := time.Now()
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	h := waitHolding(t, p, held, 3)
	slices.SortFunc(h.started, time.Time.Compare)
	// The first call sleeps holdFor: a third call started later started
	// only once a worker was freed, not when the share was raised.
	if end := h.started[0].Add(holdFor); !h.started[2].Before(end) {
		t.Fatalf("umbrella's third call started at %s, once its first (started %s, sleeping %s) had ended: the raised share was not used while its calls waited",
			h.started[2].Format(time.StampMilli), h.started[0].Format(time.StampMilli), holdFor)
	}
	t.Logf("umbrella held its own share of 1; its third call started %s after the file's rewrite and SIGHUP", h.started[2].Sub(raised).Round(time.Millisecond))
}
