package api

import (
	"errors"
	"io"
	"net/http"
	"os"
	"time"
)

// deadlineBody is a request body that must arrive whole within its
// deadline: the connection's read deadline is set when the handler starts
// and cleared once the body is read to its end, so a client that sends a
// body a byte at a time holds the connection for at most the body timeout
// (config http.body_timeout), while a long answer (a held worker poll, an
// event stream) is not bounded by it.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

// withBodyDeadline returns r with its body bounded by d, or r as it is
// when it has no body.
func withBodyDeadline(w http.ResponseWriter, r *http.Request, d time.Duration) *http.Request {
	if r.Body == nil || r.Body == http.NoBody || d <= 0 {
		return r
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return r // a writer that cannot (a test recorder): nothing to bound
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	return r
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		// The whole body: the connection's later reads (the server's wait
		// for the client going away) must not time out. After a failure the
		// deadline stays, so the server's own read of what is left of the
		// body fails at once and the connection is closed.
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// bodyTimedOut reports whether err is a body read that hit its deadline.
func bodyTimedOut(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
