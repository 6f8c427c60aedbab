package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/node"
)

// TestErrorCodes: what the node's collaborators report maps to one code
// each, in a fixed order, with the node's message; an error of no known
// kind is internal and its details stay in the log.
func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code node.Code
		msg  string // a part of the message; "" for the error's own
	}{
		{fmt.Errorf("%w: bad", node.ErrInvalid), node.CodeInvalid, ""},
		{fmt.Errorf("%w: session x", node.ErrNotFound), node.CodeNotFound, ""},
		{fmt.Errorf("%w: hook h refused", node.ErrHookFailed), node.CodeHookFailed, ""},
		{fmt.Errorf("%w: %w", node.ErrConflict, core.ErrTurnMismatch), node.CodeTurnIDReused, ""},
		{fmt.Errorf("%w: answer", node.ErrConflict), node.CodeConflict, ""},
		{node.ErrClosed, node.CodeClosed, "shutting down"},
		{fmt.Errorf("%w: 16 turns wait", actors.ErrBusy), node.CodeBusy, "then retry"},
		{fmt.Errorf("%w: 16 turns wait", node.ErrBusy), node.CodeBusy, "then retry"},
		{core.ErrSessionClosed, node.CodeSessionClosed, "open a new session"},
		{fmt.Errorf("%w: log", actors.ErrSessionUnavailable), node.CodeUnavailable, ""},
		// The log's servers out of reach for a moment (natslog.Unavailable):
		// the caller retries, as for a session's actor.
		{fmt.Errorf("node: indexing session: %w", jetstream.ErrNoStreamResponse), node.CodeUnavailable, ""},
		{fmt.Errorf("node: indexing session: %w", &jetstream.APIError{Code: 503, ErrorCode: 10163, Description: "expected last sequence per subject temporarily unavailable"}), node.CodeUnavailable, ""},
		{&node.NotOwnerError{Session: "s", Owner: "b"}, node.CodeNotOwner, "owned by node b"},
		{context.Canceled, node.CodeEnded, "the work goes on"},
		{fmt.Errorf("%w: 10000 calls", node.ErrTooLarge), node.CodeTooLarge, ""},
		{fmt.Errorf("%w: 3 open sessions", node.ErrLimited), node.CodeLimited, ""},
		{errors.New("disk on fire"), node.CodeInternal, "the node's log has the details"},
		// A session actor that panicked: internal, and the caller is told
		// which session and what to do.
		{fmt.Errorf("turn t1: %w", &node.SessionFailedError{Tenant: "a", Session: "s1"}), node.CodeInternal, "session s1: its actor failed"},
		{&node.SessionFailedError{Session: "s1"}, node.CodeInternal, "retry with the same turn id"},
	} {
		if got := node.ErrorCode(tc.err); got != tc.code {
			t.Errorf("ErrorCode(%v) = %s, want %s", tc.err, got, tc.code)
		}
		msg := node.ErrorMessage(tc.err)
		switch {
		case tc.msg == "" && msg != tc.err.Error():
			t.Errorf("ErrorMessage(%v) = %q, want the error's own", tc.err, msg)
		case tc.msg != "" && !strings.Contains(msg, tc.msg):
			t.Errorf("ErrorMessage(%v) = %q, want it to say %q", tc.err, msg, tc.msg)
		}
		if tc.code == node.CodeInternal && strings.Contains(msg, "disk") {
			t.Errorf("an internal error's details %q reach the caller", msg)
		}
	}
	if node.ErrorCode(nil) != "" {
		t.Error("nil has a code")
	}
}
