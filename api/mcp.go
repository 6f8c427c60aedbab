package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/tool"
)

// DefaultMCPSessionTimeout closes an MCP session (and its callsheet session)
// that sent no request for this long.
const DefaultMCPSessionTimeout = time.Hour

// mcpCall is the call id of the one call of a turn made by tools/call.
const mcpCall = "mcp"

// WithMCPSessionTimeout sets how long an idle MCP session on /mcp lives;
// default DefaultMCPSessionTimeout.
func WithMCPSessionTimeout(d time.Duration) Option {
	return func(s *Server) error {
		if d <= 0 {
			return fmt.Errorf("%w: MCP session timeout %s: use a positive duration", ErrInvalidOption, d)
		}
		s.mcpTimeout = d
		return nil
	}
}

// mcpService serves the node as an MCP server on /mcp, over the SDK's
// streamable HTTP handler (docs/mcp.md "Using callsheet from an MCP
// client"). One SDK server exists per tenant and agent, holding the tools a
// model of that agent is given; an MCP session is one callsheet session,
// opened when the client finishes initializing and closed when the MCP
// session ends; a tools/call is a one-call turn.
type mcpService struct {
	api     *Server
	handler http.Handler

	mu       sync.Mutex
	servers  map[mcpKey]*mcpServer
	sessions map[*sdk.ServerSession]*mcpSession
	byID     map[string]*mcpSession // by Mcp-Session-Id
	closing  bool
	watching bool
	changed  chan struct{} // the tool registry changed (buffer 1)
	stop     chan struct{}
	wg       sync.WaitGroup
}

type mcpKey struct{ tenant, agent string }

// mcpServer is the SDK server of one tenant and agent, and the tools it
// offers now.
type mcpServer struct {
	key   mcpKey
	sdk   *sdk.Server
	mu    sync.Mutex
	tools map[string]*tool.Tool
}

// mcpSession is the callsheet session behind one MCP session.
type mcpSession struct {
	key mcpKey
	// owner is the token info's user id (tenant/principal) of whoever
	// opened the MCP session; "" without tenants.
	owner   string
	mu      sync.Mutex
	session string // callsheet session id; "" until opened
	err     error  // why it could not be opened
	lastSeq uint64 // the last event seen by a progress watch
	running map[string]bool
	// calls ends the tools/call handlers in flight: the SDK's
	// ServerSession.Close waits for them and does not cancel them.
	calls map[*int]context.CancelCauseFunc
}

// Why a tools/call handler's context ends early.
var (
	// errMCPDeleted: the client deleted its session; its calls are
	// cancelled as the client would by cancelling each request.
	errMCPDeleted = errors.New("the MCP session was deleted")
	// errMCPShutdown: the node is shutting down; the calls go on in the
	// log and are settled by whoever owns the session next.
	errMCPShutdown = errors.New("the node is shutting down")
)

// endCalls ends every tools/call in flight with cause.
func (ms *mcpSession) endCalls(cause error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, cancel := range ms.calls {
		cancel(cause)
	}
}

func newMCPService(s *Server) *mcpService {
	m := &mcpService{
		api:      s,
		servers:  map[mcpKey]*mcpServer{},
		sessions: map[*sdk.ServerSession]*mcpSession{},
		byID:     map[string]*mcpSession{},
		changed:  make(chan struct{}, 1),
		stop:     make(chan struct{}),
	}
	h := sdk.NewStreamableHTTPHandler(m.serverFor, &sdk.StreamableHTTPOptions{
		// Server.ServeHTTP checks every route's Host, peer and origin
		// (api/guard.go), /mcp included, more strictly than the SDK's own
		// loopback check.
		DisableLocalhostProtection: true,
		SessionTimeout:             s.mcpTimeout,
		MaxRequestBodyBytes:        s.maxBody,
	})
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			m.deleting(r)
		}
		h.ServeHTTP(w, r)
	})
	if s.node.Config().MultiTenant() {
		// Who opened the session rides in the token info as its user id:
		// the SDK then refuses (403) a request for the session with another
		// tenant's or principal's token.
		handler = auth.RequireBearerToken(m.verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(handler)
		// The SDK refuses a request without a bearer token before it asks
		// verify: that refusal is logged here, as the API's are.
		checked := handler
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f := strings.Fields(r.Header.Get("Authorization")); len(f) != 2 || !strings.EqualFold(f[0], "bearer") {
				s.log.Warn("authentication failed", "route", "/mcp", "method", r.Method, "remote", r.RemoteAddr, "reason", "no bearer token")
			}
			checked.ServeHTTP(w, r)
		})
	}
	m.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every MCP request needs run: an MCP session is a callsheet
		// session, and a tools/call a turn. A bad or missing token is left
		// to the SDK's 401.
		id, err := s.auth.identify(r)
		if err == nil && !id.scopes.has(config.ScopeRun) {
			writeError(w, scopeError(w, r, id, config.ScopeRun))
			return
		}
		if err == nil {
			// A stream of the MCP session ends when its token is removed.
			var release func()
			r, release = revocable(r, id)
			defer release()
		}
		if agent := r.URL.Query().Get("agent"); agent != "" {
			if _, ok := s.node.Config().AgentNamed(agent); !ok {
				writeError(w, errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("agent %q is not configured; leave ?agent= out for the default surface", agent)))
				return
			}
		}
		handler.ServeHTTP(w, r)
	})
	return m
}

// deleting ends the calls in flight of the session a DELETE names, when
// the request comes from whoever opened it, so that the SDK's close (which
// waits for them) does not wait for ever on a call that waits for an
// approval. Anyone else's DELETE changes nothing here and is refused by the
// SDK.
func (m *mcpService) deleting(r *http.Request) {
	m.mu.Lock()
	ms := m.byID[r.Header.Get("Mcp-Session-Id")]
	m.mu.Unlock()
	if ms == nil {
		return
	}
	ms.mu.Lock()
	mine := ms.owner == owner(r.Context())
	ms.mu.Unlock()
	if mine {
		ms.endCalls(errMCPDeleted)
	}
}

// owner is the user id of the token info ctx carries, or "".
func owner(ctx context.Context) string {
	if ti := auth.TokenInfoFromContext(ctx); ti != nil {
		return ti.UserID
	}
	return ""
}

// verify maps a bearer token to who it authenticates, with the API's own
// table. The session is bound to the tenant and the principal: the SDK
// refuses (403) a request for it whose token names anyone else.
func (m *mcpService) verify(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
	id, err := m.api.identify(r)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			return nil, fmt.Errorf("%w: %s", auth.ErrInvalidToken, e.Message)
		}
		return nil, fmt.Errorf("%w: %v", auth.ErrInvalidToken, err)
	}
	return &auth.TokenInfo{UserID: id.tenant + "/" + id.principal, Extra: map[string]any{mcpTenantKey: id.tenant}}, nil
}

// mcpTenantKey holds the tenant in an MCP request's token info.
const mcpTenantKey = "callsheet/tenant"

func (m *mcpService) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// serverFor returns the SDK server of the request's tenant and agent,
// making it on first use. The SDK asks on every request (for the protocol
// versions) and uses the answer only to open a new session, so this is a
// lookup, not a construction, after the first time.
func (m *mcpService) serverFor(r *http.Request) *sdk.Server {
	tenant := config.DefaultTenant
	if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
		tenant, _ = ti.Extra[mcpTenantKey].(string)
	}
	key := mcpKey{tenant: tenant, agent: r.URL.Query().Get("agent")}
	m.mu.Lock()
	defer m.mu.Unlock()
	if srv, ok := m.servers[key]; ok {
		return srv.sdk
	}
	srv := &mcpServer{key: key, tools: map[string]*tool.Tool{}}
	srv.sdk = sdk.NewServer(&sdk.Implementation{Name: "callsheet", Title: "callsheet node " + m.api.node.Name(), Version: "1"}, &sdk.ServerOptions{
		Instructions: "Each MCP session is one callsheet session; each tools/call runs as a one-call turn with callsheet's validation, permissions (a call may wait for approval), replay policy and ordered commit. A result's _meta names the session and turn.",
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}, Logging: &sdk.LoggingCapabilities{}},
		InitializedHandler: func(ctx context.Context, req *sdk.InitializedRequest) {
			_, _ = m.session(ctx, req.Session, key, req.Extra)
		},
	})
	m.servers[key] = srv
	m.syncTools(srv)
	if !m.watching && !m.closing {
		m.watching = true
		m.api.node.Registry().Notify(m.changed)
		m.wg.Add(1)
		go m.watch()
	}
	return srv.sdk
}

// watch follows the tool registry (MCP servers' tools come and go) and
// updates every SDK server, which tells its sessions with
// notifications/tools/list_changed. It ends with close.
func (m *mcpService) watch() {
	defer m.wg.Done()
	for {
		select {
		case <-m.changed:
			m.mu.Lock()
			srvs := make([]*mcpServer, 0, len(m.servers))
			for _, s := range m.servers {
				srvs = append(srvs, s)
			}
			m.mu.Unlock()
			for _, s := range srvs {
				m.syncTools(s)
			}
		case <-m.stop:
			return
		}
	}
}

// syncTools makes srv offer exactly the tools a model of its agent is
// given now: each as the SDK's raw tool (no validation of its own: the
// node validates every call), annotated from its declarations.
func (m *mcpService) syncTools(srv *mcpServer) {
	ts, err := m.api.node.ToolsFor(srv.key.tenant, srv.key.agent)
	if err != nil {
		m.api.log.Warn("mcp: listing the tools for an agent failed", "agent", srv.key.agent, "err", err)
		return
	}
	want := map[string]*tool.Tool{}
	for _, t := range ts {
		want[t.Name] = t
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	var gone []string
	for name := range srv.tools {
		if _, ok := want[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		srv.sdk.RemoveTools(gone...)
	}
	descs, _ := describe(ts, m.guidance(), false)
	for i, t := range ts {
		if srv.tools[t.Name] == t {
			continue // unchanged: the registry stores a new value on every change
		}
		srv.sdk.AddTool(mcpToolOf(t, descs[i]), m.callHandler(srv.key))
	}
	srv.tools = want
}

// guidance is the config's guidance with the guidelines placed in each
// description: MCP tools have no other place for them.
func (m *mcpService) guidance() config.Guidance {
	g := m.api.node.Config().Guidance
	g.Placement = config.PlacementDescription
	return g
}

// mcpToolOf is a tool as MCP clients see it. The hints follow the
// declarations (docs/spec.md §7): read_only → readOnlyHint; a replay-safe
// tool is idempotent; side-effecting and delegating tools may be
// destructive; only tools labelled external reach an open world. _meta
// carries the declarations themselves.
func mcpToolOf(t *tool.Tool, desc string) *sdk.Tool {
	d := t.Declarations.Normalize()
	destructive := d.Effect == tool.EffectSideEffecting || d.Effect == tool.EffectDelegating
	openWorld := false
	labels := []string{}
	for _, l := range t.Labels {
		labels = append(labels, string(l))
		openWorld = openWorld || l == tool.LabelExternal
	}
	return &sdk.Tool{
		Name:        t.Name,
		Title:       t.ShortDescription,
		Description: desc,
		InputSchema: json.RawMessage(schemaOf(t)),
		Annotations: &sdk.ToolAnnotations{
			ReadOnlyHint:    d.Effect == tool.EffectReadOnly,
			DestructiveHint: &destructive,
			IdempotentHint:  d.Replay == tool.ReplaySafe,
			OpenWorldHint:   &openWorld,
		},
		Meta: sdk.Meta{
			"callsheet/effect":      string(d.Effect),
			"callsheet/replay":      string(d.Replay),
			"callsheet/concurrency": string(d.Concurrency),
			"callsheet/labels":      labels,
		},
	}
}

// session returns the callsheet session of an MCP session, opening it on
// first use (the initialized notification, or a call that raced ahead of
// it) and arranging for it to be closed when the MCP session ends.
func (m *mcpService) session(ctx context.Context, ss *sdk.ServerSession, key mcpKey, extra *sdk.RequestExtra) (*mcpSession, error) {
	who := ""
	if extra != nil && extra.TokenInfo != nil {
		who = extra.TokenInfo.UserID
	}
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return nil, errors.New("the node is shutting down")
	}
	ms, ok := m.sessions[ss]
	if !ok {
		ms = &mcpSession{key: key, running: map[string]bool{}, calls: map[*int]context.CancelCauseFunc{}}
		m.sessions[ss] = ms
		m.byID[ss.ID()] = ms
		m.wg.Add(1)
		go m.await(ss, ms)
	}
	m.mu.Unlock()
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if ms.owner == "" {
		// Not every message carries the token info (the initialized
		// notification may not); the SDK lets only the opener's requests
		// reach a session, so the first one that does names the owner.
		ms.owner = who
	}
	if ms.session == "" && ms.err == nil {
		info, err := m.api.node.OpenSession(context.WithoutCancel(ctx), key.tenant, "", key.agent)
		if err != nil {
			ms.err = err
		} else {
			ms.session = info.Session
			m.api.log.Info("mcp session opened", "mcp_session", ss.ID(), "session", info.Session, "tenant", key.tenant)
		}
	}
	if ms.err != nil {
		return nil, ms.err
	}
	return ms, nil
}

// await closes the callsheet session once its MCP session has ended
// (DELETE, the idle timeout, or the client going away), cancelling what
// still runs first; at node shutdown the session is left as it is, since
// its turns belong to the log, not to this process. One goroutine per MCP
// session; the mcpService owns it.
func (m *mcpService) await(ss *sdk.ServerSession, ms *mcpSession) {
	defer m.wg.Done()
	_ = ss.Wait()
	m.mu.Lock()
	delete(m.sessions, ss)
	delete(m.byID, ss.ID())
	closing := m.closing
	m.mu.Unlock()
	ms.mu.Lock()
	sid := ms.session
	ms.mu.Unlock()
	if closing || sid == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		ms.mu.Lock()
		running := make([]string, 0, len(ms.running))
		for t := range ms.running {
			running = append(running, t)
		}
		ms.mu.Unlock()
		for _, t := range running {
			_ = m.api.node.CancelTurn(ctx, ms.key.tenant, sid, t, "", "the MCP session ended")
		}
		err := m.api.node.CloseSession(ctx, ms.key.tenant, sid, "the MCP session ended")
		if err == nil || !errors.Is(err, node.ErrConflict) {
			if err != nil {
				m.api.log.Warn("closing the session after its MCP session ended failed", "session", sid, "err", err)
			}
			return
		}
		// A turn is still settling: wait for it, then close.
		select {
		case <-time.After(min(50*time.Millisecond<<min(attempt, 5), time.Second)):
		case <-ctx.Done():
			m.api.log.Warn("session still has a running turn 30s after its MCP session ended; left open", "session", sid)
			return
		}
	}
}

// close ends every MCP session, so that their hanging streams return and
// http.Server.Shutdown can finish; the callsheet sessions stay open.
func (m *mcpService) close() {
	m.mu.Lock()
	if m.closing {
		m.mu.Unlock()
		return
	}
	m.closing = true
	sessions := make([]*sdk.ServerSession, 0, len(m.sessions))
	for ss, ms := range m.sessions {
		sessions = append(sessions, ss)
		ms.endCalls(errMCPShutdown)
	}
	watching := m.watching
	m.mu.Unlock()
	for _, ss := range sessions {
		_ = ss.Close()
	}
	if watching {
		m.api.node.Registry().Stop(m.changed)
		close(m.stop)
	}
	m.wg.Wait()
}

// callHandler runs a tools/call as a one-call turn of the MCP session's
// callsheet session: the node validates, authorises (the call may wait for
// an approval given over the HTTP API), schedules, claims, runs and commits
// it as any other. With a progress token, each step of the call is sent as
// a progress notification. A client that cancels the request (or whose
// session ends) cancels the call: a never call cut short is indeterminate.
func (m *mcpService) callHandler(key mcpKey) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		ms, err := m.session(ctx, req.Session, key, req.Extra)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "no callsheet session for this MCP session: " + err.Error()}
		}
		ctx, end := context.WithCancelCause(ctx)
		defer end(nil)
		id := new(int)
		ms.mu.Lock()
		sid := ms.session
		turn := ulid.Make().String()
		ms.running[turn] = true
		ms.calls[id] = end
		ms.mu.Unlock()
		defer func() {
			ms.mu.Lock()
			delete(ms.running, turn)
			delete(ms.calls, id)
			ms.mu.Unlock()
		}()
		calls := []events.CallSpec{{ID: mcpCall, Name: req.Params.Name, Arguments: req.Params.Arguments}}
		tv, err := m.runTurn(ctx, req, ms, sid, turn, calls)
		if err != nil {
			if errors.Is(context.Cause(ctx), errMCPShutdown) {
				// The call goes on in the log; only this answer ends.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("the node is shutting down; turn %s of callsheet session %s goes on and its result will be in the session's transcript", turn, sid)}
			}
			if ctx.Err() != nil {
				// The client cancelled, deleted its session or went away:
				// cancel the call too.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_ = m.api.node.CancelTurn(cctx, key.tenant, sid, turn, "", "the MCP client cancelled the request")
				cancel()
				return nil, ctx.Err()
			}
			e, _ := toError(err)
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: e.Message}
		}
		return mcpResult(sid, tv), nil
	}
}

// runTurn submits the turn and waits for it; with a progress token it
// follows the session's events and reports each step of the turn.
func (m *mcpService) runTurn(ctx context.Context, req *sdk.CallToolRequest, ms *mcpSession, sid, turn string, calls []events.CallSpec) (projections.Turn, error) {
	n, tenant := m.api.node, ms.key.tenant
	token := req.Params.GetProgressToken()
	if token == nil {
		return n.SubmitTurn(ctx, tenant, sid, turn, calls, true)
	}
	// Following the call's events is a live event stream like any other:
	// it takes one of the tenant's places (event_streams.max_per_tenant).
	// Without a place the call still runs, only without progress.
	release, err := m.api.holdStream(tenant)
	if err != nil {
		return n.SubmitTurn(ctx, tenant, sid, turn, calls, true)
	}
	defer release()
	ms.mu.Lock()
	after := ms.lastSeq
	ms.mu.Unlock()
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	evs, err := n.Events(wctx, tenant, sid, after, true)
	if err != nil {
		return projections.Turn{}, err
	}
	if _, err := n.SubmitTurn(ctx, tenant, sid, turn, calls, false); err != nil {
		return projections.Turn{}, err
	}
	step := 0
	for ev := range evs {
		var ref struct {
			Turn string `json:"turn"`
		}
		if json.Unmarshal(ev.Data, &ref) != nil || ref.Turn != turn {
			continue
		}
		if ev.Type == events.TypeTurnCompleted {
			ms.mu.Lock()
			ms.lastSeq = max(ms.lastSeq, ev.Seq)
			ms.mu.Unlock()
			break
		}
		if msg := progressMessage(ev); msg != "" {
			step++
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: float64(step), Message: msg})
		}
	}
	if ctx.Err() != nil {
		return projections.Turn{}, ctx.Err()
	}
	// The answer: posting the same turn again answers with its recorded
	// results once they are committed, and runs nothing (docs/spec.md §8);
	// the log can show TurnCompleted a moment before the session actor
	// answers for it, and the watch can end early if the log closes.
	return n.SubmitTurn(ctx, tenant, sid, turn, calls, true)
}

// progressMessage says what one event of the call means for the client
// waiting on it; "" for events that are not a step worth reporting.
func progressMessage(ev events.Event) string {
	switch ev.Type {
	case events.TypeTurnReceived:
		return "received: validated and authorised"
	case events.TypeApprovalRequested:
		return "waiting for approval (POST /v1/sessions/" + ev.Session + "/approvals/" + mcpCall + ")"
	case events.TypeApprovalGranted:
		return "approved"
	case events.TypeToolCallRequested:
		return "queued for a tool worker"
	case events.TypeToolCallStarted:
		return "running"
	case events.TypeRetryScheduled:
		return "failed; retrying after backoff"
	case events.TypeToolCallCompleted, events.TypeToolCallFailed, events.TypeToolCallIndeterminate, events.TypeDispatchBlocked:
		return "settled: " + string(ev.Type)
	case events.TypeResultCommitted:
		return "committed"
	}
	return ""
}

// mcpResult converts a one-call turn's result to a tools/call result: an
// ok result's parts become content (text, images; JSON as text, and as
// structured content when it is one object); any other outcome is an error
// result (isError) whose text says what happened. _meta names the
// callsheet session, turn, outcome and attempts.
func mcpResult(session string, tv projections.Turn) *sdk.CallToolResult {
	res := &sdk.CallToolResult{Content: []sdk.Content{}}
	meta := sdk.Meta{"callsheet/session": session, "callsheet/turn": tv.Turn}
	res.Meta = meta
	if len(tv.Results) != 1 {
		res.IsError = true
		res.Content = append(res.Content, &sdk.TextContent{Text: fmt.Sprintf("the turn has %d results, want 1", len(tv.Results))})
		return res
	}
	r := tv.Results[0]
	meta["callsheet/outcome"] = string(r.Outcome)
	meta["callsheet/attempts"] = r.Attempts
	if r.Block != "" {
		meta["callsheet/block"] = string(r.Block)
	}
	if r.Truncated {
		meta["callsheet/truncated"] = true
		if r.FullOutput != nil {
			meta["callsheet/full_output"] = "/v1/outputs/" + r.FullOutput.Object
		}
	}
	var jsonParts int
	for _, p := range r.Content {
		switch p.Type {
		case tool.PartText:
			res.Content = append(res.Content, &sdk.TextContent{Text: p.Text})
		case tool.PartJSON:
			jsonParts++
			res.Content = append(res.Content, &sdk.TextContent{Text: string(p.JSON)})
			var obj map[string]any
			if jsonParts == 1 && json.Unmarshal(p.JSON, &obj) == nil {
				res.StructuredContent = obj
			}
		case tool.PartImage:
			res.Content = append(res.Content, &sdk.ImageContent{MIMEType: p.MIME, Data: p.Data})
		}
	}
	if jsonParts != 1 {
		res.StructuredContent = nil
	}
	if r.Outcome != events.OutcomeOK {
		res.IsError = true
		res.StructuredContent = nil
		if r.Outcome == events.OutcomeBlocked {
			res.Content = append([]sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("blocked (%s); nothing ran.", r.Block)}}, res.Content...)
		}
	}
	return res
}
