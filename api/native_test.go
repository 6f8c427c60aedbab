package api

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/api/native"
	"github.com/callsheet/callsheet/config"
)

func nativeFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("native", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// turnCount is how many turns the session's transcript holds.
func (e *env) turnCount(session string) int {
	e.t.Helper()
	tr, err := e.node.Transcript(context.Background(), config.DefaultTenant, session)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(tr.Turns)
}

// TestNativeChatCompletion: a Chat Completion's tool calls run in order; the
// call whose arguments string does not parse is blocked and the others run;
// the answer is one tool message per call; the completion's id is the turn
// id, so posting it again answers the same and runs nothing.
func TestNativeChatCompletion(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	body := nativeFixture(t, "chat_completion.json")
	path := "/v1/sessions/" + s.Session + "/turns?format=openai_chat"
	var a native.ChatAnswer
	first := e.must("POST", path, body, http.StatusOK, &a)
	if a.Turn != "chatcmpl-CZ9mQx3Jk2f1nV0aTq8Lw5rYb7Hd" {
		t.Errorf("turn=%q, want the completion's id", a.Turn)
	}
	want := []struct{ id, prefix string }{
		{"call_Qm1XnP7sT2vA9cD4eF6gH8jK", "created notes.txt"},
		{"call_Rn2YoQ8tU3wB0dE5fG7hI9kL", "[error] "},
		{"call_So3ZpR9uV4xC1eF6gH8iJ0lM", "[blocked: invalid_arguments; the call did not run] invalid arguments for glob: invalid arguments: arguments are not valid JSON"},
	}
	if len(a.Messages) != len(want) {
		t.Fatalf("%d messages, want %d: %+v", len(a.Messages), len(want), a.Messages)
	}
	for i, w := range want {
		m := a.Messages[i]
		text, _ := m.Content.(string)
		if m.Role != "tool" || m.ToolCallID != w.id || !strings.HasPrefix(strings.ToLower(text), strings.ToLower(w.prefix)) {
			t.Errorf("messages[%d]=%+v, want a tool message for %s starting %q", i, m, w.id, w.prefix)
		}
	}
	again := e.must("POST", path, body, http.StatusOK, nil)
	if string(again) != string(first) {
		t.Errorf("posted again: %s\nwant the first answer %s", again, first)
	}
	if n := e.turnCount(s.Session); n != 1 {
		t.Errorf("%d turns after posting one completion twice, want 1", n)
	}
	got := e.must("GET", "/v1/sessions/"+s.Session+"/turns/"+a.Turn+"?format=openai", "", http.StatusOK, nil)
	if string(got) != string(first) {
		t.Errorf("GET ?format=openai: %s\nwant %s", got, first)
	}
}

// TestNativeResponsesAndAnthropic: each whole response's id is the turn
// id; its assistant part posts with ?turn= and is idempotent the same way.
func TestNativeResponsesAndAnthropic(t *testing.T) {
	e := newEnv(t, nil)
	for _, tc := range []struct {
		format, fixture, id string
		part                func(map[string]any) any
	}{
		{"openai_responses", "responses.json", "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b", func(m map[string]any) any { return m["output"] }},
		{"anthropic", "anthropic_message.json", "msg_01Aq9w938a90dw8q5GuF4hZb", func(m map[string]any) any { return m["content"] }},
	} {
		t.Run(tc.format, func(t *testing.T) {
			s := e.open()
			path := "/v1/sessions/" + s.Session + "/turns?format=" + tc.format
			var a struct {
				Turn    string            `json:"turn"`
				Input   []json.RawMessage `json:"input"`
				Message struct {
					Role    string            `json:"role"`
					Content []json.RawMessage `json:"content"`
				} `json:"message"`
			}
			body := nativeFixture(t, tc.fixture)
			e.must("POST", path, body, http.StatusOK, &a)
			if a.Turn != tc.id {
				t.Errorf("turn=%q, want %q", a.Turn, tc.id)
			}
			items := a.Input
			if tc.format == "anthropic" {
				items = a.Message.Content
				if a.Message.Role != "user" {
					t.Errorf("message role %q, want user", a.Message.Role)
				}
			}
			if len(items) != 2 || !strings.Contains(string(items[0]), "created notes.txt") || !strings.Contains(string(items[1]), "[error]") {
				t.Errorf("answer items %s, want the write's result then the read's error", items)
			}
			var whole map[string]any
			_ = json.Unmarshal([]byte(body), &whole)
			part, _ := json.Marshal(tc.part(whole))
			first := e.must("POST", path+"&turn=part-1", string(part), http.StatusOK, nil)
			again := e.must("POST", path+"&turn=part-1", string(part), http.StatusOK, nil)
			if string(first) != string(again) || !strings.Contains(string(first), `"turn":"part-1"`) {
				t.Errorf("part posted twice with turn=part-1: %s then %s", first, again)
			}
			if n := e.turnCount(s.Session); n != 2 {
				t.Errorf("%d turns, want 2 (the whole response, then its part once)", n)
			}
			status, b := e.do("POST", path+"&turn=other", body)
			wantError(t, status, b, 400, CodeInvalidRequest, `turn="other" differs from the response's id`)
		})
	}
}

// TestNativeRefusals: what is not a provider's response is refused with
// what was wrong and where, and nothing is recorded.
func TestNativeRefusals(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	base := "/v1/sessions/" + s.Session + "/turns"
	for _, tc := range []struct {
		name, query, body, code, msg string
		status                       int
	}{
		{"unknown format", "?format=gemini", `{}`, CodeInvalidRequest, `format="gemini"`, 400},
		{"no tool calls", "?format=anthropic", `{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn"}`, CodeNoToolCalls, `stop_reason "end_turn"`, 400},
		{"not the shape", "?format=openai_chat", `{"choices":[{"message":{"tool_calls":[{"id":"c1","function":{}}]}}]}`, CodeInvalidBody, "choices[0].message.tool_calls[0].function.name is missing", 400},
		{"duplicate key", "?format=openai_responses", `{"id":"r","id":"s","output":[]}`, CodeInvalidBody, `the key "id" twice`, 400},
		{"duplicate key by case", "?format=openai_chat", `{"id":"r","ID":"s","choices":[]}`, CodeInvalidBody, `"id" twice`, 400},
		{"repeated call id", "?format=anthropic", `[` + strings.Repeat(`{"type":"tool_use","id":"x","name":"read","input":{}},`, 1) + `{"type":"tool_use","id":"x","name":"read","input":{}}]`, CodeInvalidRequest, `repeats call id "x"`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, b := e.do("POST", base+tc.query, tc.body)
			wantError(t, status, b, tc.status, tc.code, tc.msg)
		})
	}
	if n := e.turnCount(s.Session); n != 0 {
		t.Errorf("%d turns recorded by refused posts, want 0", n)
	}
}

// TestNativeDuplicateKeyInArgumentsString: a model's arguments string with
// a key twice blocks that call as invalid_arguments; its sibling runs.
func TestNativeDuplicateKeyInArgumentsString(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	body := `{"role":"assistant","tool_calls":[
		{"id":"a","type":"function","function":{"name":"read","arguments":"{\"path\":\"x\",\"path\":\"y\"}"}},
		{"id":"b","type":"function","function":{"name":"write","arguments":"{\"path\":\"b.txt\",\"content\":\"b\"}"}}]}`
	var a native.ChatAnswer
	e.must("POST", "/v1/sessions/"+s.Session+"/turns?format=openai_chat&turn=t1", body, http.StatusOK, &a)
	if len(a.Messages) != 2 {
		t.Fatalf("messages %+v, want 2", a.Messages)
	}
	if c := a.Messages[0].Content.(string); !strings.HasPrefix(c, "[blocked: invalid_arguments") || !strings.Contains(c, "arguments.path: field appears more than once") {
		t.Errorf("a: %q, want blocked naming the repeated key", c)
	}
	if c := a.Messages[1].Content.(string); strings.HasPrefix(c, "[") {
		t.Errorf("b: %q, want it ran", c)
	}
}

// TestNativeWaitingForPeople: a turn posted with ?wait=0 whose call needs
// an approval and another that asks a question answers 202 with nothing
// to append and what it waits for; once decided and answered, GET answers
// in the provider's shape.
func TestNativeWaitingForPeople(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Permission.Strict = true
	e := newEnv(t, &cfg)
	s := e.open()
	body := `{"id":"msg_w","role":"assistant","content":[
		{"type":"tool_use","id":"q","name":"question","input":{"question":"Which file?","options":["a","b"]}},
		{"type":"tool_use","id":"w","name":"write","input":{"path":"a.txt","content":"a"}}]}`
	var run native.Running
	e.must("POST", "/v1/sessions/"+s.Session+"/turns?format=anthropic&wait=0", body, http.StatusAccepted, &run)
	if run.Turn != "msg_w" || run.Status != "running" {
		t.Fatalf("answer %+v, want msg_w running", run)
	}
	turn := "/v1/sessions/" + s.Session + "/turns/msg_w?format=anthropic"
	deadline := time.Now().Add(10 * time.Second)
	for len(run.Waiting) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		raw := e.must("GET", turn, "", http.StatusOK, &run)
		if strings.Contains(string(raw), `"message"`) {
			t.Fatalf("running answer %s holds a message to append", raw)
		}
	}
	if len(run.Waiting) != 2 || run.Waiting[0].Kind != "question" || run.Waiting[0].Question != "Which file?" ||
		run.Waiting[1].Kind != "approval" || run.Waiting[1].Call != "w" || run.Waiting[1].Reason == "" {
		t.Fatalf("waiting %+v, want the question then the approval", run.Waiting)
	}
	e.must("POST", "/v1/sessions/"+s.Session+"/answers/q", `{"answer":"a"}`, http.StatusOK, nil)
	e.must("POST", "/v1/sessions/"+s.Session+"/approvals/w", `{"decision":"deny","reason":"not now"}`, http.StatusOK, nil)
	var done native.AnthropicAnswer
	var raw []byte
	for time.Now().Before(deadline.Add(10 * time.Second)) {
		raw = e.must("GET", turn, "", http.StatusOK, &done)
		if done.Message.Role == "user" {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var m struct {
		Message struct {
			Content []native.ToolResult `json:"content"`
		} `json:"message"`
	}
	if err := json.Unmarshal(raw, &m); err != nil || len(m.Message.Content) != 2 {
		t.Fatalf("answer %s: want two tool_result blocks (%v)", raw, err)
	}
	q, w := m.Message.Content[0], m.Message.Content[1]
	if q.ToolUseID != "q" || q.IsError || q.Content != `{"answer":"a"}` {
		t.Errorf("question result %+v, want the answer as JSON text", q)
	}
	if w.ToolUseID != "w" || !w.IsError || !strings.HasPrefix(w.Content.(string), "[blocked: denied") {
		t.Errorf("write result %+v, want blocked denied with is_error", w)
	}
}
