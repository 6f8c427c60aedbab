package node

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/permission"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/tools"
)

// settings resolves the rules in force for a session's agent from config.
func (n *Node) settings(tenant, agent string) actors.Settings {
	cfg := n.cfg
	a, _ := cfg.AgentNamed(agent)
	r := cfg.Retry
	return actors.Settings{
		Cap:               cfg.Concurrency.ToolCalls,
		ParallelToolCalls: cfg.ParallelToolCallsFor(agent),
		MaxAttempts:       r.MaxAttempts,
		Backoff: func(attempt int) time.Duration {
			return backoff(r.InitialDelay.Std(), r.Factor, r.MaxDelay.Std(), attempt)
		},
		Plan: core.PlanInput{
			Lookup:      func(name string) (*tool.Tool, bool) { return n.available(tenant, a, name) },
			Policy:      n.policy(a),
			Timeout:     func(t *tool.Tool) time.Duration { return n.timeoutFor(t) },
			Unavailable: n.unavailable,
		},
		ApprovalTimeout: cfg.Permission.ApprovalTimeout.Std(),
	}
}

// policy is the permission policy of an agent: the global rules followed by
// the agent's own (the last match wins), strict mode, and plan mode.
func (n *Node) policy(a config.Agent) permission.Policy {
	p := permission.Policy{Strict: n.cfg.Permission.Strict, PlanMode: a.Mode == config.ModePlan}
	for _, rs := range [][]config.Rule{n.cfg.Permission.Rules, a.Rules} {
		for _, r := range rs {
			p.Rules = append(p.Rules, permission.Rule{ID: r.ID, Tool: r.Tool, Match: r.Match, Action: permission.Action(r.Action)})
		}
	}
	return p
}

// available says whether a tool may be called by an agent of tenant's
// session: registered (shared, or one of tenant's harness tools), not
// switched off by the tools map, and in the agent's list when it has one.
func (n *Node) available(tenant string, a config.Agent, name string) (*tool.Tool, bool) {
	t, ok := n.registry.GetFor(tenant, name)
	if !ok || tools.IsUnbacked(name) {
		return nil, false
	}
	if on, set := n.cfg.Tools[name]; set && !on {
		return nil, false
	}
	if a.Tools != nil {
		return t, slices.Contains(a.Tools, name)
	}
	if n.outsideDefault[name] {
		return nil, false
	}
	return t, true
}

// timeoutFor is a tool's call timeout: a per-tool config override, else the
// tool's own declaration, else the config default.
func (n *Node) timeoutFor(t *tool.Tool) time.Duration {
	if d, ok := n.cfg.Timeouts.Tools[t.Name]; ok && d > 0 {
		return d.Std()
	}
	if t.Timeout != 0 {
		return t.Timeout
	}
	if d := n.cfg.Timeouts.Default.Std(); d > 0 {
		return d
	}
	return tool.DefaultTimeout
}

// backoff is the delay before attempt n+1: initial·factor^(n-1), capped at
// maxDelay, with ±20% jitter so retries of many calls do not align.
func backoff(initial time.Duration, factor float64, maxDelay time.Duration, n int) time.Duration {
	d := float64(initial) * math.Pow(max(factor, 1), float64(max(n-1, 0)))
	d = min(d, float64(maxDelay))
	d *= 0.8 + 0.4*rand.Float64()
	return time.Duration(d)
}

// ToolsFor returns the tools a model of agent in tenant's sessions is
// given, sorted by name: available to the agent (the tenant's harness tools
// included) and not deferred.
func (n *Node) ToolsFor(tenant, agent string) ([]*tool.Tool, error) {
	a, ok := n.cfg.AgentNamed(agent)
	if agent != "" && !ok {
		return nil, fmt.Errorf("%w: agent %q is not configured", ErrInvalid, agent)
	}
	var out []*tool.Tool
	for _, t := range n.registry.VisibleFor(tenant) {
		if _, ok := n.available(tenant, a, t.Name); ok {
			out = append(out, t)
		}
	}
	return out, nil
}
