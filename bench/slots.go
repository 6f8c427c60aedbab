package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
)

// benchSlotFairness times tenant A's calls over HTTP to a node process
// (cmd/callsheet-node) while tenant B holds every worker it may take: the issue's
// attack (docs/security.md "Resources", "Workers"). B opens one session per
// exclusive worker and runs a long `sleep` shell in each, then A's
// write+read turn is timed (the client's wall time; floor: the same turn on
// the node with B idle); then B queues ten times the background workers in
// background sleeps, and A's one background job's wait is read from the log
// (its ToolCallRequested to its ToolCallStarted). The rows' conditions say
// how many workers B held meanwhile.
func benchSlotFairness(ctx context.Context, s *suite) ([]sample, error) {
	// The full suite at the node's defaults (64 workers a class, a tenant
	// 32 of them); smaller runs on 4 of each, 2 a tenant.
	workers, hold, limits := config.DefaultExclusiveWorkers, 30*time.Second, map[string]any{}
	if s.cfg.Calls < 1000 {
		workers, hold = 4, 10*time.Second
		four := map[string]any{"exclusive": 4, "isolated_background": 4}
		limits = map[string]any{"workers": four}
	}
	dir, bin, err := buildNode(ctx, "csbench-slots-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rg, err := ripgrep()
	if err != nil {
		return nil, err
	}
	cfg := map[string]any{
		"durability": config.DurabilityInterval,
		"tenants": map[string]any{
			"a": map[string]any{"token": fairReader},
			"b": map[string]any{"token": fairBurner},
		},
	}
	if len(limits) > 0 {
		cfg["limits"] = limits
	}
	raw, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return nil, err
	}
	start := func(name string) (*benchProc, error) {
		return startProc(ctx, bin, []string{"CALLSHEET_RG=" + rg}, "--data", filepath.Join(dir, name), "--http", "127.0.0.1:0", "--config", cfgPath)
	}
	sleep := func(background bool) string {
		return fmt.Sprintf(`{"command": "sleep %d", "timeout_ms": %d, "background": %t}`, int(hold.Seconds()), (hold + time.Minute).Milliseconds(), background)
	}
	work := `[{"id": "w", "name": "write", "arguments": {"path": "a.txt", "content": "a\n"}}, {"id": "r", "name": "read", "arguments": {"path": "a.txt"}}]`

	timeTurn := func(p *benchProc, session string) (time.Duration, error) {
		t0 := time.Now()
		code, b, err := p.as(ctx, fairReader, http.MethodPost, "/v1/sessions/"+session+"/turns", `{"calls": `+work+`}`)
		if err == nil && (code != http.StatusOK || strings.Count(b, `"outcome":"ok"`) != 2) {
			err = fmt.Errorf("A's turn: %d %s", code, b)
		}
		return time.Since(t0), err
	}

	// The floor: A's turn with B idle.
	idle, err := start("idle")
	if err != nil {
		return nil, err
	}
	a, err := slotsOpen(ctx, idle, fairReader)
	if err != nil {
		idle.kill()
		return nil, err
	}
	var floor time.Duration
	for i := range 5 { // the first warms the node; the last is kept
		if floor, err = timeTurn(idle, a); err != nil {
			idle.kill()
			return nil, fmt.Errorf("idle %d: %w", i, err)
		}
	}
	idle.kill()

	p, err := start("busy")
	if err != nil {
		return nil, err
	}
	defer p.kill()
	if a, err = slotsOpen(ctx, p, fairReader); err != nil {
		return nil, err
	}
	if _, err := timeTurn(p, a); err != nil { // warm
		return nil, err
	}
	var bs []string
	for i := range workers {
		b, err := slotsOpen(ctx, p, fairBurner)
		if err != nil {
			return nil, err
		}
		bs = append(bs, b)
		body := fmt.Sprintf(`{"calls": [{"id": "h%d", "name": "shell", "arguments": %s}]}`, i, sleep(false))
		if code, out, err := p.as(ctx, fairBurner, http.MethodPost, "/v1/sessions/"+b+"/turns?wait=0", body); err != nil || code/100 != 2 {
			return nil, fmt.Errorf("B's call %d: %d %v %s", i, code, err, out)
		}
	}
	heldB, err := slotsSettle(ctx, p, bs)
	if err != nil {
		return nil, err
	}
	turn, err := timeTurn(p, a)
	if err != nil {
		return nil, err
	}

	// Background: B queues ten times the background workers, then A's job.
	b, err := slotsOpen(ctx, p, fairBurner)
	if err != nil {
		return nil, err
	}
	var calls []string
	for i := range 10 * workers {
		calls = append(calls, fmt.Sprintf(`{"id": "b%d", "name": "shell", "arguments": %s}`, i, sleep(true)))
	}
	if code, out, err := p.as(ctx, fairBurner, http.MethodPost, "/v1/sessions/"+b+"/turns", `{"calls": [`+strings.Join(calls, ",")+`]}`); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("B's background calls: %d %v %.300s", code, err, out)
	}
	heldBG, err := slotsSettle(ctx, p, []string{b})
	if err != nil {
		return nil, err
	}
	if a, err = slotsOpen(ctx, p, fairReader); err != nil { // the job's own session: its only request
		return nil, err
	}
	job := `{"calls": [{"id": "j", "name": "shell", "arguments": {"command": "echo a", "background": true}}]}`
	if code, out, err := p.as(ctx, fairReader, http.MethodPost, "/v1/sessions/"+a+"/turns", job); err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("A's job: %d %v %s", code, err, out)
	}
	// A job that has not started once B's first wave is over waited behind
	// it: its wait is reported as at least that long.
	var jobWait time.Duration
	deadline := time.Now().Add(hold + 10*time.Second)
	for jobWait == 0 {
		evs, err := slotsEvents(ctx, p, fairReader, a)
		if err != nil {
			return nil, err
		}
		var requested time.Time
		for _, ev := range evs {
			switch ev.Type {
			case events.TypeToolCallRequested:
				requested = ev.Time
			case events.TypeToolCallStarted:
				if !requested.IsZero() {
					jobWait = ev.Time.Sub(requested)
				}
			}
		}
		if jobWait == 0 && time.Now().After(deadline) {
			jobWait = time.Since(requested)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cond := fmt.Sprintf("a node process (cmd/callsheet-node, interval) over HTTP, %d exclusive and %d background workers", workers, workers)
	return []sample{
		{name: "fairness/slots/turn", value: ms(turn), unit: "ms", better: Lower, floor: ms(floor),
			conditions: fmt.Sprintf("%s; tenant A's write+read turn while tenant B's %d `sleep %d` shells (one a session) hold %d exclusive workers; floor: the same turn with B idle", cond, workers, int(hold.Seconds()), heldB)},
		{name: "fairness/slots/background-wait", value: ms(jobWait), unit: "ms", better: Lower,
			conditions: fmt.Sprintf("%s; tenant A's background job, its request to its start in the log, while tenant B's %d background `sleep %d` shells are queued and hold %d workers (a job that had not started after %s is reported as that)", cond, 10*workers, int(hold.Seconds()), heldBG, hold+10*time.Second)},
	}, nil
}

// slotsOpen opens a session with token and returns its id.
func slotsOpen(ctx context.Context, p *benchProc, token string) (string, error) {
	code, b, err := p.as(ctx, token, http.MethodPost, "/v1/sessions", `{}`)
	var out struct{ Session string }
	if err == nil && code == http.StatusCreated {
		err = json.Unmarshal([]byte(b), &out)
	} else if err == nil {
		err = fmt.Errorf("open a session: %d %s", code, b)
	}
	return out.Session, err
}

// slotsEvents reads a session's events with token.
func slotsEvents(ctx context.Context, p *benchProc, token, session string) ([]events.Event, error) {
	code, b, err := p.as(ctx, token, http.MethodGet, "/v1/sessions/"+session+"/events?follow=false", "")
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("events of %s: %d %v %.200s", session, code, err, b)
	}
	var out []events.Event
	sc := bufio.NewScanner(strings.NewReader(b))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var ev events.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

// slotsSettle waits until the sessions' started calls stop growing (none
// new for a second) and returns how many started.
func slotsSettle(ctx context.Context, p *benchProc, sessions []string) (int, error) {
	last, since := -1, time.Now()
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, s := range sessions {
			evs, err := slotsEvents(ctx, p, fairBurner, s)
			if err != nil {
				return 0, err
			}
			for _, ev := range evs {
				if ev.Type == events.TypeToolCallStarted {
					n++
				}
			}
		}
		if n != last {
			last, since = n, time.Now()
		} else if n > 0 && time.Since(since) > time.Second {
			return n, nil
		}
	}
	return 0, fmt.Errorf("B's calls did not start within 2 minutes (%d started)", last)
}
