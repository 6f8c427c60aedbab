package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

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
	// CodeInsufficientScope answers a request its token's scopes do not
	// cover (403), naming the scope it needs (docs/spec.md §10).
	CodeInsufficientScope = "insufficient_scope"
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
	// RetryAfter is the answer's Retry-After; a 503 without one says 1 s.
	RetryAfter time.Duration
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

// statuses maps each code of the node's errors (node.Code) to the API's
// answer: its HTTP status and error code, and whether it is a fault of ours
// the caller cannot fix (logged, and its message not shown). It is the one
// place the API decides what a failure is; the message is the node's.
var statuses = map[node.Code]struct {
	status   int
	code     string
	internal bool
}{
	node.CodeInvalid:       {http.StatusBadRequest, CodeInvalidRequest, false},
	node.CodeNotFound:      {http.StatusNotFound, CodeNotFound, false},
	node.CodeHookFailed:    {http.StatusUnprocessableEntity, CodeHookFailed, false},
	node.CodeTurnIDReused:  {http.StatusConflict, CodeTurnIDReused, false},
	node.CodeConflict:      {http.StatusConflict, CodeConflict, false},
	node.CodeSessionClosed: {http.StatusConflict, CodeSessionClosed, false},
	node.CodeTooLarge:      {http.StatusRequestEntityTooLarge, CodeTooLarge, false},
	node.CodeLimited:       {http.StatusTooManyRequests, CodeLimitExceeded, false},
	node.CodeBusy:          {http.StatusTooManyRequests, CodeBusy, false},
	node.CodeUnavailable:   {http.StatusServiceUnavailable, CodeUnavailable, true},
	node.CodeNotOwner:      {http.StatusServiceUnavailable, CodeUnavailable, false},
	node.CodeClosed:        {http.StatusServiceUnavailable, CodeUnavailable, false},
	// The client went away or the server is shutting down: the work it
	// asked for goes on, and a later GET answers it.
	node.CodeEnded:    {http.StatusServiceUnavailable, CodeUnavailable, false},
	node.CodeInternal: {http.StatusInternalServerError, CodeInternal, true},
}

// toError maps an error from the node or the request to the API's answer:
// the node's code through statuses, and the node's message.
// internal reports whether it is a fault of ours the caller cannot fix.
func toError(err error) (e *Error, internal bool) {
	if errors.As(err, &e) {
		return e, false
	}
	st, ok := statuses[node.ErrorCode(err)]
	if !ok {
		st = statuses[node.CodeInternal]
	}
	if node.ErrorCode(err) == node.CodeUnavailable {
		// The log's failure (NATS's words) is logged, not shown.
		return errorf(st.status, st.code, unavailableMessage), st.internal
	}
	return errorf(st.status, st.code, node.ErrorMessage(err)), st.internal
}

// logFault logs a fault of ours that the caller's answer e does not
// detail (toError's internal): a session's log out of reach for a moment
// (503, the caller told to retry; most often a stream between leaders) as
// a warning, anything else as an error.
func (s *Server) logFault(r *http.Request, tenant string, e *Error, err error) {
	attrs := []any{"method", r.Method, "route", r.Pattern, "path", r.URL.Path, "tenant", tenant, "err", err}
	if e.Code == CodeUnavailable {
		s.log.Warn("log unavailable; the caller was told to retry", attrs...)
		return
	}
	s.log.Error("internal error", attrs...)
}

// unavailableMessage answers a call whose session's log failed under it
// (most often its stream between leaders after a server was lost).
const unavailableMessage = "the session's log cannot be reached just now (a node of the fleet was lost, or the session is moving): retry with the same turn id"

// writeError writes e as the API's error body.
func writeError(w http.ResponseWriter, e *Error) {
	if e.RetryAfter > 0 || e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int((e.RetryAfter+time.Second-1)/time.Second))))
	}
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
