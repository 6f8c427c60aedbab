package native

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// The pieces a provider's stream gives once a call is whole, as the SDKs
// hand them to a harness.
const (
	// A Chat tool call as ChatCompletionStream / ChatCompletionAccumulator
	// have accumulated it from its deltas (index kept).
	chatPiece = `{"index":1,"id":"call_Rn2YoQ8tU3wB0dE5fG7hI9kL","type":"function","function":{"name":"read","arguments":"{\"path\":\"missing.txt\"}"}}`
	// The Responses API's event for an output item that is complete.
	responsesEvent = `{"type":"response.output_item.done","sequence_number":9,"output_index":1,"item":{"id":"fc_68f0a1b2c3d4","type":"function_call","status":"completed","arguments":"{\"path\":\"a.txt\"}","call_id":"call_Zx9","name":"read"}}`
	// An Anthropic tool_use block as MessageStream's contentBlock event
	// gives it, its input accumulated from input_json_delta.
	anthropicBlock = `{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"read","input":{"path":"a.txt"}}`
)

func TestDecodeBatch(t *testing.T) {
	read := func(id, args string) call { return call{id, "read", args} }
	cases := []struct {
		name   string
		format Format
		body   string
		want   []call
	}{
		{"chat: one call", OpenAIChat, chatPiece, []call{read("call_Rn2YoQ8tU3wB0dE5fG7hI9kL", `"{\"path\":\"missing.txt\"}"`)}},
		{"chat: an array", OpenAIChat, "[" + chatPiece + `,{"id":"c2","type":"custom","custom":{"name":"x","input":"y"}}]`, []call{read("call_Rn2YoQ8tU3wB0dE5fG7hI9kL", `"{\"path\":\"missing.txt\"}"`)}},
		{"chat: a delta's shape", OpenAIChat, `{"role":"assistant","tool_calls":[` + chatPiece + `]}`, []call{read("call_Rn2YoQ8tU3wB0dE5fG7hI9kL", `"{\"path\":\"missing.txt\"}"`)}},
		{"responses: the done event", OpenAIResponses, responsesEvent, []call{read("call_Zx9", `"{\"path\":\"a.txt\"}"`)}},
		{"responses: the item", OpenAIResponses, string(part(t, []byte(responsesEvent), "item")), []call{read("call_Zx9", `"{\"path\":\"a.txt\"}"`)}},
		{"responses: items", OpenAIResponses, `[{"type":"reasoning","id":"rs_1","summary":[]},` + string(part(t, []byte(responsesEvent), "item")) + `]`, []call{read("call_Zx9", `"{\"path\":\"a.txt\"}"`)}},
		{"anthropic: the block", Anthropic, anthropicBlock, []call{read("toolu_01A09q90qw90lq917835lq9", `{"path":"a.txt"}`)}},
		{"anthropic: blocks", Anthropic, `[{"type":"text","text":"Reading."},` + anthropicBlock + `]`, []call{read("toolu_01A09q90qw90lq917835lq9", `{"path":"a.txt"}`)}},
		{"anthropic: input as the partial JSON joined", Anthropic, `{"type":"tool_use","id":"t1","name":"read","input":"{\"path\":\"a.t"}`, []call{read("t1", `"{\"path\":\"a.t"`)}},
	}
	for _, c := range cases {
		got, err := DecodeBatch(c.format, []byte(c.body))
		if err != nil || !equal(calls(got), c.want) {
			t.Errorf("%s: %+v, %v; want %+v", c.name, calls(got), err, c.want)
		}
	}
	bad := []struct {
		name   string
		format Format
		body   string
		err    error
		msg    string
	}{
		{"chat: no id", OpenAIChat, `{"type":"function","function":{"name":"read"}}`, ErrInvalid, "the body.id is missing"},
		{"chat: no function", OpenAIChat, `{"id":"c"}`, ErrInvalid, `the body has no "function"`},
		{"chat: a custom call only", OpenAIChat, `{"id":"c","type":"custom","custom":{}}`, ErrNoCalls, "no function tool call"},
		{"chat: a chunk's partial delta", OpenAIChat, `{"tool_calls":[{"index":0,"function":{"arguments":"{\"pa"}}]}`, ErrInvalid, "tool_calls[0].id is missing"},
		{"responses: an event without item", OpenAIResponses, `{"type":"response.output_item.done"}`, ErrInvalid, `the event has no "item"`},
		{"responses: a message item", OpenAIResponses, `{"type":"message","role":"assistant","content":[]}`, ErrNoCalls, "no function_call item"},
		{"responses: a call without call_id", OpenAIResponses, `{"type":"function_call","name":"read"}`, ErrInvalid, "the body.call_id is missing"},
		{"anthropic: a text block", Anthropic, `{"type":"text","text":"hi"}`, ErrNoCalls, "no tool_use block"},
		{"anthropic: no name", Anthropic, `[{"type":"tool_use","id":"t"}]`, ErrInvalid, "the body[0].name is missing"},
		{"not JSON", Anthropic, `{"type":`, ErrInvalid, "not JSON"},
		{"a string", OpenAIChat, `"read"`, ErrInvalid, "the body is a string"},
	}
	for _, c := range bad {
		_, err := DecodeBatch(c.format, []byte(c.body))
		if !errors.Is(err, c.err) || err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err %v, want %v saying %q", c.name, err, c.err, c.msg)
		}
	}
}

// fuzzBatch holds DecodeBatch to what it promises for any body (no panic,
// an error of its kinds, calls a turn can hold) and, differentially, to
// Decode: the calls of a batch are the calls Decode reads from the same
// items posted as a whole turn's assistant part (whole reference gives
// wrap(body)).
func fuzzBatch(f *testing.F, format Format, whole func([]byte) []byte, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := DecodeBatch(format, body)
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNoCalls) {
				t.Fatalf("err=%v: want ErrInvalid or ErrNoCalls", err)
			}
		} else {
			if len(got) == 0 {
				t.Fatal("no error and no calls")
			}
			for i, c := range got {
				if strings.TrimSpace(c.ID) == "" || strings.TrimSpace(c.Name) == "" || !json.Valid(c.Arguments) {
					t.Fatalf("calls[%d]=%+v: want an id, a name and JSON arguments", i, c)
				}
			}
		}
		ref := whole(body)
		if ref == nil {
			return
		}
		want, werr := Decode(format, ref)
		switch {
		case (err == nil) != (werr == nil):
			t.Fatalf("DecodeBatch: %v, %v; Decode of the same items: %v, %v", calls(got), err, calls(want.Calls), werr)
		case err == nil && !equal(calls(got), calls(want.Calls)):
			t.Fatalf("DecodeBatch read %v, Decode %v", calls(got), calls(want.Calls))
		case err != nil && errors.Is(err, ErrNoCalls) != errors.Is(werr, ErrNoCalls):
			t.Fatalf("DecodeBatch: %v; Decode: %v", err, werr)
		}
	})
}

// asArray is the reference for an array body: the same array (Responses
// output items, Anthropic content blocks), or nil for another body.
func asArray(b []byte) []byte {
	var a []json.RawMessage
	if json.Unmarshal(b, &a) != nil || a == nil {
		return nil
	}
	return b
}

func FuzzDecodeBatchChat(f *testing.F) {
	fuzzBatch(f, OpenAIChat, func(b []byte) []byte {
		if asArray(b) == nil {
			return nil
		}
		return []byte(`{"role":"assistant","tool_calls":` + string(b) + `}`)
	}, chatPiece, "["+chatPiece+"]", `{"tool_calls":[`+chatPiece+`]}`, `[{"id":"c","type":"custom"}]`, `[{"id":"c","function":{"name":"n","arguments":"{\"a\":"}}]`)
}

func FuzzDecodeBatchResponses(f *testing.F) {
	fuzzBatch(f, OpenAIResponses, asArray, responsesEvent, `[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]`, `[{"type":"message"}]`)
}

func FuzzDecodeBatchAnthropic(f *testing.F) {
	fuzzBatch(f, Anthropic, asArray, anthropicBlock, `[{"type":"tool_use","id":"t","name":"n","input":{"a":[1,{"b":null}]}}]`, `[{"type":"text","text":"x"}]`)
}
