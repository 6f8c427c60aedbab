package replay

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

var t0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func at(seq uint64, ms float64) projections.Stamp {
	return projections.Stamp{Seq: seq, Time: t0.Add(time.Duration(ms * float64(time.Millisecond)))}
}

// markdownAudit is a small session with each kind of fact the Markdown
// writes.
func markdownAudit() projections.Audit {
	return projections.Audit{Session: "S1", Tenant: "acme", Events: 20, First: at(1, 0), Last: at(20, 2500),
		Opened: &projections.Opened{Stamp: at(1, 0), Workspace: "demo"},
		Turns: []projections.AuditTurn{
			{Turn: "t1", Status: projections.StatusComplete, Received: at(2, 10), Completed: at(19, 2400), ParallelToolCalls: true, Cap: 8, End: at(19, 2400).Time,
				Calls: []projections.AuditCall{
					{Index: 0, ID: "a", Name: "read", Arguments: json.RawMessage(`{"path":"x"}`),
						Plan: events.PlanEntry{Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe", TimeoutMS: 120000, Rule: "default"},
						Attempts: []projections.Attempt{
							{Attempt: 1, Requested: at(3, 11), Claimed: at(5, 20), Worker: "N1", Started: at(5, 20).Time, Ended: at(6, 25), Outcome: projections.AttemptError, DurationMS: 5, Error: "flaky"},
							{Attempt: 2, Requested: at(8, 80), Claimed: at(9, 90), Worker: "N2", Started: at(9, 90).Time, Ended: at(10, 94), Outcome: projections.AttemptOK, DurationMS: 4},
						},
						Retries:   []projections.Retry{{Stamp: at(7, 25), Attempt: 2, Delay: 50 * time.Millisecond, Due: at(7, 75).Time, Error: "flaky"}},
						Committed: at(11, 95),
						Result:    &events.Result{ID: "a", Name: "read", Outcome: events.OutcomeOK, Attempts: 2, Content: []events.Part{{Type: "text", Text: "has ``` inside"}}}},
					{Index: 1, ID: "b", Name: "write", Arguments: json.RawMessage(`{}`),
						Blocked:   &projections.Blocked{Stamp: at(4, 10), Category: events.BlockInvalidArguments, Reason: "path is required"},
						Committed: at(12, 95),
						Result:    &events.Result{ID: "b", Name: "write", Outcome: events.OutcomeBlocked, Block: events.BlockInvalidArguments, Content: []events.Part{{Type: "text", Text: "path is required\n"}}}},
					{Index: 2, ID: "c", Name: "grep", Arguments: json.RawMessage(`"{\"pattern\":\"x\"}"`),
						Approval: &projections.Approval{Requested: at(13, 10), Rule: "strict-default", Reason: "strict mode",
							Decision: projections.DecisionAllow, Decided: at(14, 2000), By: "alice", Scope: "call", DecisionReason: "fine"},
						Attempts:  []projections.Attempt{{Attempt: 1, Requested: at(15, 2000), Claimed: at(16, 2300), Worker: "N1", ClaimedWithOutcome: true, Started: at(16, 2299).Time, Ended: at(17, 2300), Outcome: projections.AttemptOK, DurationMS: 1}},
						Committed: at(18, 2301),
						Result: &events.Result{ID: "c", Name: "grep", Outcome: events.OutcomeOK, Attempts: 1, Truncated: true, Touched: []string{"x.go"},
							FullOutput: &events.OutputRef{Store: "cs_outputs", Object: "acme/S1/c", Bytes: 90000, Lines: 3000},
							Content:    []events.Part{{Type: "json", JSON: json.RawMessage(`{"n":1}`)}, {Type: "image", MIME: "image/png", Data: []byte{1, 2, 3}}}}},
				}},
			{Turn: "t2", Status: projections.StatusRunning, Received: at(20, 2500), End: at(20, 2500).Time,
				Notices: []projections.AuditNotice{{Stamp: at(20, 2500), About: events.CallRef{Turn: "t1", Call: "b"}, Tool: "write", Attempt: 1, Text: "outcome unknown:\n check state"}},
				Calls:   []projections.AuditCall{{Index: 0, ID: "d", Name: "nap", Arguments: json.RawMessage(`{}`)}}},
		}}
}

func TestMarkdown(t *testing.T) {
	want := "# Session S1\n" +
		"\n- Session: tenant acme, workspace demo\n- Opened: 2026-12-01 09:00:00.000 UTC\n" +
		"- Events: 20 (seq 1 to 20), 2026-12-01 09:00:00.000 UTC to 2026-12-01 09:00:02.500 UTC\n- Outcomes: 2 ok, 1 blocked\n" +
		"\n## Turn t1 (complete)\n\nreceived 2026-12-01 09:00:00.010 UTC, completed +2.39 s; 3 calls, parallel, cap 8\n" +
		"\n### 1. read `a`: ok\n\n- Attempts: 2\n" +
		"- Plan: read_only, safe, parallel_safe; timeout 2m0s; rule default\n" +
		"- Attempt 1: requested +1.00 ms, claimed +10.0 ms by N1, started +10.0 ms; failed +15.0 ms, ran 5.00 ms: flaky; queued 9.00 ms\n" +
		"- Retry: attempt 2 scheduled at +15.0 ms after 50.0 ms, due +65.0 ms: flaky\n" +
		"- Attempt 2: requested +70.0 ms, claimed +80.0 ms by N2, started +80.0 ms; completed +84.0 ms: ok, ran 4.00 ms; queued 10.0 ms\n" +
		"- Committed: at +85.0 ms (09:00:00.095)\n" +
		"\nArguments:\n\n```json\n{\n  \"path\": \"x\"\n}\n```\n" +
		"\nResult:\n\n````\nhas ``` inside\n````\n" +
		"\n### 2. write `b`: blocked (invalid_arguments)\n\n- Attempts: 0\n" +
		"- Blocked: invalid_arguments at +0.00 ms: path is required; nothing ran\n" +
		"- Committed: at +85.0 ms (09:00:00.095)\n" +
		"\nArguments:\n\n```json\n{}\n```\n" +
		"\nResult:\n\n```\npath is required\n```\n" +
		"\n### 3. grep `c`: ok\n\n- Attempts: 1\n" +
		"- Truncated: the full output (90000 bytes, 3000 lines) is object `acme/S1/c` in store `cs_outputs`\n- Touched: x.go\n" +
		"- Approval: asked at +0.00 ms (rule strict-default: strict mode); allowed by alice at 2026-12-01 09:00:02.000 UTC (+1.99 s; waited 1.99 s), scope call: fine\n" +
		"- Attempt 1: requested +1.99 s, claimed +2.29 s by N1 (with its outcome: it ran before its claim), started +2.29 s; completed +2.29 s: ok, ran 1.00 ms; queued 299 ms\n" +
		"- Committed: at +2.29 s (09:00:02.301)\n" +
		"\nArguments:\n\n```json\n{\n  \"pattern\": \"x\"\n}\n```\n" +
		"\nResult:\n\n```json\n{\n  \"n\": 1\n}\n```\n\n[image image/png, 3 bytes]\n" +
		"\n## Turn t2 (running)\n\nreceived 2026-12-01 09:00:02.500 UTC, running (last event +0.00 ms); 1 call, one at a time, cap 0\n" +
		"\nRetry notices:\n\n- call b (write, turn t1, attempt 1) at +0.00 ms: outcome unknown: check state\n" +
		"\nNo results committed yet.\n" +
		"\n### 1. nap `d`: waiting\n\n- Attempts: 0 so far\n\nArguments:\n\n```json\n{}\n```\n"
	if got := string(Markdown(markdownAudit())); got != want {
		t.Fatalf("markdown:\n%s\nwant:\n%s", got, want)
	}
	if got := string(Markdown(projections.Audit{Session: "E"})); got != "# Session E\n\nNo turns.\n" {
		t.Fatalf("empty session: %q", got)
	}
}

// TestMarkdownIsInert: text from the log cannot become HTML, a link or the
// end of a code span when the Markdown is rendered.
func TestMarkdownIsInert(t *testing.T) {
	a := markdownAudit()
	c := &a.Turns[0].Calls[0]
	c.Name = "read<img src=x onerror=alert(1)>"
	c.ID = "a`b"
	c.Attempts[0].Error = "boom </script><script>alert(1)</script> [click](javascript:alert(1))\n## fake heading"
	got := string(Markdown(a))
	// Outside fenced blocks (none of which holds these characters here),
	// every character that could start HTML, a link or a code span is
	// escaped.
	for i, r := range got {
		unescaped := i == 0 || got[i-1] != '\\'
		if r == '<' && unescaped || r == ']' && unescaped && strings.HasPrefix(got[i:], "](") {
			t.Errorf("markdown holds an unescaped %q at %d: %q", r, i, got[max(0, i-30):min(len(got), i+30)])
		}
	}
	if strings.Contains(got, "\n## fake") {
		t.Errorf("a newline in an error started a heading:\n%s", got)
	}
	for _, want := range []string{"read\\<img src=x onerror=alert(1)\\>", "``a`b``", "\\</script\\>", "\\[click\\](javascript:alert(1)) ## fake heading"} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}

// TestMarkdownShowsSignatures: a signed head is a session fact on the page
// and in the Markdown, with its seq, hash, key, reason and who asked.
func TestMarkdownShowsSignatures(t *testing.T) {
	a := markdownAudit()
	a.Signatures = []projections.Signature{{Stamp: at(20, 2500), Signed: events.HeadSigned{Seq: 19, Hash: strings.Repeat("ab", 32),
		Key: strings.Repeat("cd", 32), Reason: events.SignRequested, By: "alice"}}}
	md := string(Markdown(a))
	want := "- Signed: 2026-12-01 09:00:02.500 UTC: the head at seq 19 (hash " + strings.Repeat("ab", 32) + ") with key cdcdcdcdcdcdcdcd (requested by alice); replay --verify checks it"
	if !strings.Contains(md, want) {
		t.Fatalf("markdown lacks %q:\n%s", want, md)
	}
	if page := string(Timeline(a)); !strings.Contains(page, "the head at seq 19") {
		t.Fatal("the timeline page does not show the signature")
	}
}
