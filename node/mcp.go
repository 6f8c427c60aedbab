package node

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/tools/mcp"
)

// DefaultMCPStartWait is how long New waits for the configured MCP servers'
// first connections, so that their tools are there for the first turns and
// the start-up log can say how each server started. A server still starting
// then connects in the background; one that cannot start leaves its tools
// unavailable, never the node.
const DefaultMCPStartWait = 15 * time.Second

// startMCP connects the configured MCP servers (docs/mcp.md) and logs how
// each one started.
func (n *Node) startMCP(ctx context.Context) error {
	if len(n.cfg.MCPServers) == 0 {
		return nil
	}
	var servers []mcp.Server
	for _, name := range slices.Sorted(maps.Keys(n.cfg.MCPServers)) {
		servers = append(servers, mcpServer(name, n.cfg.MCPServers[name]))
	}
	logf := n.opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	m, err := mcp.New(n.registry, servers, mcp.WithLogf(logf), mcp.WithMaxInFlight(n.cfg.Concurrency.MCPConnections))
	if err != nil {
		return fmt.Errorf("node: mcp servers: %w", err)
	}
	n.mcp = m
	for _, st := range m.Start(ctx, DefaultMCPStartWait) {
		switch {
		case st.Connected:
			logf("mcp server %s: ready (%s), tools: %s", st.Server, st.Transport, strings.Join(st.Tools, ", "))
		case st.Starting:
			logf("mcp server %s: still starting after %s; its tools appear when it connects (until then a call is blocked as unavailable)", st.Server, DefaultMCPStartWait)
		case st.Sessions == 0:
			logf("mcp server %s: not started (%s); its tools are unavailable until it starts", st.Server, st.Reason)
		default:
			logf("mcp server %s: not connected (%s)", st.Server, st.Reason)
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

// unavailable says why a tool a call names is not there, for the plan's
// blocked/unavailable reason: today only MCP tools have more to say than the
// generic reason.
func (n *Node) unavailable(name string) string {
	if n.mcp == nil {
		return ""
	}
	return n.mcp.Unavailable(name)
}

// MCPStatus returns the state of each configured MCP server, sorted by name
// (nil without any).
func (n *Node) MCPStatus() []mcp.Status {
	if n.mcp == nil {
		return nil
	}
	return n.mcp.Status()
}
