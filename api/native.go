package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/callsheet/callsheet/api/native"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// CodeNoToolCalls answers a provider-native turn whose response holds no
// function tool call (400): the model is done, there is nothing to run.
const CodeNoToolCalls = "no_tool_calls"

// nativeFree are the fields of a provider's response whose values are the
// model's or the caller's own JSON: keys in them are compared exactly when
// duplicates are looked for.
var nativeFree = append([]string{"input", "metadata"}, freeFields...)

// formatted routes a turn request by its ?format=: a provider's format
// (api/native) to nat, none to own, callsheet's own shape.
func (s *Server) formatted(own, nat handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, tenant string) error {
		if r.URL.Query().Get("format") == "" {
			return own(w, r, tenant)
		}
		return nat(w, r, tenant)
	}
}

// nativeFormat reads ?format= as a provider format; an unknown one is 400.
func nativeFormat(r *http.Request) (native.Format, error) {
	f, err := native.ParseFormat(r.URL.Query().Get("format"))
	if err != nil {
		return "", errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf(
			"query parameter format=%q: a turn is posted as openai_chat (or openai), openai_responses or anthropic; leave format out for callsheet's own {\"id\", \"calls\"}", r.URL.Query().Get("format")))
	}
	return f, nil
}

// submitNativeTurn is POST /v1/sessions/{s}/turns?format=F: the body is
// the provider's response (whole, or its assistant part), its function
// tool calls are the turn's calls in order, and the answer is what the
// harness appends to its conversation, in the provider's shape. The turn
// id is the response's id; ?turn= names it when the body has none (a bare
// message, output array or content array), and must agree with the body's
// when both are given. Without either the node mints one, and a repeated
// post runs the calls again: clients send ?turn=.
func (s *Server) submitNativeTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	f, err := nativeFormat(r)
	if err != nil {
		return err
	}
	wait, err := boolParam(r, "wait", true)
	if err != nil {
		return err
	}
	b, err := readBody(w, r, s.bodyLimit(r))
	if err != nil {
		return err
	}
	if err := duplicateKey(b, nativeFree...); err != nil {
		return errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
	}
	t, err := native.Decode(f, b)
	switch {
	case errors.Is(err, native.ErrNoCalls):
		return errorf(http.StatusBadRequest, CodeNoToolCalls, fmt.Sprintf("%v: append the model's message and stop, or post a response that calls a tool", err))
	case err != nil:
		return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("%v (format %s)", err, f))
	}
	id := t.ID
	if q := r.URL.Query().Get("turn"); q != "" {
		if id != "" && id != q {
			return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf(
				"query parameter turn=%q differs from the response's id %q: the response's id is the turn id; leave turn out, or post only the assistant part", q, id))
		}
		id = q
	}
	turn, err := s.node.SubmitTurn(r.Context(), tenant, r.PathValue("s"), id, t.Calls, wait)
	if err != nil {
		return err
	}
	return s.writeNative(w, r, tenant, f, turn, http.StatusAccepted)
}

// getNativeTurn is GET /v1/sessions/{s}/turns/{t}?format=F: the turn's
// answer in the provider's shape once complete, else what it waits for.
func (s *Server) getNativeTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	f, err := nativeFormat(r)
	if err != nil {
		return err
	}
	turn, err := s.node.Turn(r.Context(), tenant, r.PathValue("s"), r.PathValue("t"))
	if err != nil {
		return err
	}
	return s.writeNative(w, r, tenant, f, turn, http.StatusOK)
}

// writeNative writes a complete turn's answer in format f (200), or a
// running turn's native.Running with runningStatus.
func (s *Server) writeNative(w http.ResponseWriter, r *http.Request, tenant string, f native.Format, turn projections.Turn, runningStatus int) error {
	if turn.Status == projections.StatusComplete {
		a, err := native.Answer(f, turn)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, a)
		return nil
	}
	run := native.Running{Turn: turn.Turn, Status: projections.StatusRunning, Waiting: []native.Waiting{}}
	if evs, err := s.node.Events(r.Context(), tenant, r.PathValue("s"), 0, false); err == nil {
		var all []events.Event
		for ev := range evs {
			all = append(all, ev)
		}
		run.Waiting = native.Pending(turn.Turn, all)
	} else {
		s.log.Warn("reading the events for a running turn's answer failed", "tenant", tenant, "session", r.PathValue("s"), "err", err)
	}
	writeJSON(w, runningStatus, run)
	return nil
}
