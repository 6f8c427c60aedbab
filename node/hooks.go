package node

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/callsheet/callsheet/actors"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/hooks"
)

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

// hookRunner runs the hooks around tool calls (docs/permissions.md,
// "Hooks"): the before-tool hooks and the middleware when a turn is
// submitted, and the after-tool hooks after each attempt (it is the actors'
// AfterHooks).
type hookRunner struct {
	set    hooks.Set
	tools  *surface
	logger *slog.Logger
}

var _ actors.AfterHooks = (*hookRunner)(nil)

// before reports whether a turn's submission runs hooks.
func (h *hookRunner) before() bool { return len(h.set.Before)+len(h.set.Middleware) > 0 }

// preHooks runs the before-tool hooks and the middleware over a turn's calls
// in model order, for the calls that resolve and validate (the pre-phase
// order of docs/spec.md §2.1: resolve, validate, hooks, permission). It returns the
// middleware verdicts by call index, or ErrHookFailed.
func (h *hookRunner) preHooks(ctx context.Context, tenant, session, turn, agent string, calls []events.CallSpec) (map[int]core.Override, error) {
	if !h.before() {
		return nil, nil
	}
	a, _ := h.tools.cfg.AgentNamed(agent)
	overrides := map[int]core.Override{}
	for i, c := range calls {
		t, ok := h.tools.available(tenant, a, c.Name)
		if !ok {
			continue
		}
		args, err := core.ValidArguments(t, c.Arguments)
		if err != nil {
			continue // blocked as invalid arguments; hooks never see it
		}
		hc := hooks.Call{Tenant: tenant, Session: session, Turn: turn, Call: c.ID, Tool: c.Name, Arguments: args}
		for _, b := range h.set.Before {
			if !hooks.Applies(b.Tools, c.Name) {
				continue
			}
			if err := b.Run(ctx, hc); err != nil {
				return nil, fmt.Errorf("%w: hook %s refused call %s (%s): %v; the turn was not recorded", ErrHookFailed, b.Name, c.ID, c.Name, err)
			}
		}
		for _, m := range h.set.Middleware {
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

// After runs the after-tool hooks for one attempt's result, as the log
// records it (actors.AfterHooks).
func (h *hookRunner) After(ctx context.Context, ev events.Event, r *events.ToolCallRequested, res events.Result) {
	hc := hooks.Call{Tenant: ev.Tenant, Session: ev.Session, Turn: r.Turn, Call: r.Call, Tool: r.Name, Arguments: r.Arguments}
	for _, a := range h.set.After {
		if hooks.Applies(a.Tools, r.Name) {
			if err := a.Run(ctx, hc, res); err != nil {
				h.logger.Warn("after-tool hook failed", "hook", a.Name, "call", r.Call, "tool", r.Name, "err", err)
			}
		}
	}
}
