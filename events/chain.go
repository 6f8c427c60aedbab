package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The hash chain (docs/events.md, "The hash chain"; docs/audit.md).
//
// Every event carries in Prev the hash of its session's previous event, and
// the first event the session's genesis link, so that a change to any event
// (its payload included, whether stored inline or by reference) breaks the
// link of the event after it, and a dropped, inserted or reordered event
// breaks a link where it was. The hash of an event is the SHA-256 of the
// canonical encoding (canon.go) of the JSON object of its envelope members,
// with Data as its payload (for an event stored by reference: the resolved
// payload, never the stub):
//
//	{"causation":…,"data":…,"id":…,"prev":…,"seq":…,"session":…,"tenant":…,"time":…,"type":…}
//
// causation and prev are left out when empty, as encoding/json leaves them
// out of the stored event; data is null when the event has none; time is
// the RFC 3339 text encoding/json writes for it. Members an event's JSON may
// carry beyond these are not covered.

// ChainVersion names the rule above; it is part of every genesis link and of
// every signed head (sign.go), so a later rule cannot be mistaken for it.
const ChainVersion = "callsheet-chain-1"

// HashLen is the length of a link: lowercase hex of a SHA-256.
const HashLen = 2 * sha256.Size

// Genesis returns the link of a session's first event: the SHA-256 of the
// canonical encoding of {"chain":ChainVersion,"session":session,"tenant":tenant},
// so a chain is bound to its tenant and session from its first event on.
func Genesis(tenant, session string) string {
	b := make([]byte, 0, 64+len(tenant)+len(session))
	b = append(b, `{"chain":`...)
	b = AppendCanonicalString(b, ChainVersion)
	b = append(b, `,"session":`...)
	b = AppendCanonicalString(b, session)
	b = append(b, `,"tenant":`...)
	b = AppendCanonicalString(b, tenant)
	b = append(b, '}')
	return hexSum(sha256.Sum256(b))
}

// hexSum is hex.EncodeToString of sum, in one allocation rather than two.
func hexSum(sum [sha256.Size]byte) string {
	var b [HashLen]byte
	hex.Encode(b[:], sum[:])
	return string(b[:])
}

// Hash returns the event's hash: what the next event of its session carries
// in Prev. For an event made by Encode and unchanged since, it is the hash
// Encode computed from the payload's value (hashPayload); for any other it
// is computed from the event's fields and Data bytes. It fails, wrapping
// ErrCanonical, only when ev.Data is not JSON. It is safe for concurrent
// use.
func Hash(ev Event) (string, error) {
	if ev.encodedAsIs() && ev.enc.hash != "" {
		return ev.enc.hash, nil
	}
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	b, err := AppendEnvelope((*bp)[:0], ev)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledHashBuf {
		*bp = b
	}
	return hexSum(sum), nil
}

// hashPayload returns the hash of ev, whose Data is Payload(payload), from
// payload's value: its canonical encoding written by the generated encoder
// of its type (payloads_json.go) in place of Data's, which Hash would parse
// again. It returns "" for a payload without a generated encoder, which
// Hash then hashes from its bytes. The two are the same rule, held to each
// other by FuzzPayloadJSONAsMarshal. timeText, when not nil, is ev.Time's
// RFC 3339 text as Encode already wrote it.
func hashPayload(ev Event, payload any, timeText []byte) string {
	bp := hashBufs.Get().(*[]byte)
	defer hashBufs.Put(bp)
	b, ok := appendPayloadCanonical(appendEnvelopeHead((*bp)[:0], ev, timeText != nil), payload)
	if !ok {
		return ""
	}
	b = appendEnvelopeTail(b, ev, timeText)
	sum := sha256.Sum256(b)
	if cap(b) <= maxPooledHashBuf {
		*bp = b
	}
	return hexSum(sum)
}

// hashBufs keeps the canonical encodings' buffers between hashes; one larger
// than maxPooledHashBuf (a payload of megabytes) is left to the collector.
var hashBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledHashBuf = 1 << 20

// AppendEnvelope appends the canonical encoding of ev's envelope, the input
// of Hash, to dst. Its errors wrap ErrCanonical.
func AppendEnvelope(dst []byte, ev Event) ([]byte, error) {
	dst = appendEnvelopeHead(dst, ev, false)
	if len(ev.Data) == 0 {
		dst = append(dst, "null"...)
	} else {
		var err error
		if dst, err = AppendCanonical(dst, ev.Data); err != nil {
			return dst, fmt.Errorf("event %s (seq %d) data: %w", ev.ID, ev.Seq, err)
		}
	}
	return appendEnvelopeTail(dst, ev, nil), nil
}

// appendEnvelopeHead appends the canonical envelope's members before
// data's value: causation sorts first, then data. plain says the
// envelope's strings are jsonPlain (Encode checked them), so that the
// canonical encoding writes them as they are.
func appendEnvelopeHead(dst []byte, ev Event, plain bool) []byte {
	dst = append(dst, '{')
	if ev.Causation != "" {
		dst = append(dst, `"causation":`...)
		dst = appendEnvelopeString(dst, ev.Causation, plain)
		dst = append(dst, ',')
	}
	return append(dst, `"data":`...)
}

// appendEnvelopeTail appends the canonical envelope's members after data's
// value, and closes it. timeText, when not nil, is ev.Time as
// time.RFC3339Nano lays it out (what encoding/json writes for it), and
// says the envelope's strings are plain, as for appendEnvelopeHead.
func appendEnvelopeTail(dst []byte, ev Event, timeText []byte) []byte {
	plain := timeText != nil
	dst = append(dst, `,"id":`...)
	dst = appendEnvelopeString(dst, ev.ID, plain)
	if ev.Prev != "" {
		dst = append(dst, `,"prev":`...)
		dst = appendEnvelopeString(dst, ev.Prev, plain)
	}
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendUint(dst, ev.Seq, 10)
	dst = append(dst, `,"session":`...)
	dst = appendEnvelopeString(dst, ev.Session, plain)
	dst = append(dst, `,"tenant":`...)
	dst = appendEnvelopeString(dst, ev.Tenant, plain)
	dst = append(dst, `,"time":"`...)
	if timeText != nil {
		dst = append(dst, timeText...)
	} else {
		dst = ev.Time.AppendFormat(dst, time.RFC3339Nano)
	}
	dst = append(dst, `","type":`...)
	dst = appendEnvelopeString(dst, string(ev.Type), plain)
	return append(dst, '}')
}

// appendEnvelopeString appends s canonically; a plain s (printable ASCII
// without '"' or '\\') is written as it is, which is its canonical
// encoding.
func appendEnvelopeString(dst []byte, s string, plain bool) []byte {
	if !plain {
		return AppendCanonicalString(dst, s)
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// Chained reports whether ev carries a link. Events written before the
// chain (callsheet before issue 11) carry none.
func Chained(ev Event) bool { return ev.Prev != "" }

// Link sets the link of every event of evs, which are one session's, in
// order and from its first event (seq 1), as the session actor would have:
// the genesis link for the first, the hash of the one before for each other.
// It is for building logs outside a node (tests, tools); it fails, wrapping
// ErrCanonical, for data that is not JSON.
func Link(evs []Event) error {
	for i := range evs {
		if i == 0 {
			evs[i].Prev = Genesis(evs[i].Tenant, evs[i].Session)
			continue
		}
		h, err := Hash(evs[i-1])
		if err != nil {
			return err
		}
		evs[i].Prev = h
	}
	return nil
}
