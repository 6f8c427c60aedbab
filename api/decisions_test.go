package api

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
)

// poll GETs path until ok says the body is what it waits for.
func (e *env) poll(path string, ok func([]byte) bool) []byte {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, b := e.do("GET", path, "")
		if status == http.StatusOK && ok(b) {
			return b
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("GET %s never became ready: %d %s", path, status, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestApprovalOverHTTP(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	e := newEnv(t, &cfg)
	s := e.open()
	base := "/v1/sessions/" + s.Session
	e.must("POST", base+"/turns?wait=0", `{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"a.txt","content":"A"}}]}`, http.StatusAccepted, nil)
	list := e.poll(base+"/approvals", func(b []byte) bool { return strings.Contains(string(b), `"call":"w"`) })
	if !strings.Contains(string(list), `"rule":"strict-default"`) || !strings.Contains(string(list), `"labels":["(none declared)"]`) {
		t.Fatalf("approvals = %s, want the write with its rule and labels", list)
	}
	if status, b := e.do("POST", base+"/approvals/w", `{"decision":"allow","scope":"tool"}`, "X-Callsheet-User", "erin"); status != http.StatusOK {
		t.Fatalf("approve: %d %s", status, b)
	}
	b := e.poll(base+"/turns/t1", func(b []byte) bool { return strings.Contains(string(b), `"complete"`) })
	if !strings.Contains(string(b), `"outcome":"ok"`) {
		t.Fatalf("approved turn = %s", b)
	}
	if got, _ := os.ReadFile(filepath.Join(s.Workspace, "a.txt")); string(got) != "A" {
		t.Fatalf("file = %q, want A", got)
	}
	// The header's "erin" is not believed: without tenants the decider is
	// the fixed principal "local".
	var found bool
	for _, ev := range e.events(s.Session, "") {
		if ev.Type == "ApprovalGranted" && strings.Contains(string(ev.Data), `"by":"local"`) && strings.Contains(string(ev.Data), `"scope":"tool"`) {
			found = true
		}
	}
	if !found {
		t.Fatal(`no ApprovalGranted by "local" with scope tool in the log`)
	}
}

// TestDeciderIsThePrincipal: each token's principal is what the log
// records; a body's "by" is refused with a 400 that says why, whatever it
// names.
func TestDeciderIsThePrincipal(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	cfg.Tenants = map[string]config.Tenant{
		"acme": {Token: "acme-plain", Tokens: []config.TenantToken{{Token: "acme-alice", Principal: "alice@example.com"}}},
	}
	e := newEnv(t, &cfg)
	e.token = "acme-plain"
	s := e.open()
	base := "/v1/sessions/" + s.Session
	e.must("POST", base+"/turns?wait=0", `{"id":"t1","calls":[{"id":"a","name":"write","arguments":{"path":"a.txt","content":"A"}},{"id":"b","name":"write","arguments":{"path":"b.txt","content":"B"}}]}`, http.StatusAccepted, nil)
	e.poll(base+"/approvals", func(b []byte) bool { return strings.Contains(string(b), `"call":"a"`) })
	for _, body := range []string{`{"decision":"allow","by":"mallory"}`, `{"decision":"allow","by":""}`, `{"decision":"allow","by":null}`, `{"decision":"allow","by":{"name":"x"}}`} {
		status, b := e.do("POST", base+"/approvals/a", body)
		wantError(t, status, b, http.StatusBadRequest, CodeInvalidBody, `"by" is not accepted`, "authenticated principal", `"acme"`)
	}
	e.token = "acme-alice"
	e.must("POST", base+"/approvals/a", `{"decision":"allow"}`, http.StatusOK, nil)
	e.poll(base+"/approvals", func(b []byte) bool { return strings.Contains(string(b), `"call":"b"`) })
	e.token = "acme-plain"
	if status, b := e.do("POST", base+"/approvals/b", `{"decision":"deny"}`, "X-Callsheet-User", "mallory"); status != http.StatusOK {
		t.Fatalf("deny: %d %s", status, b)
	}
	e.poll(base+"/turns/t1", func(b []byte) bool { return strings.Contains(string(b), `"complete"`) })
	by := map[string]string{}
	for _, ev := range e.events(s.Session, "") {
		if ev.Type == "ApprovalGranted" || ev.Type == "ApprovalDenied" {
			var d struct{ Call, By, Reason string }
			_ = json.Unmarshal(ev.Data, &d)
			by[d.Call] = d.By
			if ev.Type == "ApprovalDenied" && !strings.HasPrefix(d.Reason, "denied by acme:") {
				t.Errorf("denial reason %q, want it to name the principal acme", d.Reason)
			}
		}
	}
	if by["a"] != "alice@example.com" || by["b"] != "acme" {
		t.Fatalf("deciders %v, want a by alice@example.com (her token) and b by acme (the old form's principal)", by)
	}
	// The operator's /metrics counts the kind of decider, never who.
	status, m := e.operator("/metrics")
	if status != http.StatusOK || !strings.Contains(string(m), `callsheet_approvals_total{decider="principal",decision="allow",tool="write"} 1`) || !strings.Contains(string(m), `callsheet_approvals_total{decider="principal",decision="deny",tool="write"} 1`) {
		t.Fatalf("metrics: %d, want approvals counted by decider kind:\n%s", status, m)
	}
	for _, name := range []string{"alice", "acme", "mallory"} {
		if strings.Contains(string(m), name) {
			t.Errorf("/metrics names %q", name)
		}
	}
	// An answer's "by" is refused the same way.
	status, b := e.do("POST", base+"/answers/q", `{"answer":1,"by":"mallory"}`)
	wantError(t, status, b, http.StatusBadRequest, CodeInvalidBody, "authenticated principal")
}

func TestAnswerOverHTTP(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	base := "/v1/sessions/" + s.Session
	e.must("POST", base+"/turns?wait=0", `{"id":"t1","calls":[{"id":"q","name":"question","arguments":{"question":"which branch?"}}]}`, http.StatusAccepted, nil)
	e.poll(base+"/events?follow=false", func(b []byte) bool { return strings.Contains(string(b), `"ToolCallStarted"`) })
	e.must("POST", base+"/answers/q", `{"answer":{"branch":"main"}}`, http.StatusOK, nil)
	b := e.poll(base+"/turns/t1", func(b []byte) bool { return strings.Contains(string(b), `"complete"`) })
	var turn struct {
		Results []struct {
			Outcome string
			Content []struct{ JSON json.RawMessage }
		}
	}
	if err := json.Unmarshal(b, &turn); err != nil || turn.Results[0].Outcome != "ok" || !strings.Contains(string(turn.Results[0].Content[0].JSON), `"main"`) {
		t.Fatalf("answered question turn = %s", b)
	}
	status, body := e.do("POST", base+"/answers/q", `{"answer":2}`)
	wantError(t, status, body, 409, CodeConflict)
}
