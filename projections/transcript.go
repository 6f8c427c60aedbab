package projections

import (
	"encoding/json"
	"fmt"

	"github.com/callsheet/callsheet/events"
)

// Turn statuses.
const (
	StatusRunning  = "running"
	StatusComplete = "complete"
)

// Notice is a retry notice as the model sees it in a turn's notices: a call
// of an earlier turn whose outcome is unknown.
type Notice struct {
	// Turn and Call name the indeterminate call; Tool and Attempt say what
	// it was.
	Turn    string `json:"turn"`
	Call    string `json:"call"`
	Tool    string `json:"tool"`
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
}

// Turn is one turn of a transcript: its committed results in call order and
// the notices it carries. It is also the API's answer to a turn.
type Turn struct {
	Turn    string          `json:"turn"`
	Status  string          `json:"status"`
	Results []events.Result `json:"results"`
	Notices []Notice        `json:"notices"`
}

// Transcript is a session's turns, built from commits alone.
type Transcript struct {
	Session string `json:"session"`
	Turns   []Turn `json:"turns"`
}

// Fold builds the transcript of one session from its events, in order. It is
// pure: the same events give a byte-identical transcript, live or replayed.
// An event it cannot decode is an error naming it.
func Fold(session string, evs []events.Event) (Transcript, error) {
	tr := Transcript{Session: session, Turns: []Turn{}}
	index := map[string]int{}
	var scratch events.TurnReceived
	for _, ev := range evs {
		if err := foldOne(&tr, index, ev, nil, &scratch); err != nil {
			return Transcript{}, err
		}
	}
	return tr, nil
}

// TranscriptFolder folds events one at a time, for live views.
type TranscriptFolder struct {
	tr    Transcript
	index map[string]int
}

// NewTranscriptFolder returns an empty folder for session.
func NewTranscriptFolder(session string) *TranscriptFolder {
	return &TranscriptFolder{tr: Transcript{Session: session, Turns: []Turn{}}, index: map[string]int{}}
}

// Apply folds one event.
// It keeps no scratch payload (Fold does): a live folder lives as long as
// its session's actor.
func (f *TranscriptFolder) Apply(ev events.Event) error {
	return foldOne(&f.tr, f.index, ev, nil, nil)
}

// ApplyDecoded folds one event whose decoded payload p (as events.Decode
// returns it) the caller already holds.
func (f *TranscriptFolder) ApplyDecoded(ev events.Event, p any) error {
	return foldOne(&f.tr, f.index, ev, p, nil)
}

// Transcript returns the transcript so far. The caller must not modify it.
func (f *TranscriptFolder) Transcript() Transcript { return f.tr }

// Turn returns one turn so far.
func (f *TranscriptFolder) Turn(id string) (Turn, bool) {
	i, ok := f.index[id]
	if !ok {
		return Turn{}, false
	}
	return f.tr.Turns[i], true
}

// foldOne folds one event into tr. p is its decoded payload, or nil to
// decode it here; a TurnReceived is then decoded into scratch, when there is
// one, reused from one to the next: the transcript keeps only its turn id, and a fresh
// TurnReceived (its calls and plan) for every turn was a third of Fold's
// time (docs/performance.md, "Fold"). It is still decoded whole, so a
// TurnReceived that does not decode is refused as before.
func foldOne(tr *Transcript, index map[string]int, ev events.Event, p any, scratch *events.TurnReceived) error {
	switch ev.Type {
	case events.TypeTurnReceived:
		if p == nil && scratch != nil {
			// Only Turn is read below; the slices' old elements may survive.
			*scratch = events.TurnReceived{Calls: scratch.Calls[:0], Plan: scratch.Plan[:0]}
			if err := events.DecodeInto(ev, scratch); err != nil {
				return err
			}
			p = scratch
		}
	case events.TypeTurnOpened, events.TypeResultCommitted, events.TypeTurnCompleted, events.TypeRetryNoticeIssued:
	default:
		return nil // other events do not change the transcript
	}
	if p == nil {
		var err error
		if p, err = events.Decode(ev); err != nil {
			return err
		}
	}
	turn := func(id string) (*Turn, error) {
		i, ok := index[id]
		if !ok {
			return nil, fmt.Errorf("projections: event %d (%s) names turn %q that was never received", ev.Seq, ev.Type, id)
		}
		return &tr.Turns[i], nil
	}
	open := func(id string) error {
		if _, ok := index[id]; ok {
			return fmt.Errorf("projections: event %d receives turn %q twice", ev.Seq, id)
		}
		index[id] = len(tr.Turns)
		tr.Turns = append(tr.Turns, Turn{Turn: id, Status: StatusRunning, Results: []events.Result{}, Notices: []Notice{}})
		return nil
	}
	switch p := p.(type) {
	case *events.TurnReceived:
		return open(p.Turn)
	case *events.TurnOpened:
		// A streamed turn: its calls' batches (CallsAdded) and its end
		// change nothing the model sees; its commits do.
		return open(p.Turn)
	case *events.ResultCommitted:
		t, err := turn(p.Turn)
		if err != nil {
			return err
		}
		t.Results = append(t.Results, p.Result)
	case *events.TurnCompleted:
		t, err := turn(p.Turn)
		if err != nil {
			return err
		}
		t.Status = StatusComplete
	case *events.RetryNoticeIssued:
		t, err := turn(p.Turn)
		if err != nil {
			return err
		}
		t.Notices = append(t.Notices, Notice{Turn: p.About.Turn, Call: p.About.Call, Tool: p.Name, Attempt: p.Attempt, Message: p.Notice})
	}
	return nil
}

// Marshal encodes a transcript the one way the API and the replay tool both
// print it, so their bytes are identical.
func Marshal(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
