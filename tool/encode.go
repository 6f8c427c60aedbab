package tool

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"github.com/callsheet/callsheet/internal/jsonstr"
)

// marshalValue returns json.Marshal(v) for a parsed arguments value (see
// appendValue), writing it without reflection; any other value, or one
// json.Marshal would refuse, goes to json.Marshal itself.
func marshalValue(v any) ([]byte, error) {
	if b, ok := appendValue(nil, v); ok {
		return b, nil
	}
	return json.Marshal(v)
}

// appendValue appends to dst the bytes json.Marshal writes for v, a value
// from parseArguments once defaults and integer forms are applied:
// map[string]any, []any, string, json.Number, bool, nil, and the
// json.RawMessage of a default. It reports false, having written part of
// it, for any other value, and for a number or raw message json.Marshal
// would refuse. The bytes are json.Marshal's own, to the byte
// (FuzzAppendValueAsMarshal): object keys sorted, strings escaped as
// encoding/json escapes them (HTML characters, U+2028 and U+2029, invalid
// UTF-8 as \ufffd), numbers as written, so that what a typed tool decodes is
// what it decoded before.
func appendValue(dst []byte, v any) ([]byte, bool) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), true
	case bool:
		if x {
			return append(dst, "true"...), true
		}
		return append(dst, "false"...), true
	case string:
		return appendString(dst, x), true
	case json.Number:
		if x == "" {
			x = "0" // as json.Marshal writes the zero Number
		}
		if numberEnd(x, 0) != len(x) {
			return dst, false
		}
		return append(dst, x...), true
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = appendValue(dst, e); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, strings.Compare)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, k)
			dst = append(dst, ':')
			var ok bool
			if dst, ok = appendValue(dst, x[k]); !ok {
				return dst, false
			}
		}
		return append(dst, '}'), true
	case json.RawMessage:
		if x == nil {
			return append(dst, "null"...), true
		}
		// json.Marshal compacts a raw message and escapes it for HTML.
		var c bytes.Buffer
		if json.Compact(&c, x) != nil {
			return dst, false
		}
		var e bytes.Buffer
		json.HTMLEscape(&e, c.Bytes())
		return append(dst, e.Bytes()...), true
	}
	return dst, false
}

// appendString appends s as encoding/json writes a string with HTML
// escaping on (json.Marshal's default): internal/jsonstr, which the events'
// generated encoders share.
func appendString(dst []byte, s string) []byte { return jsonstr.Append(dst, s) }
