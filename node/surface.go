package node

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/internal/retry"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/tools"
	"github.com/callsheet/callsheet/tools/mcp"
)

// DefaultMCPStartWait is how long New waits for the configured MCP servers'
// first connections, so that their tools are there for the first turns and
// the start-up log can say how each server started. A server still starting
// then connects in the background; one that cannot start leaves its tools
// unavailable, never the node.
const DefaultMCPStartWait = 15 * time.Second

// surface is a node's tool surface: every registered tool (the built-in
// ones, the config's command tools, the program's Go tools, the MCP
// servers' tools and each tenant's harness tools), what an agent may call,
// and the rules a session's calls are planned with. It is the actors'
// Tools and Rules. newSurface builds the registry; start connects the MCP
// servers and the harness stores; close stops them.
type surface struct {
	cfg config.Config
	// limitsFor is the limits a tenant runs under now (nil: the config's).
	limitsFor func(tenant string) config.Limits
	box       *sandbox.Sandbox
	// goTools are the program's own tools (Options.Tools).
	goTools  []*tool.Tool
	registry *tool.Registry
	// outsideDefault are registered tools that are not in the default
	// surface (reachable only through an agent's explicit list).
	outsideDefault map[string]bool
	// mcp keeps the configured MCP servers' tools in the registry; nil
	// without any (docs/mcp.md).
	mcp *mcp.Manager
	// hub hands harness tools' calls to external workers; harness keeps
	// their registrations (docs/workers.md).
	hub     *harness.Hub
	harness *harness.Store
	logger  *slog.Logger
}

var (
	_ actors.Tools = (*surface)(nil)
	_ actors.Rules = (*surface)(nil)
)

// newSurface registers the built-in tools, the config's command tools and
// goTools (rg for glob and grep is rgPath, or found on the system).
func newSurface(cfg config.Config, box *sandbox.Sandbox, rgPath string, goTools []*tool.Tool, logger *slog.Logger) (*surface, error) {
	s := &surface{cfg: cfg, box: box, goTools: goTools, outsideDefault: map[string]bool{}, logger: logger}
	reg, _ := tool.NewRegistry()
	defaults, outside, err := s.builtinTools(rgPath)
	if err != nil {
		return nil, err
	}
	for _, t := range defaults {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	for _, t := range outside {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
		s.outsideDefault[t.Name] = true
	}
	for i, ct := range cfg.CommandTools {
		t, err := tools.Command(tools.CommandSpec{
			Name: ct.Name, Description: ct.Description, ShortDescription: ct.ShortDescription,
			Guidelines: ct.Guidelines, Snippet: ct.Snippet, InputSchema: ct.InputSchema, Command: ct.Command,
			Effect: ct.Effect, Replay: ct.Replay, Concurrency: ct.Concurrency, Labels: ct.Labels,
			Timeout: ct.Timeout.Std(), Env: ct.Env, FleetCap: ct.FleetCap, FleetCapScope: ct.FleetCapScope,
			Unsandboxed: ct.Sandbox != nil && !*ct.Sandbox, Box: box,
			SelfConcurrency: ct.SelfConcurrency, Deferred: ct.Deferred, Escalation: ct.Escalation,
			MutatedPaths: ct.MutatedPaths, TouchedPaths: ct.TouchedPaths,
		})
		if err == nil {
			err = reg.Register(t)
		}
		if err != nil {
			return nil, fmt.Errorf("config: command_tools[%d] (%s): %w", i, ct.Name, err)
		}
	}
	for _, t := range goTools {
		if err := reg.Register(t); err != nil {
			return nil, err
		}
	}
	// tool_search appears when deferred tools exist.
	for _, t := range reg.All() {
		if t.Deferred {
			ts, err := tools.ToolSearchTool()
			if err == nil {
				err = reg.Register(ts)
			}
			if err != nil {
				return nil, err
			}
			break
		}
	}
	s.registry = reg
	return s, nil
}

// builtinTools returns the default tool surface and the registered slots
// outside it (reachable only through an agent's explicit tools list).
func (s *surface) builtinTools(rg string) (defaults, outside []*tool.Tool, err error) {
	add := func(dst *[]*tool.Tool, ts ...*tool.Tool) { *dst = append(*dst, ts...) }
	cfg := s.cfg
	core, err := tools.Builtins()
	if err != nil {
		return nil, nil, err
	}
	for _, t := range core {
		if t.Name != "shell" {
			add(&defaults, t)
		}
	}
	shell, err := tools.ShellTool(tools.ShellOptions{Sandbox: cfg.Shell.Sandbox, Network: cfg.Shell.Network, Box: s.box})
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, shell)
	// glob and grep drive rg 14+; without it the node refuses to start
	// (the error says how to install it) rather than fall back to a slower
	// walker.
	if rg == "" {
		if rg, _, err = tools.FindRipgrep(); err != nil {
			return nil, nil, err
		}
	}
	// rg is confined by Landlock, or in the sandbox on a kernel without it.
	searchOpts := []tools.RipgrepOption{tools.RipgrepSandbox(s.box)}
	if slices.Contains(cfg.Sandbox.AcceptWeaker, sandbox.BoundaryLandlock) {
		searchOpts = append(searchOpts, tools.RipgrepUnconfined())
	}
	search, err := tools.SearchTools(rg, searchOpts...)
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, search...)
	patch, err := tools.PatchTool()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, patch)
	fetch, err := tools.WebFetch(tools.WebOptions{AllowHosts: cfg.Web.AllowHosts})
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, fetch)
	// web_search and skill need a backend and directories from config;
	// without them they are not registered, so a call is blocked as
	// unavailable.
	if cfg.Web.SearchEndpoint != "" {
		ws, err := tools.WebSearch(cfg.Web.SearchEndpoint)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, ws)
	}
	if len(cfg.Skills.Dirs) > 0 {
		sk, err := tools.Skills(cfg.Skills.Dirs)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, sk)
	}
	work, err := tools.WorkStateTools()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, work...)
	jobs, err := tools.JobTools()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, jobs...)
	q, err := tools.QuestionTool()
	if err != nil {
		return nil, nil, err
	}
	add(&defaults, q)
	if cfg.Memory {
		m, err := tools.MemoryProposeTool()
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, m)
	}
	if ep := cfg.Delegate.Endpoint; ep != "" {
		t, err := tools.TaskTool(ep, cfg.Concurrency.Delegations, nil)
		if err != nil {
			return nil, nil, err
		}
		add(&defaults, t)
	}
	slots, err := tools.UnbackedSlots()
	if err != nil {
		return nil, nil, err
	}
	add(&outside, slots...)
	edit, err := tools.EditTool()
	if err != nil {
		return nil, nil, err
	}
	add(&outside, edit)
	return defaults, outside, nil
}

// startMCP connects the configured MCP servers (docs/mcp.md) and logs how
// each one started.
func (s *surface) startMCP(ctx context.Context) error {
	if len(s.cfg.MCPServers) == 0 {
		return nil
	}
	var servers []mcp.Server
	for _, name := range slices.Sorted(maps.Keys(s.cfg.MCPServers)) {
		servers = append(servers, mcpServer(name, s.cfg.MCPServers[name]))
	}
	m, err := mcp.New(s.registry, servers, mcp.WithLogger(s.logger.With("component", "mcp")), mcp.WithMaxInFlight(s.cfg.Concurrency.MCPConnections))
	if err != nil {
		return fmt.Errorf("node: mcp servers: %w", err)
	}
	s.mcp = m
	for _, st := range m.Start(ctx, DefaultMCPStartWait) {
		switch {
		case st.Connected:
			s.logger.Info("mcp server ready", "server", st.Server, "transport", st.Transport, "tools", strings.Join(st.Tools, ", "))
		case st.Starting:
			s.logger.Warn("mcp server still starting; its tools appear when it connects (until then a call is blocked as unavailable)", "server", st.Server, "after", DefaultMCPStartWait)
		case st.Sessions == 0:
			s.logger.Warn("mcp server not started; its tools are unavailable until it starts", "server", st.Server, "reason", st.Reason)
		default:
			s.logger.Warn("mcp server not connected", "server", st.Server, "reason", st.Reason)
		}
	}
	return nil
}

// mcpServer converts one config entry (validated) to the manager's form.
func mcpServer(name string, s config.MCPServer) mcp.Server {
	out := mcp.Server{
		Name: name, Command: s.Command, Env: s.Env, Dir: s.Cwd, URL: s.URL, Headers: s.Headers,
		TrustAnnotations: s.TrustAnnotations, Overrides: map[string]mcp.Override{},
	}
	for tn, o := range s.Tools {
		ov := mcp.Override{Effect: tool.Effect(o.Effect), Replay: tool.Replay(o.Replay), Concurrency: tool.Concurrency(o.Concurrency), Timeout: o.Timeout.Std()}
		if o.Labels != nil {
			ov.Labels = []tool.Label{}
			for _, l := range o.Labels {
				ov.Labels = append(ov.Labels, tool.Label(l))
			}
		}
		out.Overrides[tn] = ov
	}
	return out
}

// startHarness opens the harness tools' hub and registrations
// (docs/workers.md): every registration in the bucket is in the registry
// before the node serves. await waits for each bucket as the cluster can
// make it.
func (s *surface) startHarness(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, replicas int, await func(context.Context, string, func(context.Context) error) error,
	onSettled func(tenant string, outcome harness.Settled)) error {
	if err := await(ctx, "the settled tasks bucket "+harness.DefaultSettledBucket, func(ctx context.Context) (err error) {
		s.hub, err = harness.New(ctx, nc, js, harness.WithReplicas(replicas), harness.WithLogger(s.logger.With("component", "harness")),
			harness.WithOnSettled(onSettled))
		return err
	}); err != nil {
		return err
	}
	return await(ctx, "the harness tools bucket "+harness.DefaultToolsBucket, func(ctx context.Context) (err error) {
		s.harness, err = harness.OpenStore(ctx, js, replicas, s.applyHarness, s.logger.With("component", "harness"))
		return err
	})
}

// applyHarness makes specs the whole set of tenant's harness tools in the
// registry. A registration refused here (a config change since gave its
// name to a command tool) is left out, and logged.
func (s *surface) applyHarness(tenant string, specs map[string]harness.Spec) {
	ts := make([]*tool.Tool, 0, len(specs))
	for name, sp := range specs {
		ts = append(ts, sp.Tool(tenant, name, s.hub.Run))
	}
	if err := s.registry.ReplaceTenant(tenant, ts); err != nil {
		s.logger.Warn("applying harness tools failed", "tenant", tenant, "err", err)
	}
}

// nameOwner says who holds name among the shared tools, or "".
func (s *surface) nameOwner(name string) string {
	src, ok := s.registry.SourceOf(name)
	switch {
	case !ok:
		return ""
	case strings.HasPrefix(src, "mcp:"):
		return fmt.Sprintf("a tool of the MCP server %q (config mcp_servers)", strings.TrimPrefix(src, "mcp:"))
	case src != tool.StaticSource:
		return fmt.Sprintf("a tool of source %q", src)
	}
	for _, ct := range s.cfg.CommandTools {
		if ct.Name == name {
			return "a command tool of the node's config (command_tools)"
		}
	}
	for _, t := range s.goTools {
		if t.Name == name {
			return "a Go tool of the program that embeds the node"
		}
	}
	return "a built-in tool"
}

// close stops the MCP servers and the harness stores; after the tool
// actors, so that no call is left running on them.
func (s *surface) close() {
	if s.mcp != nil {
		_ = s.mcp.Close()
	}
	if s.harness != nil {
		s.harness.Close()
	}
	if s.hub != nil {
		s.hub.Close()
	}
}

// Resolve is the actors' Tools.Resolve: Resolve, not Get, so that a call
// planned before an MCP server's tool list (or a tenant's harness tools)
// changed still finds the tool it was planned with.
func (s *surface) Resolve(tenant, name string) (*tool.Tool, bool) {
	return s.registry.ResolveFor(tenant, name)
}

// Searchable lists the tools tool_search may offer: every registered tool
// (deferred ones included) that is not switched off and has something
// behind it. An agent's own list still decides what a call may use.
func (s *surface) Searchable() []*tool.Tool {
	var out []*tool.Tool
	for _, t := range s.registry.All() {
		if on, set := s.cfg.Tools[t.Name]; (set && !on) || tools.IsUnbacked(t.Name) || s.outsideDefault[t.Name] {
			continue
		}
		out = append(out, t)
	}
	return out
}

// Settings resolves the rules in force for a session's agent from config
// (actors.Rules).
func (s *surface) Settings(tenant, agent string) actors.Settings {
	cfg := s.cfg
	a, _ := cfg.AgentNamed(agent)
	r := cfg.Retry
	return actors.Settings{
		Cap:               cfg.Concurrency.ToolCalls,
		ParallelToolCalls: cfg.ParallelToolCallsFor(agent),
		MaxAttempts:       r.MaxAttempts,
		Backoff:           retry.Backoff{Initial: r.InitialDelay.Std(), Factor: r.Factor, Max: r.MaxDelay.Std(), Jitter: 0.2},
		Plan: core.PlanInput{
			Lookup:      func(name string) (*tool.Tool, bool) { return s.available(tenant, a, name) },
			Policy:      s.policy(a),
			Timeout:     s.timeoutFor,
			Unavailable: s.unavailable,
		},
		ApprovalTimeout: cfg.Permission.ApprovalTimeout.Std(),
		StreamTimeout:   cfg.Turns.StreamTimeout.Std(),
		CallsPerTurn:    s.callsPerTurn(tenant),
	}
}

// callsPerTurn is the tenant's limits.calls_per_turn, which a streamed
// turn is held to across its batches.
func (s *surface) callsPerTurn(tenant string) int {
	if s.limitsFor != nil {
		return s.limitsFor(tenant).CallsPerTurn
	}
	return s.cfg.Limits.CallsPerTurn
}

// policy is the permission policy of an agent: the global rules followed by
// the agent's own (the last match wins), strict mode, and plan mode.
func (s *surface) policy(a config.Agent) permission.Policy {
	p := permission.Policy{Strict: s.cfg.Permission.Strict, PlanMode: a.Mode == config.ModePlan}
	for _, rs := range [][]config.Rule{s.cfg.Permission.Rules, a.Rules} {
		for _, r := range rs {
			p.Rules = append(p.Rules, permission.Rule{ID: r.ID, Tool: r.Tool, Match: r.Match, Action: permission.Action(r.Action)})
		}
	}
	return p
}

// available says whether a tool may be called by an agent of tenant's
// session: registered (shared, or one of tenant's harness tools), not
// switched off by the tools map, and in the agent's list when it has one.
func (s *surface) available(tenant string, a config.Agent, name string) (*tool.Tool, bool) {
	t, ok := s.registry.GetFor(tenant, name)
	if !ok || tools.IsUnbacked(name) {
		return nil, false
	}
	if on, set := s.cfg.Tools[name]; set && !on {
		return nil, false
	}
	if a.Tools != nil {
		return t, slices.Contains(a.Tools, name)
	}
	if s.outsideDefault[name] {
		return nil, false
	}
	return t, true
}

// timeoutFor is a tool's call timeout: a per-tool config override, else the
// tool's own declaration, else the config default.
func (s *surface) timeoutFor(t *tool.Tool) time.Duration {
	if d, ok := s.cfg.Timeouts.Tools[t.Name]; ok && d > 0 {
		return d.Std()
	}
	if t.Timeout != 0 {
		return t.Timeout
	}
	if d := s.cfg.Timeouts.Default.Std(); d > 0 {
		return d
	}
	return tool.DefaultTimeout
}

// unavailable says why a tool a call names is not there, for the plan's
// blocked/unavailable reason: today only MCP tools have more to say than the
// generic reason.
func (s *surface) unavailable(name string) string {
	if s.mcp == nil {
		return ""
	}
	return s.mcp.Unavailable(name)
}

// toolsFor returns the tools a model of agent in tenant's sessions is
// given, sorted by name: available to the agent (the tenant's harness tools
// included) and not deferred.
func (s *surface) toolsFor(tenant, agent string) ([]*tool.Tool, error) {
	a, ok := s.cfg.AgentNamed(agent)
	if agent != "" && !ok {
		return nil, fmt.Errorf("%w: agent %q is not configured", ErrInvalid, agent)
	}
	var out []*tool.Tool
	for _, t := range s.registry.VisibleFor(tenant) {
		if _, ok := s.available(tenant, a, t.Name); ok {
			out = append(out, t)
		}
	}
	return out, nil
}
