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
	var found bool
	for _, ev := range e.events(s.Session, "") {
		if ev.Type == "ApprovalGranted" && strings.Contains(string(ev.Data), `"by":"erin"`) && strings.Contains(string(ev.Data), `"scope":"tool"`) {
			found = true
		}
	}
	if !found {
		t.Fatal("no ApprovalGranted by erin with scope tool in the log")
	}
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
