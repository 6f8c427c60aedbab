package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/tool"
)

// TestToolListChanged: a server that adds and removes a tool while
// connected sends notifications/tools/list_changed; the registry follows,
// and a call planned before the removal still finds the tool to run.
func TestToolListChanged(t *testing.T) {
	_, reg := start(t, []Server{helper("h")})
	add := mustTool(t, reg, "mcp__h__add_tool")
	if _, err := run(t, add, `{"name": "fresh.tool"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "mcp__h__fresh_tool to be registered", func() bool { _, ok := reg.Get("mcp__h__fresh_tool"); return ok })
	fresh := mustTool(t, reg, "mcp__h__fresh_tool")
	if res, err := run(t, fresh, `{}`); err != nil || textResult(res) != "added tool fresh.tool" {
		t.Fatalf("fresh tool = %q, %v", textResult(res), err)
	}
	if _, err := run(t, mustTool(t, reg, "mcp__h__remove_tool"), `{"name": "fresh.tool"}`); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "mcp__h__fresh_tool to go", func() bool { _, ok := reg.Get("mcp__h__fresh_tool"); return !ok })
	if _, ok := reg.Resolve("mcp__h__fresh_tool"); !ok {
		t.Fatal("Resolve lost the removed tool: a call planned before the change would find nothing to run")
	}
	// Run now, the server says it has no such tool: a permanent error.
	_, err := run(t, fresh, `{}`)
	if err == nil || !errors.Is(err, tool.ErrPermanent) {
		t.Fatalf("calling a tool the server removed: err=%v, want the server's permanent refusal", err)
	}
}

// TestServerCannotStart: a program that does not exist, and one that exits
// before the handshake, leave the Manager running with the reason in the
// status and in Unavailable, and the others' tools registered.
func TestServerCannotStart(t *testing.T) {
	m, reg := start(t, []Server{
		{Name: "missing", Command: []string{"/nonexistent/mcp-server"}},
		{Name: "dies", Command: []string{"sh", "-c", "echo 'fatal: no API key configured' >&2; exit 3"}},
		helper("ok"),
	})
	byName := map[string]Status{}
	for _, st := range m.Status() {
		byName[st.Server] = st
	}
	if st := byName["missing"]; st.Connected || !strings.Contains(st.Reason, "cannot start /nonexistent/mcp-server") {
		t.Errorf("missing: %+v, want a reason naming the program", st)
	}
	if st := byName["dies"]; st.Connected || !strings.Contains(st.Reason, "fatal: no API key configured") {
		t.Errorf("dies: %+v, want its stderr in the reason", st)
	}
	if !byName["ok"].Connected {
		t.Errorf("ok: %+v, want connected beside the broken ones", byName["ok"])
	}
	mustTool(t, reg, "mcp__ok__echo")
	for name, want := range map[string]string{
		"mcp__missing__read": `the MCP server "missing" has not started: cannot start`,
		"mcp__dies__x":       "fatal: no API key configured",
		"mcp__nope__x":       `no MCP server named "nope" is configured`,
		"mcp__ok__nothing":   "offers no tool named so (its tools: mcp__ok__add_tool",
		"read":               "",
	} {
		if got := m.Unavailable(name); !strings.Contains(got, want) || (want == "" && got != "") {
			t.Errorf("Unavailable(%s)=%q, want %q", name, got, want)
		}
	}
}

// TestServerCrashMidCall kills the server process while a call runs: the
// call fails as lost (never as an ordinary error or success), the server is
// restarted with a new process, and the next call works.
func TestServerCrashMidCall(t *testing.T) {
	runs := filepath.Join(t.TempDir(), "runs")
	m, reg := start(t, []Server{helper("h", mcptest.LogEnv+"="+runs)})
	first := m.Status()[0]
	slow := mustTool(t, reg, "mcp__h__slow")
	done := make(chan error, 1)
	go func() {
		_, err := run(t, slow, `{"ms": 60000}`)
		done <- err
	}()
	waitFor(t, "the slow call to start on the server", func() bool { b, _ := os.ReadFile(runs); return len(b) > 0 })
	if err := syscall.Kill(first.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the call did not return after its server was killed")
	}
	if !errors.Is(err, tool.ErrLost) || errors.Is(err, tool.ErrNotSent) {
		t.Fatalf("call whose server was killed: err=%v, want tool.ErrLost", err)
	}
	if !strings.Contains(err.Error(), `"h" went away while the call ran`) {
		t.Errorf("message %q does not say what happened", err)
	}
	waitFor(t, "the server to be restarted", func() bool { st := m.Status()[0]; return st.Connected && st.Sessions == 2 })
	if st := m.Status()[0]; st.PID == first.PID || st.PID == 0 {
		t.Fatalf("restarted server pid %d, first %d: want a new process", st.PID, first.PID)
	}
	echo := mustTool(t, reg, "mcp__h__echo")
	if res, err := run(t, echo, `{"text": "back"}`); err != nil || textResult(res) != "back" {
		t.Fatalf("echo after restart = %q, %v", textResult(res), err)
	}
	if b, _ := os.ReadFile(runs); strings.Count(string(b), "run") != 1 {
		t.Fatalf("slow ran %d times, want once: the manager must never resend a call", strings.Count(string(b), "run"))
	}
}

// TestServerExitsMidCall: the server exits by itself in the middle of a
// call (the exit tool), with the same outcome as a kill.
func TestServerExitsMidCall(t *testing.T) {
	m, reg := start(t, []Server{helper("h")})
	_, err := run(t, mustTool(t, reg, "mcp__h__exit"), `{"code": 7}`)
	if !errors.Is(err, tool.ErrLost) {
		t.Fatalf("exit mid-call: err=%v, want tool.ErrLost", err)
	}
	waitFor(t, "the restart", func() bool { st := m.Status()[0]; return st.Connected && st.Sessions == 2 })
}

// TestCallWhileDown: a call made while the server is not connected fails at
// once as not sent, with the reason.
func TestCallWhileDown(t *testing.T) {
	m, reg := start(t, []Server{helper("h")}, WithBackoff(30*time.Second, time.Minute))
	echo := mustTool(t, reg, "mcp__h__echo")
	_ = syscall.Kill(m.Status()[0].PID, syscall.SIGKILL)
	waitFor(t, "the server to be seen down", func() bool { return !m.Status()[0].Connected })
	_, err := run(t, echo, `{"text": "x"}`)
	if !errors.Is(err, tool.ErrNotSent) || !strings.Contains(err.Error(), "not connected") {
		t.Fatalf("call while down: err=%v, want not sent", err)
	}
	if _, ok := reg.Get("mcp__h__echo"); !ok {
		t.Fatal("a server's tools vanished while it restarts")
	}
}

// TestMaxInFlight: at most MaxInFlight calls reach one server at once; a
// call that cannot get a slot before its deadline fails as not sent.
func TestMaxInFlight(t *testing.T) {
	_, reg := start(t, []Server{helper("h")}, WithMaxInFlight(2))
	slow := mustTool(t, reg, "mcp__h__slow")
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := run(t, slow, `{"ms": 200}`); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	res, err := run(t, mustTool(t, reg, "mcp__h__peak"), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	if got := textResult(res); got != "2" {
		t.Fatalf("peak overlapping calls on the server = %s, want 2 (the cap)", got)
	}
	// Both slots busy: a call whose deadline passes while it waits was not sent.
	hold := make(chan struct{})
	for range 2 {
		go func() { _, _ = run(t, slow, `{"ms": 3000}`); hold <- struct{}{} }()
	}
	time.Sleep(300 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = slow.Run(ctx, json.RawMessage(`{"ms": 1}`))
	if !errors.Is(err, tool.ErrNotSent) || !strings.Contains(err.Error(), "concurrency.mcp_connections") {
		t.Fatalf("call without a slot: err=%v, want not sent naming the cap", err)
	}
	<-hold
	<-hold
}

// TestResourceTool lists and reads a server's resources through the one
// read-only tool.
func TestResourceTool(t *testing.T) {
	_, reg := start(t, []Server{helper("h")})
	rt := mustTool(t, reg, "mcp__h__read_resource")
	if rt.Effect != tool.EffectReadOnly || rt.Replay != tool.ReplaySafe {
		t.Fatalf("resource tool declarations=%+v, want read_only and safe", rt.Declarations)
	}
	res, err := run(t, rt, `{}`)
	if err != nil || !strings.Contains(textResult(res), `"uri":"mem://hello"`) {
		t.Fatalf("listing = %s, %v", textResult(res), err)
	}
	res, err = run(t, rt, `{"uri": "mem://hello"}`)
	if err != nil || textResult(res) != "hello from a resource" {
		t.Fatalf("read = %q, %v", textResult(res), err)
	}
	if _, err := run(t, rt, `{"uri": "mem://absent"}`); err == nil {
		t.Fatal("reading an absent resource succeeded")
	}
}

// TestEverythingServer runs the real everything server over stdio and over
// streamable HTTP: tools, a call with structured arguments, the resource
// tool, and a minimal environment (the node's own variables stay out).
func TestEverythingServer(t *testing.T) {
	t.Setenv("CALLSHEET_TEST_SECRET", "must-not-leak")
	url, _ := everythingHTTP(t)
	m, reg := start(t, []Server{
		everythingStdio(t, "ev", map[string]string{"GIVEN_BY_CONFIG": "yes"}),
		{Name: "evh", URL: url, Headers: map[string]string{"X-Callsheet-Test": "1"}},
	})
	for _, st := range m.Status() {
		if !st.Connected {
			t.Fatalf("%s not connected: %s", st.Server, st.Reason)
		}
	}
	for _, server := range []string{"ev", "evh"} {
		sum := mustTool(t, reg, ToolName(server, "get-sum"))
		if res, err := run(t, sum, `{"a": 2, "b": 40}`); err != nil || !strings.Contains(textResult(res), "42") {
			t.Errorf("%s get-sum = %q, %v", server, textResult(res), err)
		}
		echo := mustTool(t, reg, ToolName(server, "echo"))
		if res, err := run(t, echo, `{"message": "über"}`); err != nil || !strings.Contains(textResult(res), "über") {
			t.Errorf("%s echo = %q, %v", server, textResult(res), err)
		}
		rt := mustTool(t, reg, ToolName(server, ResourceTool))
		res, err := run(t, rt, `{}`)
		if err != nil || !strings.Contains(textResult(res), "demo://") {
			t.Errorf("%s resources = %.300s, %v", server, textResult(res), err)
		}
		img := mustTool(t, reg, ToolName(server, "get-tiny-image"))
		res, err = run(t, img, `{}`)
		if err != nil {
			t.Errorf("%s get-tiny-image: %v", server, err)
		}
		found := false
		for _, p := range res.Parts {
			found = found || (p.Type == tool.PartImage && p.MIME == "image/png" && len(p.Data) > 0)
		}
		if !found {
			t.Errorf("%s get-tiny-image parts %+v: want a PNG image part", server, res.Parts)
		}
	}
	env, err := run(t, mustTool(t, reg, "mcp__ev__get-env"), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	got := textResult(env)
	if strings.Contains(got, "must-not-leak") || !strings.Contains(got, "GIVEN_BY_CONFIG") {
		t.Fatalf("server environment: %.500s\nwant GIVEN_BY_CONFIG and not the node's CALLSHEET_TEST_SECRET", got)
	}
	_ = fmt.Sprint
}

// TestNameCollisionsAndLongNames: two server tools that sanitise to one
// name are not both registered (the first by the server's name wins, the
// other is refused with a message naming both), and a name past 64
// characters is shortened with a stable hash and still calls its tool.
func TestNameCollisionsAndLongNames(t *testing.T) {
	m, reg := start(t, []Server{helper("h")})
	add := mustTool(t, reg, "mcp__h__add_tool")
	long := "a-tool-name-that-goes-on-" + strings.Repeat("and-on-", 8)
	for _, n := range []string{"dup_x", "dup.x", long, "read_resource"} {
		if _, err := run(t, add, fmt.Sprintf(`{"name": %q}`, n)); err != nil {
			t.Fatal(err)
		}
	}
	longName := ToolName("h", long)
	waitFor(t, "the added tools", func() bool {
		_, a := reg.Get(longName)
		return a && len(m.Status()[0].Refused) == 2
	})
	refused := m.Status()[0].Refused
	if why := refused["dup.x"]; !strings.Contains(why, "mcp__h__dup_x") || !strings.Contains(why, `its tool "dup_x"`) {
		t.Errorf("dup.x refused with %q, want the shared name and the tool that has it", why)
	}
	if why := refused["read_resource"]; !strings.Contains(why, "reads its resources") {
		t.Errorf("read_resource refused with %q, want the resource tool named", why)
	}
	if res, err := run(t, mustTool(t, reg, "mcp__h__dup_x"), `{}`); err != nil || textResult(res) != "added tool dup_x" {
		t.Fatalf("mcp__h__dup_x called %q (%v), want the tool dup_x", textResult(res), err)
	}
	if len(longName) != MaxName {
		t.Fatalf("long name %q has %d characters, want %d", longName, len(longName), MaxName)
	}
	if res, err := run(t, mustTool(t, reg, longName), `{}`); err != nil || textResult(res) != "added tool "+long {
		t.Fatalf("%s called %q (%v)", longName, textResult(res), err)
	}
}

// TestServerStillStarting: a server slower than Start's wait is reported
// as starting (not as failed), and connects later on its own.
func TestServerStillStarting(t *testing.T) {
	reg := &tool.Registry{}
	slow := Server{Name: "slow", Command: []string{"sh", "-c", "sleep 1; exec \"$0\"", os.Args[0]}, Env: map[string]string{mcptest.Env: "1"}}
	m, err := New(reg, []Server{slow}, WithLogger(logtest.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	st := m.Start(context.Background(), 10*time.Millisecond)[0]
	if !st.Starting || st.Connected {
		t.Fatalf("status after a short wait: %+v, want starting", st)
	}
	if why := m.Unavailable("mcp__slow__echo"); !strings.Contains(why, "still starting") {
		t.Fatalf("Unavailable while starting = %q", why)
	}
	waitFor(t, "the slow server to connect", func() bool { return m.Status()[0].Connected })
	mustTool(t, reg, "mcp__slow__echo")
}
