package native

import (
	"encoding/json"
	"fmt"

	"github.com/callsheet/callsheet/events"
)

// DecodeBatch reads body as calls of a streamed turn, posted in format f
// as the provider's stream gives them, each once the model has streamed it
// whole (docs/clients.md, "Streamed turns"):
//
//   - OpenAIChat: a tool call ({"id", "type": "function", "function":
//     {"name", "arguments"}}), an array of them, or an object holding them
//     as "tool_calls" (a delta's or a message's shape, the arguments
//     accumulated). A call's "index" is not read: the calls go in the order
//     posted.
//   - OpenAIResponses: a function_call output item, an array of output
//     items, or the "response.output_item.done" event that carries one as
//     "item".
//   - Anthropic: a tool_use content block (its input accumulated), or an
//     array of content blocks.
//
// Items of other kinds (text, reasoning, the harness's own tool kinds) are
// left out, as Decode leaves them. Errors wrap ErrInvalid (naming the
// place) or ErrNoCalls (nothing to run). The caller refuses duplicate keys
// first.
func DecodeBatch(f Format, body []byte) ([]events.CallSpec, error) {
	var v json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("%w: the body is not JSON: %v", ErrInvalid, err)
	}
	var calls []events.CallSpec
	var err error
	switch f {
	case OpenAIChat:
		calls, err = chatBatch(v)
	case OpenAIResponses:
		calls, err = responsesBatch(v)
	case Anthropic:
		calls, err = anthropicBatch(v)
	default:
		_, err = ParseFormat(string(f))
	}
	if err == nil && len(calls) == 0 {
		err = fmt.Errorf("%w: the body holds no %s: post each call once the model has streamed it whole", ErrNoCalls, batchWant(f))
	}
	return calls, err
}

func batchWant(f Format) string {
	switch f {
	case OpenAIResponses:
		return "function_call item"
	case Anthropic:
		return "tool_use block"
	}
	return "function tool call"
}

// items reads body as an array (where "the body") or, when it is an
// object, passes it to one.
func items(body json.RawMessage, want string, one func(map[string]json.RawMessage) ([]events.CallSpec, error), many func([]json.RawMessage, string) ([]events.CallSpec, error)) ([]events.CallSpec, error) {
	if isArray(body) {
		var a []json.RawMessage
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, fmt.Errorf("%w: the body: %v", ErrInvalid, err)
		}
		return many(a, "the body")
	}
	m, err := object(body, "the body", want)
	if err != nil {
		return nil, err
	}
	return one(m)
}

func chatBatch(body json.RawMessage) ([]events.CallSpec, error) {
	return items(body, "a tool call, an array of tool calls, or an object with tool_calls", func(m map[string]json.RawMessage) ([]events.CallSpec, error) {
		if _, ok := m["tool_calls"]; ok {
			calls, err := optArray(m, "tool_calls", "")
			if err != nil {
				return nil, err
			}
			return chatCalls(calls, "tool_calls")
		}
		c, ok, err := chatCall(m, "the body")
		if err != nil || !ok {
			return nil, err
		}
		return []events.CallSpec{c}, nil
	}, chatCalls)
}

func responsesBatch(body json.RawMessage) ([]events.CallSpec, error) {
	return items(body, "an output item, an array of output items, or a response.output_item.done event", func(m map[string]json.RawMessage) ([]events.CallSpec, error) {
		where := "the body."
		if typ, _ := optString(m, "type", ""); typ == "response.output_item.done" {
			item, err := field(m, "item", "the event", "the output item that is done")
			if err != nil {
				return nil, err
			}
			m, where = item, "item."
		}
		c, ok, err := responseCall(m, where)
		if err != nil || !ok {
			return nil, err
		}
		return []events.CallSpec{c}, nil
	}, responseCalls)
}

func anthropicBatch(body json.RawMessage) ([]events.CallSpec, error) {
	return items(body, "a tool_use block or an array of content blocks", func(m map[string]json.RawMessage) ([]events.CallSpec, error) {
		c, ok, err := anthropicCall(m, "the body.")
		if err != nil || !ok {
			return nil, err
		}
		return []events.CallSpec{c}, nil
	}, anthropicCalls)
}
