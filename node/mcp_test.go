package node_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

func filesystemServer(t *testing.T, dir string) config.MCPServer {
	return config.MCPServer{Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-filesystem/dist/index.js"), dir}}
}

func helperServer(env ...string) config.MCPServer {
	e := map[string]string{mcptest.Env: "1"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		e[k] = v
	}
	return config.MCPServer{Command: []string{os.Args[0]}, Env: e}
}

// mcpNode starts a node with the given MCP servers (strict mode when asked)
// and returns it with its log.
func mcpNode(t *testing.T, strict bool, servers map[string]config.MCPServer, tune ...func(*config.Config)) (*node.Node, *testenv.Buffer) {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = strict
	cfg.MCPServers = servers
	cfg.Retry.InitialDelay = config.Duration(300 * time.Millisecond)
	for _, f := range tune {
		f(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, logs
}

func wait(t *testing.T, n *node.Node, s, turn string) projections.Turn {
	t.Helper()
	var tv projections.Turn
	waitFor(t, func() bool {
		var err error
		tv, err = n.Turn(context.Background(), "default", s, turn)
		return err == nil && tv.Status == projections.StatusComplete
	})
	return tv
}

// TestMCPFilesystemThroughCallsheet is the must-show: with the
// filesystem server configured, its read and write tools run through
// callsheet; in strict mode the write asks, the read is read-only (and so
// asks nothing) only when the server is trusted, and invalid arguments are
// blocked before anything reaches the server.
func TestMCPFilesystemThroughCallsheet(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("remember the milk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	trusted := filesystemServer(t, dir)
	trusted.TrustAnnotations = true
	n, logs := mcpNode(t, true, map[string]config.MCPServer{"fs": filesystemServer(t, dir), "tfs": trusted})
	if !strings.Contains(logs.String(), `msg="mcp server ready" server=fs transport=stdio tools=`) || !strings.Contains(logs.String(), "mcp__fs__write_file") {
		t.Fatalf("start-up log does not list the server's tools:\n%s", logs)
	}
	ctx := context.Background()
	s := openSession(t, n)
	notes := filepath.Join(dir, "notes.txt")
	out := filepath.Join(dir, "out.txt")

	// Untrusted: the read is strictest, so strict mode asks for it too.
	if _, err := n.SubmitTurn(ctx, "default", s, "r1", []events.CallSpec{spec("r", "mcp__fs__read_text_file", fmt.Sprintf(`{"path": %q}`, notes))}, false); err != nil {
		t.Fatal(err)
	}
	req := waitApproval(t, n, s, "r")
	if req.Effect != "side_effecting" || req.Rule != "strict-default" {
		t.Fatalf("untrusted read asked as %+v, want side_effecting by strict-default", req)
	}
	if err := n.Approve(ctx, "default", s, "r", true, "alice", "", ""); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, n, s, "r1").Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(r.Content[0].Text, "remember the milk") {
		t.Fatalf("approved untrusted read: %+v", r)
	}

	// Trusted: the read is read-only and runs at once. The optional fields
	// come as null, as a model in OpenAI's strict mode sends them: they
	// count as left out, and the server never sees a null it would refuse.
	tv := submit(t, n, s, "r2", spec("r", "mcp__tfs__read_text_file", fmt.Sprintf(`{"path": %q, "head": null, "tail": null}`, notes)))
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(r.Content[0].Text, "remember the milk") {
		t.Fatalf("trusted read: %+v", r)
	}

	// The write asks even on the trusted server, and writes only once allowed.
	for i, server := range []string{"fs", "tfs"} {
		turn, call := fmt.Sprintf("w%d", i), fmt.Sprintf("w%d", i)
		if _, err := n.SubmitTurn(ctx, "default", s, turn, []events.CallSpec{spec(call, "mcp__"+server+"__write_file", fmt.Sprintf(`{"path": %q, "content": "from %s"}`, out, server))}, false); err != nil {
			t.Fatal(err)
		}
		req := waitApproval(t, n, s, call)
		if req.Effect != "side_effecting" || !strings.Contains(strings.Join(req.Labels, ","), "irreversible") {
			t.Fatalf("%s write asked as %+v, want side_effecting labelled irreversible", server, req)
		}
		if _, err := os.Stat(out); i == 0 && !os.IsNotExist(err) {
			t.Fatal("the write ran before it was approved")
		}
		if err := n.Approve(ctx, "default", s, call, true, "alice", "", ""); err != nil {
			t.Fatal(err)
		}
		if r := wait(t, n, s, turn).Results[0]; r.Outcome != events.OutcomeOK {
			t.Fatalf("approved %s write: %+v", server, r)
		}
		if b, _ := os.ReadFile(out); string(b) != "from "+server {
			t.Fatalf("file after the %s write = %q", server, b)
		}
	}

	// Invalid arguments are blocked; nothing is asked, nothing is written.
	tv = submit(t, n, s, "bad",
		spec("b1", "mcp__tfs__write_file", fmt.Sprintf(`{"path": %q}`, filepath.Join(dir, "never.txt"))),
		spec("b2", "mcp__tfs__read_text_file", `{"path": 42}`),
		spec("b3", "mcp__tfs__write_file", fmt.Sprintf(`{"path": %q, "content": "x", "mode": "0777"}`, filepath.Join(dir, "never.txt"))))
	for _, r := range tv.Results {
		if r.Outcome != events.OutcomeBlocked || r.Block != events.BlockInvalidArguments {
			t.Errorf("call %s with invalid arguments: %+v, want blocked/invalid_arguments", r.ID, r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never.txt")); !os.IsNotExist(err) {
		t.Fatal("a blocked write reached the server")
	}

	// The tools appear in the model's tool list under their mcp__ names.
	ts, err := n.ToolsFor("default", "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ts {
		names = append(names, x.Name)
	}
	for _, want := range []string{"mcp__fs__read_text_file", "mcp__fs__write_file", "mcp__tfs__list_directory"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("ToolsFor lacks %s", want)
		}
	}
}

// TestMCPServerThatCannotStart: the node starts, says so in its log, and a
// call to the server's tools is blocked as unavailable with the reason.
func TestMCPServerThatCannotStart(t *testing.T) {
	n, logs := mcpNode(t, false, map[string]config.MCPServer{
		"broken": {Command: []string{"sh", "-c", "echo 'cannot open /etc/broken.conf' >&2; exit 2"}},
		"h":      helperServer(),
	})
	if !strings.Contains(logs.String(), `msg="mcp server not started; its tools are unavailable until it starts" server=broken reason=`) || !strings.Contains(logs.String(), "cannot open /etc/broken.conf") {
		t.Fatalf("start-up log does not say the server could not start, and why:\n%s", logs)
	}
	s := openSession(t, n)
	tv := submit(t, n, s, "t", spec("c", "mcp__broken__anything", `{}`), spec("e", "mcp__h__echo", `{"text": "fine"}`))
	r := tv.Results[0]
	if r.Outcome != events.OutcomeBlocked || r.Block != events.BlockUnavailable || !strings.Contains(r.Content[0].Text, "cannot open /etc/broken.conf") {
		t.Fatalf("call to a server that cannot start: %+v, want blocked/unavailable with the reason", r)
	}
	if r := tv.Results[1]; r.Outcome != events.OutcomeOK || r.Content[0].Text != "fine" {
		t.Fatalf("call to the working server beside it: %+v", r)
	}
}

// TestMCPServerCrashMidCall kills a real third-party server (everything's
// long-running operation, untrusted, so replay never) while the call runs:
// the call is indeterminate and is not run again; the server is restarted
// and the next call works. A replay-safe call whose server crashes is
// retried on the restarted server instead.
func TestMCPServerCrashMidCall(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	safe := helperServer(mcptest.LogEnv + "=" + runs)
	safe.Tools = map[string]config.MCPTool{"crash_once": {Replay: "safe"}}
	n, _ := mcpNode(t, false, map[string]config.MCPServer{
		"ev": {Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}},
		"h":  safe,
	})
	ctx := context.Background()
	s := openSession(t, n)
	pid := 0
	for _, st := range n.MCPStatus() {
		if st.Server == "ev" {
			pid = st.PID
		}
	}
	if _, err := n.SubmitTurn(ctx, "default", s, "long", []events.CallSpec{spec("op", "mcp__ev__trigger-long-running-operation", `{"duration": 60, "steps": 60}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, ev := range recorded(t, n, s) {
			if ev.Type == events.TypeToolCallStarted {
				return true
			}
		}
		return false
	})
	time.Sleep(200 * time.Millisecond) // let the request reach the server
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	r := wait(t, n, s, "long").Results[0]
	if r.Outcome != events.OutcomeIndeterminate || r.Attempts != 1 || !strings.Contains(r.Content[0].Text, "went away while the call ran") {
		t.Fatalf("never call whose server was killed: %+v, want indeterminate after one attempt, saying why", r)
	}
	starts := 0
	for _, ev := range recorded(t, n, s) {
		if ev.Type == events.TypeToolCallStarted {
			starts++
		}
	}
	if starts != 1 {
		t.Fatalf("%d ToolCallStarted, want 1: an indeterminate never call is not run again", starts)
	}
	waitFor(t, func() bool {
		for _, st := range n.MCPStatus() {
			if st.Server == "ev" {
				return st.Connected && st.Sessions == 2
			}
		}
		return false
	})
	if r := submit(t, n, s, "after", spec("e", "mcp__ev__echo", `{"message": "restarted"}`)).Results[0]; r.Outcome != events.OutcomeOK || !strings.Contains(r.Content[0].Text, "restarted") {
		t.Fatalf("call after the restart: %+v", r)
	}

	// Replay-safe: the crash is retried until the server is back (an
	// attempt made while it restarts is not sent, and retried in turn).
	r = submit(t, n, s, "safe", spec("c", "mcp__h__crash_once", `{}`)).Results[0]
	if r.Outcome != events.OutcomeOK || r.Content[0].Text != "survived" || r.Attempts < 2 {
		t.Fatalf("safe call whose server crashed: %+v, want ok on a later attempt", r)
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 2 {
		t.Fatalf("crash_once reached the server %d times, want 2 (the crash and the retry that answered)", strings.Count(string(b), "run"))
	}
}

// TestMCPPlanStaysWhatWasDecided: a call planned (and waiting for approval)
// before its tool vanished from the server's list still runs as planned
// once approved, and reaches the server, which says it has no such tool; a
// turn planned after the change is blocked as unavailable, saying why.
func TestMCPPlanStaysWhatWasDecided(t *testing.T) {
	n, _ := mcpNode(t, true, map[string]config.MCPServer{"h": helperServer()})
	ctx := context.Background()
	s := openSession(t, n)
	if _, err := n.SubmitTurn(ctx, "default", s, "t1", []events.CallSpec{spec("x", "mcp__h__peak", `{}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s, "x")
	// Another session removes the tool from the server meanwhile (strict
	// mode asks for that too).
	s2 := openSession(t, n)
	if _, err := n.SubmitTurn(ctx, "default", s2, "rm", []events.CallSpec{spec("rm", "mcp__h__remove_tool", `{"name": "peak"}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitApproval(t, n, s2, "rm")
	if err := n.Approve(ctx, "default", s2, "rm", true, "ops", "", ""); err != nil {
		t.Fatal(err)
	}
	wait(t, n, s2, "rm")
	waitFor(t, func() bool { _, ok := n.Registry().Get("mcp__h__peak"); return !ok })

	if err := n.Approve(ctx, "default", s, "x", true, "alice", "", ""); err != nil {
		t.Fatal(err)
	}
	r := wait(t, n, s, "t1").Results[0]
	if r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, `unknown tool "peak"`) {
		t.Fatalf("call planned before the tool vanished: %+v, want it run and refused by the server", r)
	}
	r = submit(t, n, s, "t2", spec("y", "mcp__h__peak", `{}`)).Results[0]
	if r.Outcome != events.OutcomeBlocked || r.Block != events.BlockUnavailable || !strings.Contains(r.Content[0].Text, "offers no tool named so") {
		t.Fatalf("call planned after: %+v, want blocked/unavailable saying the server no longer offers it", r)
	}
}

// TestMCPCallThatNeverLeftIsAnError: with concurrency.mcp_connections = 1,
// a never call whose timeout passes while it waits for the busy server's
// one slot was never sent: it is an error, not indeterminate.
func TestMCPCallThatNeverLeftIsAnError(t *testing.T) {
	h := helperServer()
	h.Tools = map[string]config.MCPTool{"echo": {Timeout: config.Duration(500 * time.Millisecond)}}
	n, _ := mcpNode(t, false, map[string]config.MCPServer{"h": h}, func(c *config.Config) { c.Concurrency.MCPConnections = 1 })
	ctx := context.Background()
	busy, waiting := openSession(t, n), openSession(t, n)
	if _, err := n.SubmitTurn(ctx, "default", busy, "hold", []events.CallSpec{spec("s", "mcp__h__slow", `{"ms": 2000}`)}, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		for _, ev := range recorded(t, n, busy) {
			if ev.Type == events.TypeToolCallStarted {
				return true
			}
		}
		return false
	})
	r := submit(t, n, waiting, "w", spec("e", "mcp__h__echo", `{"text": "x"}`)).Results[0]
	if r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, "was not sent") {
		t.Fatalf("call that never got a connection: %+v, want an error saying it was not sent (not indeterminate)", r)
	}
}
