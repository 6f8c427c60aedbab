package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/projections"
)

// scopedTenant is a config whose tenant acme has one token per scope,
// tok-<scope> (principal <scope>-holder), and tok-all with every scope
// (no "scopes"); writes under ask/ wait for an approval, and results are
// cut at 1 KiB so that a full output is kept.
func scopedTenant() config.Config {
	cfg := config.DefaultConfig()
	toks := []config.TenantToken{{Token: "tok-all", Principal: "root"}}
	for _, sc := range config.Scopes() {
		toks = append(toks, config.TenantToken{Token: "tok-" + sc, Principal: sc + "-holder", Scopes: []string{sc}})
	}
	cfg.Tenants = map[string]config.Tenant{"acme": {Tokens: toks}, "globex": {Token: "tok-globex"}}
	cfg.Permission.Rules = []config.Rule{{Tool: "write", Match: "ask/*", Action: config.ActionAsk}}
	cfg.ToolOutput.MaxBytes = 1024
	return cfg
}

// scopeCase is one request the walk makes for a route, and the statuses it
// may answer when the token has the route's scope.
type scopeCase struct {
	method, path, body string
	header             []string
	ok                 []int
}

// TestEveryRouteByEveryScope walks every route of routeTable with a token
// of each scope: a token without the route's scope is 403
// insufficient_scope naming the scope, before anything is done; the token
// with it gets the route's own answer. It prints the table of
// docs/spec.md §10 (go test -run TestEveryRouteByEveryScope -v ./api).
func TestEveryRouteByEveryScope(t *testing.T) {
	cfg := scopedTenant()
	e := newEnv(t, &cfg)
	e.token = "tok-all"

	// A session with a kept output and a checkpointed write; one waiting
	// for an approval, one for an answer, one to close; a harness tool.
	main := e.open().Session
	big := strings.Repeat("0123456789abcdef\n", 200)
	var tv projections.Turn
	e.must("POST", "/v1/sessions/"+main+"/turns", fmt.Sprintf(`{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"f.txt","content":%q}},{"id":"r","name":"read","arguments":{"path":"f.txt"}}]}`, big), http.StatusOK, &tv)
	if len(tv.Results) != 2 || tv.Results[1].FullOutput == nil {
		t.Fatalf("set-up turn: %+v, want the read cut with its full output kept", tv)
	}
	output := tv.Results[1].FullOutput.Object
	approving := e.open().Session
	e.must("POST", "/v1/sessions/"+approving+"/turns?wait=0", `{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"ask/x","content":"x"}}]}`, http.StatusAccepted, nil)
	e.poll("/v1/sessions/"+approving+"/approvals", func(b []byte) bool { return strings.Contains(string(b), `"call":"w"`) })
	asking := e.open().Session
	e.must("POST", "/v1/sessions/"+asking+"/turns?wait=0", `{"id":"t1","calls":[{"id":"q","name":"question","arguments":{"question":"which?"}}]}`, http.StatusAccepted, nil)
	e.poll("/v1/sessions/"+asking+"/events?follow=false", func(b []byte) bool { return strings.Contains(string(b), `"ToolCallStarted"`) })
	closing := e.open().Session
	deleting := e.open().Session
	e.must("PUT", "/v1/tools/polled", spec(""), http.StatusOK, nil)
	fakeTask := "tk_" + strings.Repeat("A", 43)

	s := "/v1/sessions/" + main
	cases := map[string]scopeCase{
		"GET /healthz":                                          {method: "GET", path: "/healthz", ok: []int{200}},
		"GET /metrics":                                          {method: "GET", path: "/metrics", ok: []int{404}}, // a node with tenants serves metrics to its operator only
		"POST /v1/sessions":                                     {method: "POST", path: "/v1/sessions", body: `{}`, ok: []int{201}},
		"GET /v1/sessions":                                      {method: "GET", path: "/v1/sessions", ok: []int{200}},
		"GET /v1/nodes":                                         {method: "GET", path: "/v1/nodes", ok: []int{200}},
		"GET /v1/sessions/{s}":                                  {method: "GET", path: s, ok: []int{200}},
		"POST /v1/sessions/{s}/turns":                           {method: "POST", path: s + "/turns", body: `{"id":"t2","calls":[{"id":"c","name":"todo_get","arguments":{}}]}`, ok: []int{200}},
		"GET /v1/sessions/{s}/turns/{t}":                        {method: "GET", path: s + "/turns/t1", ok: []int{200}},
		"POST /v1/sessions/{s}/turns/{t}/calls":                 {method: "POST", path: s + "/turns/st/calls", body: `{"calls":[{"id":"c","name":"todo_get","arguments":{}}]}`, ok: []int{202}},
		"POST /v1/sessions/{s}/turns/{t}/end":                   {method: "POST", path: s + "/turns/st/end", ok: []int{200}},
		"POST /v1/sessions/{s}/turns/{t}/cancel":                {method: "POST", path: "/v1/sessions/" + asking + "/turns/t1/cancel", body: `{"call":"nothing-of-that-id"}`, ok: []int{202, 404}},
		"POST /v1/sessions/{s}/close":                           {method: "POST", path: "/v1/sessions/" + closing + "/close", ok: []int{200}},
		"GET /v1/sessions/{s}/events":                           {method: "GET", path: s + "/events?follow=false", ok: []int{200}},
		"GET /v1/sessions/{s}/transcript":                       {method: "GET", path: s + "/transcript", ok: []int{200}},
		"GET /v1/sessions/{s}/timeline":                         {method: "GET", path: s + "/timeline", ok: []int{200}},
		"GET /v1/sessions/{s}/turns/{t}/calls/{call}/arguments": {method: "GET", path: s + "/turns/t1/calls/w/arguments", ok: []int{200}},
		"GET /v1/sessions/{s}/approvals":                        {method: "GET", path: "/v1/sessions/" + approving + "/approvals", ok: []int{200}},
		"GET /v1/outputs/{object...}":                           {method: "GET", path: "/v1/outputs/" + output, ok: []int{200}},
		"GET /v1/tools":                                         {method: "GET", path: "/v1/tools", ok: []int{200}},
		"GET /v1/checkpoints":                                   {method: "GET", path: "/v1/checkpoints?follow=false", ok: []int{200}},
		"DELETE /v1/sessions/{s}":                               {method: "DELETE", path: "/v1/sessions/" + deleting, ok: []int{200}},
		"GET /v1/deletions":                                     {method: "GET", path: "/v1/deletions", ok: []int{200}},
		"POST /v1/sessions/{s}/approvals/{call}":                {method: "POST", path: "/v1/sessions/" + approving + "/approvals/w", body: `{"decision":"allow"}`, ok: []int{200}},
		"POST /v1/sessions/{s}/answers/{call}":                  {method: "POST", path: "/v1/sessions/" + asking + "/answers/q", body: `{"answer":"this one"}`, ok: []int{200}},
		"POST /v1/sessions/{s}/rewind":                          {method: "POST", path: s + "/rewind", body: `{"call":"w"}`, ok: []int{200}},
		"POST /v1/sessions/{s}/sign":                            {method: "POST", path: s + "/sign", ok: []int{200}},
		"PUT /v1/tools/{name}":                                  {method: "PUT", path: "/v1/tools/lookup", body: spec(""), ok: []int{200}},
		"DELETE /v1/tools/{name}":                               {method: "DELETE", path: "/v1/tools/lookup", ok: []int{204}},
		"POST /v1/workers/poll":                                 {method: "POST", path: "/v1/workers/poll", body: `{"worker":"w1","tools":["polled"],"wait_ms":0}`, ok: []int{204}},
		"POST /v1/tasks/{task}/heartbeat":                       {method: "POST", path: "/v1/tasks/" + fakeTask + "/heartbeat", ok: []int{409}},
		"POST /v1/tasks/{task}/complete":                        {method: "POST", path: "/v1/tasks/" + fakeTask + "/complete", body: complete("x"), ok: []int{409}},
		"POST /v1/tasks/{task}/fail":                            {method: "POST", path: "/v1/tasks/" + fakeTask + "/fail", body: `{"error":"x"}`, ok: []int{409}},
		"/mcp": {method: "POST", path: "/mcp", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"walk","version":"1"}}}`,
			header: []string{"Accept", "application/json, text/event-stream", "Content-Type", "application/json"}, ok: []int{200}},
	}
	scopes := config.Scopes()
	var table strings.Builder
	table.WriteString("| route | needs | " + strings.Join(scopes, " | ") + " |\n|---|---|" + strings.Repeat("---|", len(scopes)) + "\n")
	for _, rt := range e.api.routeTable() {
		c, ok := cases[rt.Pattern]
		if !ok {
			t.Fatalf("route %s has no case in this walk: add one", rt.Pattern)
		}
		delete(cases, rt.Pattern)
		needs := rt.Scope
		if needs == "" {
			needs = "(none)"
		}
		fmt.Fprintf(&table, "| `%s` | %s |", rt.Pattern, needs)
		for _, sc := range scopes {
			req := e.request(c.method, c.path, c.body, c.header...)
			req.Header.Set("Authorization", "Bearer tok-"+sc)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var eb errorBody
			_ = json.NewDecoder(resp.Body).Decode(&eb)
			resp.Body.Close()
			fmt.Fprintf(&table, " %d |", resp.StatusCode)
			allowed := rt.Scope == "" || rt.Scope == sc
			switch {
			case allowed && !slices.Contains(c.ok, resp.StatusCode):
				t.Errorf("%s with a %s token: status %d (%s), want one of %v", rt.Pattern, sc, resp.StatusCode, eb.Error.Message, c.ok)
			case !allowed && (resp.StatusCode != http.StatusForbidden || eb.Error.Code != CodeInsufficientScope || !strings.Contains(eb.Error.Message, fmt.Sprintf("scope %q", rt.Scope))):
				t.Errorf("%s with a %s token: status %d %s %q, want 403 %s naming scope %q", rt.Pattern, sc, resp.StatusCode, eb.Error.Code, eb.Error.Message, CodeInsufficientScope, rt.Scope)
			case !allowed && resp.Header.Get("WWW-Authenticate") != fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, rt.Scope):
				t.Errorf("%s with a %s token: WWW-Authenticate %q", rt.Pattern, sc, resp.Header.Get("WWW-Authenticate"))
			}
		}
		table.WriteString("\n")
	}
	for p := range cases {
		t.Errorf("case %s names no route of routeTable", p)
	}
	t.Logf("route × scope → status (the token has only that scope):\n%s", table.String())

	// What the refused tokens asked for did not happen: one session
	// opened by the run token, the approval and the answer by their
	// holders.
	var list SessionList
	e.poll("/v1/sessions", func(b []byte) bool { return json.Unmarshal(b, &list) == nil && len(list.Sessions) >= 5 })
	if len(list.Sessions) != 5 {
		t.Errorf("%d sessions, want the 4 of the set-up that were not deleted and 1 opened by tok-run", len(list.Sessions))
	}
	for _, check := range []struct{ session, event, by string }{
		{approving, "ApprovalGranted", `"by":"approve-holder"`},
		{asking, "AnswerReceived", `"by":"approve-holder"`},
	} {
		var n int
		for _, ev := range e.events(check.session, "") {
			if string(ev.Type) == check.event {
				n++
				if !strings.Contains(string(ev.Data), check.by) {
					t.Errorf("%s %s", ev.Type, ev.Data)
				}
			}
		}
		if n != 1 {
			t.Errorf("%d %s events in %s, want 1", n, check.event, check.session)
		}
	}
}

// TestScopesHostileTenant attacks the scope check as a tenant holding a
// read token would: method overrides, a lower-case method, a path that is
// not canonical, and /mcp's tools/call on an MCP session a run token
// opened. Each is refused or served as the read it is, and nothing is
// recorded.
func TestScopesHostileTenant(t *testing.T) {
	cfg := scopedTenant()
	// run-holder also holds a read token: the same principal, so the MCP
	// SDK's own check (a session is its opener's) lets it reach the MCP
	// session its run token opened.
	acme := cfg.Tenants["acme"]
	acme.Tokens = append(acme.Tokens, config.TenantToken{Token: "tok-run-holder-read", Principal: "run-holder", Scopes: []string{config.ScopeRead}})
	cfg.Tenants["acme"] = acme
	e := newEnv(t, &cfg)
	e.token = "tok-all"
	s := e.open().Session
	e.token = "tok-read"
	turn := `{"id":"evil","calls":[{"id":"c","name":"write","arguments":{"path":"pwned","content":"x"}}]}`
	for _, tt := range []struct {
		name, method, path string
		header             []string
	}{
		{"override header to GET", "POST", "/v1/sessions/" + s + "/turns", []string{"X-HTTP-Method-Override", "GET"}},
		{"override header on open", "POST", "/v1/sessions", []string{"X-HTTP-Method-Override", "GET", "X-Method-Override", "GET"}},
		{"override query", "POST", "/v1/sessions/" + s + "/turns?_method=GET", nil},
		{"override to PUT a tool", "PUT", "/v1/tools/evil", []string{"X-HTTP-Method-Override", "GET"}},
		{"sign as a reader", "POST", "/v1/sessions/" + s + "/sign", []string{"X-HTTP-Method-Override", "GET"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, b := e.do(tt.method, tt.path, turn, tt.header...)
			wantError(t, status, b, http.StatusForbidden, CodeInsufficientScope, "needs a token with scope")
		})
	}
	// Methods the mux does not route, and paths it redirects, reach no
	// handler at all.
	for _, tt := range []struct{ method, path string }{
		{"post", "/v1/sessions/" + s + "/turns"},
		{"HEAD", "/v1/sessions/" + s + "/turns"},
		{"POST", "/v1/sessions/" + s + "/x/../turns"},
		{"POST", "/v1//sessions/" + s + "/turns"},
	} {
		req := e.request(tt.method, tt.path, turn)
		client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 300 {
			t.Errorf("%s %s with a read token: %d, want no handler", tt.method, tt.path, resp.StatusCode)
		}
	}

	// /mcp: a run token opens an MCP session; a read token of the same
	// tenant calls a tool on it.
	mcpPost := func(token, sid, body string) (int, http.Header, []byte) {
		req := e.request("POST", "/mcp", body, "Accept", "application/json, text/event-stream", "Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, resp.Header, b
	}
	status, h, b := mcpPost("tok-run", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	sid := h.Get("Mcp-Session-Id")
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize with a run token: %d %s", status, b)
	}
	if status, _, b := mcpPost("tok-run", sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", status, b)
	}
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"write","arguments":{"path":"pwned","content":"x"}}}`
	for _, tok := range []string{"tok-run-holder-read", "tok-read", "tok-approve", "tok-admin", "tok-workers", "tok-tools"} {
		status, _, b := mcpPost(tok, sid, call)
		wantError(t, status, b, http.StatusForbidden, CodeInsufficientScope, `scope "run"`)
	}
	e.token = "tok-all"
	var list SessionList
	e.poll("/v1/sessions", func(b []byte) bool { return json.Unmarshal(b, &list) == nil && len(list.Sessions) >= 2 })
	for _, it := range list.Sessions {
		if it.Calls != 0 {
			t.Errorf("session %s has %d calls, want none: %+v", it.Session, it.Calls, it)
		}
	}
}

// TestScopesForwardedInAFleet: a call forwarded to the session's owner
// carries the caller's token, so the owner checks the same scopes; a
// token without the route's scope is refused by the node it reaches
// first, a forged forwarding mark gains it nothing, and a read token's
// read is served by the owner while a run token's read is refused there
// too.
func TestScopesForwardedInAFleet(t *testing.T) {
	cfg := scopedTenant()
	fl := newFleetAs(t, 2, &cfg, "tok-all")
	a, b := fl[0], fl[1]
	a.token = "tok-all"
	var open struct{ Session string }
	a.must("POST", "/v1/sessions", `{}`, http.StatusCreated, &open)
	s := open.Session
	path := "/v1/sessions/" + s + "/turns"
	turn := `{"id":"t1","calls":[{"id":"c","name":"todo_get","arguments":{}}]}`
	for _, fn := range fl {
		fn.token = "tok-read"
		for _, hops := range []string{"", "1", "3"} {
			var hdr []string
			if hops != "" {
				hdr = []string{HeaderHops, hops}
			}
			code, body, _ := fn.served("POST", path, turn, hdr...)
			wantError(t, code, body, http.StatusForbidden, CodeInsufficientScope, `scope "run"`)
		}
	}
	b.token = "tok-run"
	if code, body, by := b.served("POST", path, turn); code != http.StatusOK || by != "n1" {
		t.Fatalf("a run token's turn via n2: %d (served by %q) %s, want 200 from n1, the owner", code, by, body)
	}
	if code, body, _ := b.served("GET", path+"/t1", "", HeaderHops, "1"); code != http.StatusForbidden {
		t.Fatalf("a run token's read of the turn via n2, marked forwarded: %d %s, want 403", code, body)
	}
	b.token = "tok-read"
	if code, body, by := b.served("GET", path+"/t1", ""); code != http.StatusOK || by != "n1" || !strings.Contains(string(body), `"complete"`) {
		t.Fatalf("a read token's read via n2: %d (served by %q) %s, want the owner's answer", code, by, body)
	}
	// Only the run token's turn was recorded.
	a.token = "tok-all"
	var tr projections.Transcript
	a.must("GET", "/v1/sessions/"+s+"/transcript", "", http.StatusOK, &tr)
	if len(tr.Turns) != 1 {
		t.Fatalf("transcript has %d turns, want 1", len(tr.Turns))
	}
}
