package native

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// png is a 1x1 PNG's first bytes: the renderer passes data through.
var png = []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}

// turn is one of every kind of result, and a retry notice.
var turn = projections.Turn{Turn: "t1", Status: projections.StatusComplete, Results: []events.Result{
	{ID: "ok", Name: "read", Outcome: events.OutcomeOK, Content: []events.Part{{Type: "text", Text: "hello"}}, Attempts: 1},
	{ID: "json", Name: "question", Outcome: events.OutcomeOK, Content: []events.Part{{Type: "json", JSON: json.RawMessage(`{"answer":"yes"}`)}}, Attempts: 1},
	{ID: "img", Name: "read", Outcome: events.OutcomeOK, Content: []events.Part{{Type: "text", Text: "a.png"}, {Type: "image", MIME: "image/png", Data: png}}, Attempts: 1},
	{ID: "svg", Name: "read", Outcome: events.OutcomeOK, Content: []events.Part{{Type: "image", MIME: "image/svg+xml", Data: []byte("<svg/>")}}, Attempts: 1},
	{ID: "bad", Name: "glob", Outcome: events.OutcomeBlocked, Block: events.BlockInvalidArguments, Content: []events.Part{{Type: "text", Text: "invalid arguments: unexpected end"}}},
	{ID: "err", Name: "read", Outcome: events.OutcomeError, Content: []events.Part{{Type: "text", Text: "no such file"}}, Attempts: 1},
	{ID: "lost", Name: "shell", Outcome: events.OutcomeIndeterminate, Content: []events.Part{{Type: "text", Text: "unknown"}}, Attempts: 1},
	{ID: "empty", Name: "write", Outcome: events.OutcomeOK, Content: []events.Part{}, Attempts: 1},
}, Notices: []projections.Notice{{Turn: "t0", Call: "x", Tool: "shell", Attempt: 1, Message: "Call x ended indeterminate."}}}

func encode(t *testing.T, v any) string {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestAnswerChat(t *testing.T) {
	a, err := Answer(OpenAIChat, turn)
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "turn": "t1",
  "messages": [
    {
      "role": "tool",
      "tool_call_id": "ok",
      "content": "hello"
    },
    {
      "role": "tool",
      "tool_call_id": "json",
      "content": "{\"answer\":\"yes\"}"
    },
    {
      "role": "tool",
      "tool_call_id": "img",
      "content": "a.png\n[1 image returned: shown in the user message after the tool messages]"
    },
    {
      "role": "tool",
      "tool_call_id": "svg",
      "content": "[an image of type \"image/svg+xml\" (6 bytes) is not shown: models take PNG, JPEG, GIF and WebP images]"
    },
    {
      "role": "tool",
      "tool_call_id": "bad",
      "content": "[blocked: invalid_arguments; the call did not run] invalid arguments: unexpected end"
    },
    {
      "role": "tool",
      "tool_call_id": "err",
      "content": "[error] no such file"
    },
    {
      "role": "tool",
      "tool_call_id": "lost",
      "content": "[indeterminate] unknown"
    },
    {
      "role": "tool",
      "tool_call_id": "empty",
      "content": "(no output)"
    },
    {
      "role": "user",
      "content": [
        {
          "type": "text",
          "text": "Images returned by call img (read):"
        },
        {
          "type": "image_url",
          "image_url": {
            "url": "data:image/png;base64,iVBORw0KGgo="
          }
        },
        {
          "type": "text",
          "text": "Retry notice: Call x ended indeterminate."
        }
      ]
    }
  ]
}`
	if got := encode(t, a); got != want {
		t.Errorf("answer:\n%s\nwant:\n%s", got, want)
	}
}

func TestAnswerResponses(t *testing.T) {
	a, err := Answer(OpenAIResponses, turn)
	if err != nil {
		t.Fatal(err)
	}
	in := a.(ResponsesAnswer).Input
	if len(in) != len(turn.Results)+1 {
		t.Fatalf("%d input items, want one per call and the notice message", len(in))
	}
	for i, r := range turn.Results {
		out := in[i].(FunctionCallOutput)
		if out.Type != "function_call_output" || out.CallID != r.ID {
			t.Errorf("input[%d]=%+v, want function_call_output of %s", i, out, r.ID)
		}
	}
	if got, want := encode(t, in[2]), `{
  "type": "function_call_output",
  "call_id": "img",
  "output": [
    {
      "type": "input_text",
      "text": "a.png"
    },
    {
      "type": "input_image",
      "image_url": "data:image/png;base64,iVBORw0KGgo=",
      "detail": "auto"
    }
  ]
}`; got != want {
		t.Errorf("image output:\n%s\nwant:\n%s", got, want)
	}
	if got, want := encode(t, in[len(in)-1]), `{
  "type": "message",
  "role": "user",
  "content": [
    {
      "type": "input_text",
      "text": "Retry notice: Call x ended indeterminate."
    }
  ]
}`; got != want {
		t.Errorf("notice:\n%s\nwant:\n%s", got, want)
	}
}

func TestAnswerAnthropic(t *testing.T) {
	a, err := Answer(Anthropic, turn)
	if err != nil {
		t.Fatal(err)
	}
	m := a.(AnthropicAnswer).Message
	if m.Role != "user" || len(m.Content) != len(turn.Results)+1 {
		t.Fatalf("message role %q with %d blocks, want user with one per call and the notice", m.Role, len(m.Content))
	}
	isError := map[string]bool{"bad": true, "err": true}
	for i, r := range turn.Results {
		b := m.Content[i].(ToolResult)
		if b.ToolUseID != r.ID || b.IsError != isError[r.ID] {
			t.Errorf("content[%d]: tool_use_id %q is_error %v, want %q %v", i, b.ToolUseID, b.IsError, r.ID, isError[r.ID])
		}
	}
	if got, want := encode(t, m.Content[2]), `{
  "type": "tool_result",
  "tool_use_id": "img",
  "content": [
    {
      "type": "text",
      "text": "a.png"
    },
    {
      "type": "image",
      "source": {
        "type": "base64",
        "media_type": "image/png",
        "data": "iVBORw0KGgo="
      }
    }
  ]
}`; got != want {
		t.Errorf("image result:\n%s\nwant:\n%s", got, want)
	}
	if b := m.Content[len(m.Content)-1].(AnthropicBlock); b.Type != "text" || b.Text != "Retry notice: Call x ended indeterminate." {
		t.Errorf("last block %+v, want the notice as text after every tool_result", b)
	}
}

func TestAnswerNothingElseWhenAllRan(t *testing.T) {
	tr := projections.Turn{Turn: "t", Results: []events.Result{turn.Results[0]}}
	for _, f := range []Format{OpenAIChat, OpenAIResponses, Anthropic} {
		a, _ := Answer(f, tr)
		var n int
		switch a := a.(type) {
		case ChatAnswer:
			n = len(a.Messages)
		case ResponsesAnswer:
			n = len(a.Input)
		case AnthropicAnswer:
			n = len(a.Message.Content)
		}
		if n != 1 {
			t.Errorf("%s: %d items for one ok call, want 1", f, n)
		}
	}
}

func ev(t *testing.T, seq uint64, typ events.Type, p any) events.Event {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return events.Event{Seq: seq, Type: typ, Time: time.Unix(0, 0), Data: b}
}

func TestPending(t *testing.T) {
	ref := func(turn, call string, i int) events.CallRef { return events.CallRef{Turn: turn, Call: call, Index: i} }
	evs := []events.Event{
		ev(t, 1, events.TypeApprovalRequested, events.ApprovalRequested{CallRef: ref("t1", "w", 2), Name: "write", Arguments: json.RawMessage(`{"path":"x"}`), Reason: "strict mode"}),
		ev(t, 2, events.TypeApprovalRequested, events.ApprovalRequested{CallRef: ref("t1", "granted", 3), Name: "write"}),
		ev(t, 3, events.TypeApprovalGranted, events.ApprovalGranted{CallRef: ref("t1", "granted", 3), Name: "write"}),
		ev(t, 4, events.TypeToolCallRequested, events.ToolCallRequested{CallRef: ref("t1", "q", 0), Name: "question", Arguments: json.RawMessage(`{"question":"Which?","options":["a","b"]}`)}),
		ev(t, 5, events.TypeToolCallStarted, events.ToolCallStarted{CallRef: ref("t1", "q", 0), Attempt: 1}),
		ev(t, 6, events.TypeToolCallRequested, events.ToolCallRequested{CallRef: ref("t1", "answered", 1), Name: "question"}),
		ev(t, 7, events.TypeToolCallStarted, events.ToolCallStarted{CallRef: ref("t1", "answered", 1), Attempt: 1}),
		ev(t, 8, events.TypeAnswerReceived, events.AnswerReceived{CallRef: ref("t1", "answered", 1), Answer: json.RawMessage(`1`)}),
		ev(t, 9, events.TypeApprovalRequested, events.ApprovalRequested{CallRef: ref("t0", "old", 0), Name: "write"}),
		ev(t, 10, events.TypeToolCallStarted, events.ToolCallStarted{CallRef: ref("t1", "r", 4), Attempt: 1}),
	}
	got := encode(t, Pending("t1", evs))
	want := `[
  {
    "kind": "question",
    "call": "q",
    "name": "question",
    "question": "Which?",
    "options": [
      "a",
      "b"
    ]
  },
  {
    "kind": "approval",
    "call": "w",
    "name": "write",
    "arguments": {
      "path": "x"
    },
    "reason": "strict mode"
  }
]`
	if got != want {
		t.Errorf("pending:\n%s\nwant:\n%s", got, want)
	}
	if got := Pending("t9", evs); len(got) != 0 {
		t.Errorf("pending of an unknown turn: %+v, want none", got)
	}
}
