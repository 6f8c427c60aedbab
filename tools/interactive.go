package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/callsheet/callsheet/tool"
)

type questionArgs struct {
	Question string   `json:"question" jsonschema:"the question to ask the user, self-contained"`
	Options  []string `json:"options,omitempty" jsonschema:"choices to offer, if the answer is one of a few"`
}

// QuestionTool asks the user a structured question and waits, without a
// timeout, for the answer given through POST /v1/sessions/{s}/answers/{call}.
// The answer is an event, so a node restarted while waiting reads it back.
func QuestionTool() (*tool.Tool, error) {
	return tool.New("question", "Ask the user a question and wait for the answer.",
		func(ctx context.Context, a questionArgs) (tool.Result, error) {
			rt, err := tool.RuntimeFrom(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			answer, err := rt.Answer(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			return tool.Result{Parts: []tool.Part{{Type: tool.PartJSON, JSON: mustJSON(map[string]json.RawMessage{"answer": answer})}}}, nil
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectUserMediated, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}),
		tool.WithTimeout(tool.Infinite),
		tool.WithGuidelines("Ask only what you cannot find out yourself; offer options when the answer is one of a few."),
		tool.WithSnippet(`question(question="Deploy to staging or production?", options=["staging","production"])`))
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

type bgArgs struct {
	Action    string `json:"action" enum:"list,output,wait,cancel" jsonschema:"list jobs, show a job's output, wait for a job, or cancel it"`
	Job       string `json:"job,omitempty" jsonschema:"the job id (from a background call's result); required except for list"`
	TimeoutMS int    `json:"timeout_ms,omitempty" minimum:"1" maximum:"600000" jsonschema:"for wait: give up after this many milliseconds (default 60000)"`
}

type jobArgs struct {
	Job string `json:"job" jsonschema:"the job id"`
}

// JobTools returns bg (inspect or cancel background calls; list, output and
// wait are read-only, cancel is side-effecting) and job (a job's status).
func JobTools() ([]*tool.Tool, error) {
	bg, err := tool.New("bg", "Inspect background jobs (list, output, wait) or cancel one.",
		func(ctx context.Context, a bgArgs) (tool.Result, error) {
			rt, err := tool.RuntimeFrom(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			if a.Action != "list" && a.Job == "" {
				return tool.Result{}, tool.Permanent(fmt.Errorf("bg %s needs a job id; use bg list to see them", a.Action))
			}
			switch a.Action {
			case "list":
				jobs, err := rt.Jobs(ctx)
				if err != nil {
					return tool.Result{}, err
				}
				for i := range jobs {
					jobs[i].Output = nil // list shows status only
				}
				return tool.JSON(map[string]any{"jobs": jobs})
			case "output":
				j, err := rt.Job(ctx, a.Job, false)
				if err != nil {
					return tool.Result{}, err
				}
				return jobResult(j)
			case "wait":
				wait := 60 * time.Second
				if a.TimeoutMS > 0 {
					wait = time.Duration(a.TimeoutMS) * time.Millisecond
				}
				wctx, cancel := context.WithTimeout(ctx, wait)
				defer cancel()
				j, err := rt.Job(wctx, a.Job, true)
				if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
					if j, err = rt.Job(ctx, a.Job, false); err == nil {
						return jobResult(j)
					}
				}
				if err != nil {
					return tool.Result{}, err
				}
				return jobResult(j)
			default: // cancel
				if err := rt.CancelJob(ctx, a.Job); err != nil {
					return tool.Result{}, err
				}
				return tool.Text("cancellation of job " + a.Job + " recorded"), nil
			}
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}),
		tool.WithClassify(func(a bgArgs) tool.Declarations {
			if a.Action == "cancel" {
				return tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}
			}
			return tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}
		}),
		tool.WithTimeout(11*time.Minute),
		tool.WithGuidelines("Use wait instead of polling output in a loop.", "cancel stops a running job; its effects so far stay."),
		tool.WithSnippet(`bg(action="wait", job="01J.../t1/0", timeout_ms=30000)`))
	if err != nil {
		return nil, err
	}
	job, err := tool.New("job", "Report a background job's status and, once done, its output.",
		func(ctx context.Context, a jobArgs) (tool.Result, error) {
			rt, err := tool.RuntimeFrom(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			j, err := rt.Job(ctx, a.Job, false)
			if err != nil {
				return tool.Result{}, err
			}
			return jobResult(j)
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}),
		tool.WithGuidelines("Use to check on a job started by a background call."),
		tool.WithSnippet(`job(job="01J.../t1/0")`))
	if err != nil {
		return nil, err
	}
	return []*tool.Tool{bg, job}, nil
}

func jobResult(j tool.Job) (tool.Result, error) {
	head, err := tool.JSON(map[string]string{"job": j.ID, "tool": j.Tool, "call": j.Call, "status": j.Status})
	if err != nil {
		return tool.Result{}, err
	}
	head.Parts = append(head.Parts, j.Output...)
	return head, nil
}

type toolSearchArgs struct {
	Query string `json:"query" jsonschema:"words to look for in tool names and descriptions"`
	Limit int    `json:"limit,omitempty" default:"5" minimum:"1" maximum:"20" jsonschema:"how many tools to return"`
}

// ToolSearchTool finds tools, deferred ones included, by words in their name
// and description, and returns their definitions so the model can call them.
func ToolSearchTool() (*tool.Tool, error) {
	return tool.New("tool_search", "Find more tools by what they do; returns their definitions.",
		func(ctx context.Context, a toolSearchArgs) (tool.Result, error) {
			rt, err := tool.RuntimeFrom(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			words := strings.Fields(strings.ToLower(a.Query))
			type hit struct {
				t     *tool.Tool
				score int
			}
			var hits []hit
			for _, t := range rt.Tools() {
				hay := strings.ToLower(t.Name + " " + t.Description + " " + strings.Join(t.Guidelines, " "))
				score := 0
				for _, w := range words {
					if strings.Contains(hay, w) {
						score++
					}
					if strings.Contains(strings.ToLower(t.Name), w) {
						score += 2
					}
				}
				if score > 0 {
					hits = append(hits, hit{t, score})
				}
			}
			sort.SliceStable(hits, func(i, j int) bool {
				if hits[i].score != hits[j].score {
					return hits[i].score > hits[j].score
				}
				return hits[i].t.Name < hits[j].t.Name
			})
			type def struct {
				Name        string          `json:"name"`
				Description string          `json:"description"`
				InputSchema json.RawMessage `json:"input_schema"`
			}
			defs := []def{}
			for _, h := range hits[:min(len(hits), a.Limit)] {
				defs = append(defs, def{h.t.Name, h.t.Description, h.t.InputSchema})
			}
			return tool.JSON(map[string]any{"tools": defs})
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}),
		tool.WithGuidelines("Use when none of your tools fits: more tools exist than are listed."),
		tool.WithSnippet(`tool_search(query="kubernetes logs")`))
}

type memoryArgs struct {
	Memory string `json:"memory" jsonschema:"one fact worth remembering across sessions, stated plainly"`
	Why    string `json:"why,omitempty" jsonschema:"why it is worth remembering"`
}

// MemoryProposeTool records a proposed memory in the session's durable state
// (kind "memory"); whoever curates memory reads the proposals from the log.
func MemoryProposeTool() (*tool.Tool, error) {
	return tool.New("memory_propose", "Propose a fact to remember across sessions; a curator decides.",
		func(ctx context.Context, a memoryArgs) (tool.Result, error) {
			rt, err := tool.RuntimeFrom(ctx)
			if err != nil {
				return tool.Result{}, err
			}
			var list []memoryArgs
			if prev, err := rt.State(ctx, "memory"); err == nil && prev != nil {
				_ = json.Unmarshal(prev, &list)
			}
			list = append(list, a)
			return setState("memory", list, fmt.Sprintf("memory proposed (%d proposals in this session)", len(list)))
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}),
		tool.WithGuidelines("Propose only durable, non-secret facts (preferences, conventions), never credentials."),
		tool.WithSnippet(`memory_propose(memory="The user prefers tabs in Go files")`))
}

type slotArgs struct {
	Request json.RawMessage `json:"request,omitempty" jsonschema:"the request"`
}

// UnbackedSlots returns execute and lsp: registered slots outside the default
// surface with nothing behind them on this node. The runtime reports them as
// unavailable (blocked) rather than running them.
func UnbackedSlots() ([]*tool.Tool, error) {
	var out []*tool.Tool
	for _, s := range []struct{ name, desc string }{
		{"execute", "Run code in a managed execution environment."},
		{"lsp", "Ask a language server (definitions, references, diagnostics)."},
	} {
		name := s.name
		t, err := tool.New(name, s.desc, func(ctx context.Context, a slotArgs) (tool.Result, error) {
			return tool.Result{}, fmt.Errorf("%s is unavailable: nothing backs it on this node", name)
		}, tool.WithGuidelines("Registered slot: available only where an operator backs it."))
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// UnbackedNames are the slots UnbackedSlots registers.
var UnbackedNames = []string{"execute", "lsp"}

// IsUnbacked reports whether name is an unbacked slot.
func IsUnbacked(name string) bool { return slices.Contains(UnbackedNames, name) }

type taskArgs struct {
	Goal    string `json:"goal" jsonschema:"a bounded goal for the delegate, with what done means"`
	Context string `json:"context,omitempty" jsonschema:"what the delegate needs to know"`
	Agent   string `json:"agent,omitempty" jsonschema:"which configured agent should do it"`
}

// TaskTool delegates a bounded goal to another agent through the host's
// delegate: an HTTP endpoint of the harness that runs a child session and
// answers {"result": "..."}. The child's own calls are calls of their own,
// with their own declarations and approvals. capacity is
// concurrency.delegations (a self-concurrency group).
func TaskTool(endpoint string, capacity int, client *http.Client) (*tool.Tool, error) {
	if client == nil {
		client = &http.Client{Timeout: 0}
	}
	return tool.New("task", "Delegate a bounded goal to another agent and get its result.",
		func(ctx context.Context, a taskArgs) (tool.Result, error) {
			call, _ := tool.CallFrom(ctx)
			body, _ := json.Marshal(map[string]any{
				"tenant": call.Tenant, "session": call.Session, "turn": call.Turn, "call": call.ID,
				"idempotency_key": call.IdempotencyKey, "goal": a.Goal, "context": a.Context, "agent": a.Agent,
			})
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
			if err != nil {
				return tool.Result{}, err
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Idempotency-Key", call.IdempotencyKey)
			resp, err := client.Do(req)
			if err != nil {
				return tool.Result{}, fmt.Errorf("delegate unreachable: %w", err)
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
			if err != nil {
				return tool.Result{}, err
			}
			if resp.StatusCode/100 != 2 {
				return tool.Result{}, fmt.Errorf("delegate answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
			}
			var out struct {
				Result string `json:"result"`
			}
			if err := json.Unmarshal(b, &out); err != nil {
				return tool.Result{}, fmt.Errorf("delegate answered undecodable JSON (want {\"result\": \"...\"}): %w", err)
			}
			return tool.Text(out.Result), nil
		},
		tool.WithWorkspaceFree(), tool.WithDeclarations(tool.Declarations{Effect: tool.EffectDelegating, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}),
		tool.WithSelfConcurrency(func() int { return capacity }),
		tool.WithTimeout(30*time.Minute),
		tool.WithGuidelines("Delegate only self-contained work with a clear end; include everything the delegate needs in context."),
		tool.WithSnippet(`task(goal="find every caller of ParseConfig and list them with file:line")`))
}
