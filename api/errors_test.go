package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
)

func TestToError(t *testing.T) {
	for _, tc := range []struct {
		err          error
		status       int
		code         string
		wantInternal bool
	}{
		{fmt.Errorf("%w: bad", node.ErrInvalid), http.StatusBadRequest, CodeInvalidRequest, false},
		{fmt.Errorf("%w: session x", node.ErrNotFound), http.StatusNotFound, CodeNotFound, false},
		{node.ErrClosed, http.StatusServiceUnavailable, CodeUnavailable, false},
		{fmt.Errorf("%w: 16 turns wait", node.ErrBusy), http.StatusTooManyRequests, CodeBusy, false},
		{&node.Error{Code: node.CodeSessionClosed, Message: "closed"}, http.StatusConflict, CodeSessionClosed, false},
		{&node.Error{Code: node.CodeUnavailable, Message: "log"}, http.StatusServiceUnavailable, CodeUnavailable, true},
		{context.Canceled, http.StatusServiceUnavailable, CodeUnavailable, false},
		{errorf(http.StatusTeapot, "tea", "short and stout"), http.StatusTeapot, "tea", false},
		{fmt.Errorf("%w: 10000 calls", node.ErrTooLarge), http.StatusRequestEntityTooLarge, CodeTooLarge, false},
		{fmt.Errorf("%w: 3 open sessions", node.ErrLimited), http.StatusTooManyRequests, CodeLimitExceeded, false},
		{errors.New("disk on fire"), http.StatusInternalServerError, CodeInternal, true},
	} {
		e, internal := toError(tc.err)
		if e.Status != tc.status || e.Code != tc.code || internal != tc.wantInternal {
			t.Errorf("toError(%v) = %d %s internal=%v, want %d %s internal=%v", tc.err, e.Status, e.Code, internal, tc.status, tc.code, tc.wantInternal)
		}
		if tc.code == CodeInternal && e.Message == tc.err.Error() {
			t.Errorf("internal error %q leaked to the client", tc.err)
		}
	}
}

// TestEveryNodeCodeHasAStatus: the table maps every code the node returns.
func TestEveryNodeCodeHasAStatus(t *testing.T) {
	for _, c := range node.Codes() {
		if _, ok := statuses[c]; !ok {
			t.Errorf("node code %s has no HTTP status", c)
		}
	}
}

// TestUnavailableAnswer: a call whose session's log failed under it (NATS's
// words in the error) is answered 503 with Retry-After and a plain message
// to retry with the same turn id; NATS's text is logged, never shown. A call
// that met a takeover and was not served in time says the same.
func TestUnavailableAnswer(t *testing.T) {
	natsErr := fmt.Errorf("%w: appending to session s1: nats: no responders available for request", actors.ErrSessionUnavailable)
	moved := moving("s1", "node n1, which owned it, was lost while it served this call", true)
	for _, tc := range []struct {
		name       string
		e          *Error
		retryAfter string
	}{
		{"log failed", func() *Error { e, _ := toError(natsErr); return e }(), "1"},
		{"takeover not done in time", moved, "2"},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, tc.e)
		body := rec.Body.String()
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != tc.retryAfter {
			t.Errorf("%s: %d, Retry-After %q, want 503 and %s", tc.name, rec.Code, rec.Header().Get("Retry-After"), tc.retryAfter)
		}
		if !strings.Contains(body, "retry with the same turn id") || strings.Contains(strings.ToLower(body), "nats") {
			t.Errorf("%s: %s, want a plain message to retry with the same turn id and no NATS text", tc.name, body)
		}
	}
}

// TestFaultLevels: a session's log out of reach for a moment (503, the
// caller told to retry) is logged as a warning with NATS's words; any other
// fault of ours as an error.
func TestFaultLevels(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/v1/sessions/s1/turns", nil)
	natsErr := fmt.Errorf("%w: appending to session s1: nats: no responders available for request", actors.ErrSessionUnavailable)
	for _, tc := range []struct {
		err  error
		want string
	}{
		{natsErr, `level=WARN msg="log unavailable; the caller was told to retry"`},
		{errors.New("disk on fire"), `level=ERROR msg="internal error"`},
	} {
		var logs testenv.Buffer
		s := &Server{log: slog.New(slog.NewTextHandler(&logs, nil))}
		e, internal := toError(tc.err)
		if !internal {
			t.Fatalf("toError(%v): not a fault of ours", tc.err)
		}
		s.logFault(r, "acme", e, tc.err)
		line := logs.String()
		if !strings.Contains(line, tc.want) || !strings.Contains(line, tc.err.Error()) {
			t.Errorf("%v logged as\n%s\nwant %s with the error", tc.err, line, tc.want)
		}
	}
}
