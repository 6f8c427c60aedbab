package native

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/events"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// part returns the JSON at key of body's object (one level, or
// choices[0].message).
func part(t testing.TB, body []byte, path ...string) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	for _, p := range path {
		switch p {
		case "0":
			v = v.([]any)[0]
		default:
			v = v.(map[string]any)[p]
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type call struct{ id, name, args string }

func calls(cs []events.CallSpec) []call {
	var out []call
	for _, c := range cs {
		out = append(out, call{c.ID, c.Name, string(c.Arguments)})
	}
	return out
}

func TestDecodeWholeAndPart(t *testing.T) {
	chat := fixture(t, "chat_completion.json")
	resp := fixture(t, "responses.json")
	msg := fixture(t, "anthropic_message.json")
	chatCalls := []call{
		{"call_Qm1XnP7sT2vA9cD4eF6gH8jK", "write", `"{\"path\":\"notes.txt\",\"content\":\"hello\\n\"}"`},
		{"call_Rn2YoQ8tU3wB0dE5fG7hI9kL", "read", `"{\"path\":\"missing.txt\"}"`},
		{"call_So3ZpR9uV4xC1eF6gH8iJ0lM", "glob", `"{\"pattern\":\"*.tx"`},
	}
	respCalls := []call{
		{"call_Xb4mE9qK2rT7uV1wY3zA5cD6", "write", `"{\"path\":\"notes.txt\",\"content\":\"hello\\n\"}"`},
		{"call_Yc5nF0rL3sU8vW2xZ4aB6dE7", "read", `"{\"path\":\"missing.txt\"}"`},
	}
	anthCalls := []call{
		{"toolu_01A09q90qw90lq917835lq9a", "write", `{"path": "notes.txt", "content": "hello\n"}`},
		{"toolu_01B19r01rx01mr028946mr0b", "read", `{"path": "missing.txt"}`},
	}
	tests := []struct {
		name   string
		format Format
		body   []byte
		id     string
		calls  []call
	}{
		{"chat completion", OpenAIChat, chat, "chatcmpl-CZ9mQx3Jk2f1nV0aTq8Lw5rYb7Hd", chatCalls},
		{"chat message", OpenAIChat, part(t, chat, "choices", "0", "message"), "", nil},
		{"responses object", OpenAIResponses, resp, "resp_68af4030592c81938ec0a5fbab4a3e9f05438e46b5f69a3b", respCalls},
		{"responses output", OpenAIResponses, part(t, resp, "output"), "", nil},
		{"anthropic message", Anthropic, msg, "msg_01Aq9w938a90dw8q5GuF4hZb", anthCalls},
		{"anthropic content", Anthropic, part(t, msg, "content"), "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.format, tc.body)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tc.id {
				t.Errorf("id=%q, want %q", got.ID, tc.id)
			}
			want := tc.calls
			if want == nil { // a part re-encoded: same calls, compact arguments
				whole := map[Format][]call{OpenAIChat: chatCalls, OpenAIResponses: respCalls, Anthropic: anthCalls}[tc.format]
				for _, c := range whole {
					var v any
					_ = json.Unmarshal([]byte(c.args), &v)
					b, _ := json.Marshal(v)
					want = append(want, call{c.id, c.name, string(b)})
				}
			}
			if g, w := calls(got.Calls), want; !equal(g, w) {
				t.Errorf("calls=%q\nwant %q", g, w)
			}
		})
	}
}

func equal(a, b []call) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDecodeIgnoresWhatTheHarnessRuns(t *testing.T) {
	tests := []struct {
		name   string
		format Format
		body   string
		want   []call
	}{
		{"chat custom tool call", OpenAIChat, `{"role":"assistant","tool_calls":[
			{"id":"c1","type":"custom","custom":{"name":"grammar","input":"x"}},
			{"id":"c2","type":"function","function":{"name":"read","arguments":"{}"}}]}`,
			[]call{{"c2", "read", `"{}"`}}},
		{"chat arguments missing or null", OpenAIChat, `{"tool_calls":[
			{"id":"c1","function":{"name":"read"}},{"id":"c2","function":{"name":"read","arguments":null}}]}`,
			[]call{{"c1", "read", "{}"}, {"c2", "read", "{}"}}},
		{"responses other items", OpenAIResponses, `[{"type":"message","role":"assistant","content":[]},
			{"type":"web_search_call","id":"ws_1","status":"completed"},
			{"type":"custom_tool_call","call_id":"x","name":"n","input":"i"},
			{"type":"function_call","call_id":"c1","name":"glob","arguments":"{\"pattern\":\"*\"}"}]`,
			[]call{{"c1", "glob", `"{\"pattern\":\"*\"}"`}}},
		{"anthropic thinking and server tools", Anthropic, `[{"type":"thinking","thinking":"...","signature":"s"},
			{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"q"}},
			{"type":"tool_use","id":"t1","name":"grep","input":{"pattern":"x"}}]`,
			[]call{{"t1", "grep", `{"pattern":"x"}`}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.format, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if g := calls(got.Calls); !equal(g, tc.want) {
				t.Errorf("calls=%q, want %q", g, tc.want)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct {
		name    string
		format  Format
		body    string
		wantErr error
		msg     string
	}{
		{"not JSON", OpenAIChat, `{"choices":`, ErrInvalid, "not JSON"},
		{"chat array", OpenAIChat, `[]`, ErrInvalid, "the body is an array"},
		{"chat two choices", OpenAIChat, `{"id":"x","choices":[{"message":{}},{"message":{}}]}`, ErrInvalid, "choices has 2 entries"},
		{"chat no choices", OpenAIChat, `{"id":"x","choices":[]}`, ErrInvalid, "choices has 0 entries"},
		{"chat choice without message", OpenAIChat, `{"choices":[{"index":0}]}`, ErrInvalid, `choices[0] has no "message"`},
		{"chat user message", OpenAIChat, `{"role":"user","content":"hi"}`, ErrInvalid, `role is "user"`},
		{"chat call without id", OpenAIChat, `{"tool_calls":[{"type":"function","function":{"name":"read","arguments":"{}"}}]}`, ErrInvalid, "tool_calls[0].id is missing"},
		{"chat call without name", OpenAIChat, `{"tool_calls":[{"id":"c","function":{"arguments":"{}"}}]}`, ErrInvalid, "tool_calls[0].function.name is missing"},
		{"chat id a number", OpenAIChat, `{"id":7,"choices":[{"message":{}}]}`, ErrInvalid, "id is a number, want a string"},
		{"chat tool_calls an object", OpenAIChat, `{"tool_calls":{}}`, ErrInvalid, "tool_calls is an object, want an array"},
		{"chat done", OpenAIChat, `{"id":"x","choices":[{"message":{"role":"assistant","content":"Done."},"finish_reason":"stop"}]}`, ErrNoCalls, `finish_reason "stop"`},
		{"chat key case is exact", OpenAIChat, `{"Tool_Calls":[{"id":"c","function":{"name":"read"}}]}`, ErrNoCalls, "no function call"},
		{"responses without output", OpenAIResponses, `{"id":"resp_1","object":"response"}`, ErrInvalid, "has no output"},
		{"responses item not an object", OpenAIResponses, `[1]`, ErrInvalid, "the body[0] is a number"},
		{"responses call without call_id", OpenAIResponses, `[{"type":"function_call","id":"fc_1","name":"read","arguments":"{}"}]`, ErrInvalid, "[0].call_id is missing"},
		{"responses done", OpenAIResponses, `{"id":"r","output":[{"type":"message","role":"assistant","content":[]}]}`, ErrNoCalls, "no function_call item"},
		{"anthropic without content", Anthropic, `{"id":"msg_1","type":"message"}`, ErrInvalid, "has no content"},
		{"anthropic user message", Anthropic, `{"role":"user","content":[]}`, ErrInvalid, `role is "user"`},
		{"anthropic tool_use without id", Anthropic, `[{"type":"tool_use","name":"read","input":{}}]`, ErrInvalid, "the body[0].id is missing"},
		{"anthropic block without type", Anthropic, `{"content":[{"text":"x"}]}`, ErrInvalid, "content[0].type is missing"},
		{"anthropic done", Anthropic, `{"id":"m","role":"assistant","content":[{"type":"text","text":"Done."}],"stop_reason":"end_turn"}`, ErrNoCalls, `stop_reason "end_turn"`},
		{"anthropic text content", Anthropic, `{"role":"assistant","content":"Done."}`, ErrNoCalls, "no tool_use block"},
		{"unknown format", Format("gemini"), `{}`, ErrFormat, `"gemini"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.format, []byte(tc.body))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err=%v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err=%q, want it to say %q", err, tc.msg)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for in, want := range map[string]Format{"openai": OpenAIChat, "openai_chat": OpenAIChat, "openai_responses": OpenAIResponses, "anthropic": Anthropic} {
		if got, err := ParseFormat(in); err != nil || got != want {
			t.Errorf("ParseFormat(%q)=%q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseFormat(""); !errors.Is(err, ErrFormat) {
		t.Errorf("ParseFormat(\"\") err=%v, want ErrFormat", err)
	}
}

// fuzzDecode holds Decode to what it promises for any body: no panic, an
// error that names its kind, and calls a turn can hold.
func fuzzDecode(f *testing.F, format Format, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := Decode(format, body)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNoCalls) {
				t.Fatalf("err=%v: want ErrInvalid or ErrNoCalls", err)
			}
			return
		}
		if len(got.Calls) == 0 {
			t.Fatal("no error and no calls")
		}
		for i, c := range got.Calls {
			if strings.TrimSpace(c.ID) == "" || strings.TrimSpace(c.Name) == "" {
				t.Fatalf("calls[%d]=%+v: want an id and a name", i, c)
			}
			if !json.Valid(c.Arguments) {
				t.Fatalf("calls[%d] arguments %q are not JSON", i, c.Arguments)
			}
		}
		again, err := Decode(format, body)
		if err != nil || again.ID != got.ID || !equal(calls(again.Calls), calls(got.Calls)) {
			t.Fatalf("Decode is not deterministic: %+v then %+v, %v", got, again, err)
		}
	})
}

func FuzzDecodeChat(f *testing.F) {
	fuzzDecode(f, OpenAIChat, string(fixture(f, "chat_completion.json")),
		`{"tool_calls":[{"id":"c","function":{"name":"n","arguments":"{\"a\":"}}]}`,
		`{"choices":[{"message":{"tool_calls":[{"id":"c","type":"custom"}]}}]}`)
}

func FuzzDecodeResponses(f *testing.F) {
	fuzzDecode(f, OpenAIResponses, string(fixture(f, "responses.json")),
		`[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]`,
		`{"output":null}`)
}

func FuzzDecodeAnthropic(f *testing.F) {
	fuzzDecode(f, Anthropic, string(fixture(f, "anthropic_message.json")),
		`[{"type":"tool_use","id":"t","name":"n","input":{"a":[1,{"b":null}]}}]`,
		`{"content":"text"}`)
}
