package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/tool"
)

// startHarness opens the harness tools' hub and registrations
// (docs/workers.md): every registration in the bucket is in the registry
// before the node serves.
func (n *Node) startHarness(ctx context.Context, js jetstream.JetStream, replicas int) error {
	// await: in a fleet the buckets are made once enough servers are up.
	if err := n.await(ctx, "the settled tasks bucket "+harness.DefaultSettledBucket, func(ctx context.Context) (err error) {
		n.hub, err = harness.New(ctx, n.nc, js, harness.WithReplicas(replicas), harness.WithLogf(n.logf))
		return err
	}); err != nil {
		return err
	}
	return n.await(ctx, "the harness tools bucket "+harness.DefaultToolsBucket, func(ctx context.Context) (err error) {
		n.harness, err = harness.OpenStore(ctx, js, replicas, n.applyHarness, n.logf)
		return err
	})
}

// applyHarness makes specs the whole set of tenant's harness tools in the
// registry. A registration refused here (a config change since gave its
// name to a command tool) is left out, and logged.
func (n *Node) applyHarness(tenant string, specs map[string]harness.Spec) {
	ts := make([]*tool.Tool, 0, len(specs))
	for name, sp := range specs {
		ts = append(ts, sp.Tool(tenant, name, n.hub.Run))
	}
	if err := n.registry.ReplaceTenant(tenant, ts); err != nil {
		n.logf("harness tools of tenant %s: %v", tenant, err)
	}
}

// nameOwner says who holds name among the shared tools, or "".
func (n *Node) nameOwner(name string) string {
	src, ok := n.registry.SourceOf(name)
	switch {
	case !ok:
		return ""
	case strings.HasPrefix(src, "mcp:"):
		return fmt.Sprintf("a tool of the MCP server %q (config mcp_servers)", strings.TrimPrefix(src, "mcp:"))
	case src != tool.StaticSource:
		return fmt.Sprintf("a tool of source %q", src)
	}
	for _, ct := range n.cfg.CommandTools {
		if ct.Name == name {
			return "a command tool of the node's config (command_tools)"
		}
	}
	for _, t := range n.opts.Tools {
		if t.Name == name {
			return "a Go tool of the program that embeds the node"
		}
	}
	return "a built-in tool"
}

// PutTool registers (or replaces) tenant's harness tool name
// (docs/spec.md §7): the same rules as every other tool, whatever is left
// out strictest. It is durable and reaches every node; this node plans with
// it once PutTool returns. Errors: ErrInvalid (a bad name or spec, saying
// which field and why), ErrConflict (the name is a built-in's, a command
// tool's or an MCP tool's, named), ErrLimited (too many tools).
func (n *Node) PutTool(ctx context.Context, tenant, name string, sp harness.Spec) error {
	if err := harness.ValidName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if owner := n.nameOwner(name); owner != "" {
		return fmt.Errorf("%w: the tool name %q is taken by %s; a harness tool needs a name of its own", ErrConflict, name, owner)
	}
	if err := sp.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := n.registry.CheckFor(tenant, sp.Tool(tenant, name, n.hub.Run)); err != nil {
		var re *tool.RegistrationError
		if errors.As(err, &re) && re.Rule == tool.RuleDuplicateName {
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Stored as given, normalized: what every node rebuilds the tool from.
	sp.Guidelines = slices.Clone(sp.Guidelines)
	err := n.harness.Put(ctx, tenant, name, sp)
	if errors.Is(err, harness.ErrLimit) {
		return fmt.Errorf("%w: %w", ErrLimited, err)
	}
	return err
}

// DeleteTool removes tenant's harness tool name. Calls already planned
// still run it; new plans no longer see it. ErrNotFound when the tenant has
// no such tool.
func (n *Node) DeleteTool(ctx context.Context, tenant, name string) error {
	err := n.harness.Delete(ctx, tenant, name)
	if errors.Is(err, harness.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// HarnessTool returns tenant's registration of name.
func (n *Node) HarnessTool(tenant, name string) (harness.Spec, bool) {
	return n.harness.Get(tenant, name)
}

// Poll waits for tasks of tenant's harness tools (POST /v1/workers/poll):
// up to p.Max, as soon as one comes, none when p.Wait ends first. ErrInvalid
// for a malformed poll or a tool that is not one of tenant's harness tools;
// ErrLimited when the tenant holds harness.MaxPollsPerTenant polls here.
func (n *Node) Poll(ctx context.Context, tenant string, p harness.PollRequest) ([]harness.Task, error) {
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for i, name := range p.Tools {
		if _, ok := n.harness.Get(tenant, name); !ok {
			return nil, fmt.Errorf("%w: tools[%d]: %q is not a harness tool of your tenant; register it first (PUT /v1/tools/%s): only harness tools have tasks to poll", ErrInvalid, i, name, name)
		}
	}
	tasks, err := n.hub.Poll(ctx, tenant, p)
	if errors.Is(err, harness.ErrLimit) {
		return nil, fmt.Errorf("%w: %w", ErrLimited, err)
	}
	return tasks, err
}

// TaskHeartbeat tells the attempt task names that its worker is alive and
// answers whether the call was cancelled. ErrConflict when no attempt of
// tenant waits on task.
func (n *Node) TaskHeartbeat(ctx context.Context, tenant, task string, details json.RawMessage) (bool, error) {
	cancel, err := n.hub.Heartbeat(ctx, tenant, task, details)
	return cancel, harnessError(err)
}

// TaskComplete hands the attempt task names its result. ErrConflict when no
// attempt of tenant waits on task; ErrInvalid, ErrTooLarge for the result.
func (n *Node) TaskComplete(ctx context.Context, tenant, task string, content []tool.Part) error {
	return harnessError(n.hub.Complete(ctx, tenant, task, content))
}

// TaskFail tells the attempt task names that its worker failed it;
// permanent stops retries of a safe tool. Errors as TaskComplete.
func (n *Node) TaskFail(ctx context.Context, tenant, task, message string, permanent bool) error {
	return harnessError(n.hub.Fail(ctx, tenant, task, message, permanent))
}

// harnessError maps the hub's errors to the node's.
func harnessError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, harness.ErrNotWaiting):
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, harness.ErrTooLarge):
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	case errors.Is(err, harness.ErrInvalid):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return err
}
