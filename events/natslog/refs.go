package natslog

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	fastjson "github.com/segmentio/encoding/json"

	"github.com/callsheet/callsheet/events"
)

// Events by reference.
//
// A NATS message holds at most the server's max_payload (1 MiB by default),
// and a turn's events can hold much more: a 4 MiB write is 4 MiB in its
// TurnReceived and again in its ToolCallRequested. An event whose encoded
// size exceeds the reference threshold is therefore stored in two parts:
// its payload (the "data" value, byte for byte as it would appear inline) in
// the payload object store under a content-addressed name, and in the
// stream a stub: the envelope without "data", with "data_ref" naming the
// object, its SHA-256 and its size (docs/events.md, "Events stored by
// reference"). Every reader (Read, Watch, Last, request delivery) resolves a
// stub before handing the event on, checking the digest, so nothing above
// the log sees the difference.
//
// The object is stored before the message that names it: a crash in
// between leaves an object no event names (harmless, and a retried append
// stores the same name again), never an event naming a missing object.

// Defaults of the reference options.
const (
	// DefaultPayloadBucket is the object store bucket of payloads stored by
	// reference.
	DefaultPayloadBucket = "cs_payloads"
	// DefaultRefThreshold is the encoded event size above which an event is
	// stored by reference (256 KiB). A connection whose server allows less
	// than 4 times that per message lowers it to a quarter of the server's
	// max_payload.
	DefaultRefThreshold = 256 << 10
	// minRefThreshold is the smallest accepted threshold: a stub is a few
	// hundred bytes, so a smaller threshold would store stubs by reference.
	minRefThreshold = 4 << 10
	// objectChunk is the object store's default chunk size (128 KiB).
	objectChunk = 128 << 10
	// refRetry is how long a request whose payload could not be fetched
	// (the server busy, not a bad reference) waits before redelivery.
	refRetry = 500 * time.Millisecond
)

// ErrBadReference is wrapped by the error a reader returns for a stub whose
// object is missing, is not under the event's tenant and session, or does
// not match the digest or size the stub records.
var ErrBadReference = errors.New("natslog: event payload stored by reference does not check out")

// WithPayloadBucket names the object store bucket that holds payloads stored
// by reference; default DefaultPayloadBucket. Bucket names are letters,
// digits, '_' and '-'.
func WithPayloadBucket(name string) Option {
	return func(c *config) error {
		if !tokenRE.MatchString(name) || len(name) > 64 {
			return fmt.Errorf("%w: payload bucket %q: use 1..64 letters, digits, '_' or '-'", ErrInvalidOption, name)
		}
		c.payloadBucket = name
		return nil
	}
}

// WithRefThreshold sets the encoded event size above which an event is
// stored by reference; default DefaultRefThreshold, at least 4 KiB. The Log
// lowers it to a quarter of the server's max_payload when that is smaller.
func WithRefThreshold(n int) Option {
	return func(c *config) error {
		if n < minRefThreshold {
			return fmt.Errorf("%w: reference threshold %d: use at least %d bytes", ErrInvalidOption, n, minRefThreshold)
		}
		c.refThreshold = n
		return nil
	}
}

// PayloadRef is the "data_ref" of a stub: where an event's payload is.
type PayloadRef struct {
	// Bucket is the object store bucket (DefaultPayloadBucket).
	Bucket string `json:"bucket"`
	// Object is "TENANT/SESSION/SHA256", the SHA-256 in lowercase hex.
	Object string `json:"object"`
	// SHA256 is the lowercase hex SHA-256 of the payload bytes.
	SHA256 string `json:"sha256"`
	// Bytes is the payload's length.
	Bytes int `json:"bytes"`
}

// stub is the stored form of an event kept by reference: the envelope of
// events.Event with "data" left out and "data_ref" in its place.
type stub struct {
	ID        string      `json:"id"`
	Tenant    string      `json:"tenant"`
	Session   string      `json:"session"`
	Seq       uint64      `json:"seq"`
	Time      time.Time   `json:"time"`
	Type      events.Type `json:"type"`
	Causation string      `json:"causation,omitempty"`
	// Prev is the hash chain's link (docs/events.md): the envelope's, so an
	// event stored by reference is chained like any other, over its
	// resolved payload.
	Prev    string     `json:"prev,omitempty"`
	DataRef PayloadRef `json:"data_ref"`
}

// pendingRef is a payload to store before the message whose stub names it.
type pendingRef struct {
	name string
	data []byte
}

// refThreshold is the size above which an encoded event goes by reference,
// and packLimit the most bytes packed into one message: both within the
// server's max_payload, whatever it is.
func (l *Log) refThreshold() int {
	t := l.cfg.refThreshold
	if mp := l.nc.MaxPayload(); mp > 0 && int64(t) > mp/4 {
		t = max(int(mp/4), 1)
	}
	return t
}

// chunkSize is the object store chunk size the Log writes with: 128 KiB,
// or less against a server whose max_payload is small.
func (l *Log) chunkSize() int { return min(objectChunk, l.packLimit()) }

func (l *Log) packLimit() int {
	p := maxPacked
	if mp := l.nc.MaxPayload(); mp > 0 && int64(p) > mp/2 {
		p = max(int(mp/2), 1)
	}
	return p
}

// byReference returns the stub that stands for ev in the stream, and the
// payload to store under the stub's name. data is the payload exactly as it
// would appear inline (encoding/json compacts and HTML-escapes a RawMessage
// the same way in both places).
func (l *Log) byReference(ev events.Event) ([]byte, pendingRef, error) {
	// An event events.Encode made holds its payload as encoding/json wrote
	// it, which compacting leaves as it is.
	data := []byte(ev.Data)
	if _, ok := ev.Encoding(); !ok {
		var err error
		if data, err = json.Marshal(ev.Data); err != nil {
			return nil, pendingRef{}, err
		}
	}
	sum := sha256.Sum256(data)
	digest := hex.EncodeToString(sum[:])
	ref := PayloadRef{Bucket: l.cfg.payloadBucket, Object: ev.Tenant + "/" + ev.Session + "/" + digest, SHA256: digest, Bytes: len(data)}
	b, err := json.Marshal(stub{ID: ev.ID, Tenant: ev.Tenant, Session: ev.Session, Seq: ev.Seq, Time: ev.Time, Type: ev.Type, Causation: ev.Causation, Prev: ev.Prev, DataRef: ref})
	if err != nil {
		return nil, pendingRef{}, err
	}
	return b, pendingRef{name: ref.Object, data: data}, nil
}

// payloads holds the payload object store, found or created on first use.
type payloads struct {
	mu  sync.Mutex
	obs jetstream.ObjectStore
}

// payloadStore returns the payload bucket. A writer creates it if needed; a
// reader only looks it up, so reading a log never creates anything.
func (l *Log) payloadStore(ctx context.Context, create bool) (jetstream.ObjectStore, error) {
	l.refs.mu.Lock()
	defer l.refs.mu.Unlock()
	if l.refs.obs != nil {
		return l.refs.obs, nil
	}
	var obs jetstream.ObjectStore
	var err error
	if create {
		obs, err = ensureObjects(ctx, l.js, jetstream.ObjectStoreConfig{
			Bucket:      l.cfg.payloadBucket,
			Description: "callsheet event payloads stored by reference",
			Storage:     jetstream.FileStorage,
			Replicas:    l.cfg.replicas,
		})
	} else {
		obs, err = l.js.ObjectStore(ctx, l.cfg.payloadBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("payload object store %s: %w", l.cfg.payloadBucket, err)
	}
	l.refs.obs = obs
	return obs, nil
}

// putRefs stores the payloads an append's stubs name, before any of its
// messages is published. A payload already stored under its name (a retried
// append) is not stored again: the name is its digest.
func (l *Log) putRefs(ctx context.Context, refs []pendingRef) error {
	if len(refs) == 0 {
		return nil
	}
	obs, err := l.payloadStore(ctx, true)
	if err != nil {
		return err
	}
	// The bounded put of objectput.go: a payload can be as large as a body
	// (limits.body_bytes), and chunks stay within the server's max_payload.
	o := &Objects{obs: obs, js: l.js, bucket: l.cfg.payloadBucket, chunk: l.chunkSize()}
	for _, r := range refs {
		if info, err := obs.GetInfo(ctx, r.name); err == nil && info.Size == uint64(len(r.data)) && !info.Deleted {
			continue
		}
		if _, _, err := o.putBounded(ctx, r.name, bytes.NewReader(r.data)); err != nil {
			return fmt.Errorf("store payload %s/%s: %w", l.cfg.payloadBucket, r.name, err)
		}
	}
	return nil
}

// stored is one event of a decoded message; ref is set when the event was
// stored by reference and its Data is not yet filled in.
type stored struct {
	ev  events.Event
	ref *PayloadRef
}

// decodeStored decodes a stored message, one event or a packed run of them,
// without resolving references. It needs no server, so it can be fuzzed.
func decodeStored(data []byte) ([]stored, error) {
	i := 0
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
		i++
	}
	if i == len(data) || data[i] != '[' {
		s, err := decodeOne(data)
		if err != nil {
			return nil, err
		}
		return []stored{s}, nil
	}
	// Split with the decoder events.Decode uses (it refuses what
	// encoding/json refuses: events.FuzzUnmarshalAsStdlib).
	var raws []json.RawMessage
	if err := fastjson.Unmarshal(data, &raws); err != nil {
		return nil, fmt.Errorf("events: undecodable packed message: %w", err)
	}
	if len(raws) == 0 {
		return nil, errors.New("events: empty packed message")
	}
	out := make([]stored, len(raws))
	for k, r := range raws {
		s, err := decodeOne(r)
		if err != nil {
			return nil, err
		}
		if k > 0 && s.ev.Seq != out[k-1].ev.Seq+1 {
			return nil, fmt.Errorf("events: packed message holds seq %d after %d", s.ev.Seq, out[k-1].ev.Seq)
		}
		out[k] = s
	}
	return out, nil
}

// decodeLastStored decodes the last event of a stored message, as
// decodeStored would, without decoding the events packed before it (a
// request's pack carries the turn's TurnReceived, with every call's
// arguments and the plan, which the worker does not need). The whole message
// must still be valid JSON.
func decodeLastStored(data []byte) (stored, error) {
	i := 0
	for i < len(data) && (data[i] == ' ' || data[i] == '\n' || data[i] == '\t' || data[i] == '\r') {
		i++
	}
	if i == len(data) || data[i] != '[' {
		return decodeOne(data)
	}
	if !fastjson.Valid(data) { // as encoding/json's: events.FuzzUnmarshalAsStdlib
		return stored{}, errors.New("events: undecodable packed message: not JSON")
	}
	last, ok := lastElement(data[i:])
	if !ok {
		return stored{}, errors.New("events: empty packed message")
	}
	return decodeOne(last)
}

// lastElement returns the last element of a JSON array that json.Valid has
// accepted, or false for an empty one.
func lastElement(arr []byte) ([]byte, bool) {
	depth, start, end := 0, -1, -1
	inString, escaped := false, false
	for i, c := range arr {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			depth++
			if depth == 1 && c == '[' {
				start = i + 1
			}
		case ']', '}':
			if depth == 1 {
				end = i
			}
			depth--
		case ',':
			if depth == 1 {
				start = i + 1
			}
		}
		if depth == 0 && end >= 0 {
			break
		}
	}
	if start < 0 || end < start {
		return nil, false
	}
	el := arr[start:end]
	for len(el) > 0 && (el[0] == ' ' || el[0] == '\n' || el[0] == '\t' || el[0] == '\r') {
		el = el[1:]
	}
	for len(el) > 0 && (el[len(el)-1] == ' ' || el[len(el)-1] == '\n' || el[len(el)-1] == '\t' || el[len(el)-1] == '\r') {
		el = el[:len(el)-1]
	}
	return el, len(el) > 0
}

// decodeOne decodes one stored event: an event with its data, or a stub
// with a data_ref (an event never has both).
func decodeOne(b []byte) (stored, error) {
	ev, err := events.Unmarshal(b)
	if err != nil {
		return stored{}, err
	}
	if ev.Data != nil && string(ev.Data) != "null" {
		return stored{ev: ev}, nil
	}
	var s struct {
		DataRef *PayloadRef `json:"data_ref"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return stored{}, fmt.Errorf("events: undecodable event %s: %w", ev.ID, err)
	}
	if s.DataRef == nil {
		return stored{ev: ev}, nil // an event whose payload is null
	}
	r := s.DataRef
	want := ev.Tenant + "/" + ev.Session + "/" + r.SHA256
	if len(r.SHA256) != 2*sha256.Size || strings.Trim(r.SHA256, "0123456789abcdef") != "" || r.Object != want || r.Bytes < 0 {
		return stored{}, fmt.Errorf("%w: event %s (seq %d of %s/%s) names object %q with sha256 %q: want %q, a lowercase hex SHA-256 named under its own tenant and session",
			ErrBadReference, ev.ID, ev.Seq, ev.Tenant, ev.Session, r.Object, r.SHA256, want)
	}
	return stored{ev: ev, ref: r}, nil
}

// resolve fills in the payload of an event stored by reference, checking it
// against the stub's size and digest; other events pass through.
func (l *Log) resolve(ctx context.Context, s stored) (events.Event, error) {
	if s.ref == nil {
		return s.ev, nil
	}
	r, ev := s.ref, s.ev
	if r.Bucket != l.cfg.payloadBucket {
		return events.Event{}, fmt.Errorf("%w: event %s (seq %d of %s/%s) names bucket %q, this log keeps payloads in %q", ErrBadReference, ev.ID, ev.Seq, ev.Tenant, ev.Session, r.Bucket, l.cfg.payloadBucket)
	}
	// A missing bucket or object is wrapped in ErrBadReference (it will not
	// appear later); any other failure to fetch may be transient.
	obs, err := l.payloadStore(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		err = fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	if err != nil {
		return events.Event{}, fmt.Errorf("event %s (seq %d of %s/%s): %w", ev.ID, ev.Seq, ev.Tenant, ev.Session, err)
	}
	data, err := obs.GetBytes(ctx, r.Object)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		err = fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	if err != nil {
		return events.Event{}, fmt.Errorf("event %s (seq %d of %s/%s): payload %s/%s: %w", ev.ID, ev.Seq, ev.Tenant, ev.Session, r.Bucket, r.Object, err)
	}
	sum := sha256.Sum256(data)
	if len(data) != r.Bytes || hex.EncodeToString(sum[:]) != r.SHA256 {
		return events.Event{}, fmt.Errorf("%w: event %s (seq %d of %s/%s): object %s/%s holds %d bytes with sha256 %x, the stub records %d bytes with %s",
			ErrBadReference, ev.ID, ev.Seq, ev.Tenant, ev.Session, r.Bucket, r.Object, len(data), sum, r.Bytes, r.SHA256)
	}
	if !json.Valid(data) {
		return events.Event{}, fmt.Errorf("%w: event %s (seq %d of %s/%s): object %s/%s is not JSON", ErrBadReference, ev.ID, ev.Seq, ev.Tenant, ev.Session, r.Bucket, r.Object)
	}
	ev.Data = json.RawMessage(data)
	return ev, nil
}

// decodeMsg decodes a stored message and resolves every event in it that was
// stored by reference.
func (l *Log) decodeMsg(ctx context.Context, data []byte) ([]events.Event, error) {
	ss, err := decodeStored(data)
	if err != nil {
		return nil, err
	}
	out := make([]events.Event, len(ss))
	for i, s := range ss {
		if out[i], err = l.resolve(ctx, s); err != nil {
			return nil, err
		}
	}
	return out, nil
}
