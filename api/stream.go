package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/callsheet/callsheet/api/native"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

// Streamed turns (docs/spec.md §8): POST .../turns/{t}/calls adds calls to
// an open turn, the first post opening it, and POST .../turns/{t}/end
// closes it and answers as a posted turn does. With ?format= a batch is
// the provider's streamed piece (api/native.DecodeBatch) and the end
// answers in the provider's shape.

// batchRequest is the body of POST .../turns/{t}/calls in callsheet's own
// shape.
type batchRequest struct {
	Calls []events.CallSpec `json:"calls"`
	// From is the index the batch starts at: the calls posted before it.
	From *int `json:"from"`
	// ParallelToolCalls and Cap, on the first batch, set the turn's
	// scheduling.
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
	Cap               *int  `json:"cap"`
}

// endRequest is the optional body of POST .../turns/{t}/end.
type endRequest struct {
	// Calls is how many calls the harness posted to the turn.
	Calls *int `json:"calls"`
}

// addCalls is POST /v1/sessions/{s}/turns/{t}/calls: one batch of the
// streamed turn t, answered once it is recorded with {"turn", "status":
// "open"|"ended", "from", "size", "calls", "parallel_tool_calls", "cap"} (202).
func (s *Server) addCalls(w http.ResponseWriter, r *http.Request, tenant string) error {
	var o node.BatchOptions
	var calls []events.CallSpec
	if r.URL.Query().Get("format") == "" {
		var req batchRequest
		if err := decodeBody(w, r, s.maxBody, &req, false); err != nil {
			return err
		}
		if err := (turnRequest{Calls: req.Calls}).check(); err != nil {
			return err
		}
		calls, o.ParallelToolCalls, o.Cap = req.Calls, req.ParallelToolCalls, req.Cap
		o.From = -1
		if req.From != nil {
			o.From = *req.From
		}
	} else {
		f, err := nativeFormat(r)
		if err != nil {
			return err
		}
		if o, err = batchQuery(r); err != nil {
			return err
		}
		b, err := readBody(w, r, s.maxBody)
		if err != nil {
			return err
		}
		if err := duplicateKey(b, nativeFree...); err != nil {
			return errorf(http.StatusBadRequest, CodeInvalidBody, err.Error())
		}
		calls, err = native.DecodeBatch(f, b)
		switch {
		case errors.Is(err, native.ErrNoCalls):
			return errorf(http.StatusBadRequest, CodeNoToolCalls, fmt.Sprintf("%v; text, reasoning and the harness's own tool kinds are not posted", err))
		case err != nil:
			return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf("%v (format %s)", err, f))
		}
	}
	if o.From < -1 {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("from %d: give the count of calls posted to the turn before this batch (0 for the first), or leave it out", o.From))
	}
	if o.Cap != nil && *o.Cap < 1 {
		return errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("cap %d: give at least 1 (the most parallel-safe calls of the turn to run at once), or leave it out for the session's", *o.Cap))
	}
	b, err := s.node.AddCalls(r.Context(), tenant, r.PathValue("s"), r.PathValue("t"), calls, o)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, b)
	return nil
}

// batchQuery reads a native batch's from, parallel_tool_calls and cap from
// the query (the body is the provider's piece).
func batchQuery(r *http.Request) (node.BatchOptions, error) {
	o := node.BatchOptions{From: -1}
	q := r.URL.Query()
	num := func(name string) (*int, error) {
		v := q.Get(name)
		if v == "" {
			return nil, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return nil, errorf(http.StatusBadRequest, CodeInvalidRequest, fmt.Sprintf("query parameter %s=%q: want a whole number", name, v))
		}
		return &n, nil
	}
	from, err := num("from")
	if err != nil {
		return o, err
	}
	if from != nil {
		o.From = *from
	}
	if o.Cap, err = num("cap"); err != nil {
		return o, err
	}
	if q.Has("parallel_tool_calls") {
		p, err := boolParam(r, "parallel_tool_calls", true)
		if err != nil {
			return o, err
		}
		o.ParallelToolCalls = &p
	}
	return o, nil
}

// endTurn is POST /v1/sessions/{s}/turns/{t}/end: the streamed turn t has
// all its calls; the answer is a posted turn's (200 complete, or 202 with
// ?wait=0), in the provider's shape with ?format=.
func (s *Server) endTurn(w http.ResponseWriter, r *http.Request, tenant string) error {
	wait, err := boolParam(r, "wait", true)
	if err != nil {
		return err
	}
	var f native.Format
	if r.URL.Query().Get("format") != "" {
		if f, err = nativeFormat(r); err != nil {
			return err
		}
	}
	var req endRequest
	if err := decodeBody(w, r, s.maxBody, &req, true); err != nil {
		return err
	}
	calls := 0
	if req.Calls != nil {
		if *req.Calls < 1 {
			return errorf(http.StatusBadRequest, CodeInvalidBody, fmt.Sprintf(`"calls" is %d: give how many calls were posted to the turn (at least 1), or leave it out`, *req.Calls))
		}
		calls = *req.Calls
	}
	turn, err := s.node.EndTurn(r.Context(), tenant, r.PathValue("s"), r.PathValue("t"), calls, wait)
	if err != nil {
		return err
	}
	if f != "" {
		return s.writeNative(w, r, tenant, f, turn, http.StatusAccepted)
	}
	if turn.Status == projections.StatusComplete {
		writeJSON(w, http.StatusOK, turn)
		return nil
	}
	writeJSON(w, http.StatusAccepted, running{Turn: turn.Turn, Status: projections.StatusRunning})
	return nil
}
