package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/core"
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
		{fmt.Errorf("%w: 16 turns wait", actors.ErrBusy), http.StatusTooManyRequests, CodeBusy, false},
		{core.ErrSessionClosed, http.StatusConflict, CodeSessionClosed, false},
		{fmt.Errorf("%w: log", actors.ErrSessionUnavailable), http.StatusServiceUnavailable, CodeUnavailable, true},
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
