package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
)

// DefaultMaxBody is the largest request body the API reads (8 MiB,
// config.DefaultBodyBytes) unless the config's limits.body_bytes or
// WithMaxBody says otherwise; a larger one is refused with 413.
const DefaultMaxBody = config.DefaultBodyBytes

// freeFields name the body fields whose values are the caller's own JSON
// (a call's arguments, an answer), decoded by others: within them keys are
// compared exactly, elsewhere as encoding/json matches struct fields.
var freeFields = []string{"arguments", "answer", "input_schema", "json", "details"}

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
// invalid_body, or 413 body_too_large naming limits.body_bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf(
				"request body is larger than %d bytes, the limit limits.body_bytes: send a smaller body (large file contents are better written in parts), or ask the operator to raise limits.body_bytes", tooLarge.Limit))
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
// "calls[0].arguments", "the body"). Keys of objects the API decodes into
// its own structs are compared as encoding/json matches field names,
// regardless of case ("name" and "Name" are the same field); within the
// values of free fields they are compared exactly. b must be valid JSON; an
// error in it is left to the decoder, which reports it better.
func duplicateKey(b []byte, free ...string) error {
	return (&dupScanner{dec: json.NewDecoder(bytes.NewReader(b)), free: free}).run(false)
}

// duplicateKeyAt is duplicateKey for a document at path, compared exactly
// (or by field-name folding when exact is false), with no free fields.
func duplicateKeyAt(b []byte, path string, exact bool) error {
	return (&dupScanner{dec: json.NewDecoder(bytes.NewReader(b)), root: path}).run(exact)
}

// errNotJSON stops a scan of a document that is not valid JSON.
var errNotJSON = errors.New("not JSON")

func (d *dupScanner) run(exact bool) error {
	if err := d.scan("", exact); err != nil && err != errNotJSON {
		return err
	}
	return nil
}

type dupScanner struct {
	dec  *json.Decoder
	free []string
	root string // the path of the document itself; "" is "the body"
}

// where names the object at path for a message.
func (d *dupScanner) where(path string) string {
	switch {
	case path != "" && d.root != "":
		return d.root + "." + path
	case path != "":
		return path
	case d.root != "":
		return d.root
	}
	return "the body"
}

// scan reads one value; exact says keys in it compare byte for byte.
func (d *dupScanner) scan(path string, exact bool) error {
	tok, err := d.dec.Token()
	if err != nil {
		return errNotJSON // the decoder says what is wrong, better
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]string{} // compared form → the key as sent
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return errNotJSON
			}
			key, _ := kt.(string)
			cmp := key
			if !exact {
				cmp = foldName(key)
			}
			if prev, dup := seen[cmp]; dup {
				if prev == key {
					return fmt.Errorf("%s has the key %q twice: send each key once (JSON readers disagree on which of two equal keys counts)", d.where(path), key)
				}
				return fmt.Errorf("%s has the key %q twice, as %q and %q (field names match regardless of case): send each key once", d.where(path), prev, prev, key)
			}
			seen[cmp] = key
			child := key
			if path != "" {
				child = path + "." + key
			}
			childExact := exact
			for _, f := range d.free {
				childExact = childExact || foldName(key) == foldName(f)
			}
			if err := d.scan(child, childExact); err != nil {
				return err
			}
		}
		if _, err := d.dec.Token(); err != nil { // '}'
			return errNotJSON
		}
	case json.Delim('['):
		for i := 0; d.dec.More(); i++ {
			if err := d.scan(fmt.Sprintf("%s[%d]", path, i), exact); err != nil {
				return err
			}
		}
		if _, err := d.dec.Token(); err != nil { // ']'
			return errNotJSON
		}
	}
	return nil
}

// foldName is the form encoding/json compares struct field names in (its
// own foldName): two names are the same field when their folded forms are
// equal. ASCII letters are upper-cased, other runes mapped through
// unicode.ToUpper(unicode.ToLower(r)), so "ſ" folds like "s" and the Kelvin
// sign like "k".
func foldName(s string) string {
	b := make([]rune, 0, len(s))
	for _, r := range s {
		switch {
		case 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		case r >= utf8.RuneSelf:
			r = unicode.ToUpper(unicode.ToLower(r))
		}
		b = append(b, r)
	}
	return string(b)
}
