package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// shellRig is a node whose worker calls are one `shell` call of `true`:
// in the sandbox, or with shell.sandbox "off" for the floor.
type shellRig struct{ *nodeRig }

// startShellNode starts a node (interval durability, so the log weighs
// less against what the sandbox costs) with the sandbox on or off.
func startShellNode(ctx context.Context, sandboxed bool) (*shellRig, error) {
	r, err := startNode(ctx, config.DurabilityInterval, func(o *node.Options) {
		cfg := *o.Config
		if !sandboxed {
			cfg.Shell.Sandbox = config.SandboxOff
		}
		o.Config = &cfg
	})
	if err != nil {
		return nil, err
	}
	if sandboxed {
		if err := r.n.Sandbox().Ready(); err != nil {
			r.close()
			return nil, skip("the sandbox cannot run commands here: %v", err)
		}
	}
	return &shellRig{r}, nil
}

// call runs one shell call of `true` on worker w's session.
func (r *shellRig) call(ctx context.Context, w int) error {
	spec := []events.CallSpec{{ID: "c1", Name: "shell", Arguments: json.RawMessage(`{"command":"true"}`)}}
	t, err := r.n.SubmitTurn(ctx, tenant, r.sessions[w], "", spec, true)
	if err != nil {
		return err
	}
	if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
		return fmt.Errorf("shell turn %s: %+v", t.Turn, t.Results)
	}
	return nil
}

// benchShell times one-call turns of `shell true` over the node in the
// sandbox against the same calls with the sandbox off, in the same run:
// the ratio is what the sandbox adds to a shell call.
func benchShell(ctx context.Context, s *suite) ([]sample, error) {
	n := max(s.cfg.Calls/5, 20) // a shell call is a process or two: fewer calls
	run := func(sandboxed bool) ([]float64, error) {
		r, err := startShellNode(ctx, sandboxed)
		if err != nil {
			return nil, err
		}
		defer r.close()
		lat, err := timeCalls(ctx, r, n)
		if err != nil {
			return nil, err
		}
		return []float64{us(percentile(lat, 50)), us(percentile(lat, 99))}, nil
	}
	off, err := run(false)
	if err != nil {
		return nil, fmt.Errorf("sandbox off: %w", err)
	}
	on, err := run(true)
	if err != nil {
		return nil, fmt.Errorf("sandbox on: %w", err)
	}
	cond := fmt.Sprintf("interval, 1 session, one 1-call turn of shell {\"command\":\"true\"} at a time, %d calls; floor: the same with shell.sandbox \"off\" (bash in a process group, no namespaces)", n)
	return []sample{
		{name: "latency/shell/p50", value: on[0], unit: "µs", better: Lower, floor: off[0], conditions: cond},
		{name: "latency/shell/p99", value: on[1], unit: "µs", better: Lower, floor: off[1], conditions: cond},
	}, nil
}
