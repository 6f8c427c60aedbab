package replay

import (
	"encoding/json"
	"testing"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

func TestMarkdown(t *testing.T) {
	tr := projections.Transcript{Session: "S1", Turns: []projections.Turn{
		{Turn: "t1", Status: projections.StatusComplete, Notices: []projections.Notice{}, Results: []events.Result{
			{ID: "a", Name: "read", Outcome: events.OutcomeOK, Attempts: 2, Content: []events.Part{{Type: "text", Text: "has ``` inside"}}},
			{ID: "b", Name: "write", Outcome: events.OutcomeBlocked, Block: events.BlockInvalidArguments, Content: []events.Part{{Type: "text", Text: "path is required\n"}}},
			{ID: "c", Name: "grep", Outcome: events.OutcomeOK, Attempts: 1, Truncated: true, Touched: []string{"x.go"},
				FullOutput: &events.OutputRef{Store: "cs_outputs", Object: "acme/S1/c", Bytes: 90000, Lines: 3000},
				Content:    []events.Part{{Type: "json", JSON: json.RawMessage(`{"n":1}`)}, {Type: "image", MIME: "image/png", Data: []byte{1, 2, 3}}}},
		}},
		{Turn: "t2", Status: projections.StatusRunning, Results: []events.Result{}, Notices: []projections.Notice{
			{Turn: "t1", Call: "b", Tool: "write", Attempt: 1, Message: "outcome unknown:\n check state"},
		}},
	}}
	want := "# Session S1\n" +
		"\n## Turn t1 (complete)\n" +
		"\n### 1. read `a`: ok\n\nAttempts: 2\n\n````\nhas ``` inside\n````\n" +
		"\n### 2. write `b`: blocked (invalid_arguments)\n\nAttempts: 0\n\n```\npath is required\n```\n" +
		"\n### 3. grep `c`: ok\n\nAttempts: 1\nTruncated: the full output (90000 bytes, 3000 lines) is object `acme/S1/c` in store `cs_outputs`\nTouched: x.go\n\n```json\n{\n  \"n\": 1\n}\n```\n\n[image image/png, 3 bytes]\n" +
		"\n## Turn t2 (running)\n\nRetry notices:\n\n- call b (write, turn t1, attempt 1): outcome unknown: check state\n\nNo results committed yet.\n"
	if got := string(Markdown(tr)); got != want {
		t.Fatalf("markdown:\n%s\nwant:\n%s", got, want)
	}
	if got := string(Markdown(projections.Transcript{Session: "E"})); got != "# Session E\n\nNo turns.\n" {
		t.Fatalf("empty transcript: %q", got)
	}
}
