// Command fakemodel is a stand-in for the OpenAI and Anthropic APIs that the
// agent examples (examples/agents) run against: it replays a recorded
// multi-step tool-calling conversation in each provider's own JSON
// (scripts/*.json) and refuses, with the provider's 400, a request whose
// tool results are not what that provider requires: every tool call of
// every earlier response answered exactly once, in order, in the right
// shape, right after the call. Each step is answered once, in order.
//
//	go run ./examples/agents/fakemodel --addr 127.0.0.1:0
//
// serves POST /v1/chat/completions (scripts/openai_chat.json),
// /v1/responses (openai_responses.json) and /v1/messages (anthropic.json),
// and prints "listening on http://ADDR" once it does.
package main

import (
	"bytes"
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
)

//go:embed scripts/*.json
var scripts embed.FS

// step is one recorded response and what the request for it must hold:
// Expect are texts its tool results carry (the calls really ran).
type step struct {
	Expect   []string        `json:"expect"`
	Response json.RawMessage `json:"response"`
}

// script is one provider's conversation; next is the step to answer.
type script struct {
	mu    sync.Mutex
	steps []step
	next  int
	// check validates a request against the steps answered before it and
	// returns the tool results' text.
	check func(req map[string]any, answered []step) (string, error)
}

func load(name string) []step {
	b, err := scripts.ReadFile("scripts/" + name)
	if err != nil {
		log.Fatal(err)
	}
	var s []step
	if err := json.Unmarshal(b, &s); err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	return s
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	mux := http.NewServeMux()
	for path, s := range map[string]*script{
		"/v1/chat/completions": {steps: load("openai_chat.json"), check: checkChat},
		"/v1/responses":        {steps: load("openai_responses.json"), check: checkResponses},
		"/v1/messages":         {steps: load("anthropic.json"), check: checkAnthropic},
	} {
		anthropic := path == "/v1/messages"
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) { s.serve(w, r, anthropic) })
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening on http://%s\n", ln.Addr())
	log.Fatal(http.Serve(ln, mux))
}

func (s *script) serve(w http.ResponseWriter, r *http.Request, anthropic bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var req map[string]any
	dec := json.NewDecoder(r.Body)
	dec.UseNumber()
	if err := dec.Decode(&req); err != nil {
		refuse(w, anthropic, "the body is not JSON: "+err.Error())
		return
	}
	if s.next >= len(s.steps) {
		refuse(w, anthropic, fmt.Sprintf("the script has %d steps and every one was answered", len(s.steps)))
		return
	}
	if tools, _ := req["tools"].([]any); len(tools) == 0 {
		refuse(w, anthropic, "tools: the request gives the model no tools")
		return
	}
	results, err := s.check(req, s.steps[:s.next])
	if err != nil {
		refuse(w, anthropic, err.Error())
		return
	}
	for _, want := range s.steps[s.next].Expect {
		if !strings.Contains(results, want) {
			refuse(w, anthropic, fmt.Sprintf("step %d: no tool result holds %q", s.next, want))
			return
		}
	}
	fmt.Fprintf(os.Stderr, "fakemodel: %s step %d answered\n", r.URL.Path, s.next)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(s.steps[s.next].Response)
	s.next++
}

// refuse answers 400 in the provider's error shape.
func refuse(w http.ResponseWriter, anthropic bool, msg string) {
	fmt.Fprintf(os.Stderr, "fakemodel: refused: %s\n", msg)
	var body any = map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "param": nil, "code": nil}}
	if anthropic {
		body = map[string]any{"type": "error", "error": map[string]any{"type": "invalid_request_error", "message": msg}}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(body)
}

// get walks v by keys and indexes ("choices", 0, "message").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			a, _ := v.([]any)
			if k >= len(a) {
				return nil
			}
			v = a[k]
		}
	}
	return v
}

func str(v any, path ...any) string { s, _ := get(v, path...).(string); return s }

func list(v any, path ...any) []any { a, _ := get(v, path...).([]any); return a }

func recorded(st step) any {
	var v any
	d := json.NewDecoder(bytes.NewReader(st.Response))
	d.UseNumber()
	_ = d.Decode(&v)
	return v
}

// checkText checks a tool result's content: a non-empty string, or a list
// of parts of the allowed types, each text part non-empty.
func checkText(where string, content any, parts map[string]bool, out *strings.Builder) error {
	switch c := content.(type) {
	case string:
		if c == "" {
			return fmt.Errorf("%s: content is empty", where)
		}
		out.WriteString(c + "\n")
		return nil
	case []any:
		if len(c) == 0 {
			return fmt.Errorf("%s: content is an empty list", where)
		}
		for i, p := range c {
			typ := str(p, "type")
			if !parts[typ] {
				return fmt.Errorf("%s: content[%d] has type %q, which a tool result cannot carry here", where, i, typ)
			}
			if t, ok := get(p, "text").(string); ok {
				out.WriteString(t + "\n")
			}
		}
		return nil
	}
	return fmt.Errorf("%s: content must be a string or a list of parts", where)
}

// checkChat: after each recorded assistant message with tool_calls comes
// that message (its calls' ids), then one role "tool" message per call, in
// order, each answering its tool_call_id once.
func checkChat(req map[string]any, answered []step) (string, error) {
	msgs := list(req, "messages")
	var out strings.Builder
	i := 0
	for n, st := range answered {
		want := list(recorded(st), "choices", 0, "message", "tool_calls")
		for i < len(msgs) && str(msgs[i], "role") != "assistant" {
			i++
		}
		if i == len(msgs) {
			return "", fmt.Errorf("messages: the assistant message of response %d is missing", n)
		}
		got := list(msgs[i], "tool_calls")
		if len(got) != len(want) {
			return "", fmt.Errorf("messages[%d]: the assistant message has %d tool_calls, the response had %d", i, len(got), len(want))
		}
		for k := range want {
			if str(got[k], "id") != str(want[k], "id") {
				return "", fmt.Errorf("messages[%d].tool_calls[%d].id is %q, the response's was %q", i, k, str(got[k], "id"), str(want[k], "id"))
			}
		}
		i++
		for k := range want {
			if i >= len(msgs) || str(msgs[i], "role") != "tool" {
				return "", fmt.Errorf("an assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s", str(want[k], "id"))
			}
			if id := str(msgs[i], "tool_call_id"); id != str(want[k], "id") {
				return "", fmt.Errorf("messages[%d]: tool_call_id %q, want %q (each call answered once, in order)", i, id, str(want[k], "id"))
			}
			if err := checkText(fmt.Sprintf("messages[%d]", i), get(msgs[i], "content"), map[string]bool{"text": true}, &out); err != nil {
				return "", err
			}
			i++
		}
		for ; i < len(msgs) && str(msgs[i], "role") == "user"; i++ {
			if err := checkText(fmt.Sprintf("messages[%d]", i), get(msgs[i], "content"), map[string]bool{"text": true, "image_url": true}, &out); err != nil {
				return "", err
			}
		}
	}
	for ; i < len(msgs); i++ {
		if r := str(msgs[i], "role"); r == "assistant" || r == "tool" {
			return "", fmt.Errorf("messages[%d]: a %s message the conversation does not hold", i, r)
		}
	}
	return out.String(), nil
}

// checkResponses: every function_call of a recorded response is in the
// input, in order, and has exactly one function_call_output after it with
// its call_id; the outputs come in call order.
func checkResponses(req map[string]any, answered []step) (string, error) {
	items := list(req, "input")
	var out strings.Builder
	calls, outputs := map[string][]int{}, map[string][]int{}
	for i, it := range items {
		switch str(it, "type") {
		case "function_call":
			calls[str(it, "call_id")] = append(calls[str(it, "call_id")], i)
		case "function_call_output":
			outputs[str(it, "call_id")] = append(outputs[str(it, "call_id")], i)
			if err := checkText(fmt.Sprintf("input[%d].output", i), get(it, "output"), map[string]bool{"input_text": true, "input_image": true}, &out); err != nil {
				return "", err
			}
		case "message":
			if r := str(it, "role"); r == "user" && i > 0 {
				if err := checkText(fmt.Sprintf("input[%d]", i), get(it, "content"), map[string]bool{"input_text": true, "input_image": true}, &out); err != nil {
					return "", err
				}
			}
		}
	}
	lastCall, lastOut, want := -1, -1, 0
	for n, st := range answered {
		for _, o := range list(recorded(st), "output") {
			if str(o, "type") != "function_call" {
				continue
			}
			want++
			id := str(o, "call_id")
			c, r := calls[id], outputs[id]
			switch {
			case len(c) != 1 || c[0] < lastCall:
				return "", fmt.Errorf("input: the function_call %s of response %d is missing, repeated or out of order", id, n)
			case len(r) == 0:
				return "", fmt.Errorf("No tool output found for function call %s.", id)
			case len(r) > 1:
				return "", fmt.Errorf("input[%d]: a second function_call_output for %s (each call answered once)", r[1], id)
			case r[0] < c[0] || r[0] < lastOut:
				return "", fmt.Errorf("input[%d]: the function_call_output for %s comes before its call or out of call order (each call answered once, in order)", r[0], id)
			}
			lastCall, lastOut = c[0], r[0]
		}
	}
	if len(calls) != want || len(outputs) != want {
		return "", fmt.Errorf("input: %d function calls and %d outputs, the conversation holds %d", len(calls), len(outputs), want)
	}
	return out.String(), nil
}

// checkAnthropic: each recorded assistant message is followed by a user
// message whose content starts with one tool_result per tool_use, in
// order; then only text and images.
func checkAnthropic(req map[string]any, answered []step) (string, error) {
	msgs := list(req, "messages")
	var out strings.Builder
	if len(msgs) != 1+2*len(answered) {
		return "", fmt.Errorf("messages: %d messages, want %d (the first user message, then each response and its results)", len(msgs), 1+2*len(answered))
	}
	for n, st := range answered {
		a, u := msgs[1+2*n], msgs[2+2*n]
		if str(a, "role") != "assistant" || str(u, "role") != "user" {
			return "", fmt.Errorf("messages[%d..%d]: roles %q, %q; want assistant then user", 1+2*n, 2+2*n, str(a, "role"), str(u, "role"))
		}
		var want []string
		for _, b := range list(recorded(st), "content") {
			if str(b, "type") == "tool_use" {
				want = append(want, str(b, "id"))
			}
		}
		var got []string
		for _, b := range list(a, "content") {
			if str(b, "type") == "tool_use" {
				got = append(got, str(b, "id"))
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			return "", fmt.Errorf("messages[%d]: tool_use ids %v, the response's were %v", 1+2*n, got, want)
		}
		blocks := list(u, "content")
		for k, id := range want {
			if k >= len(blocks) || str(blocks[k], "type") != "tool_result" {
				return "", fmt.Errorf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.", 1+2*n, id)
			}
			if got := str(blocks[k], "tool_use_id"); got != id {
				return "", fmt.Errorf("messages.%d.content.%d: tool_result for %q, want %q (each call answered once, in order)", 2+2*n, k, got, id)
			}
			if e, ok := get(blocks[k], "is_error").(bool); !ok && get(blocks[k], "is_error") != nil {
				return "", fmt.Errorf("messages.%d.content.%d.is_error: want a boolean, got %v", 2+2*n, k, e)
			}
			if err := checkText(fmt.Sprintf("messages.%d.content.%d", 2+2*n, k), get(blocks[k], "content"), map[string]bool{"text": true, "image": true}, &out); err != nil {
				return "", err
			}
		}
		for k := len(want); k < len(blocks); k++ {
			if t := str(blocks[k], "type"); t != "text" && t != "image" {
				return "", fmt.Errorf("messages.%d.content.%d: a %s block after the tool results", 2+2*n, k, t)
			}
			out.WriteString(str(blocks[k], "text") + "\n")
		}
	}
	return out.String(), nil
}
