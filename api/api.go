package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// Defaults of the Server's options.
const (
	// DefaultKeepAlive is how often an idle followed SSE stream gets a
	// comment line, so proxies do not close it.
	DefaultKeepAlive = 15 * time.Second
)

// ErrInvalidOption is wrapped by every error about a bad Option.
var ErrInvalidOption = errors.New("api: invalid option")

// Option configures New.
type Option func(*Server) error

// WithLogger sets where the Server logs failed authentications (the route
// and why, never the token) and internal errors; default: discarded.
func WithLogger(l *slog.Logger) Option {
	return func(s *Server) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		s.log = l
		return nil
	}
}

// WithMaxBody sets the largest request body read, in bytes; default the
// node's config limits.body_bytes (DefaultMaxBody unless set). A larger body
// is refused with 413.
func WithMaxBody(n int64) Option {
	return func(s *Server) error {
		if n < 1 {
			return fmt.Errorf("%w: max body %d: use at least 1 byte", ErrInvalidOption, n)
		}
		s.maxBody = n
		return nil
	}
}

// WithBodyTimeout sets how long a request body may take to arrive, from
// when its handler starts; default the node's config http.body_timeout
// (config.DefaultBodyTimeout unless set). A body still arriving then is
// refused with 408 and its connection closed.
func WithBodyTimeout(d time.Duration) Option {
	return func(s *Server) error {
		if d <= 0 {
			return fmt.Errorf("%w: body timeout %s: use a positive duration", ErrInvalidOption, d)
		}
		s.bodyTimeout = d
		return nil
	}
}

// WithKeepAlive sets how often an idle followed SSE stream gets a comment
// line; default DefaultKeepAlive.
func WithKeepAlive(d time.Duration) Option {
	return func(s *Server) error {
		if d <= 0 {
			return fmt.Errorf("%w: keep-alive %s: use a positive duration", ErrInvalidOption, d)
		}
		s.keepAlive = d
		return nil
	}
}

// Server is the HTTP API over one node. It is an http.Handler, safe for
// concurrent use.
type Server struct {
	node    *node.Node
	guard   guard
	auth    *authTable
	mux     *http.ServeMux
	metrics http.Handler
	maxBody int64
	// bodyTimeout bounds the arrival of each request body (api/deadline.go).
	bodyTimeout time.Duration
	keepAlive   time.Duration
	log         *slog.Logger
	// streamLimit bounds each tenant's live event streams (events.go).
	streamLimit streamLimit

	// mcp serves /mcp (api/mcp.go); mcpTimeout closes idle MCP sessions.
	mcp        *mcpService
	mcpTimeout time.Duration

	// streams ends every followed event stream when cancelled (CloseStreams):
	// http.Server.Shutdown waits for handlers, and a followed stream would
	// otherwise never return.
	streams     context.Context
	stopStreams context.CancelFunc
	// transport carries calls forwarded to other nodes of the fleet.
	transport http.RoundTripper
}

// New returns the API over n. The tenants and guidance come from
// n.Config(). It fails only for a bad option (ErrInvalidOption).
func New(n *node.Node, opts ...Option) (*Server, error) {
	s := &Server{
		node:        n,
		guard:       guard{local: !n.Config().MultiTenant(), allowed: n.Config().HTTP.AllowedHosts},
		auth:        &authTable{node: n},
		mux:         http.NewServeMux(),
		maxBody:     int64(n.Config().Limits.BodyBytes),
		bodyTimeout: n.Config().HTTP.BodyTimeout.Std(),
		keepAlive:   DefaultKeepAlive,
		log:         slog.New(slog.DiscardHandler),
		streamLimit: streamLimit{max: n.Config().EventStreams.MaxPerTenant},
		mcpTimeout:  DefaultMCPSessionTimeout,
	}
	if s.streamLimit.max < 1 { // a Config not from DefaultConfig or Parse
		s.streamLimit.max = config.DefaultMaxStreamsPerTenant
	}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if g := n.Gatherer(); g != nil {
		// OpenMetrics when the scraper asks for it (Prometheus does by
		// default), the classic text format otherwise; client_golang
		// negotiates on Accept.
		s.metrics = promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true})
	}
	if s.maxBody < 1 {
		s.maxBody = DefaultMaxBody // a Config built in Go without limits
	}
	if s.bodyTimeout <= 0 {
		s.bodyTimeout = config.DefaultBodyTimeout
	}
	s.streams, s.stopStreams = context.WithCancel(context.Background())
	s.transport = &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	s.mcp = newMCPService(s)
	s.routes()
	return s, nil
}

// CloseStreams ends every followed event stream and every MCP session on
// /mcp (their callsheet sessions stay open), now and later, so that
// http.Server.Shutdown can finish; register it with
// http.Server.RegisterOnShutdown.
func (s *Server) CloseStreams() {
	s.stopStreams()
	s.mcp.close()
}

// handlerFunc handles one authenticated request for tenant. A returned
// error is written as the API's error answer, unless the handler has begun
// its answer.
type handlerFunc func(w http.ResponseWriter, r *http.Request, tenant string) error

// handle registers h behind tenant authentication, the check that the
// token has scope, and error mapping; h's request carries the authenticated
// principal (principal).
func (s *Server) handle(pattern, scope string, h handlerFunc) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		id, err := s.identify(r)
		tenant := id.tenant
		setTenant(r, tenant)
		if err == nil && !id.scopes.has(scope) {
			err = scopeError(w, r, id, scope)
		}
		if err == nil {
			// A token removed while its request runs (a followed stream,
			// a held poll, a turn waited on) ends the request.
			var release func()
			r, release = revocable(r, id)
			defer release()
			err = h(w, withIdentity(r, id), tenant)
			if err != nil && errors.Is(context.Cause(r.Context()), errRevoked) {
				err = errorf(http.StatusUnauthorized, CodeUnauthorized, errRevoked.Error()+"; what it asked for goes on")
			}
		}
		if err != nil {
			e, internal := toError(err)
			if internal {
				s.logFault(r, tenant, e, err)
			}
			writeError(w, e)
		}
	})
}

// ServeHTTP checks r's Host, peer and origin (api/guard.go: 403 forbidden),
// bounds the arrival of its body (api/deadline.go), then routes it. Unknown paths and methods get the API's JSON error (404
// not_found, 405 method_not_allowed with Allow) rather than the ServeMux's
// plain text.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w, r, done := measure(s.node.OpsMetrics(), w, r) // api/httpmetrics.go
	defer func() { done(r) }()
	r = traceParent(r) // api/trace.go
	if e := s.guard.check(r); e != nil {
		writeError(w, e)
		return
	}
	r = withBodyDeadline(w, r, s.bodyTimeout)
	if h, pattern := s.mux.Handler(r); pattern == "" {
		rec := &statusRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		switch rec.status {
		case http.StatusMethodNotAllowed:
			w.Header().Set("Allow", rec.header.Get("Allow"))
			writeError(w, errorf(http.StatusMethodNotAllowed, CodeMethod, fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, rec.header.Get("Allow"))))
		default:
			writeError(w, errorf(http.StatusNotFound, CodeNotFound, fmt.Sprintf("no such route: %s %s", r.Method, r.URL.Path)))
		}
		return
	}
	s.mux.ServeHTTP(w, r)
}

// statusRecorder keeps the status and headers the ServeMux's own 404 and
// 405 handlers set, and drops their text body.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(status int)      { r.status = status }

func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request, _ string) error {
	if s.node.Config().MultiTenant() {
		// The node's metrics count every tenant's work (tool names, rules,
		// volumes): they are the operator's, not a tenant's.
		return errorf(http.StatusNotFound, CodeNotFound, "a node with tenants serves its metrics to the operator only: scrape the operator's listener (cmd/callsheet-node --metrics-listen ADDR, GET /metrics there)")
	}
	if s.metrics == nil {
		return errorf(http.StatusNotFound, CodeNotFound, "this node's metrics go to a registerer it was given, not one it can serve")
	}
	s.metrics.ServeHTTP(w, r)
	return nil
}

func (s *Server) openSession(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req openRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, true); err != nil {
		return err
	}
	info, err := s.node.OpenSession(r.Context(), tenant, req.Workspace, req.Agent)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+info.Session)
	writeJSON(w, http.StatusCreated, info)
	return nil
}

// running is the answer for a turn whose calls are not all committed.
type running struct {
	Turn   string `json:"turn"`
	Status string `json:"status"`
}

func (s *Server) submitTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	wait, err := boolParam(r, "wait", true)
	if err != nil {
		return err
	}
	var req turnRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	if err := req.check(); err != nil {
		return err
	}
	turn, err := s.node.SubmitTurn(r.Context(), tenant, r.PathValue("s"), req.ID, req.Calls, wait)
	if err != nil {
		return err
	}
	if turn.Status == projections.StatusComplete {
		writeJSON(w, http.StatusOK, turn)
		return nil
	}
	writeJSON(w, http.StatusAccepted, running{Turn: turn.Turn, Status: projections.StatusRunning})
	return nil
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	turn, err := s.node.Turn(r.Context(), tenant, r.PathValue("s"), r.PathValue("t"))
	if err != nil {
		return err
	}
	if turn.Status == projections.StatusComplete {
		writeJSON(w, http.StatusOK, turn)
		return nil
	}
	writeJSON(w, http.StatusOK, running{Turn: turn.Turn, Status: projections.StatusRunning})
	return nil
}

func (s *Server) getTranscript(w http.ResponseWriter, r *http.Request, tenant string) error {
	tr, err := s.node.Transcript(r.Context(), tenant, r.PathValue("s"))
	if err != nil {
		return err
	}
	b, err := projections.Marshal(tr)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
	return nil
}

// getOutput streams a kept full output (up to limits.output_bytes_per_call)
// without holding it.
func (s *Server) getOutput(w http.ResponseWriter, r *http.Request, tenant string) error {
	body, size, err := s.node.OpenOutput(r.Context(), tenant, r.PathValue("object"))
	if err != nil {
		return err
	}
	defer body.Close()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	if _, err := io.Copy(w, body); err != nil {
		s.log.Warn("streaming an output failed", "object", r.PathValue("object"), "tenant", tenant, "err", err)
	}
	return nil
}

func (s *Server) getTools(w http.ResponseWriter, r *http.Request, tenant string) error {
	q := r.URL.Query()
	format, err := ParseFormat(q.Get("format"))
	if err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, err.Error())
	}
	strict, err := boolParam(r, "strict", false)
	if err != nil {
		return err
	}
	tools, err := s.node.ToolsFor(tenant, q.Get("agent"))
	if err != nil {
		return err
	}
	defs, err := Render(tools, s.node.Config().Guidance, format, WithStrict(strict))
	if err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, err.Error())
	}
	writeJSON(w, http.StatusOK, defs)
	return nil
}

// boolParam reads a boolean query parameter: 1/true/yes or 0/false/no,
// def when absent.
func boolParam(r *http.Request, name string, def bool) (bool, error) {
	v, ok := r.URL.Query()[name]
	if !ok || len(v) == 0 || v[0] == "" {
		return def, nil
	}
	switch v[0] {
	case "1", "true", "yes":
		return true, nil
	case "0", "false", "no":
		return false, nil
	}
	return false, errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("query parameter %s=%q: use true or false (1 or 0)", name, v[0]))
}
