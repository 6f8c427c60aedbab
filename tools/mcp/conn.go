package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/tool"
)

// protocolVersion is the MCP version callsheet asks for. The SDK's newest
// (2026-07-28) is stateless: tool lists are cached for a server-given time
// and change notifications need a subscription stream. 2025-11-25 keeps a
// session whose server pushes notifications/tools/list_changed, which is
// what picking up tool-list changes at once rests on; every server the SDK
// can talk to negotiates it or an older version.
const protocolVersion = "2025-11-25"

// conn is one server: its supervisor's state and the current session. Its
// fields under mu are read by calls and Status from other goroutines.
type conn struct {
	m      *Manager
	cfg    Server
	source string
	slots  chan struct{} // one per call in flight (MaxInFlight)
	relist chan struct{} // a tools/list_changed arrived (buffer 1)
	stderr *tailBuffer   // the last output of a stdio server's program

	firstDone chan struct{} // closed after the first connection attempt
	firstOnce sync.Once

	mu       sync.Mutex
	session  *sdk.ClientSession // nil while not connected
	reason   string             // why not connected
	pid      int
	sessions int
	tools    map[string]string // registered callsheet name → the server's name
	refused  map[string]string // the server's tool name → why it was refused
	offered  []string          // callsheet names of every tool the server lists
}

func newConn(m *Manager, s Server) *conn {
	return &conn{
		m: m, cfg: s, source: "mcp:" + s.Name,
		slots:     make(chan struct{}, m.maxInFlight),
		relist:    make(chan struct{}, 1),
		stderr:    &tailBuffer{max: 2048},
		firstDone: make(chan struct{}),
		reason:    "starting",
	}
}

func (c *conn) transport() string {
	if c.cfg.URL != "" {
		return "http"
	}
	return "stdio"
}

// supervise connects, serves the session until it ends, and reconnects with
// backoff, until ctx ends. It is the server's one long-lived goroutine; the
// Manager owns it (Close cancels ctx and waits).
func (c *conn) supervise(ctx context.Context) {
	defer c.m.wg.Done()
	delay := c.m.initialBackoff
	for {
		start := time.Now()
		err := c.serve(ctx)
		if ctx.Err() != nil {
			c.setDown("the node is shutting down")
			return
		}
		if time.Since(start) >= stableAfter {
			delay = c.m.initialBackoff
		}
		var wait time.Duration
		wait, delay = c.m.backoff(delay)
		c.mu.Lock()
		wasUp := c.sessions > 0
		c.mu.Unlock()
		msg := err.Error()
		c.setDown(fmt.Sprintf("%s (trying again in %s)", msg, wait.Round(10*time.Millisecond)))
		c.firstOnce.Do(func() { close(c.firstDone) })
		if wasUp {
			c.m.log.Warn("mcp server ended; restarting", "server", c.cfg.Name, "reason", msg, "in", wait.Round(10*time.Millisecond))
		} else {
			c.m.log.Warn("mcp server not started; its tools are unavailable until it starts", "server", c.cfg.Name, "reason", msg, "retry_in", wait.Round(10*time.Millisecond))
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			c.setDown("the node is shutting down")
			return
		}
	}
}

// serve runs one session: connect, list and register the tools, then wait
// for the session to end, listing again on each list_changed. It returns
// why the session ended (or could not start).
func (c *conn) serve(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, c.m.connectTimeout)
	defer cancel()
	cs, pid, err := c.connect(cctx)
	if err != nil {
		return err
	}
	// Wait returns when the session ends for any reason: the program
	// exited, the HTTP session was lost, a keep-alive ping failed, or
	// Close. The goroutine is the session's; it ends with it.
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }()
	if err := c.refresh(cctx, cs); err != nil {
		_ = cs.Close()
		<-ended
		return c.exitReason(fmt.Errorf("listing its tools: %w", err))
	}
	c.mu.Lock()
	c.session, c.pid, c.reason = cs, pid, ""
	c.sessions++
	n, sessions := len(c.tools), c.sessions
	c.mu.Unlock()
	c.firstOnce.Do(func() { close(c.firstDone) })
	how := c.cfg.URL
	if pid != 0 {
		how = fmt.Sprintf("pid %d", pid)
	}
	if sessions > 1 {
		c.m.log.Info("mcp server restarted", "server", c.cfg.Name, "transport", c.transport(), "via", how, "tools", n, "sessions", sessions)
	} else {
		c.m.log.Info("mcp server connected", "server", c.cfg.Name, "transport", c.transport(), "via", how, "tools", n)
	}
	for {
		select {
		case err := <-ended:
			c.setDown("")
			return c.exitReason(err)
		case <-c.relist:
			lctx, lcancel := context.WithTimeout(ctx, c.m.connectTimeout)
			if err := c.refresh(lctx, cs); err != nil {
				c.m.log.Warn("mcp server: listing tools after a change failed", "server", c.cfg.Name, "err", err)
			}
			lcancel()
		case <-ctx.Done():
			c.setDown("the node is shutting down")
			_ = cs.Close()
			<-ended
			return ctx.Err()
		}
	}
}

// connect starts the program (or reaches the URL) and runs the initialize
// handshake.
func (c *conn) connect(ctx context.Context) (*sdk.ClientSession, int, error) {
	client := sdk.NewClient(&sdk.Implementation{Name: "callsheet", Version: "1"}, &sdk.ClientOptions{
		// callsheet offers servers no roots, sampling or elicitation.
		Capabilities: &sdk.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
			select {
			case c.relist <- struct{}{}:
			default: // a relist is already pending
			}
		},
		KeepAlive: c.m.keepAlive,
	})
	var t sdk.Transport
	var cmd *exec.Cmd
	if c.cfg.URL != "" {
		t = &sdk.StreamableClientTransport{Endpoint: c.cfg.URL, HTTPClient: &http.Client{Transport: headers{c.cfg.Headers, http.DefaultTransport}}}
	} else {
		cmd = exec.Command(c.cfg.Command[0], c.cfg.Command[1:]...)
		cmd.Env = environment(c.cfg.Env)
		cmd.Dir = c.cfg.Dir
		c.stderr.reset()
		cmd.Stderr = c.stderr
		t = &sdk.CommandTransport{Command: cmd, TerminateDuration: 2 * time.Second}
	}
	cs, err := client.Connect(ctx, t, &sdk.ClientSessionOptions{ProtocolVersion: protocolVersion})
	if err != nil {
		if cmd != nil && cmd.Process == nil {
			return nil, 0, fmt.Errorf("cannot start %s: %w", strings.Join(c.cfg.Command, " "), err)
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer to initialize within %s: %w", c.m.connectTimeout, err)
		}
		return nil, 0, c.exitReason(fmt.Errorf("initialize failed: %w", err))
	}
	pid := 0
	if cmd != nil && cmd.Process != nil {
		pid = cmd.Process.Pid
	}
	return cs, pid, nil
}

// exitReason adds what a stdio program last wrote on stderr to err.
func (c *conn) exitReason(err error) error {
	if err == nil {
		err = errors.New("the session ended")
	}
	msg := "exited: " + err.Error()
	if c.cfg.URL != "" {
		msg = "the connection ended: " + err.Error()
	}
	if tail := c.stderr.String(); tail != "" {
		msg += "; its stderr ends: " + tail
	}
	return errors.New(msg)
}

func (c *conn) setDown(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.session, c.pid = nil, 0
	if reason != "" {
		c.reason = reason
	}
}

// current returns the session calls are sent on, or why there is none.
func (c *conn) current() (*sdk.ClientSession, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session, c.reason
}

// refresh lists the server's tools (and whether it has resources) and
// makes them the server's source in the registry.
func (c *conn) refresh(ctx context.Context, cs *sdk.ClientSession) error {
	var listed []*sdk.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		listed = append(listed, t)
	}
	caps := cs.InitializeResult().Capabilities
	resources := caps != nil && caps.Resources != nil
	tools, names, refused, offered := c.build(listed, resources)
	// The registry refuses names another source holds (a command tool
	// called mcp__...): those tools are refused here too.
	for _, re := range registrationErrors(c.m.reg.Replace(c.source, tools)) {
		if orig, ok := names[re.Tool]; ok {
			refused[orig] = re.Detail
			delete(names, re.Tool)
		}
	}
	c.mu.Lock()
	old, oldRefused := c.tools, c.refused
	c.tools, c.refused, c.offered = names, refused, offered
	c.mu.Unlock()
	if old != nil {
		added, removed := diff(old, names)
		if len(added)+len(removed) > 0 {
			c.m.log.Info("mcp server: tool list changed", "server", c.cfg.Name, "added", listOr(added, "none"), "removed", listOr(removed, "none"))
		}
	}
	if old == nil {
		// An override that names no tool of the server is most likely a
		// typo in the config: say so once per session.
		listedNames := map[string]bool{}
		for _, st := range listed {
			listedNames[st.Name] = true
		}
		for _, name := range slices.Sorted(maps.Keys(c.cfg.Overrides)) {
			if !listedNames[name] {
				c.m.log.Warn(fmt.Sprintf("mcp server: config mcp_servers.%s.tools names a tool the server does not offer (its tools, by the server's names, are the part after %s in the offered list)", c.cfg.Name, ServerPrefix(c.cfg.Name)),
					"server", c.cfg.Name, "tool", name, "offered", listOr(offered, "none"))
			}
		}
	}
	for _, orig := range slices.Sorted(maps.Keys(refused)) {
		if oldRefused[orig] == refused[orig] {
			continue // said already
		}
		c.m.log.Warn("mcp server: tool refused", "server", c.cfg.Name, "tool", orig, "reason", refused[orig])
	}
	return nil
}

func diff(old, cur map[string]string) (added, removed []string) {
	for n := range cur {
		if _, ok := old[n]; !ok {
			added = append(added, n)
		}
	}
	for n := range old {
		if _, ok := cur[n]; !ok {
			removed = append(removed, n)
		}
	}
	sort.Strings(added)
	sort.Strings(removed)
	return added, removed
}

// build turns a server's listed tools into callsheet tools. The resource
// tool takes its name first. When several server tools come out under one
// name, the one whose own name is that name (nothing was sanitised) wins,
// else the one that held it before this listing, else the first by the
// server's own name; the others are refused. So a name keeps meaning the
// same tool across list changes and restarts, whatever order the server
// lists them in.
func (c *conn) build(listed []*sdk.Tool, resources bool) (tools []*tool.Tool, names map[string]string, refused map[string]string, offered []string) {
	names, refused = map[string]string{}, map[string]string{}
	if resources {
		rt := c.resourceTool()
		tools = append(tools, rt)
		names[rt.Name] = ""
	}
	c.mu.Lock()
	before := c.tools
	c.mu.Unlock()
	rank := func(st *sdk.Tool) int {
		name := ToolName(c.cfg.Name, st.Name)
		switch {
		case name == ServerPrefix(c.cfg.Name)+st.Name:
			return 0
		case before != nil && before[name] == st.Name:
			return 1
		}
		return 2
	}
	slices.SortStableFunc(listed, func(a, b *sdk.Tool) int {
		if r := rank(a) - rank(b); r != 0 {
			return r
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, st := range listed {
		name := ToolName(c.cfg.Name, st.Name)
		offered = append(offered, name)
		if prev, taken := names[name]; taken {
			by := fmt.Sprintf("its tool %q", prev)
			if prev == "" {
				by = "the tool that reads its resources"
			}
			refused[st.Name] = fmt.Sprintf("its name becomes %s, which %s already has; tool names must stay distinct after sanitising to [a-zA-Z0-9_-] (rename one of them on the server)", name, by)
			continue
		}
		t, err := c.toolFor(name, st)
		if err != nil {
			refused[st.Name] = err.Error()
			continue
		}
		tools = append(tools, t)
		names[name] = st.Name
	}
	slices.Sort(offered)
	return tools, names, refused, offered
}

// toolFor builds the callsheet tool for one server tool, checking it as the
// registry will so a refusal names the server's tool.
func (c *conn) toolFor(name string, st *sdk.Tool) (*tool.Tool, error) {
	schema, err := json.Marshal(st.InputSchema)
	if err != nil || st.InputSchema == nil {
		return nil, fmt.Errorf("its input schema cannot be read: %v", err)
	}
	o := c.cfg.Overrides[st.Name]
	d, labels := Declare(st.Annotations, c.cfg.TrustAnnotations, o)
	desc := strings.TrimSpace(st.Description)
	if desc == "" {
		desc = strings.TrimSpace(st.Title)
	}
	if desc == "" {
		desc = fmt.Sprintf("The tool %q of the MCP server %q (it gives no description).", st.Name, c.cfg.Name)
	}
	remote := st.Name
	t := &tool.Tool{
		Name:         name,
		Description:  desc,
		InputSchema:  schema,
		Guidelines:   []string{fmt.Sprintf("Provided by the MCP server %q as its tool %q.", c.cfg.Name, st.Name)},
		Declarations: d,
		Labels:       labels,
		Timeout:      o.Timeout,
		Run: func(ctx context.Context, args json.RawMessage) (tool.Result, error) {
			return c.call(ctx, remote, args)
		},
	}
	if st.Title != "" && st.Title != desc {
		t.ShortDescription = st.Title
	}
	if _, err := tool.NewRegistry(t); err != nil {
		var re *tool.RegistrationError
		if errors.As(err, &re) {
			return nil, fmt.Errorf("it breaks the tool contract (%s): %s", re.Rule, re.Detail)
		}
		return nil, err
	}
	return t, nil
}

// registrationErrors returns the *tool.RegistrationError values in err,
// which may join several.
func registrationErrors(err error) []*tool.RegistrationError {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*tool.RegistrationError
		for _, e := range j.Unwrap() {
			out = append(out, registrationErrors(e)...)
		}
		return out
	}
	var re *tool.RegistrationError
	if errors.As(err, &re) {
		return []*tool.RegistrationError{re}
	}
	return nil
}

// unavailable explains why name is not a registered tool of this server.
func (c *conn) unavailable(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session == nil && c.sessions == 0 {
		select {
		case <-c.firstDone:
		default:
			return fmt.Sprintf("the MCP server %q is still starting; its tools appear when it connects, try again shortly", c.cfg.Name)
		}
		return fmt.Sprintf("the MCP server %q has not started: %s", c.cfg.Name, c.reason)
	}
	for orig, why := range c.refused {
		if ToolName(c.cfg.Name, orig) == name {
			return fmt.Sprintf("the MCP server %q offers %q, but it was refused: %s", c.cfg.Name, orig, why)
		}
	}
	if _, ok := c.tools[name]; ok {
		return "" // registered: the caller's own rules made it unavailable
	}
	have := slices.Sorted(maps.Keys(c.tools))
	return fmt.Sprintf("the MCP server %q offers no tool named so (its tools: %s)", c.cfg.Name, listOr(have, "none"))
}

func (c *conn) status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	starting := false
	select {
	case <-c.firstDone:
	default:
		starting = true
	}
	return Status{
		Server: c.cfg.Name, Transport: c.transport(), Connected: c.session != nil, Starting: starting,
		Reason: c.reason, Tools: slices.Sorted(maps.Keys(c.tools)), Refused: maps.Clone(c.refused),
		PID: c.pid, Sessions: c.sessions,
	}
}

// minimalEnv are the variables of the node's environment a stdio server's
// program inherits; the rest (credentials the node may hold) it does not.
var minimalEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "TMPDIR", "LANG", "LC_ALL"}

func environment(extra map[string]string) []string {
	var env []string
	for _, k := range minimalEnv {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		env = append(env, k+"="+extra[k])
	}
	return env
}

// headers adds configured headers to every request to an HTTP server.
type headers struct {
	h    map[string]string
	next http.RoundTripper
}

func (h headers) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(h.h) == 0 {
		return h.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range h.h {
		if strings.EqualFold(k, "Host") {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	return h.next.RoundTrip(r)
}

// tailBuffer keeps the last max bytes written to it, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) reset() {
	t.mu.Lock()
	t.b = nil
	t.mu.Unlock()
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 && len(s)-i > 40 {
		s = s[i+1:] // the last line says most
	}
	return s
}
