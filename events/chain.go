package events

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	fastjson "github.com/segmentio/encoding/json"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// The hash chain (docs/events.md, "The hash chain"; docs/audit.md).
//
// Every event carries in Prev the hash of its session's previous event, and
// the first event the session's genesis link, so that a change to any event
// (its payload included, whether stored inline or by reference) breaks the
// link of the event after it, and a dropped, inserted or reordered event
// breaks a link where it was. Two rules define an event's hash; a session is
// chained by one of them from its first event to its last, and its genesis
// link names which (ChainOf):
//
//   - Chain2, the rule of every session opened since: the SHA-256 of the
//     event's JSON as stored (Marshal, with a payload stored by reference
//     inline), which is its line in an export. An outsider needs SHA-256 and
//     the export's bytes, nothing else: no parser, no canonical form.
//   - Chain1, the rule of sessions opened before: the SHA-256 of the
//     canonical encoding (canon.go) of the JSON object of the envelope's
//     members, with Data as its payload,
//
//	{"causation":…,"data":…,"id":…,"prev":…,"seq":…,"session":…,"tenant":…,"time":…,"type":…}
//
//     causation and prev left out when empty, data null when the event has
//     none, time the RFC 3339 text encoding/json writes for it. Its
//     canonical encoding is RFC 8785 extended to text that is not I-JSON,
//     which standard JCS libraries do not reproduce for every event.

// Chain names a rule of the hash chain. It is part of every genesis link and
// of every signed head (sign.go), so a link or a signature is never read
// under another rule than the one it was made by.
type Chain string

// The rules of the hash chain.
const (
	// Chain1 hashes the canonical encoding of the envelope's members.
	Chain1 Chain = "callsheet-chain-1"
	// Chain2 hashes the event's stored JSON, byte for byte.
	Chain2 Chain = "callsheet-chain-2"
)

// ChainVersion is the rule a session opened now is chained by.
const ChainVersion = Chain2

// ErrUnknownChain is returned for a Chain that is neither Chain1 nor Chain2.
var ErrUnknownChain = errors.New("events: unknown hash chain rule")

// HashLen is the length of a link: lowercase hex of a SHA-256.
const HashLen = 2 * sha256.Size

// ChainOf returns the rule a session's events are linked by, from the first
// event of its log: Chain2 when that event carries the session's Chain2
// genesis link, else Chain1 (the rule of sessions opened before Chain2, of
// logs whose first events carry no link, and of a first event whose link was
// changed, which verifying then reports).
func ChainOf(tenant, session string, first Event) Chain {
	if first.Seq == 1 && first.Prev == Chain2.Genesis(tenant, session) {
		return Chain2
	}
	return Chain1
}

// Genesis returns the link of a session's first event under ChainVersion;
// see Chain.Genesis.
func Genesis(tenant, session string) string { return ChainVersion.Genesis(tenant, session) }

// Genesis returns the link of a session's first event: the SHA-256 of the
// canonical encoding of {"chain":c,"session":session,"tenant":tenant}, so a
// chain is bound to its rule, tenant and session from its first event on.
func (c Chain) Genesis(tenant, session string) string {
	b := make([]byte, 0, 64+len(tenant)+len(session))
	b = append(b, `{"chain":`...)
	b = AppendCanonicalString(b, string(c))
	b = append(b, `,"session":`...)
	b = AppendCanonicalString(b, session)
	b = append(b, `,"tenant":`...)
	b = AppendCanonicalString(b, tenant)
	b = append(b, '}')
	return hexSum(sha256.Sum256(b))
}

// Hash returns the event's hash under ChainVersion; see Chain.Hash.
func Hash(ev Event) (string, error) { return ChainVersion.Hash(ev) }

// Hash returns the event's hash under rule c: what the next event of its
// session carries in Prev. For an event made by Encode and unchanged since,
// it is computed from what Encode kept (the bytes for Chain2, the payload's
// value for Chain1), else from the event's fields and Data bytes. It fails,
// wrapping ErrCanonical, when ev.Data is not JSON (or, for Chain2, when
// encoding/json cannot encode the event, as for a time outside RFC 3339's
// years), and with ErrUnknownChain for another rule. It is safe for
// concurrent use.
func (c Chain) Hash(ev Event) (string, error) {
	switch c {
	case Chain2:
		return hash2(ev)
	case Chain1:
		return hash1(ev)
	}
	return "", fmt.Errorf("%w %q", ErrUnknownChain, string(c))
}

// hash2 is Chain2's hash: SHA-256 of the stored JSON, Marshal's bytes. An
// event read back from them (every event callsheet stores) holds data that
// encoding/json would write as it is (compactEscaped): its bytes are laid
// out around it as Encode lays them out, without encoding/json's
// reflection and second compaction. Anything else takes json.Marshal.
func hash2(ev Event) (string, error) {
	if ev.encodedAsIs() {
		return ev.enc.hash2, nil
	}
	if compactEscaped(ev.Data) && fastjson.Valid(ev.Data) {
		bp := hashBufs.Get().(*[]byte)
		defer hashBufs.Put(bp)
		if b, _, ok := appendPlainEnvelope((*bp)[:0], ev); ok {
			sum := sha256.Sum256(b)
			if cap(b) <= maxPooledHashBuf {
				*bp = b
			}
			return hexSum(sum), nil
		}
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return "", fmt.Errorf("%w: event %s (seq %d): %w", ErrCanonical, ev.ID, ev.Seq, err)
	}
	return hexSum(sha256.Sum256(b)), nil
}

// compactEscaped reports whether encoding/json writes the JSON text b, as
// a json.RawMessage, as it is: no whitespace outside strings, and none of
// the characters it escapes ('<', '>', '&', U+2028, U+2029) anywhere. It
// does not check that b is JSON.
func compactEscaped(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		// Inside a string, runs of bytes encoding/json writes as they are
		// (no quote, backslash, HTML character, control or non-ASCII byte)
		// are skipped eight at a time.
		for in && i+8 <= len(b) && jsonstr.Safe8(binary.LittleEndian.Uint64(b[i:])) {
			i += 8
		}
		if i >= len(b) {
			break
		}
		switch c := b[i]; c {
		case '"':
			in = !in
		case '\\':
			if in {
				i++ // the escaped byte; a \u escape's digits are plain
			}
		case ' ', '\t', '\n', '\r':
			if !in {
				return false
			}
		case '<', '>', '&':
			return false
		case 0xE2:
			if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
				return false
			}
		}
	}
	return true
}

// hash1 is Chain1's hash: SHA-256 of the canonical envelope.
func hash1(ev Event) (string, error) {
	if ev.encodedAsIs() && ev.enc.payload != nil {
		if h := hashPayload(ev, ev.enc.payload, ev.enc.timeText); h != "" {
			return h, nil
		}
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

// hexSum is hex.EncodeToString of sum, in one allocation rather than two.
func hexSum(sum [sha256.Size]byte) string {
	var b [HashLen]byte
	hex.Encode(b[:], sum[:])
	return string(b[:])
}

// hashPayload returns the Chain1 hash of ev, whose Data is
// Payload(payload), from payload's value: its canonical encoding written by
// the generated encoder of its type (payloads_json.go) in place of Data's,
// which hash1 would parse again. It returns "" for a payload without a
// generated encoder, which hash1 then hashes from its bytes. The two are
// the same rule, held to each other by FuzzPayloadJSONAsMarshal. timeText,
// when not nil, is ev.Time's RFC 3339 text as Encode wrote it.
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
// of its Chain1 hash, to dst. Its errors wrap ErrCanonical.
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

// Link links evs under ChainVersion; see Chain.Link.
func Link(evs []Event) error { return ChainVersion.Link(evs) }

// Link sets the link of every event of evs, which are one session's, in
// order and from its first event (seq 1), as the session actor would have
// under rule c: the genesis link for the first, the hash of the one before
// for each other. It is for building logs outside a node (tests, tools); it
// fails, wrapping ErrCanonical, for data that is not JSON.
func (c Chain) Link(evs []Event) error {
	for i := range evs {
		if i == 0 {
			evs[i].Prev = c.Genesis(evs[i].Tenant, evs[i].Session)
			continue
		}
		h, err := c.Hash(evs[i-1])
		if err != nil {
			return err
		}
		evs[i].Prev = h
	}
	return nil
}
