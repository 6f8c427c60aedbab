package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	fastjson "github.com/segmentio/encoding/json"
)

// ErrConflict is returned by Log.Append when the append assumed a stale view
// of the session: another writer appended first. The caller must reload the
// session before deciding again.
var ErrConflict = errors.New("events: stale append: the session changed since it was read")

// ErrNotFound is returned when a session has no events.
var ErrNotFound = errors.New("events: session not found")

// Log is the durable, per-session event log: what the product needs of it
// and nothing more (append, read, watch). Implementations are safe for
// concurrent use; events/natslog stores it in JetStream, events/memlog in
// memory, and events/logtest is the suite both pass.
//
// Handing a stored ToolCallRequested to the worker that runs it is not the
// log's job: the session actor that appended it hands it over in memory
// once it is durable (docs/architecture.md, "How a call reaches its tool
// actor"), and the log only keeps it, so that the session's next owner
// requests it again.
type Log interface {
	// Append stores evs, all of one session, in order. Each event's Seq
	// must continue the session: the first is expectedLast+1. The append is
	// refused with ErrConflict when the session's last stored Seq is not
	// expectedLast. Re-sending an already stored event (same ID at the same
	// Seq) stores nothing twice; re-sending an append of which only a
	// prefix is stored stores the rest.
	Append(ctx context.Context, tenant, session string, expectedLast uint64, evs []Event) error
	// Read returns the session's events with Seq > after, in order. A
	// session without events gives none and no error.
	Read(ctx context.Context, tenant, session string, after uint64) ([]Event, error)
	// Watch delivers the session's events with Seq > after, in order, and
	// then live ones, until ctx ends. The channel closes when ctx ends or the
	// log fails.
	Watch(ctx context.Context, tenant, session string, after uint64) (<-chan Event, error)
}

// ValidID reports whether a tenant, session or node id can be used by every
// Log: 1..128 letters, digits, '_' or '-' (they become subject tokens in
// events/natslog).
func ValidID(id string) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Decode decodes an event's payload into a value of the payload type that
// matches its Type, and reports a clear error for an unknown type or a bad
// payload.
//
// It decodes with github.com/segmentio/encoding/json, a drop-in
// replacement of encoding/json that refuses the same inputs and decodes the
// others to the same values (FuzzDecodeAsStdlib holds it to that for every
// payload type) at about twice the speed: decoding was nearly all of
// projections.Fold's time and a sixth of the node's CPU per call
// (docs/performance.md, "Fold"). Its error messages may read differently.
// Encoding stays with encoding/json: the stored bytes, and the hash chain
// over them, do not change.
func Decode(ev Event) (any, error) {
	v, err := newPayload(ev)
	if err != nil {
		return nil, err
	}
	if err := fastjson.Unmarshal(ev.Data, v); err != nil {
		return nil, fmt.Errorf("events: event %s (seq %d, %s): bad payload: %w", ev.ID, ev.Seq, ev.Type, err)
	}
	fit(v)
	return v, nil
}

// fit trims the slices of a payload Decode returns to their length: the
// faster decoder starts every slice at a capacity of 10, and a session's
// state and transcript keep its turns' calls, plans and results, so a
// rebuilt session would hold about 3 KiB more per turn than one decoded by
// encoding/json.
func fit(v any) {
	switch p := v.(type) {
	case *TurnReceived:
		p.Calls = clip(p.Calls)
		p.Plan = clip(p.Plan)
		for i := range p.Plan {
			p.Plan[i].Labels = clip(p.Plan[i].Labels)
		}
	case *ToolCallCompleted:
		p.Content, p.Touched = clip(p.Content), clip(p.Touched)
	case *ResultCommitted:
		p.Result.Content, p.Result.Touched = clip(p.Result.Content), clip(p.Result.Touched)
	case *ApprovalRequested:
		p.Labels = clip(p.Labels)
	case *WorkspaceRewound:
		p.Restored, p.Removed = clip(p.Restored), clip(p.Removed)
	}
}

// clip returns s in a backing array of its own length when it has room to
// spare.
func clip[T any](s []T) []T {
	if cap(s) == len(s) {
		return s
	}
	return append(make([]T, 0, len(s)), s...)
}

// DecodeInto decodes an event's payload into v, which must point to the
// payload type of ev.Type, and refuses exactly what Decode refuses. It reuses
// the capacity of v's slices, so a fold that keeps nothing of a payload but
// a field or two can decode every event of a type into one scratch value;
// what v held before may survive in elements the payload does not set, so
// such a fold must read only the fields it decoded.
func DecodeInto(ev Event, v any) error {
	payload, ok := PayloadType(ev.Type)
	if !ok {
		return fmt.Errorf("events: event %s (seq %d) has unknown type %q", ev.ID, ev.Seq, ev.Type)
	}
	if got, want := reflect.TypeOf(v), reflect.PointerTo(payload); got != want {
		return fmt.Errorf("events: event %s (seq %d, %s): decoding into %v, want %v", ev.ID, ev.Seq, ev.Type, got, want)
	}
	if err := fastjson.Unmarshal(ev.Data, v); err != nil {
		return fmt.Errorf("events: event %s (seq %d, %s): bad payload: %w", ev.ID, ev.Seq, ev.Type, err)
	}
	return nil
}

// DecodePartial decodes the fields of an event's payload that v, a pointer
// to a struct naming a few of them, asks for, with Decode's faster decoder:
// a fold that needs two fields of a payload (projections.Summary, the
// session index the node keeps as it writes) need not pay for the rest.
func DecodePartial(ev Event, v any) error {
	if err := fastjson.Unmarshal(ev.Data, v); err != nil {
		return fmt.Errorf("events: event %s (seq %d, %s): bad payload: %w", ev.ID, ev.Seq, ev.Type, err)
	}
	return nil
}

// Marshal encodes an event for storage: json.Marshal's encoding of it, which
// is what the log stores. For an event made by Encode and unchanged since it
// returns the encoding Encode made (encode.go), shared by every copy of the
// event, so the caller must not modify it.
func Marshal(ev Event) ([]byte, error) {
	if b, ok := ev.Encoding(); ok {
		return b, nil
	}
	return json.Marshal(ev)
}

// Unmarshal decodes a stored event and checks its envelope. It decodes with
// the decoder Decode uses (FuzzUnmarshalAsStdlib holds it to encoding/json):
// every event read from the log and every request a worker takes passes
// here.
func Unmarshal(b []byte) (Event, error) {
	var e envelope
	if err := fastjson.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("events: undecodable event: %w", err)
	}
	ev := Event{ID: e.ID, Tenant: e.Tenant, Session: e.Session, Seq: e.Seq, Time: time.Time(e.Time), Type: e.Type,
		Causation: e.Causation, Prev: e.Prev, Data: e.Data}
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

// Payload marshals an event payload: the bytes json.Marshal returns for
// it, written by the generated encoder of its type (payloads_json.go,
// jsonenc.go) for the types of payloads.go, and by json.Marshal for any
// other. Payload types always marshal, so a failure is a programming error
// and panics. It is safe for concurrent use.
func Payload(p any) json.RawMessage {
	bp := payloadBufs.Get().(*[]byte)
	defer payloadBufs.Put(bp)
	if b, ok := appendPayloadJSON((*bp)[:0], p); ok {
		if cap(b) <= maxPooledHashBuf {
			*bp = b
		}
		return bytes.Clone(b)
	}
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("events: payload %T does not marshal: %v", p, err))
	}
	return b
}

// payloadBufs keeps Payload's scratch buffers: the payload is written
// there, then copied out at its size.
var payloadBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// envelope is Event as Unmarshal decodes it: the same fields and names, with
// Time parsed by time.Time's own UnmarshalJSON, as encoding/json parses it.
// The faster decoder's own time parser refuses times encoding/json accepts
// (FuzzUnmarshalAsStdlib found "0000-01-01T0:00:00,0Z").
type envelope struct {
	ID        string          `json:"id"`
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session"`
	Seq       uint64          `json:"seq"`
	Time      stdTime         `json:"time"`
	Type      Type            `json:"type"`
	Causation string          `json:"causation,omitempty"`
	Prev      string          `json:"prev,omitempty"`
	Data      json.RawMessage `json:"data"`
}

// stdTime is a time.Time decoded by time.Time.UnmarshalJSON.
type stdTime time.Time

// UnmarshalJSON implements json.Unmarshaler with time.Time's own.
func (t *stdTime) UnmarshalJSON(b []byte) error { return (*time.Time)(t).UnmarshalJSON(b) }
