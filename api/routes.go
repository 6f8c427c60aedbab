package api

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/callsheet/callsheet/config"
)

// route is one route of the API: its method and pattern (the standard
// mux's), the scope a token needs for it (docs/spec.md §10), and what
// serves it: a handlerFunc behind authentication and the scope check, or,
// for /healthz and /mcp, a handler that does its own.
type route struct {
	Pattern string
	// Scope is a config.Scope*; "" only for /healthz, which needs no token.
	Scope string
	h     handlerFunc
	raw   http.Handler
}

// routeTable is every route of the API and the scope a token needs for it
// (docs/spec.md §8, §10): the one table the router is built from, so a
// route cannot exist without a scope, and the one the scope tests walk.
// What a session's actor serves is served by the session's owner, wherever
// the call arrives (routed, docs/spec.md §7); the log (events, transcript)
// and the object store are read on any node. Harness tools and workers
// (api/workers.go) are served by any node: the waiting call is reached over
// NATS.
func (s *Server) routeTable() []route {
	return []route{
		{Pattern: "GET /healthz", raw: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
		})},
		{Pattern: "GET /metrics", Scope: config.ScopeRead, h: s.getMetrics},
		{Pattern: "POST /v1/sessions", Scope: config.ScopeRun, h: s.openSession},
		{Pattern: "GET /v1/sessions", Scope: config.ScopeRead, h: s.listSessions},
		{Pattern: "GET /v1/nodes", Scope: config.ScopeRead, h: s.getNodes},
		{Pattern: "GET /v1/sessions/{s}", Scope: config.ScopeRead, h: s.getSession},
		// ?format= takes and answers a provider's own shapes (api/native.go).
		{Pattern: "POST /v1/sessions/{s}/turns", Scope: config.ScopeRun, h: s.routed(s.formatted(s.submitTurn, s.submitNativeTurn))},
		{Pattern: "GET /v1/sessions/{s}/turns/{t}", Scope: config.ScopeRead, h: s.routed(s.formatted(s.getTurn, s.getNativeTurn))},
		// Streamed turns: a batch of calls, and the end (api/stream.go).
		{Pattern: "POST /v1/sessions/{s}/turns/{t}/calls", Scope: config.ScopeRun, h: s.routed(s.addCalls)},
		{Pattern: "POST /v1/sessions/{s}/turns/{t}/end", Scope: config.ScopeRun, h: s.routed(s.endTurn)},
		{Pattern: "POST /v1/sessions/{s}/turns/{t}/cancel", Scope: config.ScopeRun, h: s.routed(s.cancelTurn)},
		{Pattern: "POST /v1/sessions/{s}/close", Scope: config.ScopeRun, h: s.routed(s.closeSession)},
		{Pattern: "GET /v1/sessions/{s}/events", Scope: config.ScopeRead, h: s.getEvents},
		{Pattern: "GET /v1/sessions/{s}/transcript", Scope: config.ScopeRead, h: s.getTranscript},
		{Pattern: "GET /v1/sessions/{s}/timeline", Scope: config.ScopeRead, h: s.getTimeline},
		{Pattern: "GET /v1/sessions/{s}/turns/{t}/calls/{call}/arguments", Scope: config.ScopeRead, h: s.getArguments},
		{Pattern: "GET /v1/sessions/{s}/approvals", Scope: config.ScopeRead, h: s.routed(s.listApprovals)},
		{Pattern: "GET /v1/outputs/{object...}", Scope: config.ScopeRead, h: s.getOutput},
		{Pattern: "GET /v1/tools", Scope: config.ScopeRead, h: s.getTools},
		{Pattern: "GET /v1/checkpoints", Scope: config.ScopeRead, h: s.getCheckpoints},
		{Pattern: "POST /v1/sessions/{s}/approvals/{call}", Scope: config.ScopeApprove, h: s.routed(s.approve)},
		{Pattern: "POST /v1/sessions/{s}/answers/{call}", Scope: config.ScopeApprove, h: s.routed(s.answer)},
		{Pattern: "POST /v1/sessions/{s}/rewind", Scope: config.ScopeAdmin, h: s.routed(s.rewind)},
		{Pattern: "POST /v1/sessions/{s}/sign", Scope: config.ScopeAdmin, h: s.routed(s.signSession)},
		{Pattern: "DELETE /v1/sessions/{s}", Scope: config.ScopeAdmin, h: s.routed(s.deleteSession)},
		{Pattern: "GET /v1/deletions", Scope: config.ScopeRead, h: s.listDeletions},
		{Pattern: "PUT /v1/tools/{name}", Scope: config.ScopeTools, h: s.putTool},
		{Pattern: "DELETE /v1/tools/{name}", Scope: config.ScopeTools, h: s.deleteTool},
		{Pattern: "POST /v1/workers/poll", Scope: config.ScopeWorkers, h: s.poll},
		{Pattern: "POST /v1/tasks/{task}/heartbeat", Scope: config.ScopeWorkers, h: s.heartbeat},
		{Pattern: "POST /v1/tasks/{task}/complete", Scope: config.ScopeWorkers, h: s.complete},
		{Pattern: "POST /v1/tasks/{task}/fail", Scope: config.ScopeWorkers, h: s.fail},
		// MCP over streamable HTTP (GET, POST and DELETE), authenticated by
		// the same bearer tokens: an MCP session is a callsheet session and
		// a tools/call a turn, so it needs run (api/mcp.go).
		{Pattern: "/mcp", Scope: config.ScopeRun, raw: s.mcp},
	}
}

// routes builds the router from routeTable.
func (s *Server) routes() {
	for _, rt := range s.routeTable() {
		switch {
		case rt.raw != nil:
			s.mux.Handle(rt.Pattern, rt.raw)
		case rt.Scope == "":
			panic("api: route " + rt.Pattern + " has no scope") // a programming error, found by every test
		default:
			s.handle(rt.Pattern, rt.Scope, rt.h)
		}
	}
}

// scopeSet is a set of config scopes, one bit each.
type scopeSet uint8

// allScopes has every scope: a token without "scopes", the tenant-level
// "token", and every request to a node without tenants.
var allScopes = scopeSet(1<<len(scopeBits)) - 1

// scopeBits gives each scope its bit, in config.Scopes order.
var scopeBits = func() map[string]scopeSet {
	m := map[string]scopeSet{}
	for i, name := range config.Scopes() {
		m[name] = 1 << i
	}
	return m
}()

// scopesOf is the set of names; nil means every scope (docs/spec.md §10).
// Names config did not accept are ignored.
func scopesOf(names []string) scopeSet {
	if names == nil {
		return allScopes
	}
	var set scopeSet
	for _, n := range names {
		set |= scopeBits[n]
	}
	return set
}

// has reports whether the set holds scope.
func (set scopeSet) has(scope string) bool {
	bit, ok := scopeBits[scope]
	return ok && set&bit != 0
}

// String lists the set's scopes in config.Scopes order, or "none".
func (set scopeSet) String() string {
	var out []string
	for _, name := range config.Scopes() {
		if set.has(name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// scopeError is the 403 for a request id may not make: it names the scope
// the route needs and the scopes the token has (RFC 6750 §3.1: the
// WWW-Authenticate header says insufficient_scope and the scope needed).
func scopeError(w http.ResponseWriter, r *http.Request, id identity, scope string) *Error {
	w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q`, scope))
	return errorf(http.StatusForbidden, CodeInsufficientScope, fmt.Sprintf("%s %s needs a token with scope %q; this token (principal %s of tenant %s) has scopes: %s. Ask the operator for a token with %q (tenants.%s.tokens[].scopes)",
		r.Method, r.URL.Path, scope, id.principal, id.tenant, id.scopes, scope, id.tenant))
}

// bodyLimit is the largest body r's tenant may send: its own
// limits.body_bytes when its config sets one (tenants.<t>.limits), else the
// node's (WithMaxBody, or the config's limits.body_bytes).
func (s *Server) bodyLimit(r *http.Request) int64 {
	id, _ := r.Context().Value(identityKey{}).(identity)
	if own := s.node.Tenants().Tenants[id.tenant].Limits.BodyBytes; own > 0 {
		return int64(own)
	}
	return s.maxBody
}
