package security

// Attacks on provenance (docs/spec.md §10 "Provenance", docs/security.md
// "Provenance"): whoever holds a token must not be able to record another
// name as the decider of an approval or the author of an answer, and
// /metrics must not show who decided.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
)

// strict asks for an approval of every side-effecting call.
var strict = map[string]any{"strict": true}

// pending submits writes (one call per id) as a turn without waiting and
// returns once the first of them waits for an approval.
func pending(t *testing.T, p *testnode.Proc, sess string, ids ...string) {
	t.Helper()
	var calls []any
	for _, id := range ids {
		calls = append(calls, map[string]any{"id": id, "name": "write", "arguments": map[string]any{"path": id + ".txt", "content": id}})
	}
	if code, err := p.Do("POST", "/v1/sessions/"+sess+"/turns?wait=0", map[string]any{"id": "t-" + ids[0], "calls": calls}, nil); err != nil || code != http.StatusAccepted {
		t.Fatalf("submit turn: %d %v", code, err)
	}
	waitFor(t, func() bool {
		var out struct{ Approvals []struct{ Call string } }
		code, err := p.Do("GET", "/v1/sessions/"+sess+"/approvals", nil, &out)
		return err == nil && code == http.StatusOK && len(out.Approvals) > 0
	}, "an approval request")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// post sends a JSON body with the token and extra headers and returns the
// status and the body.
func post(t *testing.T, p *testnode.Proc, token, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", p.Base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// deciders returns the by of every approval decision and answer in the log,
// by call id.
func deciders(t *testing.T, p *testnode.Proc, sess string) map[string]string {
	t.Helper()
	evs, err := p.Events(sess)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeApprovalGranted, events.TypeApprovalDenied, events.TypeAnswerReceived:
			var d struct{ Call, By string }
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			out[d.Call] = d.By
		}
	}
	return out
}

// TestProvenanceBodyCannotNameTheDecider: "by" in an approval's body is
// refused, saying why, and records nothing; the X-Callsheet-User header is
// not believed either: the token's principal is recorded. The tenant here
// uses the old {"token"} form, whose principal is the tenant's name.
func TestProvenanceBodyCannotNameTheDecider(t *testing.T) {
	p := node(t, map[string]any{
		"permission": strict,
		"tenants":    map[string]any{"acme": map[string]any{"token": "acme-old-form"}},
	})
	p.Token = "acme-old-form"
	sess := open(t, p, "")
	pending(t, p, sess, "a", "b")

	code, body := post(t, p, p.Token, "/v1/sessions/"+sess+"/approvals/a", `{"decision": "allow", "by": "mallory"}`, nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "authenticated principal") {
		t.Fatalf(`approval with "by": "mallory": %d %s, want 400 saying the decider is the authenticated principal`, code, body)
	}
	if by, ok := deciders(t, p, sess)["a"]; ok {
		t.Fatalf("the refused approval was recorded (by %q)", by)
	}
	code, body = post(t, p, p.Token, "/v1/sessions/"+sess+"/approvals/a", `{"decision": "allow"}`, map[string]string{"X-Callsheet-User": "mallory"})
	if code != http.StatusOK {
		t.Fatalf("approval with X-Callsheet-User: %d %s", code, body)
	}
	waitFor(t, func() bool {
		var out struct{ Approvals []struct{ Call string } }
		code, err := p.Do("GET", "/v1/sessions/"+sess+"/approvals", nil, &out)
		return err == nil && code == http.StatusOK && len(out.Approvals) == 1 && out.Approvals[0].Call == "b"
	}, "call b's approval request")
	if code, body := post(t, p, p.Token, "/v1/sessions/"+sess+"/approvals/b", `{"decision": "deny", "reason": "no"}`, map[string]string{"X-Callsheet-User": "mallory"}); code != http.StatusOK {
		t.Fatalf("deny with X-Callsheet-User: %d %s", code, body)
	}
	waitFor(t, func() bool { return len(deciders(t, p, sess)) == 2 }, "both decisions")
	for call, by := range deciders(t, p, sess) {
		if by != "acme" {
			t.Errorf("call %s: recorded decider %q, want the token's principal %q", call, by, "acme")
		}
	}
}

// TestProvenanceTokenNamesThePrincipal: with {"tokens": [{"token",
// "principal"}]} each token records its own principal, for approvals and
// for answers, whatever the header claims.
func TestProvenanceTokenNamesThePrincipal(t *testing.T) {
	p := node(t, map[string]any{
		"permission": strict,
		"tenants": map[string]any{"acme": map[string]any{"tokens": []any{
			map[string]any{"token": "acme-alice-7f", "principal": "alice@example.com"},
			map[string]any{"token": "acme-bob-3c", "principal": "bob"},
		}}},
	})
	p.Token = "acme-alice-7f"
	sess := open(t, p, "")
	pending(t, p, sess, "a")
	if code, body := post(t, p, "acme-bob-3c", "/v1/sessions/"+sess+"/approvals/a", `{"decision": "allow"}`, map[string]string{"X-Callsheet-User": "alice@example.com"}); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	waitFor(t, func() bool { return deciders(t, p, sess)["a"] != "" }, "the approval")
	if by := deciders(t, p, sess)["a"]; by != "bob" {
		t.Fatalf("approval by bob's token recorded decider %q, want %q", by, "bob")
	}

	// An answer to the question tool: "by" refused, the principal recorded.
	body := map[string]any{"id": "tq", "calls": []any{map[string]any{"id": "q", "name": "question", "arguments": map[string]any{"question": "go?"}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+sess+"/turns?wait=0", body, nil); err != nil || code != http.StatusAccepted {
		t.Fatalf("question turn: %d %v", code, err)
	}
	var code int
	var answer string
	waitFor(t, func() bool {
		code, answer = post(t, p, "acme-alice-7f", "/v1/sessions/"+sess+"/answers/q", `{"answer": "yes", "by": "mallory"}`, nil)
		return code != http.StatusConflict
	}, "the question to wait for its answer")
	if code != http.StatusBadRequest || !strings.Contains(answer, "authenticated principal") {
		t.Fatalf(`answer with "by": "mallory": %d %s, want 400`, code, answer)
	}
	if code, answer = post(t, p, "acme-alice-7f", "/v1/sessions/"+sess+"/answers/q", `{"answer": "yes"}`, map[string]string{"X-Callsheet-User": "mallory"}); code != http.StatusOK {
		t.Fatalf("answer: %d %s", code, answer)
	}
	waitFor(t, func() bool { return deciders(t, p, sess)["q"] != "" }, "the answer")
	if by := deciders(t, p, sess)["q"]; by != "alice@example.com" {
		t.Fatalf("answer by alice's token recorded %q, want %q", by, "alice@example.com")
	}
}

// TestProvenanceWithoutTenants: a node without tenants (loopback, tenant
// default) records the fixed principal "local", never a claimed name.
func TestProvenanceWithoutTenants(t *testing.T) {
	p := node(t, map[string]any{"permission": strict})
	sess := open(t, p, "")
	pending(t, p, sess, "a")
	if code, body := post(t, p, "", "/v1/sessions/"+sess+"/approvals/a", `{"decision": "allow"}`, map[string]string{"X-Callsheet-User": "mallory"}); code != http.StatusOK {
		t.Fatalf("approve: %d %s", code, body)
	}
	waitFor(t, func() bool { return deciders(t, p, sess)["a"] != "" }, "the approval")
	if by := deciders(t, p, sess)["a"]; by != "local" {
		t.Fatalf("recorded decider %q, want %q", by, "local")
	}
}

// TestProvenanceMetricsCarryNoIdentities: after approvals and denials by
// several principals (and names claimed in headers), the operator's
// /metrics holds no principal, claimed name, tenant or token, and a
// tenant's token reads no metrics at all (they count every tenant's work).
func TestProvenanceMetricsCarryNoIdentities(t *testing.T) {
	p := node(t, map[string]any{
		"permission": strict,
		"tenants": map[string]any{
			"acme":   map[string]any{"token": "acme-tok-91"},
			"globex": map[string]any{"token": "globex-tok-22"},
		},
	}, "--metrics-listen", "127.0.0.1:0")
	for i, who := range []struct{ token, claim, decision string }{
		{"acme-tok-91", "alice.approver", "allow"},
		{"globex-tok-22", "mallory.claimed", "deny"},
	} {
		p.Token = who.token
		sess := open(t, p, "")
		id := fmt.Sprintf("c%d", i)
		pending(t, p, sess, id)
		if code, body := post(t, p, who.token, "/v1/sessions/"+sess+"/approvals/"+id, `{"decision": "`+who.decision+`"}`, map[string]string{"X-Callsheet-User": who.claim}); code != http.StatusOK {
			t.Fatalf("decide: %d %s", code, body)
		}
		waitFor(t, func() bool { return deciders(t, p, sess)[id] != "" }, "the decision")
	}
	if code, err := p.DoAs("acme-tok-91", "GET", "/metrics", nil, nil); err != nil || code != http.StatusNotFound {
		t.Fatalf("a tenant's GET /metrics: %d %v, want 404 (the operator's listener serves them)", code, err)
	}
	resp, err := http.Get(p.OperatorURL() + "/metrics")
	if err != nil {
		t.Fatalf("operator's /metrics (%q): %v", p.OperatorURL(), err)
	}
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("operator's /metrics: %d %v", resp.StatusCode, err)
	}
	if !strings.Contains(string(metrics), "callsheet_approvals_total") {
		t.Fatalf("/metrics has no callsheet_approvals_total:\n%s", metrics)
	}
	for _, name := range []string{"alice.approver", "mallory.claimed", "acme", "globex", "acme-tok-91", "globex-tok-22"} {
		for _, line := range strings.Split(string(metrics), "\n") {
			if !strings.HasPrefix(line, "#") && strings.Contains(line, name) {
				t.Errorf("/metrics names %q: %s", name, line)
			}
		}
	}
}
