package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/callsheet/callsheet/harness"
	"github.com/callsheet/callsheet/internal/opsmetrics"
	"github.com/callsheet/callsheet/tool"
)

// The harness tools and workers routes (docs/spec.md §7, docs/workers.md).

// pollRequest is the body of POST /v1/workers/poll.
type pollRequest struct {
	Worker string   `json:"worker"`
	Tools  []string `json:"tools"`
	Max    int      `json:"max"`
	WaitMS int64    `json:"wait_ms"`
}

// heartbeatRequest is the body of POST /v1/tasks/{task}/heartbeat (may be
// empty).
type heartbeatRequest struct {
	Details json.RawMessage `json:"details"`
}

// completeRequest is the body of POST /v1/tasks/{task}/complete; Next, a
// poll's body, asks for the worker's next tasks in the same exchange.
type completeRequest struct {
	Content *[]tool.Part `json:"content"`
	Next    *pollRequest `json:"next"`
}

// failRequest is the body of POST /v1/tasks/{task}/fail; Next as for
// complete.
type failRequest struct {
	Error     string       `json:"error"`
	Permanent bool         `json:"permanent"`
	Next      *pollRequest `json:"next"`
}

// registered is the answer to PUT /v1/tools/{name}: the registration as
// it is kept, every declaration filled in.
type registered struct {
	Name             string           `json:"name"`
	Effect           tool.Effect      `json:"effect"`
	Replay           tool.Replay      `json:"replay"`
	Concurrency      tool.Concurrency `json:"concurrency"`
	TimeoutMS        int64            `json:"timeout_ms"`
	HeartbeatTimeout int64            `json:"heartbeat_timeout_ms,omitempty"`
}

// accepted answers a complete or fail the waiting call took.
type accepted struct {
	Accepted bool `json:"accepted"`
}

// acceptedNext answers a complete or fail that asked for the next tasks:
// accepted, and the poll's answer (Tasks empty when none came within its
// wait). NextError says why the poll took nothing when it was refused after
// the answer was accepted (the tenant's polls at their limit).
type acceptedNext struct {
	Accepted  bool           `json:"accepted"`
	Tasks     []harness.Task `json:"tasks"`
	NextError *errorDetail   `json:"next_error,omitempty"`
}

// errorDetail is an error's code and message, as in an error answer.
type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *Server) putTool(w http.ResponseWriter, r *http.Request, tenant string) error {
	var sp harness.Spec
	if err := decodeBody(w, r, s.bodyLimit(r), &sp, false); err != nil {
		return err
	}
	name := r.PathValue("name")
	if err := s.node.PutTool(r.Context(), tenant, name, sp); err != nil {
		return err
	}
	d := tool.Declarations{Effect: sp.Effect, Replay: sp.Replay, Concurrency: sp.Concurrency}.Normalize()
	writeJSON(w, http.StatusOK, registered{Name: name, Effect: d.Effect, Replay: d.Replay, Concurrency: d.Concurrency,
		TimeoutMS: sp.EffectiveTimeout().Milliseconds(), HeartbeatTimeout: sp.HeartbeatTimeout.Std().Milliseconds()})
	return nil
}

func (s *Server) deleteTool(w http.ResponseWriter, r *http.Request, tenant string) error {
	if err := s.node.DeleteTool(r.Context(), tenant, r.PathValue("name")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// tasksAnswer is the answer of a poll that got tasks.
type tasksAnswer struct {
	Tasks []harness.Task `json:"tasks"`
}

func (s *Server) poll(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req pollRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	p, err := req.poll("")
	if err != nil {
		return err
	}
	tasks, err := s.heldPoll(r, tenant, p)
	if err != nil {
		return err
	}
	if len(tasks) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	writeJSON(w, http.StatusOK, tasksAnswer{Tasks: tasks})
	return nil
}

// poll returns the hub's poll request, or a 400 naming a wait_ms out of
// bounds (at names the body field holding the poll: "next." or "").
func (req pollRequest) poll(at string) (harness.PollRequest, error) {
	if req.WaitMS < 0 || req.WaitMS > harness.MaxWait.Milliseconds() {
		return harness.PollRequest{}, errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("%swait_ms %d: use 0..%d (how long the poll is held when no task is there)", at, req.WaitMS, harness.MaxWait.Milliseconds()))
	}
	return harness.PollRequest{Worker: req.Worker, Tools: req.Tools, Max: req.Max, Wait: time.Duration(req.WaitMS) * time.Millisecond}, nil
}

// heldPoll holds p until tasks come or its wait ends; it ends at shutdown
// too (CloseStreams), having taken nothing.
func (s *Server) heldPoll(r *http.Request, tenant string, p harness.PollRequest) ([]harness.Task, error) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	ops := s.node.OpsMetrics()
	ops.PollWaiting(tenant, 1)
	tasks, err := s.node.Poll(ctx, tenant, p)
	ops.PollWaiting(tenant, -1)
	if err != nil {
		return nil, err
	}
	ops.Task(opsmetrics.TaskHanded, tenant, len(tasks))
	return tasks, nil
}

// checkNext returns the poll a complete or fail asks for with its answer,
// checked as POST /v1/workers/poll checks it (fields, the tenant's harness
// tools) before the answer is handed over: a refused next hands over
// nothing. nil when next is nil.
func (s *Server) checkNext(tenant string, next *pollRequest) (*harness.PollRequest, error) {
	if next == nil {
		return nil, nil
	}
	p, err := next.poll("next.")
	if err != nil {
		return nil, err
	}
	if err := s.node.CheckPoll(tenant, p); err != nil {
		e, _ := toError(err)
		e.Message = "next: " + e.Message + " (the answer was not handed over: send it again with a valid next, or without one)"
		return nil, e
	}
	return &p, nil
}

// answered writes the answer to an accepted complete or fail: with next,
// after holding the next poll, its tasks.
func (s *Server) answered(w http.ResponseWriter, r *http.Request, tenant string, next *harness.PollRequest) {
	if next == nil {
		writeJSON(w, http.StatusOK, accepted{Accepted: true})
		return
	}
	a := acceptedNext{Accepted: true, Tasks: []harness.Task{}}
	tasks, err := s.heldPoll(r, tenant, *next)
	if err != nil {
		e, internal := toError(err)
		if internal {
			s.logFault(r, tenant, e, err)
		}
		a.NextError = &errorDetail{Code: e.Code, Message: e.Message}
	} else if len(tasks) > 0 {
		a.Tasks = tasks
	}
	writeJSON(w, http.StatusOK, a)
}

func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req heartbeatRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, true); err != nil {
		return err
	}
	cancel, err := s.node.TaskHeartbeat(r.Context(), tenant, r.PathValue("task"), req.Details)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]bool{"cancel": cancel})
	return nil
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req completeRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	if req.Content == nil {
		return errorf(http.StatusBadRequest, CodeInvalidBody, `"content" is missing: send the result as {"content": [{"type": "text", "text": "..."}]} (an empty list for no output)`)
	}
	next, err := s.checkNext(tenant, req.Next)
	if err != nil {
		return err
	}
	if err := s.node.TaskComplete(r.Context(), tenant, r.PathValue("task"), *req.Content); err != nil {
		return err
	}
	s.node.OpsMetrics().Task(opsmetrics.TaskCompleted, tenant, 1)
	s.answered(w, r, tenant, next)
	return nil
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req failRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	next, err := s.checkNext(tenant, req.Next)
	if err != nil {
		return err
	}
	if err := s.node.TaskFail(r.Context(), tenant, r.PathValue("task"), req.Error, req.Permanent); err != nil {
		return err
	}
	s.node.OpsMetrics().Task(opsmetrics.TaskFailed, tenant, 1)
	s.answered(w, r, tenant, next)
	return nil
}
