package native

import (
	"encoding/json"
	"slices"

	"github.com/callsheet/callsheet/events"
)

// Running is the answer, in every format, for a turn whose calls are not
// all committed (posted with ?wait=0, or asked for while it runs). It has
// nothing to append: each provider needs every call of a response answered
// before the model's next request, and a call's result is not known yet.
// Waiting names what a person must do for the turn to go on.
type Running struct {
	Turn    string    `json:"turn"`
	Status  string    `json:"status"`
	Waiting []Waiting `json:"waiting"`
}

// Waiting is one call of a running turn that waits for a person: an
// approval (POST /v1/sessions/{s}/approvals/{call}) or the answer to a
// question (POST /v1/sessions/{s}/answers/{call}).
type Waiting struct {
	Kind string `json:"kind"` // "approval" or "question"
	Call string `json:"call"`
	Name string `json:"name"`
	// Arguments and Reason are an approval's: what would run, and why it
	// needs a person.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	// Question and Options are a question's.
	Question string   `json:"question,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// Pending folds a session's events into the calls of turn that wait for a
// person, in call order: approvals requested and not yet decided, and
// question calls started and not yet answered. Events it cannot decode are
// skipped: the answer is advice to a harness, never a decision.
func Pending(turn string, evs []events.Event) []Waiting {
	type state struct {
		w       Waiting
		waiting bool
	}
	byIndex := map[int]*state{}
	var order []int
	at := func(ref events.CallRef) *state {
		s, ok := byIndex[ref.Index]
		if !ok {
			s = &state{}
			byIndex[ref.Index] = s
			order = append(order, ref.Index)
		}
		return s
	}
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeApprovalRequested, events.TypeApprovalGranted, events.TypeApprovalDenied,
			events.TypeToolCallRequested, events.TypeToolCallStarted, events.TypeAnswerReceived,
			events.TypeResultCommitted, events.TypeDispatchBlocked, events.TypeCallCancelled:
		default:
			continue
		}
		p, err := events.Decode(ev)
		if err != nil {
			continue
		}
		ref, ok := events.CallOf(p)
		if !ok || ref.Turn != turn {
			continue
		}
		s := at(ref)
		switch p := p.(type) {
		case *events.ApprovalRequested:
			s.w = Waiting{Kind: "approval", Call: ref.Call, Name: p.Name, Arguments: p.Arguments, Reason: p.Reason}
			s.waiting = true
		case *events.ToolCallRequested:
			if p.Name == "question" {
				var q struct {
					Question string   `json:"question"`
					Options  []string `json:"options"`
				}
				_ = json.Unmarshal(p.Arguments, &q)
				s.w = Waiting{Kind: "question", Call: ref.Call, Name: p.Name, Question: q.Question, Options: q.Options}
			}
		case *events.ToolCallStarted:
			s.waiting = s.w.Kind == "question"
		default: // decided, answered, committed, blocked or cancelled
			s.waiting = false
		}
	}
	slices.Sort(order) // call order; the log's order is the order calls moved
	out := []Waiting{}
	for _, i := range order {
		if s := byIndex[i]; s.waiting {
			out = append(out, s.w)
		}
	}
	return out
}
