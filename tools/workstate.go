package tools

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/callsheet/callsheet/tool"
)

// Durable work state (docs/spec.md §5): plan, todo and goal live in the session's
// log as WorkStateUpdated events, so any node, after any restart, reads back
// what the model last set. The *_update tools replace the whole value (so a
// retry is harmless: replay safe); they change durable state, so they are
// side-effecting and strict mode asks before they run.

// PlanStep is one step of a plan.
type PlanStep struct {
	Step   string `json:"step" jsonschema:"what to do, one short sentence"`
	Status string `json:"status" enum:"pending,in_progress,completed" jsonschema:"pending, in_progress or completed"`
}

type planArgs struct {
	Steps       []PlanStep `json:"steps" jsonschema:"the whole plan, in order; it replaces the previous one"`
	Explanation string     `json:"explanation,omitempty" jsonschema:"why the plan changed"`
}

// Todo is one item of a todo list.
type Todo struct {
	Content string `json:"content" jsonschema:"the task"`
	Status  string `json:"status" enum:"pending,in_progress,completed" jsonschema:"pending, in_progress or completed"`
}

type todoArgs struct {
	Todos []Todo `json:"todos" jsonschema:"the whole list; it replaces the previous one"`
}

type goalArgs struct {
	Goal   string `json:"goal" jsonschema:"the goal, stated so that done is checkable"`
	Status string `json:"status,omitempty" enum:"active,achieved,abandoned" default:"active" jsonschema:"active, achieved or abandoned"`
}

type noArgs struct{}

var (
	readState   = tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
	updateState = tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyExclusive}
)

// WorkStateTools returns plan_get, plan_update, todo_get, todo_update,
// goal_get and goal_update.
func WorkStateTools() ([]*tool.Tool, error) {
	var out []*tool.Tool
	add := func(t *tool.Tool, err error) error {
		if err == nil {
			out = append(out, t)
		}
		return err
	}
	for _, err := range []error{
		add(getter("plan", "Read the session's current plan (the steps and their status).")),
		add(tool.New("plan_update", "Replace the session's plan: the ordered steps and their status.",
			func(ctx context.Context, a planArgs) (tool.Result, error) {
				inProgress := 0
				for i, s := range a.Steps {
					if s.Step == "" {
						return tool.Result{}, tool.Permanent(fmt.Errorf("steps[%d].step is empty", i))
					}
					if s.Status == "in_progress" {
						inProgress++
					}
				}
				if inProgress > 1 {
					return tool.Result{}, tool.Permanent(fmt.Errorf("%d steps are in_progress; keep at most one in progress", inProgress))
				}
				return setState("plan", a, fmt.Sprintf("plan updated: %d steps", len(a.Steps)))
			},
			tool.WithWorkspaceFree(), tool.WithDeclarations(updateState),
			tool.WithGuidelines("Use for multi-step work: write the plan before starting and update a step's status as soon as it changes.", "Keep at most one step in_progress."),
			tool.WithSnippet(`plan_update(steps=[{"step":"read the failing test","status":"completed"},{"step":"fix the parser","status":"in_progress"}])`))),
		add(getter("todo", "Read the session's todo list.")),
		add(tool.New("todo_update", "Replace the session's todo list.",
			func(ctx context.Context, a todoArgs) (tool.Result, error) {
				return setState("todo", a, fmt.Sprintf("todo list updated: %d items", len(a.Todos)))
			},
			tool.WithWorkspaceFree(), tool.WithDeclarations(updateState),
			tool.WithGuidelines("Use to track small, concrete tasks; mark an item completed as soon as it is done."),
			tool.WithSnippet(`todo_update(todos=[{"content":"add a test for empty input","status":"pending"}])`))),
		add(getter("goal", "Read the session's goal and its status.")),
		add(tool.New("goal_update", "Set the session's goal, or mark it achieved or abandoned.",
			func(ctx context.Context, a goalArgs) (tool.Result, error) {
				return setState("goal", a, fmt.Sprintf("goal %s: %s", a.Status, a.Goal))
			},
			tool.WithWorkspaceFree(), tool.WithDeclarations(updateState),
			tool.WithGuidelines("Set the goal once at the start of long work; mark it achieved only when you have checked it is."),
			tool.WithSnippet(`goal_update(goal="all tests in ./parser pass", status="active")`))),
	} {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func getter(kind, desc string) (*tool.Tool, error) {
	return tool.New(kind+"_get", desc, func(ctx context.Context, _ noArgs) (tool.Result, error) {
		rt, err := tool.RuntimeFrom(ctx)
		if err != nil {
			return tool.Result{}, err
		}
		v, err := rt.State(ctx, kind)
		if err != nil {
			return tool.Result{}, err
		}
		if v == nil {
			return tool.Text(fmt.Sprintf("no %s has been set in this session", kind)), nil
		}
		return tool.Result{Parts: []tool.Part{{Type: tool.PartJSON, JSON: v}}}, nil
	}, tool.WithWorkspaceFree(), tool.WithDeclarations(readState),
		tool.WithGuidelines(fmt.Sprintf("Use to recall the %s after a long pause or a restart instead of guessing it.", kind)),
		tool.WithSnippet(kind+"_get()"))
}

func setState(kind string, v any, summary string) (tool.Result, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Parts: []tool.Part{{Type: tool.PartText, Text: summary}}, State: &tool.StateUpdate{Kind: kind, Value: b}}, nil
}
