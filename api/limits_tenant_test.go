package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/config"
)

// TestTenantLimits: a tenant's own limits replace the node's field by
// field, in both directions, and each refusal names the key in force;
// another tenant keeps the node's.
func TestTenantLimits(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Limits.BodyBytes = 4096
	cfg.Tenants = map[string]config.Tenant{
		"acme":   {Token: "tok-acme", Limits: config.Limits{SessionsPerTenant: 1, CallsPerTurn: 2, CallsInFlightPerTenant: 2}},
		"globex": {Token: "tok-globex", Limits: config.Limits{BodyBytes: 65536}},
	}
	e := newEnv(t, &cfg)
	calls := func(n int, pad int) string {
		var cs []string
		for i := range n {
			cs = append(cs, fmt.Sprintf(`{"id":"c%d","name":"todo_get","arguments":{}}`, i))
		}
		return fmt.Sprintf(`{"calls":[%s],"pad":%q}`, strings.Join(cs, ","), strings.Repeat("x", pad))
	}
	e.token = "tok-acme"
	a := e.open().Session
	status, b := e.do("POST", "/v1/sessions", "")
	wantError(t, status, b, http.StatusTooManyRequests, CodeLimitExceeded, "tenants.acme.limits.sessions_per_tenant")
	status, b = e.do("POST", "/v1/sessions/"+a+"/turns", strings.Replace(calls(3, 0), `,"pad":""`, "", 1))
	wantError(t, status, b, http.StatusRequestEntityTooLarge, CodeTooLarge, "at most 2 (tenants.acme.limits.calls_per_turn)")
	status, b = e.do("POST", "/v1/sessions/"+a+"/turns", calls(1, 5000))
	wantError(t, status, b, http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "larger than 4096 bytes")

	e.token = "tok-globex"
	var g string
	for range 3 {
		g = e.open().Session
	}
	// 10 KB passes globex's own 64 KiB (the pad is refused as an unknown
	// field only once the body is read: 400, not 413).
	status, b = e.do("POST", "/v1/sessions/"+g+"/turns", calls(5, 10_000))
	if status != http.StatusBadRequest || !strings.Contains(string(b), `unknown field \"pad\"`) {
		t.Fatalf("globex's 10 KB body: %d %s, want it read (and its unknown field refused)", status, b)
	}
	e.must("POST", "/v1/sessions/"+g+"/turns", strings.Replace(calls(5, 0), `,"pad":""`, "", 1), http.StatusOK, nil)
}
