package crash

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// waitTurn polls a turn until it is complete.
func waitTurn(t *testing.T, p *testnode.Proc, session, turn string) projections.Turn {
	t.Helper()
	var tv projections.Turn
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, err := p.Do("GET", "/v1/sessions/"+session+"/turns/"+turn, nil, &tv)
		if err == nil && code == 200 && tv.Status == projections.StatusComplete {
			return tv
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn %s not complete: %d %+v %v", turn, code, tv, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killDuring runs one call of tool, kills the node with SIGKILL while the
// tool sleeps after its side effect, restarts the node, and returns the
// settled result, the side-effect count, and the next turn.
func killDuring(t *testing.T, tool string) (projections.Turn, int, projections.Turn) {
	nodeBin, _ := binaries(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := writeConfigSleep(t, dir, "5", "30s")
	p := startNode(t, nodeBin, data, cfg, "")
	var open struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &open); err != nil || code != 201 {
		t.Fatalf("open: %d %v", code, err)
	}
	calls := []map[string]any{{"id": "c0", "name": tool, "arguments": map[string]any{}}}
	p.Do("POST", "/v1/sessions/"+open.Session+"/turns?wait=0", map[string]any{"id": "t1", "calls": calls}, nil)
	deadline := time.Now().Add(30 * time.Second)
	for countRuns(t, dir, "c0") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the tool never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Kill() // SIGKILL while the tool sleeps after its effect

	p = startNode(t, nodeBin, data, cfg, "")
	defer p.Stop(t)
	first := waitTurn(t, p, open.Session, "t1")
	next := []map[string]any{{"id": "r", "name": "read", "arguments": map[string]any{"path": "."}}}
	var second projections.Turn
	if code, err := p.Do("POST", "/v1/sessions/"+open.Session+"/turns", map[string]any{"id": "t2", "calls": next}, &second); err != nil || code != 200 {
		t.Fatalf("next turn: %d %v", code, err)
	}
	return first, countRuns(t, dir, "c0"), second
}

func TestKillDuringANeverToolIsIndeterminateAndNoticed(t *testing.T) {
	first, runs, second := killDuring(t, "bump_never")
	r := first.Results[0]
	if r.Outcome != events.OutcomeIndeterminate || runs != 1 {
		t.Fatalf("after kill -9: outcome %s with %d runs, want indeterminate and 1 run", r.Outcome, runs)
	}
	if len(second.Notices) != 1 {
		t.Fatalf("next turn notices %+v, want one", second.Notices)
	}
	n := second.Notices[0]
	if n.Call != "c0" || n.Tool != "bump_never" || n.Attempt != 1 || !strings.Contains(n.Message, "authoritative state") {
		t.Fatalf("notice %+v, want call c0 of bump_never, attempt 1, telling to check state", n)
	}
	fmt.Printf("kill during never tool: outcome=%s runs=%d notice=%q\n", r.Outcome, runs, n.Message)
}

func TestKillDuringASafeToolRunsItAgain(t *testing.T) {
	first, runs, second := killDuring(t, "bump_safe")
	r := first.Results[0]
	if r.Outcome != events.OutcomeOK || r.Attempts != 2 || runs != 2 {
		t.Fatalf("after kill -9: %s, attempts %d, %d runs; want ok, attempts 2, 2 runs", r.Outcome, r.Attempts, runs)
	}
	if len(second.Notices) != 0 {
		t.Fatalf("a safe call that finished left notices %+v", second.Notices)
	}
}

func TestANeverToolThatOutlivesItsTimeoutIsNotRetried(t *testing.T) {
	nodeBin, _ := binaries(t)
	dir := t.TempDir()
	p := startNode(t, nodeBin, filepath.Join(dir, "data"), writeConfigSleep(t, dir, "5", "300ms"), "")
	defer p.Stop(t)
	var open struct{ Session string }
	p.Do("POST", "/v1/sessions", map[string]any{}, &open)
	var tv projections.Turn
	calls := []map[string]any{{"id": "c0", "name": "bump_never", "arguments": map[string]any{}}}
	if code, err := p.Do("POST", "/v1/sessions/"+open.Session+"/turns", map[string]any{"id": "t1", "calls": calls}, &tv); err != nil || code != 200 {
		t.Fatalf("turn: %d %v", code, err)
	}
	time.Sleep(500 * time.Millisecond) // room for a retry, if one were (wrongly) scheduled
	if r := tv.Results[0]; r.Outcome != events.OutcomeIndeterminate || r.Attempts != 1 {
		t.Fatalf("timed-out never call: %s after %d attempts, want indeterminate after 1", r.Outcome, r.Attempts)
	}
	if runs := countRuns(t, dir, "c0"); runs != 1 {
		t.Fatalf("timed-out never call ran %d times, want 1", runs)
	}
}

func TestKillWithAPendingApprovalKeepsIt(t *testing.T) {
	nodeBin, _ := binaries(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// Strict mode: the side-effecting counter tool asks before it runs.
	cfgPath := writeConfigSleep(t, dir, "0", "30s")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["permission"] = map[string]any{"strict": true}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	p := startNode(t, nodeBin, data, cfgPath, "")
	var open struct{ Session string }
	p.Do("POST", "/v1/sessions", map[string]any{}, &open)
	base := "/v1/sessions/" + open.Session
	calls := []map[string]any{{"id": "c0", "name": "bump_never", "arguments": map[string]any{}}}
	p.Do("POST", base+"/turns?wait=0", map[string]any{"id": "t1", "calls": calls}, nil)
	pending := func(p *testnode.Proc) bool {
		var list struct{ Approvals []events.ApprovalRequested }
		code, err := p.Do("GET", base+"/approvals", nil, &list)
		return err == nil && code == 200 && len(list.Approvals) == 1 && list.Approvals[0].Call == "c0"
	}
	deadline := time.Now().Add(20 * time.Second)
	for !pending(p) {
		if time.Now().After(deadline) {
			t.Fatal("no pending approval")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Kill() // kill -9 while the approval is pending

	p = startNode(t, nodeBin, data, cfgPath, "")
	defer p.Stop(t)
	if !pending(p) {
		t.Fatal("the pending approval did not survive kill -9")
	}
	if runs := countRuns(t, dir, "c0"); runs != 0 {
		t.Fatalf("the call ran %d times before its approval", runs)
	}
	if code, err := p.Do("POST", base+"/approvals/c0", map[string]any{"decision": "allow"}, nil); err != nil || code != 200 {
		t.Fatalf("approve: %d %v", code, err)
	}
	tv := waitTurn(t, p, open.Session, "t1")
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || countRuns(t, dir, "c0") != 1 {
		t.Fatalf("after approval: %s with %d runs, want ok and one run", r.Outcome, countRuns(t, dir, "c0"))
	}
}
