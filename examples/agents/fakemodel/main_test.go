package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func req(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestRefusesWhatTheProviderRefuses: the checks hold a request to what each
// provider requires of the tool results that follow a response, and pass
// the right ones.
func TestRefusesWhatTheProviderRefuses(t *testing.T) {
	chat, resp, anth := load("openai_chat.json")[:1], load("openai_responses.json")[:1], load("anthropic.json")[:1]
	const (
		a1 = `{"role":"assistant","tool_calls":[{"id":"call_Hn4kT1qW8eR2yU6iO0pA3sD5"},{"id":"call_Jm5lU2rX9fS3zV7jP1qB4tE6"}]}`
		t1 = `{"role":"tool","tool_call_id":"call_Hn4kT1qW8eR2yU6iO0pA3sD5","content":"ok"}`
		t2 = `{"role":"tool","tool_call_id":"call_Jm5lU2rX9fS3zV7jP1qB4tE6","content":"ok"}`
		f1 = `{"type":"function_call","call_id":"call_Lo7nW4tZ1hU5bX9lR3sD6vG8"}`
		f2 = `{"type":"function_call","call_id":"call_Mp8oX5uA2iV6cY0mS4tE7wH9"}`
		o1 = `{"type":"function_call_output","call_id":"call_Lo7nW4tZ1hU5bX9lR3sD6vG8","output":"ok"}`
		o2 = `{"type":"function_call_output","call_id":"call_Mp8oX5uA2iV6cY0mS4tE7wH9","output":"ok"}`
		u  = `{"role":"user","content":"go"}`
		au = `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6"},{"type":"tool_use","id":"toolu_01U2y2gK45rBnl3uOUsO8Vq7"}]}`
		r1 = `{"type":"tool_result","tool_use_id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","content":"ok"}`
		r2 = `{"type":"tool_result","tool_use_id":"toolu_01U2y2gK45rBnl3uOUsO8Vq7","content":[{"type":"text","text":"ok"}],"is_error":true}`
	)
	for _, tc := range []struct {
		name  string
		check func(map[string]any, []step) (string, error)
		steps []step
		body  string
		err   string // "" passes
	}{
		{"chat right", checkChat, chat, `{"messages":[` + u + `,` + a1 + `,` + t1 + `,` + t2 + `]}`, ""},
		{"chat a call unanswered", checkChat, chat, `{"messages":[` + u + `,` + a1 + `,` + t1 + `]}`, "did not have response messages"},
		{"chat out of order", checkChat, chat, `{"messages":[` + u + `,` + a1 + `,` + t2 + `,` + t1 + `]}`, "in order"},
		{"chat answered twice", checkChat, chat, `{"messages":[` + u + `,` + a1 + `,` + t1 + `,` + t2 + `,` + t2 + `]}`, "does not hold"},
		{"chat image in a tool message", checkChat, chat, `{"messages":[` + u + `,` + a1 + `,` + t1 + `,{"role":"tool","tool_call_id":"call_Jm5lU2rX9fS3zV7jP1qB4tE6","content":[{"type":"image_url"}]}]}`, "cannot carry"},
		{"responses right", checkResponses, resp, `{"input":[` + u + `,` + f1 + `,` + f2 + `,` + o1 + `,` + o2 + `]}`, ""},
		{"responses a call unanswered", checkResponses, resp, `{"input":[` + u + `,` + f1 + `,` + f2 + `,` + o1 + `]}`, "No tool output found"},
		{"responses interleaved", checkResponses, resp, `{"input":[` + u + `,` + f1 + `,` + o1 + `,` + f2 + `,` + o2 + `]}`, ""},
		{"responses out of order", checkResponses, resp, `{"input":[` + u + `,` + f1 + `,` + f2 + `,` + o2 + `,` + o1 + `]}`, "in order"},
		{"responses answered twice", checkResponses, resp, `{"input":[` + u + `,` + f1 + `,` + f2 + `,` + o1 + `,` + o2 + `,` + o2 + `]}`, "answered once"},
		{"anthropic right", checkAnthropic, anth, `{"messages":[` + u + `,` + au + `,{"role":"user","content":[` + r1 + `,` + r2 + `,{"type":"text","text":"note"}]}]}`, ""},
		{"anthropic text first", checkAnthropic, anth, `{"messages":[` + u + `,` + au + `,{"role":"user","content":[{"type":"text","text":"note"},` + r1 + `,` + r2 + `]}]}`, "without `tool_result` blocks immediately after"},
		{"anthropic one missing", checkAnthropic, anth, `{"messages":[` + u + `,` + au + `,{"role":"user","content":[` + r1 + `]}]}`, "toolu_01U2y2gK45rBnl3uOUsO8Vq7"},
		{"anthropic is_error a string", checkAnthropic, anth, `{"messages":[` + u + `,` + au + `,{"role":"user","content":[` + r1 + `,` + strings.Replace(r2, "true", `"yes"`, 1) + `]}]}`, "want a boolean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.check(req(t, tc.body), tc.steps)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("refused a right request: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("err=%v, want it to say %q", err, tc.err)
			}
		})
	}
}
