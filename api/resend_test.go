package api

import (
	"net/http/httptest"
	"testing"
)

// TestResendable: after a takeover only a read, or a turn that names its id
// (in the body or ?turn=), is sent to the new owner again; a turn without
// one would be minted a second id there and run twice, and decisions,
// cancels and closes are answered instead.
func TestResendable(t *testing.T) {
	for _, tc := range []struct {
		method, pattern, target, body string
		want                          bool
	}{
		{"GET", "GET /v1/sessions/{s}/turns/{t}", "/v1/sessions/s/turns/t1", "", true},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns", `{"id": "t1", "calls": []}`, true},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns", `{"calls": []}`, false},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns", `{"id": "", "calls": []}`, false},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns?format=openai_responses", `{"id": "resp_1", "output": []}`, true},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns?format=anthropic&turn=t9", `{"content": []}`, true},
		{"POST", "POST /v1/sessions/{s}/turns", "/v1/sessions/s/turns", `not json`, false},
		{"POST", "POST /v1/sessions/{s}/approvals/{call}", "/v1/sessions/s/approvals/c1", `{"id": "x", "decision": "allow"}`, false},
		{"POST", "POST /v1/sessions/{s}/close", "/v1/sessions/s/close", `{}`, false},
	} {
		r := httptest.NewRequest(tc.method, tc.target, nil)
		r.Pattern = tc.pattern
		if got := resendable(r, []byte(tc.body)); got != tc.want {
			t.Errorf("%s %s %s: resendable %v, want %v", tc.method, tc.target, tc.body, got, tc.want)
		}
	}
}
