package api

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/harness"
)

// A complete or fail that asks for the worker's next tasks ("next", a
// poll's body) and is answered with them (docs/spec.md §7).

// answerNext is the answer to a complete or fail with "next".
type answerNext struct {
	Accepted  bool           `json:"accepted"`
	Tasks     []harness.Task `json:"tasks"`
	NextError *errorDetail   `json:"next_error"`
}

// withNext returns the body b (a JSON object) with "next" added.
func withNext(b, next string) string {
	return strings.TrimSuffix(strings.TrimSpace(b), "}") + `, "next": ` + next + `}`
}

func (e *env) answerNext(op, token, body string) answerNext {
	e.t.Helper()
	var a answerNext
	raw := e.must("POST", "/v1/tasks/"+token+"/"+op, body, http.StatusOK, &a)
	if !a.Accepted || a.Tasks == nil || !strings.Contains(string(raw), `"tasks":`) {
		e.t.Fatalf("%s with next: %s: want accepted and a tasks list", op, raw)
	}
	return a
}

// TestHarnessAnswerAndPoll: a complete with "next" hands over the result and
// is held as a poll, answering with the next task once one is offered; one
// whose wait ends answers an empty list; a fail takes "next" too; a task
// handed in such an answer that the worker never acts on is lost at its
// heartbeat_timeout exactly as a poll's, and never handed out again.
func TestHarnessAnswerAndPoll(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/charge", spec(`, "timeout": "60s"`), http.StatusOK, nil)
	e.must("PUT", "/v1/tools/slow", spec(`, "heartbeat_timeout": "1s", "timeout": "60s"`), http.StatusOK, nil)
	s := e.open()
	turn1 := e.submitAsync(s.Session, `{"calls": [{"id": "c1", "name": "charge", "arguments": {"order": "A-1"}}]}`)
	tk1 := e.takeOne("charge")
	// The answer is held as a poll until a task comes: the next turn, of
	// another session, is posted once it is held.
	next := `{"worker": "w1", "tools": ["charge", "slow"], "max": 1, "wait_ms": 20000}`
	held := make(chan answerNext, 1)
	go func() { held <- e.answerNext("complete", tk1.Task, withNext(complete("one"), next)) }()
	if r := e.waitTurn(s.Session, turn1).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "one" {
		t.Fatalf("turn 1 result %+v: want the completed answer", r)
	}
	e.waitPolls("acme", 1)
	s2 := e.open()
	turn2 := e.submitAsync(s2.Session, `{"calls": [{"id": "c2", "name": "charge", "arguments": {"order": "A-2"}}]}`)
	a := <-held
	if len(a.Tasks) != 1 || a.Tasks[0].Call != "c2" || a.Tasks[0].Session != s2.Session || a.Tasks[0].Attempt != 1 {
		t.Fatalf("complete with next answered tasks %+v: want c2's task", a.Tasks)
	}
	tk2 := a.Tasks[0]
	// Nothing more comes within the wait: accepted, no tasks.
	a = e.answerNext("complete", tk2.Task, withNext(complete("two"), `{"worker": "w1", "tools": ["charge"], "wait_ms": 300}`))
	if len(a.Tasks) != 0 || a.NextError != nil {
		t.Fatalf("answer %+v: want accepted, no tasks", a)
	}
	if r := e.waitTurn(s2.Session, turn2).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "two" {
		t.Fatalf("turn 2 result %+v", r)
	}
	// A fail with next; the next task is already waiting.
	turn3 := e.submitAsync(s.Session, `{"calls": [{"id": "c3", "name": "charge", "arguments": {"order": "A-3"}}]}`)
	tk3 := e.takeOne("charge")
	turn4 := e.submitAsync(s2.Session, `{"calls": [{"id": "c4", "name": "slow", "arguments": {"order": "A-4"}}]}`)
	a = e.answerNext("fail", tk3.Task, withNext(`{"error": "card declined"}`, next))
	if r := e.waitTurn(s.Session, turn3).Results[0]; r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, "card declined") {
		t.Fatalf("turn 3 result %+v: want the failure", r)
	}
	if len(a.Tasks) != 1 || a.Tasks[0].Call != "c4" || a.Tasks[0].HeartbeatTimeoutMS != 1000 {
		t.Fatalf("fail with next answered tasks %+v: want c4's task", a.Tasks)
	}
	// The worker never acts on c4's task (its answer went nowhere): lost at
	// the heartbeat_timeout, as a poll's task, and not handed out again.
	tk4 := a.Tasks[0]
	if r := e.waitTurn(s2.Session, turn4).Results[0]; r.Outcome != events.OutcomeIndeterminate || !strings.Contains(r.Content[0].Text, "heartbeat") {
		t.Fatalf("turn 4 result %+v: want indeterminate naming the missed heartbeat", r)
	}
	if got := e.pollTasks(1500*time.Millisecond, "slow"); len(got) != 0 {
		t.Fatalf("the lost never call was handed out again: %+v", got)
	}
	status, b := e.do("POST", "/v1/tasks/"+tk4.Task+"/complete", withNext(complete("late"), next))
	wantError(t, status, b, 409, CodeConflict, "lost")
}

// TestHarnessAnswerAndPollRefused attacks "next": another tenant's token
// with next is 409 and takes nothing, even of the attacker's own waiting
// tasks; a next the poll route would refuse (another tenant's or a
// built-in's tool, a subject pattern, bounds, unknown fields, duplicate
// keys) is refused before the answer is handed over, so the call still
// waits; a token without the workers scope is 403; and a tenant's next
// never takes another tenant's task of the same tool name.
func TestHarnessAnswerAndPollRefused(t *testing.T) {
	e := twoTenants(t, func(c *config.Config) {
		acme := c.Tenants["acme"]
		acme.Tokens = append(acme.Tokens, config.TenantToken{Token: "tok-acme-read", Principal: "reader", Scopes: []string{config.ScopeRead}})
		c.Tenants["acme"] = acme
	})
	e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, nil)
	s := e.open()
	turn := e.submitAsync(s.Session, `{"calls": [{"id": "a", "name": "lookup_order", "arguments": {"order": "A-1"}}]}`)
	tk := e.takeOne("lookup_order")

	// globex has a task of its own tool of the same name waiting.
	var gs sessionAnswer
	var gturn string
	e.as("tok-globex", func() {
		e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, nil)
		gs = e.open()
		gturn = e.submitAsync(gs.Session, `{"calls": [{"id": "g", "name": "lookup_order", "arguments": {"order": "G-1"}}]}`)
		next := `{"worker": "thief", "tools": ["lookup_order"], "max": 4, "wait_ms": 0}`
		for op, body := range map[string]string{"complete": complete("forged"), "fail": `{"error": "forged"}`} {
			status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/"+op, withNext(body, next))
			wantError(t, status, b, 409, CodeConflict)
		}
	})

	// acme's own token, with a next the poll route refuses.
	cases := map[string]struct {
		next   string
		status int
		code   string
		msg    []string
	}{
		"built-in tool":   {`{"worker": "w", "tools": ["read"]}`, 400, CodeInvalidRequest, []string{"next", "not a harness tool"}},
		"unregistered":    {`{"worker": "w", "tools": ["charge"]}`, 400, CodeInvalidRequest, []string{"next", "not a harness tool"}},
		"subject pattern": {`{"worker": "w", "tools": ["lookup_order.>"]}`, 400, CodeInvalidRequest, []string{"next", "not a tool name"}},
		"no tools":        {`{"worker": "w", "tools": []}`, 400, CodeInvalidRequest, []string{"next", "tools"}},
		"no worker":       {`{"tools": ["lookup_order"]}`, 400, CodeInvalidRequest, []string{"next", "worker"}},
		"max":             {`{"worker": "w", "tools": ["lookup_order"], "max": 65}`, 400, CodeInvalidRequest, []string{"next", "max"}},
		"wait":            {`{"worker": "w", "tools": ["lookup_order"], "wait_ms": 60001}`, 400, CodeInvalidRequest, []string{"next.wait_ms"}},
		"unknown field":   {`{"worker": "w", "tools": ["lookup_order"], "tenant": "globex"}`, 400, CodeInvalidBody, []string{`"tenant"`}},
		"duplicate key":   {`{"worker": "w", "tools": ["lookup_order"], "tools": ["x"]}`, 400, CodeInvalidBody, []string{"tools"}},
		"wrong type":      {`["lookup_order"]`, 400, CodeInvalidBody, []string{"next"}},
	}
	for name, c := range cases {
		for op, body := range map[string]string{"complete": complete("early"), "fail": `{"error": "early"}`} {
			status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/"+op, withNext(body, c.next))
			if status != c.status {
				t.Errorf("%s (%s): status %d %s, want %d", name, op, status, b, c.status)
				continue
			}
			wantError(t, status, b, c.status, c.code, c.msg...)
		}
	}
	e.as("tok-acme-read", func() {
		status, b := e.do("POST", "/v1/tasks/"+tk.Task+"/complete", withNext(complete("reader"), `{"worker": "w", "tools": ["lookup_order"]}`))
		wantError(t, status, b, 403, CodeInsufficientScope, "workers")
	})

	// Nothing refused was handed over: the call still waits, and acme's
	// next, held for a second, never takes globex's waiting task.
	a := e.answerNext("complete", tk.Task, withNext(complete("real"), `{"worker": "w1", "tools": ["lookup_order"], "max": 8, "wait_ms": 1000}`))
	if len(a.Tasks) != 0 {
		t.Fatalf("acme's next took %+v: want nothing (globex's task is globex's)", a.Tasks)
	}
	if r := e.waitTurn(s.Session, turn).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "real" {
		t.Fatalf("result %+v: want the real worker's answer", r)
	}
	// globex's task was never handed out by the refused posts: its first
	// attempt is still there for globex's worker.
	e.as("tok-globex", func() {
		g := e.takeOne("lookup_order")
		if g.Call != "g" || g.Attempt != 1 {
			t.Fatalf("globex's task %+v: want g, attempt 1", g)
		}
		e.must("POST", "/v1/tasks/"+g.Task+"/complete", complete("globex"), http.StatusOK, nil)
		if r := e.waitTurn(gs.Session, gturn).Results[0]; r.Content[0].Text != "globex" {
			t.Fatalf("globex result %+v", r)
		}
	})
}

// TestHarnessAnswerAndPollHangUp: a worker whose connection closes while
// its complete's next is held has its result taken, and the held poll ends
// with it: the next task is not handed to the closed connection but to the
// next poll, as its first attempt.
func TestHarnessAnswerAndPollHangUp(t *testing.T) {
	e := twoTenants(t)
	e.must("PUT", "/v1/tools/charge", spec(`, "timeout": "60s"`), http.StatusOK, nil)
	s := e.open()
	turn1 := e.submitAsync(s.Session, `{"calls": [{"id": "c1", "name": "charge", "arguments": {"order": "A-1"}}]}`)
	tk1 := e.takeOne("charge")

	body := withNext(complete("one"), `{"worker": "gone", "tools": ["charge"], "wait_ms": 60000}`)
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /v1/tasks/%s/complete HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-acme\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		tk1.Task, e.srv.Listener.Addr(), len(body), body)
	if r := e.waitTurn(s.Session, turn1).Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "one" {
		t.Fatalf("turn 1 result %+v: want the answer of the closed connection", r)
	}
	e.waitPolls("acme", 1)
	_ = conn.Close()
	e.waitPolls("acme", 0)

	turn2 := e.submitAsync(s.Session, `{"calls": [{"id": "c2", "name": "charge", "arguments": {"order": "A-2"}}]}`)
	tk2 := e.takeOne("charge")
	if tk2.Call != "c2" || tk2.Attempt != 1 {
		t.Fatalf("task %+v: want c2's first attempt", tk2)
	}
	e.must("POST", "/v1/tasks/"+tk2.Task+"/complete", complete("two"), http.StatusOK, nil)
	if r := e.waitTurn(s.Session, turn2).Results[0]; r.Content[0].Text != "two" {
		t.Fatalf("turn 2 result %+v", r)
	}
}

// waitPolls waits until tenant holds n polls on the node, by its metrics
// (labelled by tenant or not).
func (e *env) waitPolls(tenant string, n int) {
	e.t.Helper()
	want := map[string]bool{fmt.Sprintf(`callsheet_harness_polls_waiting{tenant=%q} %d`, tenant, n): true, fmt.Sprintf(`callsheet_harness_polls_waiting %d`, n): true}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		rec := httptest.NewRecorder()
		e.api.metrics.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil)) // the operator's: a node with tenants serves it elsewhere
		sc := bufio.NewScanner(rec.Body)
		found := false
		for sc.Scan() {
			if want[sc.Text()] {
				found = true
			}
		}
		if found {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.t.Fatalf("metrics never said %d polls of %s waiting", n, tenant)
}
