package events

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"strconv"
	"sync"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// The pieces the generated payload encoders (payloads_json.go, written by
// events/internal/gen; docs/events.md, "One encoding per event") are made
// of: each writes a value as encoding/json writes it (the append*JSON
// functions) or as the canonical encoding of canon.go writes the value
// encoding/json wrote (the append*Canonical ones), so a payload's bytes are
// json.Marshal's and its hash is that of its canonical encoding, without
// reflection and without parsing the bytes again. The functions that can
// fail (a RawMessage that is not JSON, a float that is NaN or infinite)
// report false where json.Marshal fails; the caller then leaves the value to
// json.Marshal, which reports the error itself.

// appendJSONString appends s as encoding/json writes a string (with its
// default HTML escaping): internal/jsonstr, which the tool package's
// argument encoder shares.
func appendJSONString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }

// canonPlain8 reports whether every byte of x is one the canonical
// encoding writes as it is in a string (canon.go's plain).
func canonPlain8(x uint64) bool {
	return x&jsonstr.MSB|jsonstr.HasLess(x, 0x20)|jsonstr.HasByte(x, '"')|jsonstr.HasByte(x, '\\') == 0
}

// appendJSONInt and appendJSONUint write an integer; encoding/json and the
// canonical encoding write every int64 and uint64 alike.
func appendJSONInt(dst []byte, v int64) []byte   { return strconv.AppendInt(dst, v, 10) }
func appendJSONUint(dst []byte, v uint64) []byte { return strconv.AppendUint(dst, v, 10) }

// appendJSONBool writes true or false.
func appendJSONBool(dst []byte, v bool) []byte {
	if v {
		return append(dst, "true"...)
	}
	return append(dst, "false"...)
}

// appendJSONBytes writes a []byte as encoding/json does: null for nil,
// else its standard, padded base64 in quotes (which the canonical encoding
// writes alike: base64 has no character it escapes).
func appendJSONBytes(dst, b []byte) []byte {
	if b == nil {
		return append(dst, "null"...)
	}
	dst = append(dst, '"')
	dst = base64.StdEncoding.AppendEncode(dst, b)
	return append(dst, '"')
}

// appendJSONFloat64 writes f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form below 1e-6 and
// from 1e21 on (e-7, not e-07); false for NaN and the infinities, which
// encoding/json refuses.
func appendJSONFloat64(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	fmt := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		fmt = 'e'
	}
	dst = strconv.AppendFloat(dst, f, fmt, -1, 64)
	if fmt == 'e' {
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendCanonicalFloat64 writes f as the canonical encoding writes the
// number encoding/json writes for it: the same shortest digits, laid out by
// appendDecimal; false where appendJSONFloat64 is.
func appendCanonicalFloat64(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // [-]d[.ddd]e±dd
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	e := bytes.IndexByte(b, 'e')
	mant, exp := b[:e], b[e+1:]
	var frac []byte
	if len(mant) > 2 {
		frac = mant[2:]
	}
	return appendDecimal(dst, neg, mant[:1], frac, exp[0] == '-', exp[1:]), true
}

// appendJSONRaw writes a json.RawMessage as encoding/json does: null for
// nil, else compacted with its HTML escaping (json.Compact, then '<', '>',
// '&', U+2028 and U+2029 escaped: inside a compact text they can only be in
// strings); false for text that is not one JSON value, which encoding/json
// refuses.
func appendJSONRaw(dst []byte, m json.RawMessage) ([]byte, bool) {
	if m == nil {
		return append(dst, "null"...), true
	}
	buf := compactBufs.Get().(*bytes.Buffer)
	defer compactBufs.Put(buf)
	buf.Reset()
	if err := json.Compact(buf, m); err != nil {
		return dst, false
	}
	dst = appendHTMLEscaped(dst, buf.Bytes())
	if buf.Cap() > maxPooledHashBuf {
		*buf = bytes.Buffer{}
	}
	return dst, true
}

// compactBufs keeps appendJSONRaw's scratch buffers.
var compactBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// appendHTMLEscaped appends src with encoding/json's HTML escapes.
func appendHTMLEscaped(dst, src []byte) []byte {
	const hex = "0123456789abcdef"
	start := 0
	for i, c := range src {
		if c == '<' || c == '>' || c == '&' {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			start = i + 1
		}
		if c == 0xE2 && i+2 < len(src) && src[i+1] == 0x80 && src[i+2]&^1 == 0xA8 {
			dst = append(dst, src[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[src[i+2]&0xF])
			start = i + 3
		}
	}
	return append(dst, src[start:]...)
}

// appendCanonicalRaw writes a json.RawMessage's canonical encoding: null for
// nil (as encoding/json writes it), else AppendCanonical's; false for text
// that is not JSON.
func appendCanonicalRaw(dst []byte, m json.RawMessage) ([]byte, bool) {
	if m == nil {
		return append(dst, "null"...), true
	}
	out, err := AppendCanonical(dst, m)
	return out, err == nil
}

// closeObject finishes an object whose members were written from start
// on, each after a ',': the first ',' becomes the '{', or the object is
// empty.
func closeObject(dst []byte, start int) []byte {
	if len(dst) == start {
		return append(dst, '{', '}')
	}
	dst[start] = '{'
	return append(dst, '}')
}
