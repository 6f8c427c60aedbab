package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

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
