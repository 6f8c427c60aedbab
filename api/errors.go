package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/node"
)

// Error codes of the API's error answers.
const (
	CodeInvalidBody  = "invalid_body"
	CodeBodyTooLarge = "body_too_large"
	// CodeRequestTimeout answers a body that did not arrive within
	// http.body_timeout (408).
	CodeRequestTimeout = "request_timeout"
	CodeTooLarge       = "too_large"
	CodeLimitExceeded  = "limit_exceeded"
	CodeInvalidRequest = "invalid_request"
	CodeUnauthorized   = "unauthorized"
	// CodeForbidden answers a request the node refuses before anything
	// else (403): a Host it does not answer to, a peer beyond loopback on a
	// node without tenants, a browser page of another origin (api/guard.go).
	CodeForbidden   = "forbidden"
	CodeNotFound    = "not_found"
	CodeMethod      = "method_not_allowed"
	CodeUnavailable = "unavailable"
	CodeBusy        = "busy"
	// CodeTooManyStreams answers a live event stream beyond the tenant's
	// event_streams.max_per_tenant (429).
	CodeTooManyStreams = "too_many_streams"
	CodeSessionClosed  = "session_closed"
	CodeNotImplemented = "not_implemented"
	CodeConflict       = "conflict"
	// CodeTurnIDReused answers a turn id posted again with other calls
	// (409): a turn id is an idempotency key (docs/spec.md §8).
	CodeTurnIDReused = "turn_id_reused"
	CodeHookFailed   = "hook_failed"
	CodeInternal     = "internal"
)

// Error is an answer the API gives instead of a result: an HTTP status and
// the {"error": {"code", "message"}} body.
type Error struct {
	Status  int
	Code    string
	Message string
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

func errorf(status int, code, msg string) *Error {
	return &Error{Status: status, Code: code, Message: msg}
}

// errorBody is the JSON shape of every error answer.
type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// toError maps an error from the node or the request to the API's answer.
// internal reports whether it is a fault of ours the caller cannot fix.
func toError(err error) (e *Error, internal bool) {
	if errors.As(err, &e) {
		return e, false
	}
	switch {
	case errors.Is(err, node.ErrInvalid):
		return errorf(http.StatusBadRequest, CodeInvalidRequest, err.Error()), false
	case errors.Is(err, node.ErrNotFound):
		return errorf(http.StatusNotFound, CodeNotFound, err.Error()), false
	case errors.Is(err, node.ErrHookFailed):
		return errorf(http.StatusUnprocessableEntity, CodeHookFailed, err.Error()), false
	case errors.Is(err, core.ErrTurnMismatch):
		return errorf(http.StatusConflict, CodeTurnIDReused, err.Error()), false
	case errors.Is(err, node.ErrConflict):
		return errorf(http.StatusConflict, CodeConflict, err.Error()), false
	case errors.Is(err, node.ErrTooLarge):
		return errorf(http.StatusRequestEntityTooLarge, CodeTooLarge, err.Error()), false
	case errors.Is(err, node.ErrLimited):
		return errorf(http.StatusTooManyRequests, CodeLimitExceeded, err.Error()), false
	case errors.Is(err, node.ErrBusy), errors.Is(err, actors.ErrBusy):
		return errorf(http.StatusTooManyRequests, CodeBusy, err.Error()+": wait for the session's running turns, then retry"), false
	case errors.Is(err, core.ErrSessionClosed):
		return errorf(http.StatusConflict, CodeSessionClosed, "the session is closed: open a new session"), false
	case errors.Is(err, actors.ErrSessionUnavailable):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, err.Error()), true
	case errors.Is(err, node.ErrClosed):
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the node is shutting down; retry on another node or later"), false
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or the server is shutting down: the work it
		// asked for goes on, and a later GET answers it.
		return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the request ended before its answer was ready ("+err.Error()+"); the work goes on: ask again later"), false
	}
	return errorf(http.StatusInternalServerError, CodeInternal, "internal error; the node's log has the details"), true
}

// writeError writes e as the API's error body.
func writeError(w http.ResponseWriter, e *Error) {
	var b errorBody
	b.Error.Code, b.Error.Message = e.Code, e.Message
	writeJSON(w, e.Status, b)
}

// writeJSON writes v as a JSON answer with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Every answer type marshals; this is a programming error.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"answer does not encode"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
