package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/callsheet/callsheet/events"
)

// DefaultMaxBody is the largest request body the API reads (8 MiB); a
// larger one is refused with 413.
const DefaultMaxBody = 8 << 20

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
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, fmt.Sprintf("request body is larger than %d bytes", tooLarge.Limit))
		}
		return errorf(http.StatusBadRequest, CodeInvalidBody, "reading request body: "+err.Error())
	}
	if allowEmpty && len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := decodeJSON(b, v); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	return nil
}

// decodeJSON decodes b as exactly one JSON object into v, strictly. The
// error says what was wrong and where, in words a client can act on.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return describeJSONError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("request body holds data after its JSON object, at byte %d: send exactly one JSON object", dec.InputOffset())
	}
	return nil
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
	}
	return nil
}
