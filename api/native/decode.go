package native

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/callsheet/callsheet/events"
)

// Format names a provider's response and conversation shape.
type Format string

// The formats a turn may be posted and answered in.
const (
	// OpenAIChat is OpenAI's Chat Completions API: the body is a Chat
	// Completion or its choice's message; the answer is messages.
	OpenAIChat Format = "openai_chat"
	// OpenAIResponses is OpenAI's Responses API: the body is a Response or
	// its output array; the answer is input items.
	OpenAIResponses Format = "openai_responses"
	// Anthropic is Anthropic's Messages API: the body is a Message or its
	// content array; the answer is one user message.
	Anthropic Format = "anthropic"
)

// Errors returned by ParseFormat and Decode.
var (
	// ErrFormat is wrapped by ParseFormat's error for an unknown name.
	ErrFormat = errors.New("native: unknown format")
	// ErrInvalid is wrapped by every error about a body that is not the
	// provider's shape: the message names the place and what was wrong.
	ErrInvalid = errors.New("native: invalid response")
	// ErrNoCalls is wrapped by Decode's error for a well-formed response
	// that holds no function tool call: the model is done, or called only
	// tools the harness runs itself; there is no turn to run.
	ErrNoCalls = errors.New("native: no tool calls")
)

// ParseFormat returns the format named s. "openai" is OpenAIChat, as
// GET /v1/tools names the Chat Completions format.
func ParseFormat(s string) (Format, error) {
	switch Format(s) {
	case OpenAIChat, "openai":
		return OpenAIChat, nil
	case OpenAIResponses:
		return OpenAIResponses, nil
	case Anthropic:
		return Anthropic, nil
	}
	return "", fmt.Errorf("%w: format %q is not one of openai_chat, openai_responses, anthropic", ErrFormat, s)
}

// Turn is what Decode reads from a response: its id ("" when the body
// has none, as a bare message, output array or content array has not) and
// its function tool calls in the model's order. Arguments are the
// provider's bytes verbatim: a Chat or Responses arguments string stays a
// JSON string, which the node decodes; one that does not hold a JSON object
// blocks that call as invalid_arguments, and the others run.
type Turn struct {
	ID    string
	Calls []events.CallSpec
}

// Decode reads body as a response of format f. It reads object keys
// exactly as the provider spells them and ignores every field it does not
// need (usage, model, text blocks, reasoning items, ...); tool calls of
// kinds callsheet does not run (a Chat "custom" tool call, a Responses item
// other than "function_call", an Anthropic block other than "tool_use") are
// left to the harness. Errors wrap ErrInvalid (not the provider's shape,
// naming where) or ErrNoCalls. The caller refuses duplicate keys first
// (encoding/json keeps the last of two silently).
func Decode(f Format, body []byte) (Turn, error) {
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return Turn{}, fmt.Errorf("%w: the body is not JSON: %v", ErrInvalid, err)
	}
	switch f {
	case OpenAIChat:
		return decodeChat(v)
	case OpenAIResponses:
		return decodeResponses(v)
	case Anthropic:
		return decodeAnthropic(v)
	}
	_, err := ParseFormat(string(f))
	return Turn{}, err
}

// decodeChat reads a Chat Completion ({"id", "choices": [{"message"}]}) or
// its message ({"role": "assistant", "tool_calls": [...]}).
func decodeChat(body json.RawMessage) (Turn, error) {
	top, err := object(body, "the body", "a Chat Completion object or its choices[0].message")
	if err != nil {
		return Turn{}, err
	}
	var t Turn
	msg, where := top, ""
	if raw, ok := top["choices"]; ok {
		if t.ID, err = optString(top, "id", ""); err != nil {
			return Turn{}, err
		}
		var choices []json.RawMessage
		if err := json.Unmarshal(raw, &choices); err != nil || choices == nil {
			return Turn{}, fmt.Errorf("%w: choices is %s, want an array of one choice", ErrInvalid, kind(raw))
		}
		if len(choices) != 1 {
			return Turn{}, fmt.Errorf("%w: choices has %d entries: post a completion of one choice, or the message of the choice the conversation goes on with", ErrInvalid, len(choices))
		}
		choice, err := object(choices[0], "choices[0]", "an object")
		if err != nil {
			return Turn{}, err
		}
		if msg, err = field(choice, "message", "choices[0]", "an object"); err != nil {
			return Turn{}, err
		}
		where = "choices[0].message."
	} else if _, ok := top["object"]; ok {
		return Turn{}, fmt.Errorf("%w: the body has no choices: post a Chat Completion (object \"chat.completion\") or its choices[0].message", ErrInvalid)
	}
	if role, err := optString(msg, "role", where); err != nil {
		return Turn{}, err
	} else if role != "" && role != "assistant" {
		return Turn{}, fmt.Errorf("%w: %srole is %q: post the assistant's message", ErrInvalid, where, role)
	}
	calls, err := optArray(msg, "tool_calls", where)
	if err != nil {
		return Turn{}, err
	}
	if t.Calls, err = chatCalls(calls, where+"tool_calls"); err != nil {
		return Turn{}, err
	}
	if len(t.Calls) == 0 {
		return Turn{}, fmt.Errorf("%w: %stool_calls holds no function call%s: the model is done (or called only tools the harness runs itself), so there is nothing to run", ErrNoCalls, where, reason(top, msg, "finish_reason"))
	}
	return t, nil
}

// chatCalls reads Chat tool calls ({"id", "type", "function": {"name",
// "arguments"}}); where names the array, for errors. Calls of a type other
// than "function" are the harness's own and left out.
func chatCalls(raws []json.RawMessage, where string) ([]events.CallSpec, error) {
	var out []events.CallSpec
	for i, raw := range raws {
		at := fmt.Sprintf("%s[%d]", where, i)
		c, err := object(raw, at, "an object")
		if err != nil {
			return nil, err
		}
		call, ok, err := chatCall(c, at)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, call)
		}
	}
	return out, nil
}

// chatCall reads one Chat tool call (at names it): its call, or ok false
// for a custom tool call, which is the harness's own.
func chatCall(c map[string]json.RawMessage, at string) (events.CallSpec, bool, error) {
	typ, err := optString(c, "type", at+".")
	if err != nil || (typ != "" && typ != "function") {
		return events.CallSpec{}, false, err
	}
	id, err := reqString(c, "id", at+".", "the call id the tool message answers")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	fn, err := field(c, "function", at, "an object {\"name\", \"arguments\"}")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	name, err := reqString(fn, "name", at+".function.", "the tool the model called")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	return events.CallSpec{ID: id, Name: name, Arguments: arguments(fn["arguments"])}, true, nil
}

// decodeResponses reads a Response ({"id", "output": [...]}) or its output
// array.
func decodeResponses(body json.RawMessage) (Turn, error) {
	var t Turn
	var items []json.RawMessage
	where := ""
	if isArray(body) {
		if err := json.Unmarshal(body, &items); err != nil {
			return Turn{}, fmt.Errorf("%w: the body: %v", ErrInvalid, err)
		}
	} else {
		top, err := object(body, "the body", "a Response object or its output array")
		if err != nil {
			return Turn{}, err
		}
		if _, ok := top["output"]; !ok {
			return Turn{}, fmt.Errorf("%w: the body has no output: post a Response (object \"response\") or its output array", ErrInvalid)
		}
		if t.ID, err = optString(top, "id", ""); err != nil {
			return Turn{}, err
		}
		if items, err = optArray(top, "output", ""); err != nil {
			return Turn{}, err
		}
		where = "output"
	}
	if where == "" {
		where = "the body"
	}
	var err error
	if t.Calls, err = responseCalls(items, where); err != nil {
		return Turn{}, err
	}
	if len(t.Calls) == 0 {
		return Turn{}, fmt.Errorf("%w: the output holds no function_call item: the model is done (or called only tools the harness runs itself), so there is nothing to run", ErrNoCalls)
	}
	return t, nil
}

// responseCalls reads Responses output items, keeping the function_call
// ones ({"type", "call_id", "name", "arguments"}); where names the array.
func responseCalls(items []json.RawMessage, where string) ([]events.CallSpec, error) {
	var out []events.CallSpec
	for i, raw := range items {
		at := fmt.Sprintf("%s[%d]", where, i)
		it, err := object(raw, at, "an output item object")
		if err != nil {
			return nil, err
		}
		c, ok, err := responseCall(it, at+".")
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// responseCall reads one output item: a function_call's call, or ok false
// for another kind (messages, reasoning, the harness's own tool kinds).
func responseCall(it map[string]json.RawMessage, prefix string) (events.CallSpec, bool, error) {
	typ, err := reqString(it, "type", prefix, "the item's type")
	if err != nil || typ != "function_call" {
		return events.CallSpec{}, false, err
	}
	id, err := reqString(it, "call_id", prefix, "the call id the function_call_output answers")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	name, err := reqString(it, "name", prefix, "the tool the model called")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	return events.CallSpec{ID: id, Name: name, Arguments: arguments(it["arguments"])}, true, nil
}

// decodeAnthropic reads a Message ({"id", "role": "assistant", "content":
// [...]}) or its content array.
func decodeAnthropic(body json.RawMessage) (Turn, error) {
	var t Turn
	var blocks []json.RawMessage
	where := "the body"
	var top map[string]json.RawMessage
	if isArray(body) {
		if err := json.Unmarshal(body, &blocks); err != nil {
			return Turn{}, fmt.Errorf("%w: the body: %v", ErrInvalid, err)
		}
	} else {
		var err error
		if top, err = object(body, "the body", "a Message object or its content array"); err != nil {
			return Turn{}, err
		}
		if _, ok := top["content"]; !ok {
			return Turn{}, fmt.Errorf("%w: the body has no content: post a Message (type \"message\") or its content array", ErrInvalid)
		}
		if t.ID, err = optString(top, "id", ""); err != nil {
			return Turn{}, err
		}
		if role, err := optString(top, "role", ""); err != nil {
			return Turn{}, err
		} else if role != "" && role != "assistant" {
			return Turn{}, fmt.Errorf("%w: role is %q: post the assistant's message", ErrInvalid, role)
		}
		if raw := top["content"]; len(raw) > 0 && raw[0] == '"' {
			blocks = nil // text only
		} else if blocks, err = optArray(top, "content", ""); err != nil {
			return Turn{}, err
		}
		where = "content"
	}
	var err error
	if t.Calls, err = anthropicCalls(blocks, where); err != nil {
		return Turn{}, err
	}
	if len(t.Calls) == 0 {
		return Turn{}, fmt.Errorf("%w: the content holds no tool_use block%s: the model is done, so there is nothing to run", ErrNoCalls, reason(top, nil, "stop_reason"))
	}
	return t, nil
}

// anthropicCalls reads content blocks, keeping the tool_use ones ({"type",
// "id", "name", "input"}); where names the array.
func anthropicCalls(blocks []json.RawMessage, where string) ([]events.CallSpec, error) {
	var out []events.CallSpec
	for i, raw := range blocks {
		at := fmt.Sprintf("%s[%d]", where, i)
		b, err := object(raw, at, "a content block object")
		if err != nil {
			return nil, err
		}
		c, ok, err := anthropicCall(b, at+".")
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, c)
		}
	}
	return out, nil
}

// anthropicCall reads one content block: a tool_use block's call, or ok
// false for another kind (text, thinking, server tools' blocks).
func anthropicCall(b map[string]json.RawMessage, prefix string) (events.CallSpec, bool, error) {
	typ, err := reqString(b, "type", prefix, "the block's type")
	if err != nil || typ != "tool_use" {
		return events.CallSpec{}, false, err
	}
	id, err := reqString(b, "id", prefix, "the id the tool_result answers")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	name, err := reqString(b, "name", prefix, "the tool the model called")
	if err != nil {
		return events.CallSpec{}, false, err
	}
	return events.CallSpec{ID: id, Name: name, Arguments: arguments(b["input"])}, true, nil
}

// arguments returns a call's arguments as the provider sent them; absent
// or null is "{}".
func arguments(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return json.RawMessage("{}")
	}
	return append(json.RawMessage(nil), raw...)
}

// object decodes raw as a JSON object; where names it and want says what
// was expected, for the error.
func object(raw json.RawMessage, where, want string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, fmt.Errorf("%w: %s is %s, want %s", ErrInvalid, where, kind(raw), want)
	}
	return m, nil
}

// field returns the object at key of m, which must be there.
func field(m map[string]json.RawMessage, key, where, want string) (map[string]json.RawMessage, error) {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil, fmt.Errorf("%w: %s has no %q: want %s", ErrInvalid, where, key, want)
	}
	return object(raw, where+"."+key, want)
}

// optString returns the string at key, "" when absent or null; prefix
// ("choices[0].message.") names the object for the error.
func optString(m map[string]json.RawMessage, key, prefix string) (string, error) {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%w: %s%s is %s, want a string", ErrInvalid, prefix, key, kind(raw))
	}
	return s, nil
}

// reqString is optString for a field that must be a non-empty string; what
// says what it is, for the error.
func reqString(m map[string]json.RawMessage, key, prefix, what string) (string, error) {
	s, err := optString(m, key, prefix)
	if err != nil {
		return "", err
	}
	if strings.TrimSpace(s) == "" {
		return "", fmt.Errorf("%w: %s%s is missing or empty: it is %s", ErrInvalid, prefix, key, what)
	}
	return s, nil
}

// optArray returns the array at key, nil when absent or null.
func optArray(m map[string]json.RawMessage, key, prefix string) ([]json.RawMessage, error) {
	raw, ok := m[key]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var a []json.RawMessage
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, fmt.Errorf("%w: %s%s is %s, want an array", ErrInvalid, prefix, key, kind(raw))
	}
	return a, nil
}

// reason says why a response ended, from key of msg or of the first choice
// of top, for ErrNoCalls's message.
func reason(top, msg map[string]json.RawMessage, key string) string {
	for _, m := range []map[string]json.RawMessage{msg, top} {
		if s, _ := optString(m, key, ""); s != "" {
			return fmt.Sprintf(" (%s %q)", key, s)
		}
	}
	if choices, _ := optArray(top, "choices", ""); len(choices) == 1 {
		if c, err := object(choices[0], "", ""); err == nil {
			if s, _ := optString(c, key, ""); s != "" {
				return fmt.Sprintf(" (%s %q)", key, s)
			}
		}
	}
	return ""
}

func isArray(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '['
}

// kind names the JSON type of raw for a message.
func kind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "empty"
	}
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}
