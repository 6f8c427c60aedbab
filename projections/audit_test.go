package projections_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

var update = flag.Bool("update", false, "rewrite testdata/*.audit.json from the golden event streams")

// builder writes a synthetic session log: one event per add, at t0 plus ms.
type builder struct {
	evs []events.Event
	t0  time.Time
}

func newBuilder() *builder {
	return &builder{t0: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
}

func (b *builder) add(typ events.Type, ms float64, payload any) *builder {
	data, ok := payload.(json.RawMessage)
	if !ok {
		data = events.Payload(payload)
	}
	seq := uint64(len(b.evs) + 1)
	b.evs = append(b.evs, events.Event{
		ID: fmt.Sprintf("E%03d", seq), Tenant: "acme", Session: "S1", Seq: seq,
		Time: b.t0.Add(time.Duration(ms * float64(time.Millisecond))), Type: typ, Data: data,
	})
	return b
}

func ref(turn, call string, i int) events.CallRef {
	return events.CallRef{Turn: turn, Call: call, Index: i}
}

// rich is a two-turn session with every kind of fact the audit shows, and
// events of a type this build does not know.
func rich() *builder {
	b := newBuilder()
	b.add(events.TypeSessionOpened, 0, events.SessionOpened{Workspace: "demo", Agent: "coder"})
	b.add(events.TypeTurnReceived, 10, events.TurnReceived{Turn: "t1", ParallelToolCalls: true, Cap: 8,
		Calls: []events.CallSpec{
			{ID: "r", Name: "read", Arguments: json.RawMessage(`{"path":"a"}`)},
			{ID: "f", Name: "fetch", Arguments: json.RawMessage(`"{\"url\":\"x\"}"`)},
			{ID: "x", Name: "nope", Arguments: json.RawMessage(`{}`)},
			{ID: "w", Name: "write", Arguments: json.RawMessage(`{"path":"n.md","content":"hi"}`)},
		},
		Plan: []events.PlanEntry{
			{Index: 0, Name: "read", Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe", TimeoutMS: 1000, Rule: "default"},
			{Index: 1, Name: "fetch", Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe", TimeoutMS: 1000, Rule: "default"},
			{Index: 2, Name: "nope", Blocked: events.BlockUnavailable, Reason: "no tool nope"},
			{Index: 3, Name: "write", Effect: "side_effecting", Replay: "never", Concurrency: "exclusive", TimeoutMS: 1000, Ask: true, Rule: "strict-default", Reason: "strict"},
		}})
	b.add(events.TypeDispatchBlocked, 10, events.DispatchBlocked{CallRef: ref("t1", "x", 2), Name: "nope", Category: events.BlockUnavailable, Reason: "no tool nope"})
	b.add(events.TypeApprovalRequested, 10, events.ApprovalRequested{CallRef: ref("t1", "w", 3), Name: "write", Effect: "side_effecting", Labels: []string{"(none declared)"}, Rule: "strict-default", Reason: "strict", Arguments: json.RawMessage(`{"path":"n.md","content":"hi"}`)})
	b.add(events.TypeToolCallRequested, 11, events.ToolCallRequested{CallRef: ref("t1", "r", 0), Name: "read", Attempt: 1, Arguments: json.RawMessage(`{"path":"a"}`)})
	b.add(events.TypeToolCallRequested, 11, events.ToolCallRequested{CallRef: ref("t1", "f", 1), Name: "fetch", Attempt: 1, Arguments: json.RawMessage(`{"url":"x"}`)})
	// The read runs before its claim: claim and outcome share one time.
	b.add(events.TypeToolCallStarted, 15, events.ToolCallStarted{CallRef: ref("t1", "r", 0), Attempt: 1, Worker: "N1"})
	b.add(events.TypeToolCallCompleted, 15, events.ToolCallCompleted{CallRef: ref("t1", "r", 0), Attempt: 1, DurationMS: 3,
		Content: []events.Part{{Type: "text", Text: "A"}}, Truncated: true, FullOutput: &events.OutputRef{Object: "acme/S1/E008", Bytes: 90000, Lines: 2000}})
	b.add(events.TypeToolCallStarted, 20, events.ToolCallStarted{CallRef: ref("t1", "f", 1), Attempt: 1, Worker: "N2"})
	b.add(events.TypeToolCallFailed, 24, events.ToolCallFailed{CallRef: ref("t1", "f", 1), Attempt: 1, Error: "connection reset", DurationMS: 4})
	b.add(events.TypeRetryScheduled, 24, events.RetryScheduled{CallRef: ref("t1", "f", 1), Attempt: 2, Delay: 50 * time.Millisecond, Error: "connection reset"})
	b.add("FutureFact", 30, json.RawMessage(`{"turn":"t1","call":"f","index":1,"node":"N3"}`))
	b.add(events.TypeResultCommitted, 30, events.ResultCommitted{CallRef: ref("t1", "r", 0), Result: events.Result{ID: "r", Name: "read", Outcome: events.OutcomeOK, Attempts: 1, Truncated: true}})
	b.add(events.TypeToolCallRequested, 75, events.ToolCallRequested{CallRef: ref("t1", "f", 1), Name: "fetch", Attempt: 2})
	b.add(events.TypeToolCallStarted, 80, events.ToolCallStarted{CallRef: ref("t1", "f", 1), Attempt: 2, Worker: "N3"})
	b.add(events.TypeToolCallCompleted, 90, events.ToolCallCompleted{CallRef: ref("t1", "f", 1), Attempt: 2, DurationMS: 6})
	b.add(events.TypeResultCommitted, 90, events.ResultCommitted{CallRef: ref("t1", "f", 1), Result: events.Result{ID: "f", Name: "fetch", Outcome: events.OutcomeOK, Attempts: 2}})
	b.add(events.TypeResultCommitted, 90, events.ResultCommitted{CallRef: ref("t1", "x", 2), Result: events.Result{ID: "x", Name: "nope", Outcome: events.OutcomeBlocked, Block: events.BlockUnavailable}})
	b.add(events.TypeApprovalGranted, 2000, events.ApprovalGranted{CallRef: ref("t1", "w", 3), Name: "write", By: "alice", Scope: "call", Reason: "fine"})
	b.add(events.TypeToolCallRequested, 2000, events.ToolCallRequested{CallRef: ref("t1", "w", 3), Name: "write", Attempt: 1})
	b.add(events.TypeFileCheckpointed, 2002, events.FileCheckpointed{CallRef: ref("t1", "w", 3), Path: "n.md", Existed: false})
	b.add(events.TypeToolCallStarted, 2002, events.ToolCallStarted{CallRef: ref("t1", "w", 3), Attempt: 1, Worker: "N1"})
	b.add(events.TypeToolCallIndeterminate, 2100, events.ToolCallIndeterminate{CallRef: ref("t1", "w", 3), Name: "write", Attempt: 1, Reason: "the node running it was lost"})
	b.add(events.TypeResultCommitted, 2100, events.ResultCommitted{CallRef: ref("t1", "w", 3), Result: events.Result{ID: "w", Name: "write", Outcome: events.OutcomeIndeterminate, Attempts: 1}})
	b.add(events.TypeTurnCompleted, 2100, events.TurnCompleted{Turn: "t1"})
	b.add(events.TypeTurnReceived, 3000, events.TurnReceived{Turn: "t2", Cap: 8,
		Calls: []events.CallSpec{{ID: "q", Name: "question", Arguments: json.RawMessage(`{"q":"?"}`)}, {ID: "d", Name: "write", Arguments: json.RawMessage(`{}`)}},
		Plan:  []events.PlanEntry{{Index: 0, Name: "question"}, {Index: 1, Name: "write", Ask: true}}})
	b.add(events.TypeRetryNoticeIssued, 3000, events.RetryNoticeIssued{Turn: "t2", About: ref("t1", "w", 3), Name: "write", Attempt: 1, Notice: "unknown"})
	b.add("FutureFact", 3001, json.RawMessage(`{"turn":"t2","node":"N4"}`))
	b.add(events.TypeToolCallRequested, 3001, events.ToolCallRequested{CallRef: ref("t2", "q", 0), Name: "question", Attempt: 1})
	b.add(events.TypeToolCallStarted, 3002, events.ToolCallStarted{CallRef: ref("t2", "q", 0), Attempt: 1, Worker: "N4"})
	b.add(events.TypeAnswerReceived, 4000, events.AnswerReceived{CallRef: ref("t2", "q", 0), Answer: json.RawMessage(`"yes"`), By: "bob"})
	b.add(events.TypeWorkStateUpdated, 4001, events.WorkStateUpdated{CallRef: ref("t2", "q", 0), Kind: "plan", Value: json.RawMessage(`["a"]`)})
	b.add(events.TypeCallCancelled, 4500, events.CallCancelled{CallRef: ref("t2", "d", 1), Name: "write", Reason: "stop", Running: false})
	b.add(events.TypeApprovalRequested, 4500, events.ApprovalRequested{CallRef: ref("t2", "d", 1), Name: "write", Rule: "r1", Reason: "ask"})
	b.add(events.TypeWorkspaceRewound, 5000, events.WorkspaceRewound{To: ref("t1", "w", 3), Removed: []string{"n.md"}})
	b.add("FutureFact", 5001, json.RawMessage(`{"node":"N5"}`))
	return b
}

func TestAuditFoldsEveryFact(t *testing.T) {
	a := projections.FoldAudit("acme", "S1", rich().evs)
	if a.Events != 36 || a.First.Seq != 1 || a.Last.Seq != 36 {
		t.Fatalf("events=%d first=%d last=%d, want 36, 1, 36", a.Events, a.First.Seq, a.Last.Seq)
	}
	if a.Opened == nil || a.Opened.Workspace != "demo" || a.Opened.Agent != "coder" {
		t.Fatalf("opened=%+v", a.Opened)
	}
	if len(a.Rewinds) != 1 || a.Rewinds[0].To.Call != "w" || a.Rewinds[0].Removed[0] != "n.md" {
		t.Fatalf("rewinds=%+v", a.Rewinds)
	}
	if len(a.Turns) != 2 {
		t.Fatalf("%d turns, want 2", len(a.Turns))
	}
	t1, t2 := a.Turns[0], a.Turns[1]
	if t1.Status != projections.StatusComplete || t2.Status != projections.StatusRunning || t1.Completed.Seq != 25 {
		t.Fatalf("statuses %s/%s, completed seq %d", t1.Status, t2.Status, t1.Completed.Seq)
	}
	if !t1.End.Equal(t1.Received.Time.Add(2090 * time.Millisecond)) {
		t.Errorf("t1 axis ends at %v, want its last event's time", t1.End)
	}

	r := t1.Calls[0]
	if len(r.Attempts) != 1 {
		t.Fatalf("read attempts=%+v", r.Attempts)
	}
	ra := r.Attempts[0]
	if !ra.ClaimedWithOutcome || ra.Worker != "N1" || ra.Outcome != projections.AttemptOK || !ra.Truncated || ra.FullOutput.Bytes != 90000 {
		t.Errorf("read attempt %+v: want claimed with its outcome by N1, ok, truncated", ra)
	}
	// Started is derived: the outcome's time minus the handler time.
	if want := ra.Ended.Time.Add(-3 * time.Millisecond); !ra.Started.Equal(want) {
		t.Errorf("read started %v, want %v", ra.Started, want)
	}
	if got := ra.Queued(); got != time.Millisecond {
		t.Errorf("read queued %v, want 1ms (requested +11, started +12)", got)
	}
	if string(r.Normalized) != `{"path":"a"}` || r.Plan.Rule != "default" || r.Result == nil || r.Committed.Seq != 13 {
		t.Errorf("read call %+v", r)
	}

	f := t1.Calls[1]
	if len(f.Attempts) != 2 || f.Attempts[0].Outcome != projections.AttemptError || f.Attempts[0].Error != "connection reset" ||
		f.Attempts[1].Outcome != projections.AttemptOK || f.Attempts[1].Worker != "N3" {
		t.Fatalf("fetch attempts %+v", f.Attempts)
	}
	if f.Attempts[0].ClaimedWithOutcome {
		t.Errorf("fetch attempt 1 was claimed before it ran (its claim has a time of its own): %+v", f.Attempts[0])
	}
	if len(f.Retries) != 1 || f.Retries[0].Attempt != 2 || f.Retries[0].Delay != 50*time.Millisecond ||
		!f.Retries[0].Due.Equal(f.Retries[0].Time.Add(50*time.Millisecond)) {
		t.Errorf("fetch retries %+v", f.Retries)
	}
	// A claimed attempt starts no earlier than its claim.
	if got := f.Attempts[1].Started; !got.Equal(f.Attempts[1].Ended.Time.Add(-6 * time.Millisecond)) {
		t.Errorf("fetch attempt 2 started %v", got)
	}
	if len(f.Marks) != 1 || f.Marks[0].Type != "FutureFact" || f.Marks[0].Problem != projections.MarkUnknown {
		t.Errorf("an unknown event naming call f: marks %+v, want one generic mark on the call", f.Marks)
	}

	x := t1.Calls[2]
	if x.Blocked == nil || x.Blocked.Category != events.BlockUnavailable || len(x.Attempts) != 0 || x.State() != "blocked" {
		t.Errorf("blocked call %+v state %q", x, x.State())
	}

	w := t1.Calls[3]
	ap := w.Approval
	if ap == nil || ap.Decision != projections.DecisionAllow || ap.By != "alice" || ap.Scope != "call" || ap.DecisionReason != "fine" ||
		ap.Requested.Seq != 4 || ap.Decided.Seq != 19 || ap.Pending() {
		t.Fatalf("approval %+v", ap)
	}
	if len(w.Checkpoints) != 1 || w.Checkpoints[0].Path != "n.md" || w.Checkpoints[0].Existed || w.Checkpoints[0].Attempt != 1 {
		t.Errorf("checkpoints %+v", w.Checkpoints)
	}
	if w.Indeterminate == nil || w.Indeterminate.Reason != "the node running it was lost" || w.Indeterminate.NoticedIn != "t2" {
		t.Errorf("indeterminate %+v, want noticed in t2", w.Indeterminate)
	}
	// An indeterminate attempt has no handler time: it started at its claim.
	if wa := w.Attempts[0]; !wa.Started.Equal(wa.Claimed.Time) {
		t.Errorf("indeterminate attempt started %v, want its claim %v", wa.Started, wa.Claimed.Time)
	}

	if len(t2.Notices) != 1 || t2.Notices[0].About.Call != "w" || t2.Notices[0].Text != "unknown" {
		t.Errorf("notices %+v", t2.Notices)
	}
	if len(t2.Marks) != 1 || t2.Marks[0].Type != "FutureFact" {
		t.Errorf("an unknown event naming turn t2 only: turn marks %+v", t2.Marks)
	}
	q := t2.Calls[0]
	if len(q.Answers) != 1 || q.Answers[0].By != "bob" || string(q.Answers[0].Answer) != `"yes"` ||
		len(q.WorkState) != 1 || q.WorkState[0].Kind != "plan" || q.State() != "running" {
		t.Errorf("question call %+v state %q", q, q.State())
	}
	d := t2.Calls[1]
	if d.Cancelled == nil || d.Cancelled.Reason != "stop" || !d.Approval.Pending() || d.State() != "awaiting approval" {
		t.Errorf("cancelled call %+v state %q", d, d.State())
	}
	if p := a.PendingApprovals(); len(p) != 1 || p[0].Call.ID != "d" || p[0].Turn != "t2" {
		t.Errorf("pending approvals %v, want d", p)
	}
	if len(a.Marks) != 1 || a.Marks[0].Seq != 36 || a.Marks[0].Problem != projections.MarkUnknown {
		t.Errorf("session marks %+v, want the unknown event that names nothing", a.Marks)
	}
	if got := a.Outcomes(); got[events.OutcomeOK] != 2 || got[events.OutcomeBlocked] != 1 || got[events.OutcomeIndeterminate] != 1 {
		t.Errorf("outcomes %v", got)
	}
}

// TestAuditMarksWhatItCannotPlace: nothing the log holds is dropped or turns
// into an error; each odd event says what is odd about it.
func TestAuditMarksWhatItCannotPlace(t *testing.T) {
	cases := []struct {
		name    string
		typ     events.Type
		data    string
		where   string // session, turn or call
		problem string
	}{
		{"unknown type naming a call", "FutureFact", `{"turn":"t1","call":"a","index":0}`, "call", projections.MarkUnknown},
		{"unknown type naming a turn", "LeaseRenewed", `{"turn":"t1"}`, "turn", projections.MarkUnknown},
		{"unknown type naming a call not in the turn", "FutureFact", `{"turn":"t1","call":"zz","index":0}`, "turn", projections.MarkUnknown},
		{"unknown type naming nothing", "NodeJoined", `{"node":"n"}`, "session", projections.MarkUnknown},
		{"unknown type with a non-object payload", "Odd", `[1,2]`, "session", projections.MarkUnknown},
		{"known type, bad payload", events.TypeToolCallStarted, `{"turn":"t1","call":"a","index":0,"attempt":"one"}`, "call", "undecodable payload"},
		{"a call of a turn never received", events.TypeToolCallStarted, `{"turn":"t9","call":"a","index":0,"attempt":1}`, "session", `names turn "t9", which was never received`},
		{"a call index out of range", events.TypeToolCallStarted, `{"turn":"t1","call":"a","index":7,"attempt":1}`, "turn", `names call "a" at index 7`},
		{"a call id that does not match its index", events.TypeResultCommitted, `{"turn":"t1","call":"b","index":0,"result":{}}`, "turn", `names call "b" at index 0`},
		{"a second claim", events.TypeToolCallStarted, `{"turn":"t1","call":"a","index":0,"attempt":1}`, "call", "attempt 1 was already claimed at seq 3"},
		{"a decision without a request", events.TypeApprovalGranted, `{"turn":"t1","call":"a","index":0,"by":"x"}`, "call", "a decision without an approval request"},
		{"a turn received twice", events.TypeTurnReceived, `{"turn":"t1","calls":[]}`, "turn", `turn "t1" was already received at seq 1`},
		{"a completion of a turn never received", events.TypeTurnCompleted, `{"turn":"t8"}`, "session", `names turn "t8"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			b.add(events.TypeTurnReceived, 0, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "a", Name: "read"}}})
			b.add(events.TypeToolCallRequested, 1, events.ToolCallRequested{CallRef: ref("t1", "a", 0), Attempt: 1})
			b.add(events.TypeToolCallStarted, 2, events.ToolCallStarted{CallRef: ref("t1", "a", 0), Attempt: 1})
			b.add(tc.typ, 3, json.RawMessage(tc.data))
			a := projections.FoldAudit("acme", "S1", b.evs)
			var marks []projections.Mark
			switch tc.where {
			case "session":
				marks = a.Marks
			case "turn":
				marks = a.Turns[0].Marks
			case "call":
				marks = a.Turns[0].Calls[0].Marks
			}
			if len(marks) != 1 || marks[0].Seq != 4 || marks[0].Type != tc.typ || !strings.Contains(marks[0].Problem, tc.problem) {
				t.Fatalf("%s marks=%+v, want one for seq 4 whose problem holds %q (session %+v, turn %+v)", tc.where, marks, tc.problem, a.Marks, a.Turns[0].Marks)
			}
			if string(marks[0].Data) != tc.data {
				t.Errorf("mark data %s, want the payload as recorded %s", marks[0].Data, tc.data)
			}
			if _, err := projections.Marshal(a); err != nil {
				t.Fatalf("the model does not marshal: %v", err)
			}
		})
	}
}

func TestAuditStates(t *testing.T) {
	b := newBuilder()
	b.add(events.TypeTurnReceived, 0, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "a"}, {ID: "b"}, {ID: "c"}, {ID: "d"}, {ID: "e"}}})
	if got := projections.FoldAudit("", "S", b.evs).Turns[0].Calls[0].State(); got != "waiting" {
		t.Errorf("a call with no event: %q, want waiting", got)
	}
	b.add(events.TypeToolCallRequested, 1, events.ToolCallRequested{CallRef: ref("t1", "a", 0), Attempt: 1})
	b.add(events.TypeToolCallRequested, 1, events.ToolCallRequested{CallRef: ref("t1", "b", 1), Attempt: 1})
	b.add(events.TypeToolCallStarted, 2, events.ToolCallStarted{CallRef: ref("t1", "b", 1), Attempt: 1})
	b.add(events.TypeToolCallRequested, 1, events.ToolCallRequested{CallRef: ref("t1", "c", 2), Attempt: 1})
	b.add(events.TypeToolCallStarted, 2, events.ToolCallStarted{CallRef: ref("t1", "c", 2), Attempt: 1})
	b.add(events.TypeToolCallFailed, 3, events.ToolCallFailed{CallRef: ref("t1", "c", 2), Attempt: 1})
	b.add(events.TypeRetryScheduled, 3, events.RetryScheduled{CallRef: ref("t1", "c", 2), Attempt: 2})
	b.add(events.TypeToolCallRequested, 1, events.ToolCallRequested{CallRef: ref("t1", "d", 3), Attempt: 1})
	b.add(events.TypeToolCallStarted, 2, events.ToolCallStarted{CallRef: ref("t1", "d", 3), Attempt: 1})
	b.add(events.TypeToolCallCompleted, 3, events.ToolCallCompleted{CallRef: ref("t1", "d", 3), Attempt: 1})
	b.add(events.TypeCallCancelled, 3, events.CallCancelled{CallRef: ref("t1", "e", 4)})
	calls := projections.FoldAudit("", "S", b.evs).Turns[0].Calls
	for i, want := range []string{"requested", "running", "waiting to retry", "settled, not committed yet", "cancelled, not committed yet"} {
		if got := calls[i].State(); got != want {
			t.Errorf("call %s: state %q, want %q", calls[i].ID, got, want)
		}
	}
}

// readGolden returns the golden event streams under testdata.
func readGolden(t *testing.T) map[string][]events.Event {
	t.Helper()
	paths, _ := filepath.Glob("testdata/*.events.jsonl")
	if len(paths) == 0 {
		t.Fatal("no golden streams in testdata")
	}
	out := map[string][]events.Event{}
	for _, p := range paths {
		out[strings.TrimSuffix(p, ".events.jsonl")] = readStream(t, p)
	}
	return out
}

// TestAuditGolden folds each golden stream (written by real nodes) and
// compares the model with testdata/NAME.audit.json; -update rewrites those.
func TestAuditGolden(t *testing.T) {
	for base, evs := range readGolden(t) {
		t.Run(filepath.Base(base), func(t *testing.T) {
			got, err := projections.Marshal(projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs))
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(base+".audit.json", got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(base + ".audit.json")
			if err != nil {
				t.Fatalf("%v (run go test ./projections -run TestAuditGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("audit model differs from %s.audit.json:\n%s", base, got)
			}
		})
	}
}

// TestAuditAgreesWithTheTranscript: the audit holds every committed result
// exactly as the transcript does, in the same turns and order, and every
// notice.
func TestAuditAgreesWithTheTranscript(t *testing.T) {
	for base, evs := range readGolden(t) {
		tr, err := projections.Fold(evs[0].Session, evs)
		if err != nil {
			t.Fatal(err)
		}
		a := projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs)
		if len(a.Turns) != len(tr.Turns) {
			t.Fatalf("%s: %d turns, transcript %d", base, len(a.Turns), len(tr.Turns))
		}
		for i, tt := range tr.Turns {
			at := a.Turns[i]
			var results []events.Result
			for _, c := range at.Calls {
				if c.Result != nil {
					results = append(results, *c.Result)
				}
			}
			if at.Turn != tt.Turn || at.Status != tt.Status || !reflect.DeepEqual(results, tt.Results) && len(tt.Results) > 0 {
				t.Errorf("%s turn %s: audit %s %+v, transcript %s %+v", base, tt.Turn, at.Status, results, tt.Status, tt.Results)
			}
			if len(at.Notices) != len(tt.Notices) {
				t.Errorf("%s turn %s: %d notices, transcript %d", base, tt.Turn, len(at.Notices), len(tt.Notices))
			}
		}
	}
}

// seqsIn collects every "seq" number anywhere in a marshalled model.
func seqsIn(v any, out map[uint64]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if n, ok := x.(float64); ok && k == "seq" {
				out[uint64(n)] = true
			}
			seqsIn(x, out)
		}
	case []any:
		for _, x := range v {
			seqsIn(x, out)
		}
	}
}

// shrink cuts every string in the events' payloads to 32 bytes, so that a
// property checked hundreds of times does not spend its time on a 100 kB
// output.
func shrink(evs []events.Event) []events.Event {
	var cut func(v any) any
	cut = func(v any) any {
		switch v := v.(type) {
		case string:
			return v[:min(len(v), 32)]
		case map[string]any:
			for k, x := range v {
				v[k] = cut(x)
			}
		case []any:
			for i, x := range v {
				v[i] = cut(x)
			}
		}
		return v
	}
	out := slices.Clone(evs)
	for i := range out {
		var v any
		if json.Unmarshal(out[i].Data, &v) == nil {
			out[i].Data, _ = json.Marshal(cut(v))
		}
	}
	return out
}

// perturb damages a log the ways a broken or foreign log can be: events
// dropped, duplicated, swapped, of unknown types, or with garbage payloads.
// Each event keeps a unique seq, so the test can find it in the model.
func perturb(r *rand.Rand, evs []events.Event) []events.Event {
	out := slices.Clone(evs)
	for range r.IntN(8) {
		i := r.IntN(len(out))
		switch r.IntN(5) {
		case 0:
			out = slices.Delete(out, i, i+1)
		case 1:
			out = slices.Insert(out, i, out[i])
		case 2:
			j := r.IntN(len(out))
			out[i], out[j] = out[j], out[i]
		case 3:
			out[i].Type = events.Type(fmt.Sprintf("Future%d", r.IntN(3)))
		case 4:
			out[i].Data = json.RawMessage([]string{`{"turn":1}`, `null`, `"x"`, `{"index":-1,"turn":"t1"}`, `{`}[r.IntN(5)])
		}
		if len(out) == 0 {
			out = slices.Clone(evs[:1])
		}
	}
	for i := range out {
		out[i].Seq = uint64(i + 1)
	}
	return out
}

// TestAuditPropertiesOnDamagedLogs checks, on hundreds of damaged logs,
// that the fold loses nothing (every event's seq is somewhere in the model),
// never fails to marshal, is deterministic, and that folding one event at a
// time with Changes gives the same model.
func TestAuditPropertiesOnDamagedLogs(t *testing.T) {
	streams := [][]events.Event{rich().evs}
	for _, evs := range readGolden(t) {
		streams = append(streams, shrink(evs))
	}
	prop := func(seed uint64, which uint8) bool {
		r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
		evs := perturb(r, streams[int(which)%len(streams)])
		a := projections.FoldAudit("acme", "S1", evs)
		got, err := json.Marshal(a)
		if err != nil {
			t.Logf("marshal: %v", err)
			return false
		}
		again, _ := json.Marshal(projections.FoldAudit("acme", "S1", evs))
		if !bytes.Equal(got, again) {
			t.Logf("two folds of the same events differ")
			return false
		}
		f := projections.NewAuditFolder("acme", "S1")
		for _, ev := range evs {
			f.Apply(ev)
			for _, i := range f.Changes() {
				if i < 0 || i >= len(f.Audit().Turns) {
					t.Logf("Changes names turn %d of %d", i, len(f.Audit().Turns))
					return false
				}
			}
		}
		inc, _ := json.Marshal(f.Audit())
		if !bytes.Equal(got, inc) {
			t.Logf("incremental fold differs")
			return false
		}
		var v any
		_ = json.Unmarshal(got, &v)
		seen := map[uint64]bool{}
		seqsIn(v, seen)
		for _, ev := range evs {
			if !seen[ev.Seq] {
				t.Logf("event seq %d (%s %s) is nowhere in the model", ev.Seq, ev.Type, ev.Data)
				return false
			}
		}
		return a.Events == len(evs)
	}
	if err := quick.Check(prop, &quick.Config{MaxCount: 300}); err != nil {
		t.Fatal(err)
	}
}

// TestAuditChanges: Changes names exactly the turns an event touched.
func TestAuditChanges(t *testing.T) {
	evs := rich().evs
	f := projections.NewAuditFolder("acme", "S1")
	for _, ev := range evs[:25] { // up to t1's TurnCompleted
		f.Apply(ev)
	}
	if got := f.Changes(); !slices.Equal(got, []int{0}) {
		t.Fatalf("changes after turn 1: %v, want [0]", got)
	}
	if got := f.Changes(); len(got) != 0 {
		t.Fatalf("changes twice: %v, want none the second time", got)
	}
	f.Apply(evs[25]) // TurnReceived t2
	f.Apply(evs[26]) // the notice in t2 about a call of t1
	if got := f.Changes(); !slices.Equal(got, []int{0, 1}) {
		t.Fatalf("changes after the notice: %v, want [0 1]", got)
	}
	f.Apply(evs[35]) // an unknown event naming nothing: the session's
	if got := f.Changes(); len(got) != 0 {
		t.Fatalf("changes after a session mark: %v, want none", got)
	}
}

// FuzzFoldAudit folds arbitrary events: it must never panic, and the model
// must always marshal.
func FuzzFoldAudit(f *testing.F) {
	for _, ev := range rich().evs {
		f.Add(string(ev.Type), []byte(ev.Data), uint64(2))
	}
	f.Add("ToolCallCompleted", []byte(`{"turn":"t1","call":"r","index":0,"attempt":-3,"duration_ms":1e308}`), uint64(9))
	f.Add("RetryScheduled", []byte(`{"turn":"t1","call":"f","index":1,"delay_ns":9223372036854775807}`), uint64(9))
	f.Fuzz(func(t *testing.T, typ string, data []byte, seq uint64) {
		evs := rich().evs[:25]
		evs = append(evs, events.Event{ID: "z", Tenant: "acme", Session: "S1", Seq: seq, Type: events.Type(typ), Data: data,
			Time: time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC)})
		a := projections.FoldAudit("acme", "S1", evs)
		if _, err := projections.Marshal(a); err != nil {
			t.Fatalf("model does not marshal: %v", err)
		}
		if a.Events != len(evs) {
			t.Fatalf("events=%d, want %d", a.Events, len(evs))
		}
	})
}

// TestAuditClipAt: a folder that clips keeps the first bytes of each large
// value (arguments as sent and as run, result and output parts, answers,
// work state, marks), whole runes only, says how large it was, and keeps
// every other value and fact as a folder that does not clip; the rich
// session's small values are all kept whole.
func TestAuditClipAt(t *testing.T) {
	whole := projections.FoldAudit("acme", "S1", rich().evs)
	clipped := projections.FoldAudit("acme", "S1", rich().evs, projections.ClipAt(1<<20))
	if !reflect.DeepEqual(whole, clipped) {
		t.Fatal("a clip no value reaches changed the model")
	}

	big := strings.Repeat("é", 300) // 600 bytes, two per rune
	args := events.Payload(map[string]string{"content": big})
	b := newBuilder()
	b.add(events.TypeSessionOpened, 0, events.SessionOpened{Workspace: "w"})
	b.add(events.TypeTurnReceived, 1, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "c1", Name: "write", Arguments: args}, {ID: "c2", Name: "read", Arguments: json.RawMessage(`{"path":"a"}`)}}})
	b.add(events.TypeToolCallRequested, 2, events.ToolCallRequested{CallRef: ref("t1", "c1", 0), Name: "write", Arguments: args, Attempt: 1})
	b.add(events.TypeToolCallCompleted, 3, events.ToolCallCompleted{CallRef: ref("t1", "c1", 0), Attempt: 1,
		Content: []events.Part{{Type: "text", Text: big}, {Type: "json", JSON: json.RawMessage(`{"a":"` + big + `"}`)}, {Type: "text", Text: "small"}}})
	b.add(events.TypeResultCommitted, 4, events.ResultCommitted{CallRef: ref("t1", "c1", 0), Result: events.Result{ID: "c1", Name: "write", Outcome: "ok",
		Content: []events.Part{{Type: "image", MIME: "image/png", Data: []byte(big)}}}})
	a := projections.FoldAudit("acme", "S1", b.evs, projections.ClipAt(101))
	c := a.Turns[0].Calls[0]
	var shown string
	if err := json.Unmarshal(c.Arguments, &shown); err != nil || len(shown) != 100 || !strings.HasPrefix(string(args), shown) || c.ArgumentsBytes != len(args) {
		t.Fatalf("arguments kept %s (%d bytes of %d), want a JSON string of their first 100 bytes (whole runes) and their size", c.Arguments, c.ArgumentsBytes, len(args))
	}
	if c.NormalizedBytes != len(args) || !bytes.Equal(c.Normalized, c.Arguments) {
		t.Errorf("arguments as run: %s, %d bytes", c.Normalized, c.NormalizedBytes)
	}
	at := c.Attempts[0]
	if len(at.Content) != 3 || at.Content[0].Text != big[:100] || at.Content[1].Type != "text" || at.Content[2].Text != "small" || at.ContentBytes != 600+len(`{"a":"`+big+`"}`)+5 {
		t.Errorf("output kept %+v (%d bytes)", at.Content, at.ContentBytes)
	}
	if len(c.Result.Content) != 1 || c.Result.Content[0].Text != "[image image/png, 600 bytes]" || c.ResultBytes != 600 {
		t.Errorf("result kept %+v (%d bytes)", c.Result.Content, c.ResultBytes)
	}
	if small := a.Turns[0].Calls[1]; string(small.Arguments) != `{"path":"a"}` || small.ArgumentsBytes != 0 {
		t.Errorf("small arguments kept as %s (%d)", small.Arguments, small.ArgumentsBytes)
	}
}
