package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/callsheet/callsheet/node"
)

// Headers of a fleet's forwarded calls (docs/spec.md §7).
const (
	// HeaderNode names the node that served an answer.
	HeaderNode = "X-Callsheet-Node"
	// HeaderHops counts how many times a call was forwarded between nodes.
	HeaderHops = "X-Callsheet-Hops"
)

const (
	// maxHops bounds the forwards of one call: the first node follows the
	// owners index, a node that was forwarded to follows its session
	// actor's answer (the log), and that is enough unless ownership is
	// moving, when the call is answered 503.
	maxHops = 3
	// moveWait bounds how long a call waits for a session whose owner is
	// lost or between owners to be taken over: longer than a lease TTL and
	// a leader election (docs/facts.md, "Fleet facts").
	moveWait = 30 * time.Second
	// movePoll is how often a waiting call looks again.
	movePoll = 200 * time.Millisecond
	// retryAfterMove is the Retry-After of a call that met a takeover and
	// was not served: by then the new owner is most often in place.
	retryAfterMove = 2 * time.Second
)

// routed serves a call that a session's owner must serve (it goes to the
// session actor) on whichever node owns the session: here when this node
// does, else forwarded, whole and with the caller's bearer token, to the
// owner's API, whose answer is the answer (a plain load balancer in front of
// the fleet works). The first node asks its owners index (node.Locate); a
// node that was forwarded to serves the call itself, and if its session
// actor says another node owns the session (the log says so), forwards
// once more.
//
// A call that meets a takeover (the owner cannot be reached, is lost while
// it serves the call, or the session's log is between leaders) waits, up
// to moveWait, for the new owner: a call that may be sent again (a read, or
// a turn that names its id, which makes a second post run nothing twice) is
// then sent to it; any other call, or one still unserved at moveWait, is answered 503
// with Retry-After and a plain message (docs/spec.md §7).
func (s *Server) routed(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, tenant string) error {
		w.Header().Set(HeaderNode, s.node.Name())
		hops, _ := strconv.Atoi(r.Header.Get(HeaderHops))
		body, err := readBody(w, r, s.bodyLimit(r))
		if err != nil {
			return err
		}
		session := r.PathValue("s")
		again := resendable(r, body)
		deadline := time.Now().Add(moveWait)
		// wait sleeps before the next look, or says why the call ends here.
		wait := func(why string) error {
			if time.Now().After(deadline) || r.Context().Err() != nil {
				return moving(session, why, again)
			}
			sleep(r, movePoll)
			return nil
		}
		for {
			target, owner := "", ""
			if hops == 0 {
				if o, u, local := s.node.Locate(tenant, session); !local {
					target, owner = u, o
				}
			}
			if target == "" {
				r.Body = io.NopCloser(bytes.NewReader(body))
				if hops > 0 {
					// Forwarded here: the session actor answers from the
					// log, not the owners index (node.Forwarded).
					r = r.WithContext(node.Forwarded(r.Context()))
				}
				tw := &wroteWriter{ResponseWriter: w}
				err := h(tw, r, tenant)
				var no *node.NotOwnerError
				switch {
				case errors.As(err, &no):
					if no.URL != "" && hops < maxHops {
						target, owner = no.URL, no.Owner
						break
					}
					if err := wait("no node has taken it over yet"); err != nil {
						return err
					}
					continue
				case again && !tw.wrote && node.ErrorCode(err) == node.CodeUnavailable:
					// The session's log failed under its actor (its
					// stream between leaders after a server was lost):
					// the actor stopped, and the next look starts it again.
					s.log.Info("a call met an unavailable session; trying again", "tenant", tenant, "session", session, "err", err)
					if err := wait("its log cannot be reached just now"); err != nil {
						return err
					}
					continue
				default:
					return err
				}
			}
			switch s.forward(w, r, body, target, owner, session, hops+1, again) {
			case forwardAnswered:
				return nil
			case forwardLost:
				// The owner was lost while it served the call: the call is
				// sent again to the new owner, which answers it from the
				// log or runs what the log says did not finish.
				s.log.Info("the owner was lost while it served a call; waiting for the new owner", "tenant", tenant, "session", session, "owner", owner)
				if err := wait("node " + owner + ", which owned it, was lost while it served this call"); err != nil {
					return err
				}
			case forwardNotReached:
				// The owner did not answer at all (its node is gone):
				// nothing reached it, so look again once the fleet has
				// noticed.
				if err := wait("node " + owner + ", which owns it, does not answer"); err != nil {
					return err
				}
			}
		}
	}
}

// resendable reports whether r (with body) may be sent to a session's owner
// again after an owner that may have received it was lost: a read, or a
// turn that names its id (docs/spec.md §8: an idempotency key), in its
// body's "id" (callsheet's own turn, or a provider's response id) or in
// ?turn=. A turn without one would be given a new id each time it is sent.
func resendable(r *http.Request, body []byte) bool {
	if r.Method == http.MethodGet {
		return true
	}
	if r.Pattern != "POST /v1/sessions/{s}/turns" {
		return false
	}
	if r.URL.Query().Get("turn") != "" {
		return true
	}
	var named struct {
		ID string `json:"id"`
	}
	return json.Unmarshal(body, &named) == nil && named.ID != ""
}

// moving is the answer to a call that met a takeover and was not served
// within moveWait, or that may not be sent twice: 503, Retry-After, and what
// to do in plain words.
func moving(session, why string, again bool) *Error {
	msg := fmt.Sprintf("session %s is moving to another node (%s): retry with the same turn id", session, why)
	if !again {
		msg = fmt.Sprintf("session %s is moving to another node (%s), and this call may or may not have reached its owner: look at the session (GET it, or its approvals), then retry with the same turn id or decision", session, why)
	}
	e := errorf(http.StatusServiceUnavailable, CodeUnavailable, msg)
	e.RetryAfter = retryAfterMove
	return e
}

// wroteWriter notes whether a handler wrote its answer's header.
type wroteWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *wroteWriter) WriteHeader(code int) { w.wrote = true; w.ResponseWriter.WriteHeader(code) }
func (w *wroteWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (flushes,
// deadlines) of a streamed answer.
func (w *wroteWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func sleep(r *http.Request, d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}

// forwardResult is how a forward ended.
type forwardResult int

const (
	// forwardAnswered: an answer was written.
	forwardAnswered forwardResult = iota
	// forwardNotReached: the target could not even be dialled; nothing
	// reached it and nothing was written.
	forwardNotReached
	// forwardLost: the owner was lost, or its connection broke, while it
	// served a call that may be sent again; nothing was written.
	forwardLost
)

// forward proxies r (with body) to the API at target, marking it as hop
// hops. While the call is forwarded, owner's lease is watched: a node that
// stops (SIGSTOP, a partition) still accepts connections and never answers,
// so once the fleet counts it lost the forward is given up. A call that may
// be sent again (again) whose forward failed is left to the caller to send
// again; any other is answered 503 (owner lost) or 502.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, body []byte, target, owner, session string, hops int, again bool) forwardResult {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		writeError(w, errorf(http.StatusBadGateway, CodeUnavailable, fmt.Sprintf("the session's owner advertises %q, which is not a URL", target)))
		return forwardAnswered
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	var lost atomic.Bool
	if owner != "" {
		go func() {
			t := time.NewTicker(movePoll)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if !s.node.NodeAlive(owner) {
					lost.Store(true)
					cancel()
					return
				}
			}
		}()
	}
	result := forwardAnswered
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			// The client's Host, which this node's guard admitted: the
			// fleet's nodes answer the same names (docs/spec.md §7).
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(HeaderHops, strconv.Itoa(hops))
			pr.Out.Body = io.NopCloser(bytes.NewReader(body))
			pr.Out.ContentLength = int64(len(body))
		},
		Transport:     s.transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				result = forwardNotReached
				return
			}
			if r.Context().Err() != nil && !lost.Load() {
				return // the client went away: no one reads an answer
			}
			// The owner was lost, or its connection broke mid-answer (a
			// killed process's does before its lease lapses): a call that
			// may be sent again is, once the session has an owner.
			if again {
				result = forwardLost
				return
			}
			if lost.Load() {
				writeError(w, moving(session, "node "+owner+", which owned it, was lost while it served this call", false))
				return
			}
			e := errorf(http.StatusBadGateway, CodeUnavailable, fmt.Sprintf("forwarding to the session's owner at %s failed: %v; the call may or may not have reached it: retry with the same turn id (a turn posted again with its id runs nothing twice)", target, err))
			e.RetryAfter = retryAfterMove
			writeError(w, e)
		},
	}
	// The answer's own header says which node served it.
	w.Header().Del(HeaderNode)
	rp.ServeHTTP(w, r.WithContext(ctx))
	if result != forwardAnswered {
		w.Header().Set(HeaderNode, s.node.Name())
	}
	return result
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request, tenant string) error {
	st, err := s.node.SessionStatus(r.Context(), tenant, r.PathValue("s"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// nodesAnswer is GET /v1/nodes.
type nodesAnswer struct {
	Nodes []node.NodeStatus `json:"nodes"`
}

func (s *Server) getNodes(w http.ResponseWriter, r *http.Request, tenant string) error {
	writeJSON(w, http.StatusOK, nodesAnswer{Nodes: s.node.Nodes(tenant)})
	return nil
}
