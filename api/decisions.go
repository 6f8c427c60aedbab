package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/callsheet/callsheet/events"
)

// approvalRequest is the body of POST /v1/sessions/{s}/approvals/{call}.
type approvalRequest struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason,omitempty"`
	// Scope: "call" (default), "tool_args" (this tool with these arguments
	// for the session) or "tool" (this tool for the session).
	Scope string `json:"scope,omitempty"`
	// By names the person deciding; else the X-Callsheet-User header; else
	// "api:<tenant>".
	By string `json:"by,omitempty"`
}

// decider is who made a decision: the body's by, the X-Callsheet-User
// header, or the authenticated tenant.
func decider(r *http.Request, by, tenant string) string {
	if by != "" {
		return by
	}
	if u := r.Header.Get("X-Callsheet-User"); u != "" {
		return u
	}
	return "api:" + tenant
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req approvalRequest
	if err := decodeBody(w, r, s.maxBody, &req, false); err != nil {
		return err
	}
	var allow bool
	switch req.Decision {
	case "allow":
		allow = true
	case "deny":
	default:
		return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`decision %q: use "allow" or "deny"`, req.Decision))
	}
	if err := s.node.Approve(r.Context(), tenant, r.PathValue("s"), r.PathValue("call"), allow, decider(r, req.By, tenant), req.Reason, req.Scope); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"call": r.PathValue("call"), "decision": req.Decision})
	return nil
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, tenant string) error {
	list, err := s.node.Approvals(r.Context(), tenant, r.PathValue("s"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string][]events.ApprovalRequested{"approvals": list})
	return nil
}

// answerRequest is the body of POST /v1/sessions/{s}/answers/{call}.
type answerRequest struct {
	Answer json.RawMessage `json:"answer"`
	By     string          `json:"by,omitempty"`
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req answerRequest
	if err := decodeBody(w, r, s.maxBody, &req, false); err != nil {
		return err
	}
	if len(req.Answer) == 0 {
		return errorf(http.StatusBadRequest, CodeInvalidBody, `the body needs "answer": any JSON value`)
	}
	if err := s.node.Answer(r.Context(), tenant, r.PathValue("s"), r.PathValue("call"), req.Answer, decider(r, req.By, tenant)); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"call": r.PathValue("call"), "status": "answered"})
	return nil
}

// rewindRequest is the body of POST /v1/sessions/{s}/rewind.
type rewindRequest struct {
	Call string `json:"call"`
	// Turn names the call's turn; without it the latest call with that id
	// is meant (models reuse ids such as "call_1" across turns).
	Turn string `json:"turn,omitempty"`
}

func (s *Server) rewind(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req rewindRequest
	if err := decodeBody(w, r, s.maxBody, &req, false); err != nil {
		return err
	}
	if req.Call == "" {
		return errorf(http.StatusBadRequest, CodeInvalidBody, `the body needs "call": the id of the call to rewind to (its state just before it)`)
	}
	res, err := s.node.Rewind(r.Context(), tenant, r.PathValue("s"), req.Turn, req.Call)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}

// cancelRequest is the body of POST /v1/sessions/{s}/turns/{t}/cancel.
type cancelRequest struct {
	Call   string `json:"call,omitempty"`
	Reason string `json:"reason,omitempty"`
}

func (s *Server) cancelTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req cancelRequest
	if err := decodeBody(w, r, s.maxBody, &req, true); err != nil {
		return err
	}
	if err := s.node.CancelTurn(r.Context(), tenant, r.PathValue("s"), r.PathValue("t"), req.Call, req.Reason); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"turn": r.PathValue("t"), "status": "cancelling"})
	return nil
}

// closeRequest is the body of POST /v1/sessions/{s}/close.
type closeRequest struct {
	Reason string `json:"reason,omitempty"`
}

func (s *Server) closeSession(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req closeRequest
	if err := decodeBody(w, r, s.maxBody, &req, true); err != nil {
		return err
	}
	if err := s.node.CloseSession(r.Context(), tenant, r.PathValue("s"), req.Reason); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"session": r.PathValue("s"), "status": "closed"})
	return nil
}
