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
	// By is refused (byRefused): the decider is the authenticated
	// principal. It is decoded only to say so clearly.
	By json.RawMessage `json:"by,omitempty"`
}

// byRefused is the answer to a body that names its decider. The body is
// refused rather than the field ignored: a client that relied on "by"
// learns at once that its name is not what the log records, instead of
// finding out from an audit. The X-Callsheet-User header is ignored, not
// refused: proxies add such headers to every request, and it was never part
// of a body's contract (docs/permissions.md, "Who decided").
func byRefused(r *http.Request) error {
	return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`"by" is not accepted: the decider recorded is the authenticated principal, %q (named by your bearer token's "principal" in the node's config), never a name in the body; remove "by"`, principal(r)))
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req approvalRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	if req.By != nil {
		return byRefused(r)
	}
	var allow bool
	switch req.Decision {
	case "allow":
		allow = true
	case "deny":
	default:
		return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`decision %q: use "allow" or "deny"`, req.Decision))
	}
	if err := s.node.Approve(r.Context(), tenant, r.PathValue("s"), r.PathValue("call"), allow, principal(r), req.Reason, req.Scope); err != nil {
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
	// By is refused, as in approvalRequest: the author recorded is the
	// authenticated principal.
	By json.RawMessage `json:"by,omitempty"`
}

func (s *Server) answer(w http.ResponseWriter, r *http.Request, tenant string) error {
	var req answerRequest
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
		return err
	}
	if req.By != nil {
		return byRefused(r)
	}
	if len(req.Answer) == 0 {
		return errorf(http.StatusBadRequest, CodeInvalidBody, `the body needs "answer": any JSON value`)
	}
	if err := s.node.Answer(r.Context(), tenant, r.PathValue("s"), r.PathValue("call"), req.Answer, principal(r)); err != nil {
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
	if err := decodeBody(w, r, s.bodyLimit(r), &req, false); err != nil {
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
	if err := decodeBody(w, r, s.bodyLimit(r), &req, true); err != nil {
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
	if err := decodeBody(w, r, s.bodyLimit(r), &req, true); err != nil {
		return err
	}
	if err := s.node.CloseSession(r.Context(), tenant, r.PathValue("s"), req.Reason); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"session": r.PathValue("s"), "status": "closed"})
	return nil
}
