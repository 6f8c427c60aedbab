package projections

import (
	"slices"
	"time"

	"github.com/callsheet/callsheet/events"
)

// The summary fold: what the session search index holds per session
// (GET /v1/sessions, replay --list; docs/audit.md, "Finding sessions").

// Called is the pseudo-outcome of a call that was received, whatever became
// of it: the search index's "this session called this tool".
const Called = "called"

// Summary is one session as the search index holds it, folded from its
// events by Apply. Like the audit fold it never fails: an event it cannot
// decode counts as an event and nothing else.
type Summary struct {
	Tenant  string `json:"tenant"`
	Session string `json:"session"`
	// Opened is when the session was opened (its SessionOpened's time);
	// zero until then. The index files a session under its UTC day.
	Opened    time.Time `json:"opened"`
	Workspace string    `json:"workspace,omitempty"`
	Agent     string    `json:"agent,omitempty"`
	// Turns and Calls are the turns received and the calls in them.
	Turns int `json:"turns"`
	Calls int `json:"calls"`
	// Outcomes counts the committed results by outcome.
	Outcomes map[events.Outcome]int `json:"outcomes"`
	// Tools are the tools the session's calls named, sorted.
	Tools []string `json:"tools"`
	// Ended lists, per tool, the outcomes its calls' results had, sorted.
	Ended map[string][]events.Outcome `json:"ended,omitempty"`
	// Seq and Last are the last event folded and its time.
	Seq  uint64    `json:"seq"`
	Last time.Time `json:"last"`
	// Closed is set once the session is closed; Signed is the seq of the
	// latest signed head (0: none).
	Closed bool   `json:"closed,omitempty"`
	Signed uint64 `json:"signed,omitempty"`
}

// NewSummary returns the summary of a session without events.
func NewSummary(tenant, session string) *Summary {
	return &Summary{Tenant: tenant, Session: session, Outcomes: map[events.Outcome]int{}, Tools: []string{}}
}

// FoldSummary folds a session's events into its summary.
func FoldSummary(tenant, session string, evs []events.Event) *Summary {
	s := NewSummary(tenant, session)
	for _, ev := range evs {
		s.Apply(ev)
	}
	return s
}

// Apply folds one event. It reports whether the event changed what the
// index files the session under or shows of it (more than Seq and Last).
func (s *Summary) Apply(ev events.Event) bool {
	s.Seq, s.Last = ev.Seq, ev.Time
	switch ev.Type {
	case events.TypeSessionOpened:
		var p events.SessionOpened
		if events.DecodePartial(ev, &p) != nil {
			return false
		}
		s.Opened, s.Workspace, s.Agent = ev.Time, p.Workspace, p.Agent
		return true
	case events.TypeTurnOpened:
		s.Turns++ // its calls come in CallsAdded
		return true
	case events.TypeTurnReceived, events.TypeCallsAdded:
		if !s.addCalls(ev) {
			return false
		}
		if ev.Type == events.TypeTurnReceived {
			s.Turns++
		}
		return true
	case events.TypeResultCommitted:
		if p, ok := events.Kept[events.ResultCommitted](ev); ok {
			s.ended(p.Result.Name, p.Result.Outcome)
			return true
		}
		var p struct {
			Result struct {
				Name    string         `json:"name"`
				Outcome events.Outcome `json:"outcome"`
			} `json:"result"`
		}
		if events.DecodePartial(ev, &p) != nil {
			return false
		}
		s.ended(p.Result.Name, p.Result.Outcome)
		return true
	case events.TypeSessionClosed:
		s.Closed = true
		return true
	case events.TypeHeadSigned:
		var p events.HeadSigned
		if events.DecodePartial(ev, &p) == nil {
			s.Signed = p.Seq
		}
		return true
	case events.TypeTurnCompleted:
		return true // a turn's end is when its counts settle
	}
	return false
}

// addCalls counts the calls of a TurnReceived or CallsAdded, and reports
// false for a payload that does not decode.
func (s *Summary) addCalls(ev events.Event) bool {
	// A payload the session actor just decided is read as it is.
	if p, ok := events.Kept[events.TurnReceived](ev); ok {
		for _, c := range p.Calls {
			s.called(c.Name)
		}
		return true
	}
	if p, ok := events.Kept[events.CallsAdded](ev); ok {
		for _, c := range p.Calls {
			s.called(c.Name)
		}
		return true
	}
	// Only the calls' names: the arguments can be megabytes.
	var p struct {
		Calls []struct {
			Name string `json:"name"`
		} `json:"calls"`
	}
	if events.DecodePartial(ev, &p) != nil {
		return false
	}
	for _, c := range p.Calls {
		s.called(c.Name)
	}
	return true
}

// called counts a call of the tool name.
func (s *Summary) called(name string) {
	s.Calls++
	if i, found := slices.BinarySearch(s.Tools, name); !found {
		s.Tools = slices.Insert(s.Tools, i, name)
	}
}

// ended counts a result of the tool name.
func (s *Summary) ended(name string, outcome events.Outcome) {
	s.Outcomes[outcome]++
	if s.Ended == nil {
		s.Ended = map[string][]events.Outcome{}
	}
	os := s.Ended[name]
	if i, found := slices.BinarySearch(os, outcome); !found {
		s.Ended[name] = slices.Insert(os, i, outcome)
	}
}

// Markers lists the (tool, outcome) pairs the index files the session
// under: (tool, Called) for every tool its calls named, and (tool, outcome)
// for every outcome a result of that tool had.
func (s *Summary) Markers() [][2]string {
	var out [][2]string
	for _, t := range s.Tools {
		out = append(out, [2]string{t, Called})
	}
	for _, t := range sortedKeys(s.Ended) {
		for _, o := range s.Ended[t] {
			out = append(out, [2]string{t, string(o)})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Clone returns a deep copy of s.
func (s *Summary) Clone() *Summary {
	c := *s
	c.Outcomes = make(map[events.Outcome]int, len(s.Outcomes))
	for o, n := range s.Outcomes {
		c.Outcomes[o] = n
	}
	c.Tools = slices.Clone(s.Tools)
	if s.Ended != nil {
		c.Ended = make(map[string][]events.Outcome, len(s.Ended))
		for t, os := range s.Ended {
			c.Ended[t] = slices.Clone(os)
		}
	}
	return &c
}
