package api

import (
	"bytes"
	"context"
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
)

// routed serves a call that a session's owner must serve (it goes to the
// session actor) on whichever node owns the session: here when this node
// does, else forwarded, whole and with the caller's bearer token, to the
// owner's API, whose answer is the answer (a plain load balancer in front of
// the fleet works). The first node asks its owners index (node.Locate); a
// node that was forwarded to serves the call itself, and if its session
// actor says another node owns the session (the log says so), forwards
// once more. A call for a session whose owner cannot be reached waits, up
// to moveWait, for the fleet to take the session over.
func (s *Server) routed(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, tenant string) error {
		w.Header().Set(HeaderNode, s.node.Name())
		hops, _ := strconv.Atoi(r.Header.Get(HeaderHops))
		body, err := readBody(w, r, s.bodyLimit(r))
		if err != nil {
			return err
		}
		session := r.PathValue("s")
		deadline := time.Now().Add(moveWait)
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
				err := h(w, r, tenant)
				var no *node.NotOwnerError
				if !errors.As(err, &no) {
					return err
				}
				if no.URL == "" || hops >= maxHops {
					if time.Now().After(deadline) || r.Context().Err() != nil {
						return errorf(http.StatusServiceUnavailable, CodeUnavailable, no.Error())
					}
					sleep(r, movePoll)
					continue
				}
				target, owner = no.URL, no.Owner
			}
			if s.forward(w, r, body, target, owner, session, hops+1) {
				return nil
			}
			// The owner did not answer at all (its node is gone): nothing
			// reached it, so look again once the fleet has noticed.
			if time.Now().After(deadline) || r.Context().Err() != nil {
				return errorf(http.StatusServiceUnavailable, CodeUnavailable, fmt.Sprintf("node %s, which owns session %s, does not answer, and no node has taken the session over yet; retry", owner, session))
			}
			sleep(r, movePoll)
		}
	}
}

func sleep(r *http.Request, d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}

// forward proxies r (with body) to the API at target, marking it as hop
// hops, and reports whether an answer was written: false when the target
// could not even be dialled, so nothing reached it and the caller may try
// elsewhere. While the call is forwarded, owner's lease is watched: a node
// that stops (SIGSTOP, a partition) still accepts connections and never
// answers, so once the fleet counts it lost the forward is given up and the
// caller told to ask again, instead of waiting for ever.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, body []byte, target, owner, session string, hops int) bool {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" {
		writeError(w, errorf(http.StatusBadGateway, CodeUnavailable, fmt.Sprintf("the session's owner advertises %q, which is not a URL", target)))
		return true
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
	dialFailed := false
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
				dialFailed = true
				return
			}
			if lost.Load() {
				writeError(w, errorf(http.StatusServiceUnavailable, CodeUnavailable, fmt.Sprintf("node %s, which owns session %s, was lost while it served this call, which may or may not have reached it: ask again once the fleet has taken the session over (within the lease TTL; a turn posted again with its id runs nothing twice)", owner, session)))
				return
			}
			writeError(w, errorf(http.StatusBadGateway, CodeUnavailable, fmt.Sprintf("forwarding to the session's owner at %s failed: %v; the call may or may not have reached it: ask again (a turn posted again with its id runs nothing twice)", target, err)))
		},
	}
	// The answer's own header says which node served it.
	w.Header().Del(HeaderNode)
	rp.ServeHTTP(w, r.WithContext(ctx))
	if dialFailed {
		w.Header().Set(HeaderNode, s.node.Name())
	}
	return !dialFailed
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
