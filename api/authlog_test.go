package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
)

// TestNoTokenInTheLog attacks the log as a caller would who wants a tenant's
// token written somewhere an operator (or a log pipeline) keeps it: every
// way a token can reach the node (the Authorization header, right and
// wrong, with other schemes, near misses; the query string, the path, a
// turn's arguments and id, the MCP endpoint, a worker's poll, an approval)
// with the node and the API logging everything, at debug, as JSON. No
// token, nor a near miss of one, appears in the log; each refusal is logged
// with its route and why.
func TestNoTokenInTheLog(t *testing.T) {
	const (
		plain = "tok-acme-Zq8wXr2pLk5nB7vC"
		alice = "tok-alice-Hy3mTq9sVd4fJ6gK"
		other = "tok-globex-Pw7eRt1yUi0oLp3A"
	)
	secrets := []string{plain, alice, other, plain[:len(plain)-1], alice + "x", strings.ToUpper(other)}
	cfg := config.DefaultConfig()
	cfg.Permission.Rules = []config.Rule{{ID: "ask-write", Tool: "write", Action: config.ActionAsk}}
	cfg.Tenants = map[string]config.Tenant{
		"acme":   {Token: plain, Tokens: []config.TenantToken{{Token: alice, Principal: "alice"}}},
		"globex": {Token: other},
	}
	var logs testenv.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	s, err := New(n, WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.CloseStreams)
	e := &env{t: t, node: n, api: s, srv: srv}

	send := func(auth, method, path, body string) int {
		t.Helper()
		req := e.request(method, path, body)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// Refused: no token, near misses, other schemes, the token in the
	// query string or a header of its own.
	for _, auth := range []string{"", "Bearer " + plain[:len(plain)-1], "Bearer " + alice + "x", "Bearer " + strings.ToUpper(other),
		"Basic " + plain, "Token " + alice, plain, "Bearer", "Bearer  "} {
		if got := send(auth, "GET", "/v1/sessions", ""); got != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %d, want 401", auth, got)
		}
	}
	if got := send("", "GET", "/v1/sessions?token="+plain+"&access_token="+alice, ""); got != http.StatusUnauthorized {
		t.Errorf("token in the query: %d, want 401", got)
	}
	if got := send("", "POST", "/mcp", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`); got != http.StatusUnauthorized {
		t.Errorf("MCP without a token: %d, want 401", got)
	}
	if got := send("Bearer "+plain+"0", "POST", "/mcp", `{}`); got != http.StatusUnauthorized {
		t.Errorf("MCP with a near miss: %d, want 401", got)
	}
	// Accepted: a session, a turn that waits for an approval, with tokens
	// in its arguments; the approval by alice; a worker's poll; a session
	// named by a token; another tenant's session. (The ids a caller picks
	// for its turns and calls are logged as given: a caller who names a
	// turn after its own token writes it into the log itself.)
	e.token = plain
	sess := e.open()
	base := "/v1/sessions/" + sess.Session
	e.must("POST", base+"/turns?wait=0", `{"id":"t1","calls":[{"id":"c1","name":"write","arguments":{"path":"a.txt","content":"`+other+plain+alice+`"}}]}`, http.StatusAccepted, nil)
	e.poll(base+"/approvals", func(b []byte) bool { return strings.Contains(string(b), `"ask-write"`) })
	e.token = alice
	e.must("POST", base+"/approvals/c1", `{"decision":"allow"}`, http.StatusOK, nil)
	e.poll(base+"/turns/t1", func(b []byte) bool { return strings.Contains(string(b), `"complete"`) })
	if got := send("Bearer "+plain, "POST", "/v1/workers/poll", `{"tools":["nope"],"wait_ms":1}`); got >= 500 {
		t.Errorf("worker poll: %d", got)
	}
	if got := send("Bearer "+other, "GET", "/v1/sessions/"+plain, ""); got != http.StatusNotFound {
		t.Errorf("a session named by a token: %d, want 404", got)
	}
	if got := send("Bearer "+other, "GET", base, ""); got != http.StatusNotFound {
		t.Errorf("another tenant's session: %d, want 404", got)
	}
	n.Close()

	log := logs.String()
	for _, secret := range secrets {
		if strings.Contains(log, secret) {
			i := strings.Index(log, secret)
			t.Errorf("the log holds %q: …%s…", secret, log[max(i-200, 0):min(i+200, len(log))])
		}
	}
	// Each refusal is logged with its route and why, and only at warn.
	var refusals []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("a log line is not JSON: %s", line)
		}
		if l["msg"] == "authentication failed" {
			refusals = append(refusals, l)
		}
	}
	reasons := map[string]int{}
	routes := map[string]int{}
	for _, l := range refusals {
		reasons[l["reason"].(string)]++
		routes[l["route"].(string)]++
		if l["level"] != "WARN" || l["remote"] == nil || l["method"] == nil {
			t.Errorf("a refusal's line: %v", l)
		}
	}
	if len(refusals) != 12 {
		t.Errorf("%d refusals logged, want 12: %v", len(refusals), refusals)
	}
	if reasons["the token matches no tenant"] != 4 || reasons["no bearer token"] != 8 {
		t.Errorf("reasons %v, want 4 unknown tokens (three near misses, one on /mcp) and 8 without a bearer token", reasons)
	}
	if routes["GET /v1/sessions"] != 10 || routes["/mcp"] != 2 {
		t.Errorf("routes %v, want 10 of GET /v1/sessions and 2 of /mcp", routes)
	}
	if !strings.Contains(log, `"decider":"alice"`) {
		t.Errorf("the approval's decider is not logged as the principal alice")
	}
}
