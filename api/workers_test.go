package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/projections"
)

// The harness tools routes (docs/spec.md §7, docs/workers.md), driven over
// HTTP as a worker in any language would.

const lookupSpec = `{"description": "look an order up in the shop", "guidelines": ["use to find an order"],
 "input_schema": {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"], "additionalProperties": false}%s}`

func spec(extra string) string { return fmt.Sprintf(lookupSpec, extra) }

// twoTenants is an env whose node serves acme (the env's token) and globex.
func twoTenants(t *testing.T, mod ...func(*config.Config)) *env {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	cfg.Retry.InitialDelay = config.Duration(10 * time.Millisecond)
	for _, m := range mod {
		m(&cfg)
	}
	e := newEnv(t, &cfg)
	e.token = "tok-acme"
	return e
}

// as runs f with the env's token set to tok.
func (e *env) as(tok string, f func()) {
	old := e.token
	e.token = tok
	defer func() { e.token = old }()
	f()
}

// pollTasks polls for tools and returns the tasks (none on 204).
func (e *env) pollTasks(wait time.Duration, tools ...string) []harness.Task {
	e.t.Helper()
	tj, _ := json.Marshal(tools)
	status, b := e.do("POST", "/v1/workers/poll", fmt.Sprintf(`{"worker": "w1", "tools": %s, "max": 8, "wait_ms": %d}`, tj, wait.Milliseconds()))
	switch status {
	case http.StatusNoContent:
		return nil
	case http.StatusOK:
		var a struct {
			Tasks []harness.Task `json:"tasks"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			e.t.Fatalf("poll answer %s: %v", b, err)
		}
		return a.Tasks
	}
	e.t.Fatalf("poll: status %d: %s", status, b)
	return nil
}

// submitAsync posts a turn with ?wait=0 and returns its id.
func (e *env) submitAsync(session, body string) string {
	e.t.Helper()
	var a struct {
		Turn string `json:"turn"`
	}
	e.must("POST", "/v1/sessions/"+session+"/turns?wait=0", body, http.StatusAccepted, &a)
	return a.Turn
}

// waitTurn polls a turn until it is complete.
func (e *env) waitTurn(session, turn string) projections.Turn {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var tr projections.Turn
		e.must("GET", "/v1/sessions/"+session+"/turns/"+turn, "", http.StatusOK, &tr)
		if tr.Status == projections.StatusComplete {
			return tr
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("turn %s did not complete", turn)
	return projections.Turn{}
}

// takeOne polls until one task of tool comes.
func (e *env) takeOne(tool string) harness.Task {
	e.t.Helper()
	for range 30 {
		if ts := e.pollTasks(2*time.Second, tool); len(ts) > 0 {
			if len(ts) != 1 {
				e.t.Fatalf("poll gave %d tasks, want 1", len(ts))
			}
			return ts[0]
		}
	}
	e.t.Fatalf("no task of %s came", tool)
	return harness.Task{}
}

func complete(text string) string {
	b, _ := json.Marshal(map[string]any{"content": []map[string]string{{"type": "text", "text": text}}})
	return string(b)
}

// TestHarnessToolListed: a registered tool is in GET /v1/tools in every
// format for its tenant, strictest where it declared nothing, and absent
// for another tenant; DELETE takes it away.
func TestHarnessToolListed(t *testing.T) {
	e := twoTenants(t)
	var reg registered
	e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, &reg)
	if reg.Effect != "side_effecting" || reg.Replay != "never" || reg.Concurrency != "exclusive" || reg.TimeoutMS != 120000 {
		t.Fatalf("registered %+v: want the strictest declarations and the default timeout", reg)
	}
	for _, q := range []string{"format=openai", "format=openai_responses", "format=anthropic", "format=openai&strict=true", "format=openai_responses&strict=true"} {
		_, b := e.do("GET", "/v1/tools?"+q, "")
		if !strings.Contains(string(b), `"lookup_order"`) {
			t.Errorf("GET /v1/tools?%s lacks lookup_order: %.300s", q, b)
		}
		e.as("tok-globex", func() {
			_, b := e.do("GET", "/v1/tools?"+q, "")
			if strings.Contains(string(b), "lookup_order") {
				t.Errorf("globex sees acme's tool in GET /v1/tools?%s", q)
			}
		})
	}
	status, _ := e.do("DELETE", "/v1/tools/lookup_order", "")
	if status != http.StatusNoContent {
		t.Fatalf("DELETE: status %d, want 204", status)
	}
	if _, b := e.do("GET", "/v1/tools", ""); strings.Contains(string(b), "lookup_order") {
		t.Fatal("deleted tool still listed")
	}
	status, b := e.do("DELETE", "/v1/tools/lookup_order", "")
	wantError(t, status, b, 404, CodeNotFound, "lookup_order")
}

// TestHarnessWorkerServes: results come in call order whatever order the
// worker answers in, an invalid call never reaches the worker, each task
// carries the idempotency key, and a never-replay task is handed out only
// once its claim (ToolCallStarted) is in the log.
func TestHarnessWorkerServes(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/lookup_order", spec(`, "concurrency": "parallel_safe"`), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [
		{"id": "a", "name": "lookup_order", "arguments": {"order": "A-1"}},
		{"id": "bad", "name": "lookup_order", "arguments": {"order": 7}},
		{"id": "b", "name": "lookup_order", "arguments": {"order": "B-2"}}]}`)
	var tasks []harness.Task
	for len(tasks) < 2 {
		got := e.pollTasks(5*time.Second, "lookup_order")
		tasks = append(tasks, got...)
		if len(tasks) == 0 {
			t.Fatal("no task came within 5 s")
		}
	}
	evs := e.events(s.Session, "")
	for _, tk := range tasks {
		if tk.IdempotencyKey == "" || tk.Attempt != 1 || tk.Session != s.Session || tk.Turn != turn || tk.Deadline.IsZero() {
			t.Fatalf("task %+v: want session, turn, attempt 1, an idempotency key and a deadline", tk)
		}
		if tk.Call == "bad" {
			t.Fatal("the call with invalid arguments reached the worker")
		}
		claimed := false
		for _, ev := range evs {
			var d struct {
				Call           string `json:"call"`
				Attempt        int    `json:"attempt"`
				ExternalWorker string `json:"external_worker"`
			}
			_ = json.Unmarshal(ev.Data, &d)
			if ev.Type == events.TypeToolCallStarted && d.Call == tk.Call && d.Attempt == tk.Attempt {
				claimed = true
				// The claim names the worker that took the attempt.
				if d.ExternalWorker != "w1" {
					t.Fatalf("claim of call %s: %s, want it to name worker w1", tk.Call, ev.Data)
				}
			}
		}
		if !claimed {
			t.Fatalf("task of call %s handed out before its claim was in the log", tk.Call)
		}
	}
	// Answer in reverse order.
	for i := len(tasks) - 1; i >= 0; i-- {
		var args struct{ Order string }
		_ = json.Unmarshal(tasks[i].Arguments, &args)
		e.must("POST", "/v1/tasks/"+tasks[i].Task+"/complete", complete("order "+args.Order+" key "+tasks[i].IdempotencyKey), http.StatusOK, nil)
	}
	tr := e.waitTurn(s.Session, turn)
	if len(tr.Results) != 3 || tr.Results[0].ID != "a" || tr.Results[1].ID != "bad" || tr.Results[2].ID != "b" {
		t.Fatalf("results %+v: want a, bad, b in call order", tr.Results)
	}
	if tr.Results[1].Outcome != events.OutcomeBlocked || tr.Results[1].Block != events.BlockInvalidArguments {
		t.Fatalf("bad call: %+v, want blocked/invalid_arguments", tr.Results[1])
	}
	for _, i := range []int{0, 2} {
		r := tr.Results[i]
		if r.Outcome != events.OutcomeOK || len(r.Content) != 1 || !strings.Contains(r.Content[0].Text, "key ") || strings.HasSuffix(r.Content[0].Text, "key ") {
			t.Fatalf("result %d: %+v, want ok with the worker's text and the idempotency key", i, r)
		}
	}
	if !strings.Contains(tr.Results[0].Content[0].Text, "A-1") || !strings.Contains(tr.Results[2].Content[0].Text, "B-2") {
		t.Fatalf("results carry the wrong orders: %+v", tr.Results)
	}
	// Settled: the token answers 409, and saying why.
	status, b := e.do("POST", "/v1/tasks/"+tasks[0].Task+"/complete", complete("again"))
	wantError(t, status, b, 409, CodeConflict, "settled")
}

// TestHarnessLostWorker: a worker that takes a never-replay task and
// vanishes: the call ends indeterminate, is never handed out again, the next
// turn carries the notice, and a late complete gets 409.
func TestHarnessLostWorker(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/charge", spec(`, "heartbeat_timeout": "1s", "timeout": "60s"`), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [{"id": "c1", "name": "charge", "arguments": {"order": "A-1"}}]}`)
	tk := e.takeOne("charge")
	if tk.HeartbeatTimeoutMS != 1000 {
		t.Fatalf("task heartbeat_timeout_ms %d, want 1000", tk.HeartbeatTimeoutMS)
	}
	// The worker vanishes: no heartbeat, no answer.
	tr := e.waitTurn(s.Session, turn)
	r := tr.Results[0]
	if r.Outcome != events.OutcomeIndeterminate || !strings.Contains(r.Content[0].Text, "heartbeat") {
		t.Fatalf("result %+v: want indeterminate naming the missed heartbeat", r)
	}
	if got := e.pollTasks(1500*time.Millisecond, "charge"); len(got) != 0 {
		t.Fatalf("the lost never call was handed out again: %+v", got)
	}
	status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/complete", complete("late"))
	wantError(t, status, b, 409, CodeConflict, "lost")
	status, b = e.do("POST", "/v1/tasks/"+tk.Task+"/heartbeat", "")
	wantError(t, status, b, 409, CodeConflict)
	var next projections.Turn
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls": [{"id": "r", "name": "glob", "arguments": {"pattern": "*"}}]}`, http.StatusOK, &next)
	if len(next.Notices) != 1 || next.Notices[0].Call != "c1" || next.Notices[0].Tool != "charge" {
		t.Fatalf("next turn's notices %+v: want the retry notice of c1 (charge)", next.Notices)
	}
}

// TestHarnessSafeRetry: a safe tool's failed or lost attempt is retried as
// a new task with a new token; a permanent failure stops the retries.
func TestHarnessSafeRetry(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/price", spec(`, "effect": "read_only", "replay": "safe", "heartbeat_timeout": "1s"`), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [{"id": "p", "name": "price", "arguments": {"order": "A-1"}}]}`)
	first := e.takeOne("price")
	e.must("POST", "/v1/tasks/"+first.Task+"/fail", `{"error": "shop API 503"}`, http.StatusOK, nil)
	second := e.takeOne("price") // lost: no heartbeat
	if second.Attempt != 2 || second.Task == first.Task || second.IdempotencyKey != first.IdempotencyKey {
		t.Fatalf("retry task %+v after %+v: want attempt 2, a new token, the same idempotency key", second, first)
	}
	third := e.takeOne("price")
	if third.Attempt != 3 {
		t.Fatalf("third task attempt %d, want 3 (the lost attempt is retried)", third.Attempt)
	}
	e.must("POST", "/v1/tasks/"+third.Task+"/complete", complete("42 EUR"), http.StatusOK, nil)
	tr := e.waitTurn(s.Session, turn)
	if r := tr.Results[0]; r.Outcome != events.OutcomeOK || r.Attempts != 3 {
		t.Fatalf("result %+v: want ok after 3 attempts", r)
	}
	// A read-only, safe call is claimed with its outcome: the claims name
	// the worker too.
	claims := 0
	for _, ev := range e.events(s.Session, "") {
		if ev.Type == events.TypeToolCallStarted {
			claims++
			if !strings.Contains(string(ev.Data), `"external_worker":"w1"`) {
				t.Fatalf("claim %s: want it to name worker w1", ev.Data)
			}
		}
	}
	if claims != 3 {
		t.Fatalf("%d claims, want one per attempt", claims)
	}

	turn = e.submitAsync(s.Session, `{"calls": [{"id": "q", "name": "price", "arguments": {"order": "nope"}}]}`)
	tk := e.takeOne("price")
	e.must("POST", "/v1/tasks/"+tk.Task+"/fail", `{"error": "no such order", "permanent": true}`, http.StatusOK, nil)
	tr = e.waitTurn(s.Session, turn)
	if r := tr.Results[0]; r.Outcome != events.OutcomeError || r.Attempts != 1 || !strings.Contains(r.Content[0].Text, "no such order") {
		t.Fatalf("result %+v: want an error after one attempt (permanent)", r)
	}
}

// TestHarnessCancel: a call cancelled while a worker holds it: the
// heartbeat answers cancel, complete answers 409.
func TestHarnessCancel(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/slow", spec(""), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [{"id": "s", "name": "slow", "arguments": {"order": "A-1"}}]}`)
	tk := e.takeOne("slow")
	var hb map[string]bool
	e.must("POST", "/v1/tasks/"+tk.Task+"/heartbeat", `{"details": {"progress": 0.5}}`, http.StatusOK, &hb)
	if hb["cancel"] {
		t.Fatal("heartbeat answered cancel before any cancel")
	}
	e.must("POST", "/v1/sessions/"+s.Session+"/turns/"+turn+"/cancel", "", http.StatusAccepted, nil)
	deadline := time.Now().Add(30 * time.Second)
	for !hb["cancel"] && time.Now().Before(deadline) {
		e.must("POST", "/v1/tasks/"+tk.Task+"/heartbeat", "", http.StatusOK, &hb)
		time.Sleep(10 * time.Millisecond)
	}
	if !hb["cancel"] {
		t.Fatal("heartbeat never answered cancel after the turn was cancelled")
	}
	status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/complete", complete("too late"))
	wantError(t, status, b, 409, CodeConflict, "cancelled")
	if tr := e.waitTurn(s.Session, turn); tr.Results[0].Outcome != events.OutcomeIndeterminate {
		t.Fatalf("cancelled never call: %+v, want indeterminate", tr.Results[0])
	}
}

// TestHarnessHostileTenant attacks the boundaries as another tenant would:
// its token on acme's task, guessed tokens, polling acme's tool name, and
// registering under names it may not take.
func TestHarnessHostileTenant(t *testing.T) {
	e := twoTenants(t, func(c *config.Config) {
		c.CommandTools = []config.CommandTool{{Name: "cmdtool", Description: "d", Guidelines: []string{"g"}, InputSchema: json.RawMessage(`{"type":"object","properties":{}}`), Command: []string{"true"}}}
	})
	e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [{"id": "a", "name": "lookup_order", "arguments": {"order": "A-1"}}]}`)

	// globex registers the same name and polls: it never gets acme's task.
	e.as("tok-globex", func() {
		e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, nil)
		if got := e.pollTasks(1500*time.Millisecond, "lookup_order"); len(got) != 0 {
			t.Fatalf("globex got acme's task: %+v", got)
		}
		status, b := e.do("POST", "/v1/workers/poll", `{"worker": "x", "tools": ["read"], "wait_ms": 0}`)
		wantError(t, status, b, 400, CodeInvalidRequest, "not a harness tool")
		status, b = e.do("POST", "/v1/workers/poll", `{"worker": "x", "tools": ["lookup_order.>"], "wait_ms": 0}`)
		wantError(t, status, b, 400, CodeInvalidRequest, "not a tool name")
	})
	tk := e.takeOne("lookup_order")
	e.as("tok-globex", func() {
		for _, op := range []string{"complete", "fail", "heartbeat"} {
			body := map[string]string{"complete": complete("forged"), "fail": `{"error": "forged"}`, "heartbeat": ""}[op]
			status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/"+op, body)
			wantError(t, status, b, 409, CodeConflict)
		}
	})
	// Guessed tokens: a well-formed one, and garbage.
	for _, guess := range []string{"tk_" + strings.Repeat("A", 43), "tk_x", "../../etc", strings.Repeat("z", 5000)} {
		status, b := e.do("POST", "/v1/tasks/"+guess+"/complete", complete("forged"))
		if status != 409 && status != 404 {
			t.Fatalf("guessed token %.20q: status %d %s, want 409 (or 404 for no route)", guess, status, b)
		}
	}
	// The real worker still owns the call and completes it.
	e.must("POST", "/v1/tasks/"+tk.Task+"/complete", complete("real"), http.StatusOK, nil)
	if r := e.waitTurn(s.Session, turn).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "real" {
		t.Fatalf("result %+v: want the real worker's answer", r)
	}

	// Names that belong to others.
	for name, owner := range map[string]string{"read": "built-in", "shell": "built-in", "cmdtool": "command_tools", "mcp__fs__read": "MCP"} {
		status, b := e.do("PUT", "/v1/tools/"+name, spec(""))
		if name == "mcp__fs__read" {
			wantError(t, status, b, 400, CodeInvalidRequest, owner)
			continue
		}
		wantError(t, status, b, 409, CodeConflict, name, owner)
	}
	// Bad registrations.
	huge := `{"type": "object", "description": "` + strings.Repeat("x", harness.MaxSchemaBytes) + `"}`
	cases := map[string]struct {
		body string
		msg  string
	}{
		"huge schema":      {`{"description": "d", "guidelines": ["g"], "input_schema": ` + huge + `}`, "input_schema"},
		"invalid schema":   {`{"description": "d", "guidelines": ["g"], "input_schema": {"type": "nope"}}`, "input_schema"},
		"no schema":        {`{"description": "d", "guidelines": ["g"]}`, "input_schema"},
		"no guideline":     {`{"description": "d", "input_schema": {"type": "object"}}`, "guideline"},
		"bad effect":       {spec(`, "effect": "harmless"`), "effect"},
		"read-only escal.": {spec(`, "timeout": "-1s"`), "timeout"},
		"heartbeat > call": {spec(`, "timeout": "5s", "heartbeat_timeout": "10s"`), "heartbeat_timeout"},
		"unknown field":    {spec(`, "run_as_root": true`), "run_as_root"},
		"duplicate key":    {`{"description": "a", "description": "b", "guidelines": ["g"], "input_schema": {"type": "object"}}`, "description"},
	}
	for name, c := range cases {
		status, b := e.do("PUT", "/v1/tools/evil", c.body)
		if status != 400 || !strings.Contains(string(b), c.msg) {
			t.Errorf("%s: status %d %s, want 400 naming %s", name, status, b, c.msg)
		}
	}
	status, b := e.do("PUT", "/v1/tools/bad.name", spec(""))
	wantError(t, status, b, 400, CodeInvalidRequest, "bad.name")
}

// TestHarnessNotTaken: a call no worker takes fails plainly within its
// timeout (nothing ran: an error, not indeterminate).
func TestHarnessNotTaken(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/nobody", spec(`, "timeout": "1s"`), http.StatusOK, nil)
	s := e.open()
	var tr projections.Turn
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"calls": [{"id": "n", "name": "nobody", "arguments": {"order": "A"}}]}`, http.StatusOK, &tr)
	if r := tr.Results[0]; r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, "no worker took") {
		t.Fatalf("result %+v: want an error saying no worker took it", r)
	}
	if len(tr.Notices) != 0 {
		t.Fatalf("notices %+v: want none", tr.Notices)
	}
}

// TestHarnessManyWorkers: concurrent pollers share the tasks, each handed
// out once.
func TestHarnessManyWorkers(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/echo", spec(`, "concurrency": "parallel_safe"`), http.StatusOK, nil)
	s := e.open()
	var calls []string
	for i := range 12 {
		calls = append(calls, fmt.Sprintf(`{"id": "c%d", "name": "echo", "arguments": {"order": "%d"}}`, i, i))
	}
	turn := e.submitAsync(s.Session, `{"calls": [`+strings.Join(calls, ",")+`]}`)
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				if n >= 12 {
					return
				}
				for _, tk := range e.pollTasks(500*time.Millisecond, "echo") {
					mu.Lock()
					seen[tk.Call]++
					mu.Unlock()
					var args struct{ Order string }
					_ = json.Unmarshal(tk.Arguments, &args)
					e.do("POST", "/v1/tasks/"+tk.Task+"/complete", complete(args.Order))
				}
			}
		}()
	}
	wg.Wait()
	for c, n := range seen {
		if n != 1 {
			t.Errorf("call %s handed out %d times", c, n)
		}
	}
	tr := e.waitTurn(s.Session, turn)
	for i, r := range tr.Results {
		if r.Outcome != events.OutcomeOK || r.Content[0].Text != fmt.Sprint(i) {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
}

// TestHarnessFleetCapScope: a harness tool's fleet-wide cap counts its own
// tenant's calls only: a cap over the whole fleet would share its slots
// with every other tenant's tool of the same name, so one tenant could
// starve another's calls by holding them. It is refused.
func TestHarnessFleetCapScope(t *testing.T) {
	e := twoTenants(t)
	status, b := e.do("PUT", "/v1/tools/shared_api", spec(`, "fleet_cap": 1, "fleet_cap_scope": "fleet"`))
	wantError(t, status, b, 400, CodeInvalidRequest, "fleet_cap_scope", "tenant")
	var reg registered
	e.must("PUT", "/v1/tools/shared_api", spec(`, "fleet_cap": 2`), http.StatusOK, &reg)
	status, b = e.do("PUT", "/v1/tools/shared_api", spec(`, "fleet_cap": -1`))
	wantError(t, status, b, 400, CodeInvalidRequest, "fleet cap")
}
