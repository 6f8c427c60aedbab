package node_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

func strictConfig() *config.Config {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	cfg.Agents = map[string]config.Agent{
		"planner":  {Mode: config.ModePlan},
		"reviewer": {Tools: []string{"read", "nap"}},
	}
	return &cfg
}

func waitApproval(t *testing.T, n *node.Node, s, call string) events.ApprovalRequested {
	t.Helper()
	var got events.ApprovalRequested
	waitFor(t, func() bool {
		list, err := n.Approvals(context.Background(), "default", s)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list {
			if a.Call == call {
				got = a
				return true
			}
		}
		return false
	})
	return got
}

func TestStrictModeAsksForSideEffectsOnly(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), strictConfig(), tt)
	defer n.Close()
	ctx := context.Background()
	info, _ := n.OpenSession(ctx, "default", "strict", "")
	s := info.Session

	// A read runs without asking.
	tv := submit(t, n, s, "t0", spec("r", "read", `{"path":"."}`))
	if tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("read in strict mode: %+v", tv.Results[0])
	}
	// A write asks and waits; allowing it runs it once.
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{spec("w", "write", `{"path":"a.txt","content":"A"}`)}, false); err != nil {
		t.Fatal(err)
	}
	req := waitApproval(t, n, s, "w")
	if req.Name != "write" || req.Rule != "strict-default" || len(req.Labels) == 0 {
		t.Fatalf("approval request %+v, want write asked by strict-default with labels", req)
	}
	if _, err := os.Stat(filepath.Join(info.Workspace, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("the write ran before it was approved")
	}
	if err := n.Approve(ctx, "default", s, "w", true, "alice", "looks fine", ""); err != nil {
		t.Fatal(err)
	}
	tv = submit(t, n, s, "t1")
	if tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("approved write: %+v", tv.Results[0])
	}
	// Denying a write commits blocked/denied and writes nothing.
	if _, err := n.SubmitTurn(ctx, "default", s, "t2", []events.CallSpec{spec("w2", "write", `{"path":"b.txt","content":"B"}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s, "w2")
	if err := n.Approve(ctx, "default", s, "w2", false, "bob", "not now", ""); err != nil {
		t.Fatal(err)
	}
	tv = submit(t, n, s, "t2")
	r := tv.Results[0]
	if r.Outcome != events.OutcomeBlocked || r.Block != events.BlockDenied || !strings.Contains(r.Content[0].Text, "not now") {
		t.Fatalf("denied write: %+v, want blocked/denied with the reason", r)
	}
	if _, err := os.Stat(filepath.Join(info.Workspace, "b.txt")); !os.IsNotExist(err) {
		t.Fatal("a denied write wrote its file")
	}
	evs := recorded(t, n, s)
	var by []string
	for _, ev := range evs {
		if ev.Type == events.TypeApprovalGranted || ev.Type == events.TypeApprovalDenied {
			p, _ := events.Decode(ev)
			switch p := p.(type) {
			case *events.ApprovalGranted:
				by = append(by, "granted:"+p.By)
			case *events.ApprovalDenied:
				by = append(by, "denied:"+p.By)
			}
		}
	}
	if strings.Join(by, ",") != "granted:alice,denied:bob" {
		t.Fatalf("approval provenance %v, want who decided", by)
	}
}

func TestPendingApprovalSurvivesARestart(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, strictConfig(), tt)
	s := openSession(t, n)
	ctx := context.Background()
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("m", 1)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s, "m")
	n.Close()

	n = startNode(t, dir, strictConfig(), tt)
	defer n.Close()
	waitApproval(t, n, s, "m")
	if err := n.Approve(ctx, "default", s, "m", true, "carol", "", ""); err != nil {
		t.Fatal(err)
	}
	tv := submit(t, n, s, "t1")
	if tv.Results[0].Outcome != events.OutcomeOK || tt.runs.Load() != 1 {
		t.Fatalf("after restart and approval: %+v, runs %d; want ok, ran once", tv.Results[0], tt.runs.Load())
	}
}

func TestAllowForTheSessionStopsFurtherAsks(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), strictConfig(), tt)
	defer n.Close()
	ctx := context.Background()
	s, other := openSession(t, n), openSession(t, n)
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{mutate("m1", 1)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s, "m1")
	if err := n.Approve(ctx, "default", s, "m1", true, "dave", "", events.ScopeTool); err != nil {
		t.Fatal(err)
	}
	submit(t, n, s, "t1")
	// Later calls of the tool in this session run without asking ...
	tv := submit(t, n, s, "t2", mutate("m2", 1), mutate("m3", 1))
	for _, r := range tv.Results {
		if r.Outcome != events.OutcomeOK {
			t.Fatalf("call after a session grant: %+v", r)
		}
	}
	// ... but another session still asks.
	if _, err := n.SubmitTurn(ctx, "default", other, "t1", []events.CallSpec{mutate("x", 1)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, other, "x")
}

func TestPlanModeAndAgentToolLists(t *testing.T) {
	tt := &testTools{}
	n := startNode(t, t.TempDir(), strictConfig(), tt)
	defer n.Close()
	ctx := context.Background()
	planner, err := n.OpenSession(ctx, "default", "", "planner")
	if err != nil {
		t.Fatal(err)
	}
	tv := submit(t, n, planner.Session, "t1", spec("w", "write", `{"path":"x","content":""}`), spec("sh", "shell", `{"command":"true"}`), spec("r", "read", `{"path":"."}`))
	for i, want := range []events.Block{events.BlockDenied, events.BlockDenied, ""} {
		if r := tv.Results[i]; r.Block != want {
			t.Errorf("plan mode %s: %s/%s, want block %q", r.Name, r.Outcome, r.Block, want)
		}
	}
	reviewer, err := n.OpenSession(ctx, "default", "", "reviewer")
	if err != nil {
		t.Fatal(err)
	}
	defs, _ := n.ToolsFor("default", "reviewer")
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	if strings.Join(names, ",") != "nap,read" {
		t.Fatalf("reviewer sees %v, want exactly [nap read]", names)
	}
	tv = submit(t, n, reviewer.Session, "t1", spec("w", "write", `{"path":"x","content":""}`))
	if r := tv.Results[0]; r.Block != events.BlockUnavailable {
		t.Fatalf("reviewer write: %s/%s, want blocked/unavailable", r.Outcome, r.Block)
	}
	_ = projections.StatusComplete
}

func TestApprovalTimeoutDenies(t *testing.T) {
	cfg := strictConfig()
	cfg.Permission.ApprovalTimeout = config.Duration(200 * time.Millisecond)
	tt := &testTools{}
	n := startNode(t, t.TempDir(), cfg, tt)
	defer n.Close()
	s := openSession(t, n)
	tv := submit(t, n, s, "t1", mutate("m", 1))
	r := tv.Results[0]
	if r.Block != events.BlockDenied || !strings.Contains(r.Content[0].Text, "approval-timeout") || tt.runs.Load() != 0 {
		t.Fatalf("unanswered approval: %+v (runs %d), want denied by approval-timeout and nothing run", r, tt.runs.Load())
	}
}

// TestEscalationIsAskedAndReachesTheShell: an escalated shell call is never
// allowed automatically; once approved it runs outside the sandbox, while
// the same write without escalation is refused by the sandbox.
func TestEscalationIsAskedAndReachesTheShell(t *testing.T) {
	outside := t.TempDir()
	tt := &testTools{}
	n := startNode(t, t.TempDir(), nil, tt) // not strict: only escalation asks
	defer n.Close()
	s := openSession(t, n)
	ctx := context.Background()
	confined := submit(t, n, s, "t1", spec("c", "shell", `{"command":"echo hi > `+outside+`/confined.txt"}`))
	if _, err := os.Stat(filepath.Join(outside, "confined.txt")); !os.IsNotExist(err) {
		t.Fatalf("a sandboxed shell wrote outside the workspace (%v): %+v", err, confined.Results[0])
	}
	if _, err := n.SubmitTurn(ctx, "default", s, "t2", []events.CallSpec{spec("e", "shell", `{"command":"echo hi > `+outside+`/escalated.txt","escalate":true}`)}, false); err != nil {
		t.Fatal(err)
	}
	req := waitApproval(t, n, s, "e")
	if !req.Escalate || req.Rule != "escalation" {
		t.Fatalf("approval request %+v, want an escalation asked by the escalation rule", req)
	}
	if _, err := os.Stat(filepath.Join(outside, "escalated.txt")); !os.IsNotExist(err) {
		t.Fatal("the escalated call ran before it was approved")
	}
	if err := n.Approve(ctx, "default", s, "e", true, "root-owner", "needs the host", events.ScopeTool); err != nil {
		t.Fatal(err)
	}
	if r := submit(t, n, s, "t2").Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("approved escalation: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "escalated.txt")); err != nil {
		t.Fatalf("the approved escalated call did not run outside the sandbox: %v", err)
	}
	// A grant never covers escalation: the next escalated call asks again.
	if _, err := n.SubmitTurn(ctx, "default", s, "t3", []events.CallSpec{spec("e2", "shell", `{"command":"true","escalate":true}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s, "e2")
}
