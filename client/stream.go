package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
)

// StreamedTurn is a turn whose calls are posted while the model still
// streams (docs/spec.md §8): OpenTurn posts the first calls, Add each next
// one as the model completes it, End closes the turn and answers as Turn
// does. A call starts on the node as soon as the schedule allows, not once
// the response is whole. Each post names where its batch starts, so a
// retry after a 503 or a dropped connection is answered from the record
// and a lost batch is refused rather than skipped; a harness that
// restarted and streams the same response again under the same id has
// each batch, and the end, answered from the record. Not safe for
// concurrent use: a turn's batches go in order.
type StreamedTurn struct {
	s *Session
	// ID is the turn's id: the provider's response id for a native turn,
	// else the one given with WithTurnID or minted.
	ID     string
	format Format
	// sent is where the next batch starts: after the last one posted,
	// which for a turn streamed again (a restarted harness) is not the
	// count the node holds.
	sent int
	// ParallelToolCalls and Cap are the turn's settings as the node
	// recorded them.
	ParallelToolCalls bool
	Cap               int
}

// WithParallelToolCalls false makes every call of a streamed turn run
// alone, in order (OpenTurn, OpenTurnNative); true keeps the session's.
func WithParallelToolCalls(parallel bool) TurnOption {
	return func(o *turnOptions) { o.parallel = &parallel }
}

// WithCap lowers the number of parallel-safe calls of a streamed turn that
// run at once (at most the session's concurrency.tool_calls).
func WithCap(n int) TurnOption { return func(o *turnOptions) { o.cap = n } }

// batchAnswer is the node's answer to a batch.
type batchAnswer struct {
	Turn              string `json:"turn"`
	Status            string `json:"status"`
	From              int    `json:"from"`
	Size              int    `json:"size"`
	Calls             int    `json:"calls"`
	ParallelToolCalls bool   `json:"parallel_tool_calls"`
	Cap               int    `json:"cap"`
}

// OpenTurn opens a streamed turn with its first calls (WithTurnID names
// it, else an id is minted; WithParallelToolCalls and WithCap set its
// scheduling). Errors are *Error values (a turn id of a posted turn:
// Code "turn_id_reused").
func (s *Session) OpenTurn(ctx context.Context, calls []Call, opts ...TurnOption) (*StreamedTurn, error) {
	o := turnOpts(opts)
	if o.id == "" {
		o.id = NewTurnID()
	}
	t := &StreamedTurn{s: s, ID: o.id}
	body := map[string]any{"from": 0, "calls": calls}
	if o.parallel != nil {
		body["parallel_tool_calls"] = *o.parallel
	}
	if o.cap > 0 {
		body["cap"] = o.cap
	}
	b, err := marshal(body)
	if err != nil {
		return nil, err
	}
	if err := t.post(ctx, "", b); err != nil {
		return nil, err
	}
	return t, nil
}

// Add posts the next calls of the turn.
func (t *StreamedTurn) Add(ctx context.Context, calls []Call) error {
	if t.format != "" {
		return fmt.Errorf("%w: turn %s streams %s pieces: use AddNative", ErrInvalidOption, t.ID, t.format)
	}
	b, err := marshal(map[string]any{"from": t.sent, "calls": calls})
	if err != nil {
		return err
	}
	return t.post(ctx, "", b)
}

// End closes the turn and waits for its results (unless NoWait), as Turn
// answers.
func (t *StreamedTurn) End(ctx context.Context, opts ...TurnOption) (*Answer, error) {
	var a Answer
	if err := t.end(ctx, "", turnOpts(opts).wait, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// OpenTurnNative opens a streamed turn with the first piece of a
// provider's stream in format f (docs/clients.md, "Streamed turns"): a
// Chat tool call whose arguments are whole (or a list of them), a
// Responses function_call item (or the response.output_item.done event
// carrying it), an Anthropic tool_use block whose input is whole. id is the
// turn's id: the response id the stream's first event carries, so a
// harness that restarts and streams the same response posts to the same
// turn; empty mints one. A piece is posted as TurnNative posts a response
// (RawJSON() when it has it, []byte as is, else json.Marshal).
func (s *Session) OpenTurnNative(ctx context.Context, f Format, id string, piece any, opts ...TurnOption) (*StreamedTurn, error) {
	o := turnOpts(opts)
	if id == "" {
		id = NewTurnID()
	}
	t := &StreamedTurn{s: s, ID: id, format: f}
	q := url.Values{}
	if o.parallel != nil {
		q.Set("parallel_tool_calls", strconv.FormatBool(*o.parallel))
	}
	if o.cap > 0 {
		q.Set("cap", strconv.Itoa(o.cap))
	}
	if err := t.AddNative(ctx, piece, q); err != nil {
		return nil, err
	}
	return t, nil
}

// AddNative posts the next piece of the provider's stream; extra are
// further query parameters (OpenTurnNative's settings).
func (t *StreamedTurn) AddNative(ctx context.Context, piece any, extra ...url.Values) error {
	if t.format == "" {
		return fmt.Errorf("%w: turn %s streams callsheet's own calls: use Add", ErrInvalidOption, t.ID)
	}
	body, err := nativeBody(piece)
	if err != nil {
		return err
	}
	q := url.Values{"format": {string(t.format)}, "from": {strconv.Itoa(t.sent)}}
	for _, e := range extra {
		for k, vs := range e {
			q[k] = vs
		}
	}
	return t.post(ctx, q.Encode(), body)
}

// EndNative closes the turn and answers in its provider's shape, as
// TurnNative does.
func (t *StreamedTurn) EndNative(ctx context.Context, opts ...TurnOption) (*NativeAnswer, error) {
	var a NativeAnswer
	if err := t.end(ctx, "format="+url.QueryEscape(string(t.format)), turnOpts(opts).wait, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func (t *StreamedTurn) path(suffix string) string {
	return "/v1/sessions/" + url.PathEscape(t.s.ID) + "/turns/" + url.PathEscape(t.ID) + "/" + suffix
}

// post sends one batch (again on a 503 or a dropped connection: a batch
// that was recorded is answered from the record) and notes where the next
// starts.
func (t *StreamedTurn) post(ctx context.Context, query string, body []byte) error {
	path := t.path("calls")
	if query != "" {
		path += "?" + query
	}
	var a batchAnswer
	if _, err := t.s.c.do(ctx, "POST", path, body, &a); err != nil {
		return err
	}
	t.sent, t.ParallelToolCalls, t.Cap = a.From+a.Size, a.ParallelToolCalls, a.Cap
	return nil
}

// end posts the end, naming how many calls were posted, so a lost batch
// is refused rather than left out.
func (t *StreamedTurn) end(ctx context.Context, query string, wait bool, out any) error {
	q, _ := url.ParseQuery(query)
	if !wait {
		q.Set("wait", "0")
	}
	path := t.path("end")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	b, _ := json.Marshal(map[string]int{"calls": t.sent})
	_, err := t.s.c.do(ctx, "POST", path, b, out)
	return err
}

// nativeBody is what TurnNative posts for a value: RawJSON() when the value
// has it, []byte as is, else its JSON.
func nativeBody(v any) ([]byte, error) {
	switch r := v.(type) {
	case []byte:
		return r, nil
	case json.RawMessage:
		return r, nil
	case rawJSON:
		if s := r.RawJSON(); s != "" {
			return []byte(s), nil
		}
	}
	return marshal(v)
}
