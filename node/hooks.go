package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/hooks"
)

// ErrHookFailed is returned by SubmitTurn when a before-tool hook failed: the
// whole turn is refused, nothing is recorded and nothing runs.
var ErrHookFailed = errors.New("node: before-tool hook failed")

// hookSet merges the Go hooks of Options with the config's external ones
// (Go hooks run first).
func hookSet(opts hooks.Set, cfg config.Hooks) hooks.Set {
	set := opts
	for _, h := range cfg.BeforeTool {
		set.Before = append(set.Before, hooks.CommandBefore(h.Name, h.Command, h.Tools, h.Timeout.Std()))
	}
	for _, h := range cfg.Middleware {
		set.Middleware = append(set.Middleware, hooks.CommandMiddleware(h.Name, h.Command, h.Tools, h.Timeout.Std()))
	}
	for _, h := range cfg.AfterTool {
		set.After = append(set.After, hooks.CommandAfter(h.Name, h.Command, h.Tools, h.Timeout.Std()))
	}
	return set
}

// preHooks runs the before-tool hooks and the middleware over a turn's calls
// in model order, for the calls that resolve and validate (the pre-phase
// order of docs/spec.md §2.1: resolve, validate, hooks, permission). It returns the
// middleware verdicts by call index, or ErrHookFailed.
func (n *Node) preHooks(ctx context.Context, tenant, session, turn, agent string, calls []events.CallSpec) (map[int]core.Override, error) {
	if len(n.hooks.Before) == 0 && len(n.hooks.Middleware) == 0 {
		return nil, nil
	}
	a, _ := n.cfg.AgentNamed(agent)
	overrides := map[int]core.Override{}
	for i, c := range calls {
		t, ok := n.available(tenant, a, c.Name)
		if !ok {
			continue
		}
		args, err := core.ValidArguments(t, c.Arguments)
		if err != nil {
			continue // blocked as invalid arguments; hooks never see it
		}
		hc := hooks.Call{Tenant: tenant, Session: session, Turn: turn, Call: c.ID, Tool: c.Name, Arguments: args}
		for _, h := range n.hooks.Before {
			if !hooks.Applies(h.Tools, c.Name) {
				continue
			}
			if err := h.Run(ctx, hc); err != nil {
				return nil, fmt.Errorf("%w: hook %s refused call %s (%s): %v; the turn was not recorded", ErrHookFailed, h.Name, c.ID, c.Name, err)
			}
		}
		for _, m := range n.hooks.Middleware {
			if !hooks.Applies(m.Tools, c.Name) {
				continue
			}
			v, err := m.Run(ctx, hc)
			if err != nil {
				overrides[i] = core.Override{Deny: fmt.Sprintf("middleware %s failed, so the call was denied: %v", m.Name, err), By: m.Name}
				break
			}
			if v.Action == "deny" {
				overrides[i] = core.Override{Deny: v.Reason, By: m.Name}
				break
			}
			if v.Action == "rewrite" {
				o := overrides[i]
				o.Args, o.By = v.Arguments, m.Name
				overrides[i] = o
				hc.Arguments = v.Arguments
			}
		}
	}
	return overrides, nil
}

// afterTool runs the after-tool hooks for one attempt's result.
func (n *Node) afterTool(ctx context.Context, ev events.Event, r *events.ToolCallRequested, res events.Result) {
	if len(n.hooks.After) == 0 {
		return
	}
	hc := hooks.Call{Tenant: ev.Tenant, Session: ev.Session, Turn: r.Turn, Call: r.Call, Tool: r.Name, Arguments: r.Arguments}
	for _, h := range n.hooks.After {
		if hooks.Applies(h.Tools, r.Name) {
			if err := h.Run(ctx, hc, res); err != nil && n.opts.Logf != nil {
				n.opts.Logf("after-tool hook %s on call %s (%s): %v", h.Name, r.Call, r.Name, err)
			}
		}
	}
}
