package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/jsonread"
	"github.com/callsheet/callsheet/tool"
)

// DefaultMaxBody is the largest request body the API reads (8 MiB,
// config.DefaultBodyBytes) unless the config's limits.body_bytes or
// WithMaxBody says otherwise; a larger one is refused with 413.
const DefaultMaxBody = config.DefaultBodyBytes

// freeFields name the body fields whose values are the caller's own JSON
// (a call's arguments, an answer), decoded by others: within them keys are
// compared exactly, elsewhere as encoding/json matches struct fields.
var freeFields = []string{"arguments", "answer", "input_schema", "json", "details"}

// boundedFields are the free fields whose values a tool or the model reads
// back: they nest at most tool.MaxArgumentDepth levels.
var boundedFields = []string{"arguments", "answer"}

// foldedBounded is boundedFields, folded as jsonread folds keys.
var foldedBounded = func() []string {
	out := make([]string, len(boundedFields))
	for i, f := range boundedFields {
		out[i] = jsonread.FoldName(f)
	}
	return out
}()

// openRequest is the body of POST /v1/sessions.
type openRequest struct {
	Workspace string `json:"workspace"`
	Agent     string `json:"agent"`
}

// turnRequest is the body of POST /v1/sessions/{s}/turns.
type turnRequest struct {
	ID    string            `json:"id"`
	Calls []events.CallSpec `json:"calls"`
}

// decodeBody reads r's body, at most limit bytes, as exactly one JSON value
// into v: unknown fields, wrong types and trailing data are refused. An
// empty body is an error unless allowEmpty. Errors are *Error values
// naming what was wrong: 400 invalid_body, or 413 body_too_large.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, allowEmpty bool) error {
	b, err := readBody(w, r, limit)
	if err != nil {
		return err
	}
	if allowEmpty && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := decodeJSON(b, v); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	return nil
}

// readBody reads r's body, at most limit bytes; errors are *Error values: 400
// invalid_body, 413 body_too_large naming limits.body_bytes, or 408
// request_timeout naming http.body_timeout.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf(
				"request body is larger than %d bytes, the limit limits.body_bytes: send a smaller body (large file contents are better written in parts), or ask the operator to raise limits.body_bytes", tooLarge.Limit))
		}
		if bodyTimedOut(err) {
			return nil, errorf(http.StatusRequestTimeout, CodeRequestTimeout, "the request body did not arrive within http.body_timeout: send it whole, at once (a slow upload holds a connection; ask the operator to raise http.body_timeout for slow links)")
		}
		return nil, errorf(http.StatusBadRequest, CodeInvalidBody, "reading request body: "+err.Error())
	}
	return b, nil
}

// decodeJSON decodes b as exactly one JSON object into v, strictly: a key
// that appears twice in one object is refused too (encoding/json would keep
// the last one silently, and another reader of the same body, a hook or an
// auditor, may keep the first). The error says what was wrong and where, in
// words a client can act on.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("request body holds data after its JSON object, at byte %d: send exactly one JSON object", dec.InputOffset())
	}
	return duplicateKey(b, freeFields...)
}

func describeJSONError(err error) error {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return errors.New("request body is empty: send a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("request body ends in the middle of its JSON: send one complete JSON object")
	case errors.As(err, &syntax):
		return fmt.Errorf("request body is not valid JSON at byte %d: %v", syntax.Offset, syntax)
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Errorf("request body is a JSON %s; send a JSON object", typ.Value)
		}
		return fmt.Errorf("field %q is a JSON %s; want %s", typ.Field, typ.Value, jsonKind(typ.Type.Kind().String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return fmt.Errorf("request body has unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return fmt.Errorf("request body: %v", err)
}

// jsonKind names a Go kind as the JSON type a client sends.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "slice", "array":
		return "an array"
	case "struct", "map":
		return "an object"
	case "bool":
		return "a boolean"
	}
	return "a number"
}

// check reports the first problem of a decoded turn the API refuses before
// the node sees it: no calls, or a call without id or name. Arguments are not
// checked here: a bad one is the model's mistake and becomes a
// blocked/invalid_arguments result.
func (t turnRequest) check() error {
	if len(t.Calls) == 0 {
		return errorf(http.StatusBadRequest, CodeInvalidBody, `"calls" is missing or empty: a turn needs at least one call {"id", "name", "arguments"}`)
	}
	for i, c := range t.Calls {
		switch {
		case c.ID == "":
			return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`calls[%d] has no "id": give every call the model's call id`, i))
		case c.Name == "":
			return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`calls[%d] (id %q) has no "name": give the tool name the model called`, i, c.ID))
		}
		// Arguments sent as a string holding JSON are decoded later, by the
		// tool and by hooks: the same rule holds inside them.
		var inner string
		if len(c.Arguments) > 0 && c.Arguments[0] == '"' && json.Unmarshal(c.Arguments, &inner) == nil && json.Valid([]byte(inner)) {
			if err := duplicateKeyAt([]byte(inner), fmt.Sprintf("calls[%d].arguments (a string holding JSON)", i), true); err != nil {
				return errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
			}
		}
	}
	return nil
}

// duplicateKey reports the first object key of the JSON b that appears twice
// in its object, naming the key and the object's path ("calls[0]",
// "calls[0].arguments", "the body"), or a free field's value (free: a call's
// arguments, an answer: boundedFields) that nests deeper than
// tool.MaxArgumentDepth. Keys
// of objects the API decodes into its own structs are compared as
// encoding/json matches field names, regardless of case ("name" and "Name"
// are the same field); within the values of free fields they are compared
// exactly. b must be valid JSON; an error in it is left to the decoder,
// which reports it better. Memory is linear in b (jsonread).
func duplicateKey(b []byte, free ...string) error {
	return checkKeys(b, "", free, false)
}

// duplicateKeyAt is duplicateKey for a document at path that is a bounded
// field's whole value (its keys compared exactly, its nesting bounded) when
// exact, or compared by field-name folding, with no free fields, when not.
func duplicateKeyAt(b []byte, path string, exact bool) error {
	return checkKeys(b, path, nil, exact)
}

// checkKeys reports what scanKeys does, without scanning a document that
// quickKeysOK clears.
func checkKeys(b []byte, root string, free []string, whole bool) error {
	if quickKeysOK(b) {
		return nil
	}
	return scanKeys(b, root, free, whole)
}

// quickKeysOK reports whether b surely has no key twice in one object, with
// keys compared by ASCII case folding everywhere (stricter than scanKeys
// inside free values), and nests no deeper than tool.MaxArgumentDepth, so
// that scanKeys would find nothing. It reads bytes, allocating nothing;
// false means only "not sure": a key with an escape or a non-ASCII byte,
// two keys alike when folded, more keys open at once than it keeps, deeper
// nesting, or input it does not follow. scanKeys decides those.
func quickKeysOK(b []byte) bool {
	var keys [64][]byte // the keys of the objects open, outermost first
	var start [tool.MaxArgumentDepth]int
	var object [tool.MaxArgumentDepth]bool
	depth, n, wantKey := 0, 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; c {
		case '{', '[':
			if depth == len(start) {
				return false
			}
			start[depth], object[depth] = n, c == '{'
			depth++
			wantKey = c == '{'
		case '}', ']':
			if depth == 0 {
				return false
			}
			depth--
			n, wantKey = start[depth], false
		case ',':
			wantKey = depth > 0 && object[depth-1]
		case '"':
			j, plain := i+1, true
			for ; j < len(b) && b[j] != '"'; j++ {
				if b[j] == '\\' {
					plain = false
					j++
				} else if b[j] >= utf8.RuneSelf {
					plain = false
				}
			}
			if j >= len(b) {
				return false
			}
			if wantKey {
				if !plain || n == len(keys) {
					return false
				}
				k := b[i+1 : j]
				for _, seen := range keys[start[depth-1]:n] {
					if asciiFoldEqual(seen, k) {
						return false
					}
				}
				keys[n] = k
				n++
				wantKey = false
			}
			i = j
		}
	}
	return depth == 0
}

// asciiFoldEqual reports whether the ASCII strings a and b are equal
// regardless of case.
func asciiFoldEqual(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// scanKeys reads b with jsonread, folding the keys of every object outside
// a free field's value unless whole (the document is one free value).
func scanKeys(b []byte, root string, free []string, whole bool) error {
	// Each key is folded once and compared with the free names folded once
	// (this scan runs on every body).
	foldedFree := make([]string, len(free))
	for i, f := range free {
		foldedFree[i] = jsonread.FoldName(f)
	}
	r := jsonread.New(b)
	freeFrom := -1 // the depth of the free value being read, -1 outside one
	bounded := whole
	if whole {
		freeFrom = 1
	}
	nextFree, nextBounded := false, false // the value after this key is a free (bounded) field's
	for {
		tok, err := r.Token()
		var dup *jsonread.DuplicateKeyError
		switch {
		case err == nil:
		case errors.As(err, &dup):
			return duplicateError(root, dup)
		default:
			return nil // the end, or invalid JSON, which the decoder reports
		}
		if key, ok := tok.(string); ok && r.IsKey() {
			if freeFrom < 0 {
				k := jsonread.FoldName(key)
				nextFree = slices.Contains(foldedFree, k)
				nextBounded = nextFree && slices.Contains(foldedBounded, k)
			}
			continue
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if nextFree {
				freeFrom, bounded = r.Depth(), nextBounded
			}
			if freeFrom < 0 && tok == json.Delim('{') {
				r.Fold()
			}
			if bounded && r.Depth()-freeFrom+1 > tool.MaxArgumentDepth {
				return fmt.Errorf("%s nests deeper than %d levels (at %s): a call's arguments (and an answer) may nest at most %d levels of objects and arrays (tool.MaxArgumentDepth); send flatter JSON",
					where(root, r.PathOf(freeFrom)), tool.MaxArgumentDepth, where(root, r.PathOf(r.Depth())), tool.MaxArgumentDepth)
			}
		case json.Delim('}'), json.Delim(']'):
			if r.Depth() < freeFrom {
				freeFrom, bounded = -1, false
			}
		}
		nextFree, nextBounded = false, false
	}
}

// duplicateError is the message for a key twice in one object.
func duplicateError(root string, e *jsonread.DuplicateKeyError) error {
	at := where(root, e.Object)
	if e.Prev == e.Key {
		return fmt.Errorf("%s has the key %q twice: send each key once (JSON readers disagree on which of two equal keys counts)", at, e.Key)
	}
	return fmt.Errorf("%s has the key %q twice, as %q and %q (field names match regardless of case): send each key once", at, e.Prev, e.Prev, e.Key)
}

// where names the value at path in a document at root ("" is the body).
func where(root, path string) string {
	switch {
	case path != "" && root != "":
		if strings.HasPrefix(path, "[") {
			return root + path
		}
		return root + "." + path
	case path != "":
		return path
	case root != "":
		return root
	}
	return "the body"
}
