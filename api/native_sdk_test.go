package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
)

// sdkCall is one tool call of a scripted model response.
type sdkCall struct{ id, name, args string }

// The provider responses below are in each API's wire shape; the Go SDKs
// decode them as they decode an API's answer, and what is posted is what a
// Go harness has in hand: the SDK's own serialization of the assistant part
// (ToParam, which it appends to its conversation), or the response's raw
// JSON (RawJSON).

func chatWire(id string, calls []sdkCall) string {
	var tc []string
	for _, c := range calls {
		tc = append(tc, fmt.Sprintf(`{"id":%q,"type":"function","function":{"name":%q,"arguments":%q}}`, c.id, c.name, c.args))
	}
	return fmt.Sprintf(`{"id":%q,"object":"chat.completion","created":1764633600,"model":"gpt-4.1-2025-04-14","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[%s],"refusal":null,"annotations":[]},"logprobs":null,"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":900,"completion_tokens":80,"total_tokens":980},"service_tier":"default","system_fingerprint":"fp_b3f1157249"}`, id, strings.Join(tc, ","))
}

func responsesWire(id string, calls []sdkCall) string {
	items := []string{`{"id":"rs_1","type":"reasoning","summary":[]}`}
	for i, c := range calls {
		items = append(items, fmt.Sprintf(`{"id":"fc_%d","type":"function_call","status":"completed","arguments":%q,"call_id":%q,"name":%q}`, i, c.args, c.id, c.name))
	}
	return fmt.Sprintf(`{"id":%q,"object":"response","created_at":1764633600,"status":"completed","error":null,"incomplete_details":null,"model":"gpt-5-2025-08-07","output":[%s],"parallel_tool_calls":true,"store":false,"tool_choice":"auto","tools":[],"usage":{"input_tokens":900,"output_tokens":80,"total_tokens":980}}`, id, strings.Join(items, ","))
}

func anthropicWire(id string, calls []sdkCall) string {
	blocks := []string{`{"type":"text","text":"Working on it."}`}
	for _, c := range calls {
		blocks = append(blocks, fmt.Sprintf(`{"type":"tool_use","id":%q,"name":%q,"input":%s}`, c.id, c.name, c.args))
	}
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[%s],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":900,"output_tokens":80}}`, id, strings.Join(blocks, ","))
}

// sdkPost is one format's two posts: the assistant part as the Go SDK
// serializes it (with ?turn=), and a whole response's raw JSON.
type sdkPost struct {
	format string
	// part returns the SDK-serialized assistant part of wire.
	part func(t *testing.T, wire string) []byte
	// whole returns the body of a whole response.
	whole func(t *testing.T, wire string) []byte
	wire  func(id string, calls []sdkCall) string
	// tsType and field are the SDK type the answer's field is assigned to.
	tsType, field string
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var sdkPosts = []sdkPost{
	{
		format: "openai_chat", wire: chatWire, tsType: "ChatCompletionMessageParam[]", field: "messages",
		part: func(t *testing.T, wire string) []byte {
			var c openai.ChatCompletion
			if err := json.Unmarshal([]byte(wire), &c); err != nil {
				t.Fatal(err)
			}
			return mustJSON(t, c.Choices[0].Message.ToParam())
		},
		whole: func(t *testing.T, wire string) []byte {
			var c openai.ChatCompletion
			if err := json.Unmarshal([]byte(wire), &c); err != nil {
				t.Fatal(err)
			}
			return []byte(c.RawJSON())
		},
	},
	{
		format: "openai_responses", wire: responsesWire, tsType: "ResponseInputItem[]", field: "input",
		part: func(t *testing.T, wire string) []byte {
			var r responses.Response
			if err := json.Unmarshal([]byte(wire), &r); err != nil {
				t.Fatal(err)
			}
			// What a harness appends to its input list: every output item
			// as an input item.
			var items []responses.ResponseInputItemUnionParam
			for _, o := range r.Output {
				switch o.Type {
				case "function_call":
					p := o.AsFunctionCall().ToParam()
					items = append(items, responses.ResponseInputItemUnionParam{OfFunctionCall: &p})
				case "reasoning":
					p := o.AsReasoning().ToParam()
					items = append(items, responses.ResponseInputItemUnionParam{OfReasoning: &p})
				}
			}
			return mustJSON(t, items)
		},
		whole: func(t *testing.T, wire string) []byte {
			var r responses.Response
			if err := json.Unmarshal([]byte(wire), &r); err != nil {
				t.Fatal(err)
			}
			return []byte(r.RawJSON())
		},
	},
	{
		format: "anthropic", wire: anthropicWire, tsType: "MessageParam", field: "message",
		part: func(t *testing.T, wire string) []byte {
			var m anthropic.Message
			if err := json.Unmarshal([]byte(wire), &m); err != nil {
				t.Fatal(err)
			}
			return mustJSON(t, m.ToParam())
		},
		whole: func(t *testing.T, wire string) []byte {
			var m anthropic.Message
			if err := json.Unmarshal([]byte(wire), &m); err != nil {
				t.Fatal(err)
			}
			return []byte(m.RawJSON())
		},
	},
}

// sdkEnv is a node whose workspace root the test knows, behind the API.
func sdkEnv(t *testing.T, cfg *config.Config) (*env, string) {
	t.Helper()
	root := filepath.Join(t.TempDir(), "ws")
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), WorkspaceRoot: root, Config: cfg, Logger: logtest.New(t)})
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	s, err := New(n, WithLogger(logtest.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.CloseStreams)
	return &env{t: t, node: n, api: s, srv: srv}, root
}

// TestNativeAnswersTypeCheckWithSDKs posts a turn of every kind of result
// (ok, a JSON answer, an image, a cut output, an error, blocked for bad
// arguments and by a rule, indeterminate) in each format as the Go SDKs
// produce it, then a turn that carries the retry notice, and has tsc
// --strict check that each answer is the official TypeScript SDK's type:
// ChatCompletionMessageParam[], ResponseInputItem[], MessageParam. A
// control with a wrong field shows tsc refuses what does not fit.
func TestNativeAnswersTypeCheckWithSDKs(t *testing.T) {
	tsc := testenv.Tsc(t)
	deps := testenv.NativeDeps(t)
	cfg := config.DefaultConfig()
	cfg.ToolOutput.MaxBytes = 2048
	cfg.Permission.Rules = []config.Rule{{ID: "no-shell", Tool: "shell", Action: "deny"}}
	e, _ := sdkEnv(t, &cfg)
	e.must("PUT", "/v1/tools/charge", `{"description":"Charge an order.","guidelines":["Charge once."],"input_schema":{"type":"object","properties":{"order":{"type":"string"}},"required":["order"]},"timeout":"1s"}`, http.StatusOK, nil)
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\xcf\xc0\xf0\x1f\x00\x05\x00\x01\xff\x89\x99=\x1d\x00\x00\x00\x00IEND\xaeB`\x82")

	var ts strings.Builder
	ts.WriteString(`import type { ChatCompletionMessageParam } from "openai/resources/chat/completions";
import type { ResponseInputItem } from "openai/resources/responses/responses";
import type { MessageParam } from "@anthropic-ai/sdk/resources/messages";
`)
	for _, p := range sdkPosts {
		t.Run(p.format, func(t *testing.T) {
			s := e.open()
			ws := s.Workspace // absolute, under root
			if err := os.WriteFile(filepath.Join(ws, "img.png"), png, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(ws, "big.txt"), []byte(strings.Repeat("a line of the big file\n", 400)), 0o644); err != nil {
				t.Fatal(err)
			}
			badArgs := `{"pattern":`
			if p.format == "anthropic" {
				badArgs = `{"pattern":7}` // input is always an object there
			}
			calls := []sdkCall{
				{"c_write", "write", `{"path":"a.txt","content":"hello\n"}`},
				{"c_img", "read", `{"path":"img.png"}`},
				{"c_big", "read", `{"path":"big.txt"}`},
				{"c_missing", "read", `{"path":"missing.txt"}`},
				{"c_bad", "glob", badArgs},
				{"c_shell", "shell", `{"command":"ls"}`},
				{"c_q", "question", `{"question":"Proceed?","options":["yes","no"]}`},
				{"c_charge", "charge", `{"order":"A-1"}`},
			}
			base := "/v1/sessions/" + s.Session + "/turns"
			body := p.part(t, p.wire("unused", calls))
			e.must("POST", base+"?format="+p.format+"&wait=0&turn=t1", string(body), http.StatusAccepted, nil)
			answerWhenAsked(t, e, s.Session, "c_q", `{"answer":"yes"}`)
			var tasks struct {
				Tasks []struct{ Task string } `json:"tasks"`
			}
			e.must("POST", "/v1/workers/poll", `{"worker":"w1","tools":["charge"],"max":1,"wait_ms":20000}`, http.StatusOK, &tasks)
			if len(tasks.Tasks) != 1 {
				t.Fatalf("polled %+v, want the charge task", tasks)
			}
			// The worker never completes: at the 1 s timeout the never call
			// is indeterminate.
			first := waitComplete(t, e, base+"/t1?format="+p.format)
			for _, want := range []string{"created a.txt", "iVBORw0KGgo", "image/png", "[output truncated", "[error]", "[blocked: invalid_arguments", "[blocked: denied", `{\"answer\":\"yes\"}`, "[indeterminate]"} {
				if !strings.Contains(string(first), want) {
					t.Errorf("turn 1 answer does not hold %q:\n%s", want, first)
				}
			}
			second := e.must("POST", base+"?format="+p.format, string(p.whole(t, p.wire("resp-2-"+p.format, []sdkCall{{"c_read", "read", `{"path":"a.txt"}`}}))), http.StatusOK, nil)
			if !strings.Contains(string(second), "Retry notice: Call c_charge") {
				t.Errorf("turn 2 answer carries no retry notice:\n%s", second)
			}
			for i, a := range [][]byte{first, second} {
				var m map[string]json.RawMessage
				if err := json.Unmarshal(a, &m); err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(&ts, "export const %s_turn%d: %s = %s;\n", p.format, i+1, p.tsType, m[p.field])
			}
			t.Logf("%s: posted (the Go SDK's assistant part) %s", p.format, body)
			t.Logf("%s: turn 2 answer %s", p.format, second)
		})
	}
	dir := t.TempDir()
	if err := os.Symlink(filepath.Join(deps, "node_modules"), filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	// The control: a tool_result whose is_error is a string does not fit;
	// tsc must refuse it and nothing else.
	control := strings.Replace(ts.String(), `"is_error":true`, `"is_error":"yes"`, 1)
	for name, text := range map[string]string{"answers.ts": ts.String(), "control.ts": control} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runTsc(t, tsc, dir, "answers.ts", "control.ts")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err == nil || len(lines) != 1 || !strings.HasPrefix(lines[0], "control.ts(") ||
		!strings.Contains(lines[0], "error TS2322: Type 'string' is not assignable to type 'boolean | undefined'") {
		t.Fatalf("tsc --strict: want no error in answers.ts and one in control.ts; got (%v):\n%s", err, out)
	}
	t.Logf("tsc --strict --exactOptionalPropertyTypes --noUncheckedIndexedAccess: no error in answers.ts (%d answers, %d bytes); the control: %s",
		2*len(sdkPosts), ts.Len(), lines[0])
}

// runTsc type-checks file in dir with the strictest options the SDKs'
// users turn on.
func runTsc(t *testing.T, tsc []string, dir string, files ...string) (string, error) {
	t.Helper()
	args := append(tsc[1:], "--strict", "--exactOptionalPropertyTypes", "--noUncheckedIndexedAccess", "--noEmit",
		"--target", "es2022", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck")
	args = append(args, files...)
	cmd := exec.Command(tsc[0], args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// answerWhenAsked answers the question call once it waits for an answer.
func answerWhenAsked(t *testing.T, e *env, session, call, body string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, b := e.do("POST", "/v1/sessions/"+session+"/answers/"+call, body)
		if status == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("answering %s: %d %s", call, status, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitComplete GETs a native turn until it is no longer running.
func waitComplete(t *testing.T, e *env, path string) []byte {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b := e.must("GET", path, "", http.StatusOK, nil)
		if !strings.Contains(string(b), `"status":"running"`) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("turn still running: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
