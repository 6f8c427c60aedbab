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

// completeRequest is the body of POST /v1/tasks/{task}/complete.
type completeRequest struct {
	Content *[]tool.Part `json:"content"`
}

// failRequest is the body of POST /v1/tasks/{task}/fail.
type failRequest struct {
	Error     string `json:"error"`
	Permanent bool   `json:"permanent"`
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
	if req.WaitMS < 0 || req.WaitMS > harness.MaxWait.Milliseconds() {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("wait_ms %d: use 0..%d (how long the poll is held when no task is there)", req.WaitMS, harness.MaxWait.Milliseconds()))
	}
	// A held poll ends at shutdown too (CloseStreams), having taken nothing.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(s.streams, cancel)
	defer stop()
	ops := s.node.OpsMetrics()
	ops.PollWaiting(tenant, 1)
	tasks, err := s.node.Poll(ctx, tenant, harness.PollRequest{Worker: req.Worker, Tools: req.Tools, Max: req.Max, Wait: time.Duration(req.WaitMS) * time.Millisecond})
	ops.PollWaiting(tenant, -1)
	if err != nil {
		return err
	}
	ops.Task(opsmetrics.TaskHanded, tenant, len(tasks))
	if len(tasks) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	writeJSON(w, http.StatusOK, tasksAnswer{Tasks: tasks})
	return nil
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
	if err := s.node.TaskComplete(r.Context(), tenant, r.PathValue("task"), *req.Content); err != nil {
		return err
	}
	s.node.OpsMetrics().Task(opsmetrics.TaskCompleted, tenant, 1)
	writeJSON(w, http.StatusOK, accepted{Accepted: true})
	return nil
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req failRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	if err := s.node.TaskFail(r.Context(), tenant, r.PathValue("task"), req.Error, req.Permanent); err != nil {
		return err
	}
	s.node.OpsMetrics().Task(opsmetrics.TaskFailed, tenant, 1)
	writeJSON(w, http.StatusOK, accepted{Accepted: true})
	return nil
}
