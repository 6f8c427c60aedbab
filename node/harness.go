package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/tool"
)

// PutTool registers (or replaces) tenant's harness tool name
// (docs/spec.md §7): the same rules as every other tool, whatever is left
// out strictest. It is durable and reaches every node; this node plans with
// it once PutTool returns. Errors: ErrInvalid (a bad name or spec, saying
// which field and why), ErrConflict (the name is a built-in's, a command
// tool's or an MCP tool's, named), ErrLimited (too many tools).
func (n *Node) PutTool(ctx context.Context, tenant, name string, sp harness.Spec) (err error) {
	defer code(&err)
	if err := harness.ValidName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if owner := n.tools.nameOwner(name); owner != "" {
		return fmt.Errorf("%w: the tool name %q is taken by %s; a harness tool needs a name of its own", ErrConflict, name, owner)
	}
	if err := sp.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := n.tools.registry.CheckFor(tenant, sp.Tool(tenant, name, n.tools.hub.Run)); err != nil {
		var re *tool.RegistrationError
		if errors.As(err, &re) && re.Rule == tool.RuleDuplicateName {
			return fmt.Errorf("%w: %w", ErrConflict, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	// Stored as given, normalized: what every node rebuilds the tool from.
	sp.Guidelines = slices.Clone(sp.Guidelines)
	err = n.tools.harness.Put(ctx, tenant, name, sp)
	if errors.Is(err, harness.ErrLimit) {
		return fmt.Errorf("%w: %w", ErrLimited, err)
	}
	return err
}

// DeleteTool removes tenant's harness tool name. Calls already planned
// still run it; new plans no longer see it. ErrNotFound when the tenant has
// no such tool.
func (n *Node) DeleteTool(ctx context.Context, tenant, name string) (err error) {
	defer code(&err)
	err = n.tools.harness.Delete(ctx, tenant, name)
	if errors.Is(err, harness.ErrNotFound) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

// HarnessTool returns tenant's registration of name.
func (n *Node) HarnessTool(tenant, name string) (harness.Spec, bool) {
	return n.tools.harness.Get(tenant, name)
}

// Poll waits for tasks of tenant's harness tools (POST /v1/workers/poll):
// up to p.Max, as soon as one comes, none when p.Wait ends first. ErrInvalid
// for a malformed poll or a tool that is not one of tenant's harness tools;
// ErrLimited when the tenant holds harness.MaxPollsPerTenant polls here.
func (n *Node) Poll(ctx context.Context, tenant string, p harness.PollRequest) (_ []harness.Task, err error) {
	defer code(&err)
	if err := n.checkPoll(tenant, p); err != nil {
		return nil, err
	}
	tasks, err := n.tools.hub.Poll(ctx, tenant, p)
	if errors.Is(err, harness.ErrLimit) {
		return nil, fmt.Errorf("%w: %w", ErrLimited, err)
	}
	return tasks, err
}

// CheckPoll reports what Poll would refuse p for, before anything is
// taken: ErrInvalid naming the field, or a tool that is not one of tenant's
// harness tools. A complete or fail that asks for the next tasks is checked
// with it before the answer is handed over.
func (n *Node) CheckPoll(tenant string, p harness.PollRequest) (err error) {
	defer code(&err)
	return n.checkPoll(tenant, p)
}

func (n *Node) checkPoll(tenant string, p harness.PollRequest) error {
	if err := p.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for i, name := range p.Tools {
		if _, ok := n.tools.harness.Get(tenant, name); !ok {
			return fmt.Errorf("%w: tools[%d]: %q is not a harness tool of your tenant; register it first (PUT /v1/tools/%s): only harness tools have tasks to poll", ErrInvalid, i, name, name)
		}
	}
	return nil
}

// TaskHeartbeat tells the attempt task names that its worker is alive and
// answers whether the call was cancelled. ErrConflict when no attempt of
// tenant waits on task.
func (n *Node) TaskHeartbeat(ctx context.Context, tenant, task string, details json.RawMessage) (_ bool, err error) {
	defer code(&err)
	cancel, err := n.tools.hub.Heartbeat(ctx, tenant, task, details)
	return cancel, harnessError(err)
}

// TaskComplete hands the attempt task names its result. ErrConflict when no
// attempt of tenant waits on task; ErrInvalid, ErrTooLarge for the result.
func (n *Node) TaskComplete(ctx context.Context, tenant, task string, content []tool.Part) (err error) {
	defer code(&err)
	return harnessError(n.tools.hub.Complete(ctx, tenant, task, content))
}

// TaskFail tells the attempt task names that its worker failed it;
// permanent stops retries of a safe tool. Errors as TaskComplete.
func (n *Node) TaskFail(ctx context.Context, tenant, task, message string, permanent bool) (err error) {
	defer code(&err)
	return harnessError(n.tools.hub.Fail(ctx, tenant, task, message, permanent))
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
