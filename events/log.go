package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// ErrConflict is returned by Log.Append when the append assumed a stale view
// of the session: another writer appended first. The caller must reload the
// session before deciding again.
var ErrConflict = errors.New("events: stale append: the session changed since it was read")

// ErrNotFound is returned when a session has no events.
var ErrNotFound = errors.New("events: session not found")

// Log is the durable, per-session event log. Implementations are safe for
// concurrent use.
type Log interface {
	// Append stores evs, all of one session, atomically and in order. Each
	// event's Seq must continue the session: the first is expectedLast+1.
	// The append is refused with ErrConflict when the session's last stored
	// Seq is not expectedLast. Re-sending an already stored event (same ID)
	// stores nothing twice.
	Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []Event) error
	// Read returns the session's events with Seq > after, in order.
	Read(ctx context.Context, tenant, session string, after uint64) ([]Event, error)
	// Watch delivers the session's events with Seq > after, in order, and
	// then live ones, until ctx ends. The channel closes when ctx ends or the
	// log fails.
	Watch(ctx context.Context, tenant, session string, after uint64) (<-chan Event, error)
}

// Decode decodes an event's payload into a value of the payload type that
// matches its Type, and reports a clear error for an unknown type or a bad
// payload.
func Decode(ev Event) (any, error) {
	var v any
	switch ev.Type {
	case TypeSessionOpened:
		v = &SessionOpened{}
	case TypeTurnReceived:
		v = &TurnReceived{}
	case TypeToolCallRequested:
		v = &ToolCallRequested{}
	case TypeDispatchBlocked:
		v = &DispatchBlocked{}
	case TypeApprovalRequested:
		v = &ApprovalRequested{}
	case TypeApprovalGranted:
		v = &ApprovalGranted{}
	case TypeApprovalDenied:
		v = &ApprovalDenied{}
	case TypeToolCallStarted:
		v = &ToolCallStarted{}
	case TypeFileCheckpointed:
		v = &FileCheckpointed{}
	case TypeToolCallCompleted:
		v = &ToolCallCompleted{}
	case TypeToolCallFailed:
		v = &ToolCallFailed{}
	case TypeToolCallIndeterminate:
		v = &ToolCallIndeterminate{}
	case TypeRetryScheduled:
		v = &RetryScheduled{}
	case TypeResultCommitted:
		v = &ResultCommitted{}
	case TypeTurnCompleted:
		v = &TurnCompleted{}
	case TypeRetryNoticeIssued:
		v = &RetryNoticeIssued{}
	case TypeSessionClosed:
		v = &SessionClosed{}
	case TypeCallCancelled:
		v = &CallCancelled{}
	case TypeAnswerReceived:
		v = &AnswerReceived{}
	case TypeWorkStateUpdated:
		v = &WorkStateUpdated{}
	case TypeWorkspaceRewound:
		v = &WorkspaceRewound{}
	case TypeHeadSigned:
		v = &HeadSigned{}
	default:
		return nil, fmt.Errorf("events: event %s (seq %d) has unknown type %q", ev.ID, ev.Seq, ev.Type)
	}
	if err := json.Unmarshal(ev.Data, v); err != nil {
		return nil, fmt.Errorf("events: event %s (seq %d, %s): bad payload: %w", ev.ID, ev.Seq, ev.Type, err)
	}
	return v, nil
}

// Marshal encodes an event for storage.
func Marshal(ev Event) ([]byte, error) { return json.Marshal(ev) }

// Unmarshal decodes a stored event and checks its envelope.
func Unmarshal(b []byte) (Event, error) {
	var ev Event
	if err := json.Unmarshal(b, &ev); err != nil {
		return Event{}, fmt.Errorf("events: undecodable event: %w", err)
	}
	if ev.ID == "" || ev.Type == "" || ev.Session == "" || ev.Tenant == "" || ev.Seq == 0 {
		return Event{}, fmt.Errorf("events: event envelope is missing id, type, tenant, session or seq (id=%q type=%q seq=%d)", ev.ID, ev.Type, ev.Seq)
	}
	return ev, nil
}

// Pointer returns a pointer to a copy of payload v (or v itself when it is
// already a pointer): the form Decode returns, for ApplyDecoded-style folds.
func Pointer(v any) any {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Pointer {
		return v
	}
	p := reflect.New(rv.Type())
	p.Elem().Set(rv)
	return p.Interface()
}

// Payload marshals an event payload. Payload types always marshal, so a
// failure is a programming error and panics.
func Payload(p any) json.RawMessage {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("events: payload %T does not marshal: %v", p, err))
	}
	return b
}
