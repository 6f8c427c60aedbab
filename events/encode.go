package events

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"strconv"
	"time"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// One encoding per event (docs/events.md, "One encoding per event"):
// Encode marshals the payload once, lays the envelope out around it, and
// attaches the result to the event, which Marshal, and so the log, then
// return as they are.
//
// The attached bytes are what json.Marshal returns for the event, nothing
// else: the envelope's strings and time are written here only when
// encoding/json would write them as they are (no character it escapes), and
// otherwise json.Marshal encodes the envelope; FuzzEncodeAsMarshal holds the
// two to that. They stay attached to copies of the event, and are used only
// while the event still holds exactly what they encode: every envelope field
// is compared, and the payload byte for byte (a copy, not an alias, so a
// change made in place shows too). An event changed after Encode is
// therefore encoded afresh by Marshal, never stored with stale bytes.
//
// Encode also hashes the event under Chain2 (chain.go), the SHA-256 of
// those bytes, which Hash returns while the event is as it was encoded. It
// keeps the payload's value too, so that an event of a session chained by
// Chain1 is hashed from it by the generated canonical encoder of its type
// (payloads_json.go) without a second parse; FuzzPayloadJSONAsMarshal holds
// the generated encoders to json.Marshal and that hash to the one computed
// from the bytes.

// maxAttached bounds the payload whose event's encoding Encode keeps: a
// larger one goes by reference in events/natslog (its default threshold,
// 256 KiB), whose stub never holds the envelope whole, so keeping the
// encoding would only hold the payload twice in memory.
const maxAttached = 256 << 10

// encoded is an event's encoding, attached by Encode.
type encoded struct {
	// ev is the event the bytes encode, its Data as it was when encoded.
	ev Event
	// b is the event as Marshal encodes it; b[data:len(b)-1] is its payload.
	b    []byte
	data int
	// hash2 is the event's Chain2 hash: the SHA-256 of b.
	hash2 string
	// payload is the value Data encodes, and timeText ev.Time's text inside
	// b when the envelope was written plainly (else nil): a Chain1 hash is
	// computed from them (hashPayload) when asked for.
	payload  any
	timeText []byte
}

// Encode returns ev with Data set to payload's encoding (as Payload encodes
// it) and the encoding of the whole event attached, which Marshal returns
// for it from then on without encoding it again, as long as none of its
// fields changes, and its Chain2 hash, which Hash returns for it as long. Set Prev
// before, as the session actor does: the hash covers it. ev.Data is
// ignored. An event whose payload is larger than
// 256 KiB, or whose envelope json.Marshal refuses (a time outside RFC 3339's
// years), gets no encoding attached: Marshal encodes it, as it does any
// event not made by Encode. Payload types always marshal, so Encode panics
// for a payload that does not, as Payload does. It is safe for concurrent
// use.
func Encode(ev Event, payload any) Event {
	ev.Data, ev.enc = nil, nil
	bp := payloadBufs.Get().(*[]byte)
	defer payloadBufs.Put(bp)
	// The envelope's head, then the payload after it, in a scratch buffer:
	// the payload is encoded once, and the event's bytes are laid out
	// around it without another copy of it.
	head, timeAt, timeEnd, plain := appendPlainHead((*bp)[:0], ev)
	if !plain {
		head = head[:0]
	}
	b, ok := appendPayloadJSON(head, payload)
	if !ok {
		return encodeMarshalled(ev, payload, Payload(payload))
	}
	if cap(b) <= maxPooledHashBuf {
		*bp = b[:0]
	}
	data := b[len(head):]
	if !plain || len(data) > maxAttached {
		return encodeMarshalled(ev, payload, bytes.Clone(data))
	}
	b = append(b, '}')
	// One allocation holds the payload's bytes (Data: a copy apart from the
	// encoding's, which encodedAsIs compares it with) and the event's.
	buf := make([]byte, len(data)+len(b))
	copy(buf, data)
	enc := buf[len(data):]
	copy(enc, b)
	ev.Data = buf[:len(data):len(data)]
	return attach(ev, enc, len(head), payload, enc[timeAt:timeEnd:timeEnd])
}

// encodeMarshalled is Encode for an event whose payload encodes as data but
// whose bytes Encode does not lay out itself: data too large to attach, an
// envelope with a string to escape, a payload type without a generated
// encoder (data is then what json.Marshal writes).
func encodeMarshalled(ev Event, payload any, data json.RawMessage) Event {
	ev.Data = data
	if len(ev.Data) > maxAttached {
		return ev
	}
	b, timeText, ok := appendPlainEnvelope(make([]byte, 0, envelopeSize(ev)), ev)
	at := len(b) - 1 - len(ev.Data)
	if !ok {
		var err error
		if b, err = json.Marshal(ev); err != nil {
			return ev // Marshal reports the same error when the log stores it
		}
		// The payload is the envelope's last member, written as
		// encoding/json writes a RawMessage: compacted, which leaves
		// encoding/json's own output as it is. Anything else is not
		// attached.
		at = len(b) - 1 - len(ev.Data)
		if at < 0 || !bytes.Equal(b[at:len(b)-1], ev.Data) {
			return ev
		}
	}
	return attach(ev, b[:len(b):len(b)], at, payload, timeText)
}

// attach attaches to ev its encoding b, whose payload starts at data, and
// hashes it.
func attach(ev Event, b []byte, data int, payload any, timeText []byte) Event {
	c := &encoded{ev: ev, b: b, data: data}
	// Hashed now: the session actor calls Encode with Prev already set, and
	// asks for every event's hash (docs/events.md, "The hash chain").
	c.hash2 = hexSum(sha256.Sum256(c.b))
	c.payload, c.timeText = payload, timeText
	ev.enc = c
	return ev
}

// Encoding returns the bytes Marshal returns for ev when Encode attached
// them and ev has not changed since, and false otherwise. The bytes are
// shared by every copy of the event: they must not be modified.
func (ev Event) Encoding() ([]byte, bool) {
	if !ev.encodedAsIs() {
		return nil, false
	}
	return ev.enc.b, true
}

// Kept returns the payload Encode was given for ev, when it is a P or a
// non-nil *P and ev is unchanged since (so its Data is that payload's
// encoding), and false otherwise: a consumer of freshly decided events
// (the node's observer, the session index) reads it without decoding Data
// again. The value shares its slices and maps with whoever made the
// payload: they must not be modified.
func Kept[P any](ev Event) (P, bool) {
	var zero P
	if !ev.encodedAsIs() {
		return zero, false
	}
	switch v := ev.enc.payload.(type) {
	case P:
		return v, true
	case *P:
		if v != nil {
			return *v, true
		}
	}
	return zero, false
}

// encodedAsIs reports whether ev has an encoding attached that still encodes
// it: every field as it was, the payload compared byte for byte against the
// encoding's own copy of it.
func (ev Event) encodedAsIs() bool {
	c := ev.enc
	if c == nil {
		return false
	}
	w := &c.ev
	// Time is compared with ==, not Equal: its location is part of its
	// encoding ("Z" or an offset), so the same instant elsewhere is a change.
	return ev.ID == w.ID && ev.Tenant == w.Tenant && ev.Session == w.Session && ev.Seq == w.Seq &&
		ev.Time == w.Time && ev.Type == w.Type && ev.Causation == w.Causation && ev.Prev == w.Prev &&
		bytes.Equal(ev.Data, c.b[c.data:len(c.b)-1])
}

// envelopeSize is room enough for ev's envelope with its payload, written
// plainly.
func envelopeSize(ev Event) int {
	return len(`{"id":"","tenant":"","session":"","seq":18446744073709551615,"time":"","type":"","causation":"","prev":"","data":}`) +
		len(time.RFC3339Nano) + 6 + len(ev.ID) + len(ev.Tenant) + len(ev.Session) + len(ev.Type) + len(ev.Causation) + len(ev.Prev) + len(ev.Data)
}

// appendPlainEnvelope appends ev as json.Marshal encodes it, when that can
// be done without escaping: every string of its envelope plain (jsonPlain), its
// time within RFC 3339's years and offsets. It reports false when not; dst
// is then to be dropped. The members are Event's, in its order, causation
// and prev left out when empty (omitempty), data last and verbatim. It also
// returns the time's text inside the result, which the hash lays out alike.
func appendPlainEnvelope(dst []byte, ev Event) (_, timeText []byte, _ bool) {
	if len(ev.Data) == 0 {
		return dst, nil, false
	}
	dst, timeAt, timeEnd, ok := appendPlainHead(dst, ev)
	if !ok {
		return dst, nil, false
	}
	timeText = dst[timeAt:timeEnd:timeEnd]
	dst = append(dst, ev.Data...)
	return append(dst, '}'), timeText, true
}

// appendPlainHead appends what appendPlainEnvelope writes before the
// payload, through `"data":`, and the offsets in the result of the time's
// text; ok as appendPlainEnvelope's.
func appendPlainHead(dst []byte, ev Event) (_ []byte, timeAt, timeEnd int, ok bool) {
	if !jsonPlain(ev.ID) || !jsonPlain(ev.Tenant) || !jsonPlain(ev.Session) || !jsonPlain(string(ev.Type)) || !jsonPlain(ev.Causation) || !jsonPlain(ev.Prev) {
		return dst, 0, 0, false
	}
	dst = append(dst, `{"id":"`...)
	dst = append(dst, ev.ID...)
	dst = append(dst, `","tenant":"`...)
	dst = append(dst, ev.Tenant...)
	dst = append(dst, `","session":"`...)
	dst = append(dst, ev.Session...)
	dst = append(dst, `","seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"time":"`...)
	// AppendText is what time.Time.MarshalJSON writes between its quotes,
	// with the same refusals; RFC 3339 text holds no character to escape.
	timeAt = len(dst)
	t, err := ev.Time.AppendText(dst)
	if err != nil {
		return dst, 0, 0, false
	}
	timeEnd = len(t)
	dst = append(t, `","type":"`...)
	dst = append(dst, ev.Type...)
	dst = append(dst, '"')
	if ev.Causation != "" {
		dst = append(dst, `,"causation":"`...)
		dst = append(dst, ev.Causation...)
		dst = append(dst, '"')
	}
	if ev.Prev != "" {
		dst = append(dst, `,"prev":"`...)
		dst = append(dst, ev.Prev...)
		dst = append(dst, '"')
	}
	return append(dst, `,"data":`...), timeAt, timeEnd, true
}

// jsonPlain reports whether encoding/json writes s between quotes as it is:
// printable ASCII without '"', '\\' or the characters it escapes for HTML
// ('<', '>', '&'). Ids, tenants, sessions, types and links always are.
func jsonPlain(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if x := jsonstr.Load64(s, i); !jsonstr.Safe8(x) || jsonstr.HasByte(x, 0x7f) != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if !jsonPlainByte[s[i]] {
			return false
		}
	}
	return true
}

// jsonPlainByte is jsonPlain's set, one entry a byte.
var jsonPlainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()
