package node

import (
	"context"
	"errors"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events/natslog"
)

// Code says what kind of failure an Error is: stable for callers, which act
// on the code, never on the message (the HTTP API maps each to a status in
// one table: api/errors.go).
type Code string

// The codes of the errors node returns.
const (
	// CodeInvalid: the request is malformed; the message says what and
	// where.
	CodeInvalid Code = "invalid"
	// CodeNotFound: the session, turn, output or tool does not exist for
	// the tenant.
	CodeNotFound Code = "not_found"
	// CodeConflict: the request conflicts with the session's state (an
	// answer to a call that is not asking, a rewind while a turn runs, a
	// tool name taken).
	CodeConflict Code = "conflict"
	// CodeTurnIDReused: a turn id already recorded was posted with other
	// calls (a turn id is an idempotency key: docs/spec.md §8).
	CodeTurnIDReused Code = "turn_id_reused"
	// CodeSessionClosed: the session is closed; later turns are refused.
	CodeSessionClosed Code = "session_closed"
	// CodeHookFailed: a before-tool hook refused the turn; nothing was
	// recorded.
	CodeHookFailed Code = "hook_failed"
	// CodeTooLarge: the request is over a size limit; nothing of it was
	// recorded.
	CodeTooLarge Code = "too_large"
	// CodeLimited: the tenant has reached one of its limits; nothing of
	// the request was recorded.
	CodeLimited Code = "limited"
	// CodeBusy: the session has too many turns waiting.
	CodeBusy Code = "busy"
	// CodeUnavailable: the log could not be reached for a moment (a
	// session's actor could not load or append, or the log's servers did not
	// answer: natslog.Unavailable): retry.
	CodeUnavailable Code = "unavailable"
	// CodeNotOwner: another node owns the session (a NotOwnerError).
	CodeNotOwner Code = "not_owner"
	// CodeClosed: the node is shutting down.
	CodeClosed Code = "closed"
	// CodeEnded: the caller's context ended before the answer was ready;
	// the work it asked for goes on.
	CodeEnded Code = "ended"
	// CodeInternal: a fault of the node's own, which the caller cannot
	// fix; the node's log has the details. A SessionFailedError (the
	// session's actor panicked) is internal too, and its message is shown:
	// it names the session and says to read or retry the turn.
	CodeInternal Code = "internal"
)

// Codes lists every code, in the order above.
func Codes() []Code {
	return []Code{CodeInvalid, CodeNotFound, CodeConflict, CodeTurnIDReused, CodeSessionClosed, CodeHookFailed, CodeTooLarge,
		CodeLimited, CodeBusy, CodeUnavailable, CodeNotOwner, CodeClosed, CodeEnded, CodeInternal}
}

// Error is the one error type node returns (the wtf pattern: a code and a
// message): every error out of a Node method is an *Error, its Code saying
// what kind of failure it is and its Message what went wrong, with the
// value and what to do. The error it stands for, if any, is its cause:
// errors.Is and errors.As reach it (core.ErrTurnMismatch, *NotOwnerError).
// errors.Is(err, ErrInvalid) holds for every *Error of code CodeInvalid,
// and so on for each sentinel.
type Error struct {
	Code    Code
	Message string
	err     error
	// sentinel marks the package's Err values, which errors.Is matches by
	// code.
	sentinel bool
}

// Error returns the message.
func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.err }

// Is reports whether target is the sentinel of e's code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.sentinel && t.Code == e.Code
}

func sentinel(code Code, msg string) *Error { return &Error{Code: code, Message: msg, sentinel: true} }

// Sentinels of each code, for errors.Is (every *Error of that code matches
// its sentinel); node wraps them with what went wrong.
var (
	ErrInvalid    = sentinel(CodeInvalid, "node: invalid request")
	ErrNotFound   = sentinel(CodeNotFound, "node: not found")
	ErrConflict   = sentinel(CodeConflict, "node: conflict")
	ErrHookFailed = sentinel(CodeHookFailed, "node: before-tool hook failed")
	// ErrTooLarge: the request is over a size limit (limits.calls_per_turn).
	ErrTooLarge = sentinel(CodeTooLarge, "node: request too large")
	// ErrLimited: the tenant has reached one of its limits
	// (limits.sessions_per_tenant, limits.calls_in_flight_per_tenant).
	ErrLimited = sentinel(CodeLimited, "node: tenant limit reached")
	ErrBusy    = sentinel(CodeBusy, "node: busy")
	ErrClosed  = sentinel(CodeClosed, "node: closed")
	// ErrNotOwner matches every error of CodeNotOwner (a NotOwnerError,
	// coded).
	ErrNotOwner = sentinel(CodeNotOwner, "node: another node owns the session")
)

// ErrorCode returns the code of err (as coded makes it: an *Error's own,
// CodeEnded for a context that ended, CodeInternal for an error of no known
// kind); "" for nil.
func ErrorCode(err error) Code {
	if err == nil {
		return ""
	}
	return coded(err).(*Error).Code
}

// SessionFailedError says that a session's actor stopped on a fault of its
// own (a panic while it handled a request): what the request asked for may
// or may not be recorded, and the session's next request rebuilds the actor
// from its log. It has CodeInternal.
type SessionFailedError = actors.FailedError

// ErrorMessage returns what to tell a caller of err: its message, except
// for an internal error, whose details are for the node's log only (a
// SessionFailedError's message holds none, and is told).
func ErrorMessage(err error) string {
	if err == nil {
		return ""
	}
	e := coded(err).(*Error)
	var failed *SessionFailedError
	if e.Code == CodeInternal && !errors.As(e, &failed) {
		return "internal error; the node's log has the details"
	}
	return e.Message
}

// coded makes err, from anywhere below, the *Error a Node method returns:
// the kinds its collaborators report map to codes, in this order (an error
// that is several is the first it is), and everything else is internal.
func coded(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e == err && !e.sentinel {
		return err
	}
	c := func(code Code, msg string) error { return &Error{Code: code, Message: msg, err: err} }
	switch {
	case errors.Is(err, ErrInvalid):
		return c(CodeInvalid, err.Error())
	case errors.Is(err, ErrNotFound):
		return c(CodeNotFound, err.Error())
	case errors.Is(err, ErrHookFailed):
		return c(CodeHookFailed, err.Error())
	case errors.Is(err, core.ErrTurnMismatch):
		return c(CodeTurnIDReused, err.Error())
	case errors.Is(err, ErrConflict):
		return c(CodeConflict, err.Error())
	case errors.Is(err, ErrTooLarge):
		return c(CodeTooLarge, err.Error())
	case errors.Is(err, ErrLimited):
		return c(CodeLimited, err.Error())
	case errors.Is(err, ErrBusy), errors.Is(err, actors.ErrBusy):
		return c(CodeBusy, err.Error()+": wait for the session's running turns, then retry")
	case errors.Is(err, core.ErrSessionClosed):
		return c(CodeSessionClosed, "the session is closed: open a new session")
	case errors.Is(err, actors.ErrSessionUnavailable), natslog.Unavailable(err):
		return c(CodeUnavailable, err.Error())
	case errors.Is(err, ErrClosed):
		return c(CodeClosed, "the node is shutting down; retry on another node or later")
	case errors.Is(err, ErrNotOwner), errors.Is(err, actors.ErrNotOwner):
		return c(CodeNotOwner, err.Error())
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away or the server is shutting down: the work
		// it asked for goes on, and a later call answers it.
		return c(CodeEnded, "the request ended before its answer was ready ("+err.Error()+"); the work goes on: ask again later")
	case errors.As(err, new(*SessionFailedError)):
		var failed *SessionFailedError
		errors.As(err, &failed)
		return c(CodeInternal, failed.Error())
	}
	return c(CodeInternal, err.Error())
}

// code rewrites *err as coded does; Node methods defer it.
func code(err *error) { *err = coded(*err) }
