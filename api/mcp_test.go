package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/projections"
)

// bearer is an http.RoundTripper that sends a bearer token (and an optional
// Host) with every request.
type bearer struct {
	token, host string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.token != "" {
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	if b.host != "" {
		r.Host = b.host
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpClient connects an SDK client to the env's /mcp (path may add a
// query), with token as its bearer token; opts may set handlers.
func (e *env) mcpClient(path, token string, opts *sdk.ClientOptions) (*sdk.ClientSession, error) {
	c := sdk.NewClient(&sdk.Implementation{Name: "test-client", Version: "1"}, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: e.srv.URL + path, HTTPClient: &http.Client{Transport: bearer{token: token}}}, nil)
}

func (e *env) mustMCP(path, token string, opts *sdk.ClientOptions) *sdk.ClientSession {
	e.t.Helper()
	cs, err := e.mcpClient(path, token, opts)
	if err != nil {
		e.t.Fatalf("connect to %s: %v", path, err)
	}
	e.t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) *sdk.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("tools/call %s: %v", name, err)
	}
	return res
}

func resultText(r *sdk.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// TestMCPServerTools: an MCP client sees the tool surface with annotations
// derived from the declarations, and each tools/call is a one-call turn of
// the client's own callsheet session, validated before it runs.
func TestMCPServerTools(t *testing.T) {
	e := newEnv(t, nil)
	cs := e.mustMCP("/mcp", "", nil)
	if got := cs.InitializeResult().ServerInfo.Name; got != "callsheet" {
		t.Fatalf("server name %q", got)
	}
	tools := map[string]*sdk.Tool{}
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		tools[tl.Name] = tl
	}
	read, write := tools["read"], tools["write"]
	if read == nil || write == nil {
		t.Fatalf("tools/list lacks read or write: %d tools", len(tools))
	}
	if a := read.Annotations; !a.ReadOnlyHint || a.DestructiveHint == nil || *a.DestructiveHint || !a.IdempotentHint {
		t.Errorf("read annotations %+v, want read-only, not destructive, idempotent", a)
	}
	if a := write.Annotations; a.ReadOnlyHint || a.DestructiveHint == nil || !*a.DestructiveHint {
		t.Errorf("write annotations %+v, want destructive, not read-only", a)
	}
	if read.Meta["callsheet/effect"] != "read_only" || write.Meta["callsheet/effect"] != "side_effecting" {
		t.Errorf("_meta effects %v, %v", read.Meta["callsheet/effect"], write.Meta["callsheet/effect"])
	}
	if !strings.Contains(read.Description, "Guidelines:") {
		t.Errorf("read description lacks its guidelines: %q", read.Description)
	}

	res := callTool(t, cs, "write", map[string]any{"path": "hello.txt", "content": "over MCP"})
	if res.IsError {
		t.Fatalf("write: %s", resultText(res))
	}
	session, _ := res.Meta["callsheet/session"].(string)
	if session == "" || res.Meta["callsheet/outcome"] != "ok" {
		t.Fatalf("write result meta %v: want the session and outcome ok", res.Meta)
	}
	res = callTool(t, cs, "read", map[string]any{"path": "hello.txt"})
	if res.IsError || !strings.Contains(resultText(res), "over MCP") || res.Meta["callsheet/session"] != session {
		t.Fatalf("read: %q meta %v, want the file in the same session", resultText(res), res.Meta)
	}
	// Invalid arguments are validated by the node, not passed through.
	res = callTool(t, cs, "read", map[string]any{"path": 12})
	if !res.IsError || res.Meta["callsheet/block"] != "invalid_arguments" || !strings.Contains(resultText(res), "blocked (invalid_arguments)") {
		t.Fatalf("invalid arguments: %q meta %v, want an error result blocked/invalid_arguments", resultText(res), res.Meta)
	}
	if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}}); err == nil {
		t.Fatal("calling an unknown tool succeeded")
	}

	// The same turns are in the session's transcript.
	var tr projections.Transcript
	e.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, &tr)
	if len(tr.Turns) != 3 || tr.Turns[0].Results[0].Name != "write" || tr.Turns[2].Results[0].Outcome != events.OutcomeBlocked {
		t.Fatalf("transcript %+v: want the three calls as one-call turns", tr)
	}

	// Two clients get two sessions.
	other := callTool(t, e.mustMCP("/mcp", "", nil), "read", map[string]any{"path": "hello.txt"})
	if other.Meta["callsheet/session"] == session {
		t.Fatal("a second MCP client shares the first one's callsheet session")
	}

	// Ending the MCP session closes the callsheet session.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the session to close", func() bool {
		status, _ := e.do("POST", "/v1/sessions/"+session+"/turns", `{"calls":[{"id":"c","name":"read","arguments":{"path":"hello.txt"}}]}`)
		return status == http.StatusConflict
	})
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPServerApprovalAndProgress: in strict mode a tools/call of a
// side-effecting tool waits for an approval given over the HTTP API, and
// the client, which sent a progress token, hears each step.
func TestMCPServerApprovalAndProgress(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	e := newEnv(t, &cfg)
	var mu sync.Mutex
	var steps []string
	cs := e.mustMCP("/mcp", "", &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		steps = append(steps, r.Params.Message)
		mu.Unlock()
	}})
	// The first call opens the session; its id comes back in _meta.
	session := callTool(t, cs, "read", map[string]any{"path": "."}).Meta["callsheet/session"].(string)

	done := make(chan *sdk.CallToolResult, 1)
	go func() {
		params := &sdk.CallToolParams{Name: "write", Arguments: map[string]any{"path": "a.txt", "content": "approved"}}
		params.SetProgressToken("tok-1")
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := cs.CallTool(ctx, params)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var pending struct{ Approvals []events.ApprovalRequested }
	waitUntil(t, "the approval request", func() bool {
		e.must("GET", "/v1/sessions/"+session+"/approvals", "", http.StatusOK, &pending)
		return len(pending.Approvals) == 1
	})
	select {
	case res := <-done:
		t.Fatalf("the call returned before it was approved: %+v", res)
	default:
	}
	e.must("POST", "/v1/sessions/"+session+"/approvals/"+pending.Approvals[0].Call, `{"decision":"allow"}`, http.StatusOK, nil)
	res := <-done
	if res == nil || res.IsError || res.Meta["callsheet/outcome"] != "ok" {
		t.Fatalf("approved write: %+v", res)
	}
	// Notifications are handled by the client as they arrive, maybe just
	// after the result.
	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(steps, " | ")
	}
	waitUntil(t, "the last progress notification", func() bool { return strings.Contains(got(), "committed") })
	for _, want := range []string{"waiting for approval", "approved", "running", "settled: ToolCallCompleted", "committed"} {
		if !strings.Contains(got(), want) {
			t.Errorf("progress %q lacks %q", got(), want)
		}
	}
}

// TestMCPServerCancel: a client that cancels its request cancels the call;
// the never call cut short is recorded indeterminate, never re-run.
func TestMCPServerCancel(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Shell.Sandbox = config.SandboxOff
	e := newEnv(t, &cfg)
	cs := e.mustMCP("/mcp", "", nil)
	session := callTool(t, cs, "read", map[string]any{"path": "."}).Meta["callsheet/session"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "shell", Arguments: map[string]any{"command": "sleep 30"}})
		errc <- err
	}()
	waitUntil(t, "the shell call to start", func() bool {
		// The read's claim is in its outcome; the shell's is a
		// ToolCallStarted.
		for _, ev := range e.events(session, "") {
			if ev.Type == events.TypeToolCallStarted {
				return true
			}
		}
		return false
	})
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	var tr projections.Transcript
	deadline := time.Now().Add(20 * time.Second)
	for {
		e.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, &tr)
		if len(tr.Turns) == 2 && len(tr.Turns[1].Results) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled call did not settle within 20s (the shell sleeps 30s): %+v\nevents: %+v", tr, e.events(session, ""))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := tr.Turns[1].Results[0]; r.Outcome != events.OutcomeIndeterminate || r.Attempts != 1 {
		t.Fatalf("cancelled shell call: %+v, want indeterminate after one attempt", r)
	}
}

// TestMCPServerTenants: /mcp takes the API's bearer tokens; a tenant's
// session is its own (another tenant's token cannot use its MCP session id,
// nor read the callsheet session behind it).
func TestMCPServerTenants(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{
		"acme":   {Token: "tok-acme", Tokens: []config.TenantToken{{Token: "tok-acme-bob", Principal: "bob"}}},
		"globex": {Token: "tok-globex"},
	}
	e := newEnv(t, &cfg)
	for _, tok := range []string{"", "tok-nobody"} {
		if _, err := e.mcpClient("/mcp", tok, nil); err == nil {
			t.Fatalf("connected to /mcp with token %q", tok)
		}
	}
	status, _ := e.do("POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	if status != http.StatusUnauthorized {
		t.Fatalf("initialize without a token: %d, want 401", status)
	}
	cs := e.mustMCP("/mcp", "tok-acme", nil)
	res := callTool(t, cs, "write", map[string]any{"path": "secret.txt", "content": "acme only"})
	session := res.Meta["callsheet/session"].(string)
	e.token = "tok-acme"
	e.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, nil)
	e.token = "tok-globex"
	status, b := e.do("GET", "/v1/sessions/"+session+"/transcript", "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound)

	// globex replays acme's MCP session id with its own token: refused.
	body := `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"read","arguments":{"path":"secret.txt"}}}`
	status, b = e.do("POST", "/mcp", body, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Session-Id", cs.ID(), "Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	if status != http.StatusForbidden || strings.Contains(string(b), "acme only") {
		t.Fatalf("another tenant's token on acme's MCP session: %d %s, want 403", status, b)
	}
	// Nor another principal of the same tenant: the session is its opener's.
	e.token = "tok-acme-bob"
	status, b = e.do("POST", "/mcp", body, "Content-Type", "application/json", "Accept", "application/json, text/event-stream",
		"Mcp-Session-Id", cs.ID(), "Mcp-Protocol-Version", cs.InitializeResult().ProtocolVersion)
	if status != http.StatusForbidden {
		t.Fatalf("another principal's token on the MCP session: %d %s, want 403", status, b)
	}
	e.token = "tok-globex"
	// globex's own MCP client sees its own, fresh workspace.
	res = callTool(t, e.mustMCP("/mcp", "tok-globex", nil), "read", map[string]any{"path": "secret.txt"})
	if !res.IsError || strings.Contains(resultText(res), "acme only") {
		t.Fatalf("globex read acme's file: %q", resultText(res))
	}
}

// TestMCPServerDNSRebinding: a request that reaches the loopback listener
// with a Host that is not loopback (a browser tricked by DNS rebinding) is
// refused.
func TestMCPServerDNSRebinding(t *testing.T) {
	e := newEnv(t, nil)
	c := sdk.NewClient(&sdk.Implementation{Name: "evil", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: e.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: bearer{host: "evil.example:80"}}, MaxRetries: -1}, nil)
	if err == nil || !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "Forbidden") {
		t.Fatalf("connect with Host evil.example: err=%v, want 403", err)
	}
	e.mustMCP("/mcp", "", nil) // a loopback Host is served
}

// TestMCPBothWays: a node that consumes an MCP server (the mcptest helper)
// serves its tools on /mcp too, and a tool added on that server reaches the
// node's MCP clients as notifications/tools/list_changed.
func TestMCPBothWays(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.MCPServers = map[string]config.MCPServer{"h": {Command: []string{os.Args[0]}, Env: map[string]string{mcptest.Env: "1"}}}
	e := newEnv(t, &cfg)
	changed := make(chan struct{}, 16)
	cs := e.mustMCP("/mcp", "", &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}})
	if res := callTool(t, cs, "mcp__h__echo", map[string]any{"text": "through two hops"}); res.IsError || resultText(res) != "through two hops" {
		t.Fatalf("proxied echo: %+v", res)
	}
	if res := callTool(t, cs, "mcp__h__add_tool", map[string]any{"name": "late"}); res.IsError {
		t.Fatalf("add_tool: %s", resultText(res))
	}
	select {
	case <-changed:
	case <-time.After(30 * time.Second):
		t.Fatal("no notifications/tools/list_changed after the upstream server added a tool")
	}
	waitUntil(t, "mcp__h__late in tools/list", func() bool {
		res, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tl := range res.Tools {
			if tl.Name == "mcp__h__late" {
				return true
			}
		}
		return false
	})
	if res := callTool(t, cs, "mcp__h__late", map[string]any{}); res.IsError || resultText(res) != "added tool late" {
		t.Fatalf("late tool: %+v", res)
	}
}

// TestMCPServerAgent: ?agent= gives that agent's surface; an unknown agent
// is refused with the API's error.
func TestMCPServerAgent(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Agents = map[string]config.Agent{"reviewer": {Tools: []string{"read", "grep"}}}
	e := newEnv(t, &cfg)
	res, err := e.mustMCP("/mcp?agent=reviewer", "", nil).ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if strings.Join(names, ",") != "grep,read" {
		t.Fatalf("reviewer tools %v, want grep and read", names)
	}
	status, b := e.do("POST", "/mcp?agent=ghost", "{}", "Content-Type", "application/json")
	wantError(t, status, b, http.StatusBadRequest, CodeInvalidRequest, `"ghost"`)
	_, err = e.mcpClient("/mcp?agent=ghost", "", nil)
	var je interface{ Error() string }
	if err == nil || !errors.As(err, &je) {
		t.Fatal("connected with an unknown agent")
	}
	_ = fmt.Sprint
	_ = json.Marshal
}

// TestMCPProgressCountsAsAStream: a tools/call with a progress token
// follows the session's events, so it holds one of the tenant's live-stream
// places; with none left the call still runs, without progress.
func TestMCPProgressCountsAsAStream(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.EventStreams.MaxPerTenant = 1
	e := newEnv(t, &cfg)
	var mu sync.Mutex
	steps := 0
	cs := e.mustMCP("/mcp", "", &sdk.ClientOptions{ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		steps++
		mu.Unlock()
	}})
	session := callTool(t, cs, "read", map[string]any{"path": "."}).Meta["callsheet/session"].(string)
	// One followed stream holds the tenant's only place.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/sessions/"+session+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("followed stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	params := &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "."}}
	params.SetProgressToken("p")
	res, err := cs.CallTool(context.Background(), params)
	if err != nil || res.IsError {
		t.Fatalf("call without a stream place: %v %+v", err, res)
	}
	mu.Lock()
	got := steps
	mu.Unlock()
	if got != 0 {
		t.Fatalf("%d progress notifications beyond the tenant's stream limit, want none", got)
	}
	cancel()
	// Once the place is free again, progress comes.
	waitUntil(t, "progress with the place free", func() bool {
		params := &sdk.CallToolParams{Name: "read", Arguments: map[string]any{"path": "."}}
		params.SetProgressToken("q")
		if _, err := cs.CallTool(context.Background(), params); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return steps > 0
	})
}

// TestMCPSessionEndCancelsAndCloses: an MCP session deleted while its call
// waits for an approval answers the DELETE at once (the SDK's close waits
// for calls in flight, so the node ends them first), cancels the call (it
// never runs) and closes the callsheet session. Another tenant's DELETE of
// that session changes nothing.
func TestMCPSessionEndCancelsAndCloses(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	e := newEnv(t, &cfg)
	cs, err := e.mcpClient("/mcp", "tok-acme", nil)
	if err != nil {
		t.Fatal(err)
	}
	session := callTool(t, cs, "read", map[string]any{"path": "."}).Meta["callsheet/session"].(string)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = cs.CallTool(ctx, &sdk.CallToolParams{Name: "write", Arguments: map[string]any{"path": "never.txt", "content": "x"}})
	}()
	e.token = "tok-acme"
	var pending struct{ Approvals []events.ApprovalRequested }
	waitUntil(t, "the approval request", func() bool {
		e.must("GET", "/v1/sessions/"+session+"/approvals", "", http.StatusOK, &pending)
		return len(pending.Approvals) == 1
	})
	del := func(token string) int {
		req := e.request("DELETE", "/mcp", "", "Mcp-Session-Id", cs.ID())
		req.Header.Set("Authorization", "Bearer "+token)
		c := &http.Client{Timeout: 20 * time.Second} // the SDK's close must not wait on the call
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("DELETE /mcp: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := del("tok-globex"); code != http.StatusForbidden {
		t.Fatalf("another tenant's DELETE: %d, want 403", code)
	}
	e.must("GET", "/v1/sessions/"+session+"/approvals", "", http.StatusOK, &pending)
	if len(pending.Approvals) != 1 {
		t.Fatalf("another tenant's DELETE touched the pending call: %+v", pending)
	}
	if code := del("tok-acme"); code != http.StatusNoContent {
		t.Fatalf("DELETE of the session: %d, want 204", code)
	}
	waitUntil(t, "the callsheet session to close", func() bool {
		status, _ := e.do("POST", "/v1/sessions/"+session+"/turns", `{"calls":[{"id":"c","name":"read","arguments":{"path":"."}}]}`)
		return status == http.StatusConflict
	})
	var tr projections.Transcript
	e.must("GET", "/v1/sessions/"+session+"/transcript", "", http.StatusOK, &tr)
	// The wait above may have run a read turn before the close landed: find
	// the write's turn rather than taking the last one.
	var r events.Result
	for _, turn := range tr.Turns {
		for _, res := range turn.Results {
			if res.Name == "write" {
				r = res
			}
		}
	}
	if r.Name != "write" || r.Outcome != events.OutcomeError || !strings.Contains(r.Content[0].Text, "cancelled before it ran") {
		t.Fatalf("the pending write: %+v, want cancelled before it ran", r)
	}
	cancel()
	go cs.Close()
}

// TestMCPShutdownLeavesCallsGoing: at shutdown (CloseStreams) the MCP
// sessions close without waiting on a call that waits for an approval, and
// without cancelling it: the call goes on in the log, still asking.
func TestMCPShutdownLeavesCallsGoing(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	e := newEnv(t, &cfg)
	cs := e.mustMCP("/mcp", "", nil)
	session := callTool(t, cs, "read", map[string]any{"path": "."}).Meta["callsheet/session"].(string)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "write", Arguments: map[string]any{"path": "later.txt", "content": "x"}})
		errc <- err
	}()
	var pending struct{ Approvals []events.ApprovalRequested }
	waitUntil(t, "the approval request", func() bool {
		e.must("GET", "/v1/sessions/"+session+"/approvals", "", http.StatusOK, &pending)
		return len(pending.Approvals) == 1
	})
	done := make(chan struct{})
	go func() { e.api.CloseStreams(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("CloseStreams waited on a call that waits for an approval")
	}
	// The answer (the node is shutting down; the turn goes on) races the
	// session's close, so the client may see only the request end.
	if err := <-errc; err == nil {
		t.Fatal("the client's call returned no error at shutdown")
	}
	e.must("GET", "/v1/sessions/"+session+"/approvals", "", http.StatusOK, &pending)
	if len(pending.Approvals) != 1 {
		t.Fatalf("approvals after shutdown: %+v, want the write still asking", pending)
	}
}
