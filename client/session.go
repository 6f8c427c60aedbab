package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Session is one session of a node. Its methods are safe for concurrent
// use; the node runs one turn of a session at a time.
type Session struct {
	c *Client
	// ID is the session's id.
	ID string
	// Workspace is the session's workspace (set by OpenSession).
	Workspace string
}

// Call is one tool call as the model gave it. Arguments is any JSON value
// (an object, or a string holding one, as providers send it).
type Call struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments any    `json:"arguments"`
}

// Part is one piece of a result: text, JSON or an image.
type Part struct {
	Type string          `json:"type"`
	Text string          `json:"text,omitempty"`
	JSON json.RawMessage `json:"json,omitempty"`
	MIME string          `json:"mime,omitempty"`
	Data []byte          `json:"data,omitempty"`
}

// Result is one call's committed result (docs/spec.md §8).
type Result struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Outcome    string          `json:"outcome"`
	Block      string          `json:"block,omitempty"`
	Content    []Part          `json:"content"`
	Truncated  bool            `json:"truncated"`
	FullOutput json.RawMessage `json:"full_output,omitempty"`
	Attempts   int             `json:"attempts"`
}

// Notice is a retry notice a turn carries.
type Notice struct {
	Turn    string `json:"turn"`
	Call    string `json:"call"`
	Tool    string `json:"tool"`
	Attempt int    `json:"attempt"`
	Message string `json:"message"`
}

// Answer is a turn's answer: Status "complete" with its results in call
// order and its notices, or "running" (posted with NoWait, or asked for
// while it runs).
type Answer struct {
	Turn    string   `json:"turn"`
	Status  string   `json:"status"`
	Results []Result `json:"results"`
	Notices []Notice `json:"notices"`
}

// TurnOption changes how a turn is posted.
type TurnOption func(*turnOptions)

type turnOptions struct {
	id   string
	wait bool
	// A streamed turn's settings (OpenTurn, OpenTurnNative).
	parallel *bool
	cap      int
}

// WithTurnID gives the turn's id (an idempotency key); default one minted
// by NewTurnID before the first attempt.
func WithTurnID(id string) TurnOption { return func(o *turnOptions) { o.id = id } }

// NoWait answers as soon as the turn is recorded (?wait=0): the answer's
// Status is "running" unless it was complete already.
func NoWait() TurnOption { return func(o *turnOptions) { o.wait = false } }

func turnOpts(opts []TurnOption) turnOptions {
	o := turnOptions{wait: true}
	for _, f := range opts {
		f(&o)
	}
	return o
}

// Turn posts calls as one turn and waits for its results (unless NoWait).
// A 503 or a dropped connection sends the same turn again: the node runs
// each call at most once. Errors are *Error values for the API's answers
// (a turn id already used for other calls: Code "turn_id_reused").
func (s *Session) Turn(ctx context.Context, calls []Call, opts ...TurnOption) (*Answer, error) {
	o := turnOpts(opts)
	if o.id == "" {
		o.id = NewTurnID()
	}
	b, err := marshal(map[string]any{"id": o.id, "calls": calls})
	if err != nil {
		return nil, err
	}
	path := "/v1/sessions/" + url.PathEscape(s.ID) + "/turns"
	if !o.wait {
		path += "?wait=0"
	}
	var a Answer
	_, err = s.c.do(ctx, "POST", path, b, &a)
	if err != nil {
		return nil, err
	}
	return &a, nil
}

// GetTurn answers a turn posted before: complete, or running.
func (s *Session) GetTurn(ctx context.Context, id string) (*Answer, error) {
	var a Answer
	if _, err := s.c.do(ctx, "GET", "/v1/sessions/"+url.PathEscape(s.ID)+"/turns/"+url.PathEscape(id), nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Format is a provider's shape a turn may be posted and answered in.
type Format string

// The provider formats (docs/spec.md §8, "Provider-native turns").
const (
	OpenAIChat      Format = "openai_chat"
	OpenAIResponses Format = "openai_responses"
	Anthropic       Format = "anthropic"
)

// NativeAnswer is a provider-native turn's answer. Complete (Status ""),
// it holds what the harness appends to its conversation: Messages
// (openai_chat), Input (openai_responses) or Message (anthropic), raw, to
// decode into the SDK's type with Decode. Running (Status "running"), it
// holds only Waiting: nothing may be appended yet.
type NativeAnswer struct {
	Turn     string          `json:"turn"`
	Status   string          `json:"status,omitempty"`
	Messages json.RawMessage `json:"messages,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
	Message  json.RawMessage `json:"message,omitempty"`
	Waiting  []Waiting       `json:"waiting,omitempty"`
}

// Waiting is a call of a running turn that waits for a person.
type Waiting struct {
	Kind      string          `json:"kind"`
	Call      string          `json:"call"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Question  string          `json:"question,omitempty"`
	Options   []string        `json:"options,omitempty"`
}

// Decode decodes the part to append into v: for openai_chat a
// *[]openai.ChatCompletionMessageParamUnion, for openai_responses a
// *[]responses.ResponseInputItemUnionParam, for anthropic an
// *anthropic.MessageParam. A running answer has nothing to decode.
func (a *NativeAnswer) Decode(v any) error {
	for _, raw := range []json.RawMessage{a.Messages, a.Input, a.Message} {
		if len(raw) > 0 {
			return json.Unmarshal(raw, v)
		}
	}
	return fmt.Errorf("callsheet: turn %s is %s: nothing to append yet (waiting for %d)", a.Turn, a.Status, len(a.Waiting))
}

// rawJSON is what the Go SDKs' response types give: the bytes the
// provider sent. Posted as they are, so nothing is lost in a re-encoding.
type rawJSON interface{ RawJSON() string }

// TurnNative posts a model response in format f as a turn and answers in
// that provider's shape. response is the whole response (an
// openai.ChatCompletion, a responses.Response, an anthropic.Message) or
// its assistant part (the message, the output list, the content list):
// a value with RawJSON() (the Go SDKs' response types) is posted as those
// bytes, []byte and json.RawMessage as they are, anything else as
// json.Marshal encodes it. A whole response's id is the turn id; for a
// part without one a turn id is minted before the first attempt (or given
// with WithTurnID), so a retry runs nothing twice.
func (s *Session) TurnNative(ctx context.Context, f Format, response any, opts ...TurnOption) (*NativeAnswer, error) {
	o := turnOpts(opts)
	body, err := nativeBody(response)
	if err != nil {
		return nil, err
	}
	q := url.Values{"format": {string(f)}}
	if o.id == "" && !hasResponseID(f, body) {
		o.id = NewTurnID()
	}
	if o.id != "" {
		q.Set("turn", o.id)
	}
	if !o.wait {
		q.Set("wait", "0")
	}
	var a NativeAnswer
	if _, err := s.c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(s.ID)+"/turns?"+q.Encode(), body, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// hasResponseID reports whether the node reads a turn id from body: the id
// of a whole response (a Chat Completion has "choices"; a Response or a
// Message is an object).
func hasResponseID(f Format, body []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return false
	}
	if _, ok := top["choices"]; f == OpenAIChat && !ok {
		return false
	}
	var id string
	return json.Unmarshal(top["id"], &id) == nil && id != ""
}

// GetTurnNative answers a turn in format f: complete, or running.
func (s *Session) GetTurnNative(ctx context.Context, f Format, id string) (*NativeAnswer, error) {
	var a NativeAnswer
	path := "/v1/sessions/" + url.PathEscape(s.ID) + "/turns/" + url.PathEscape(id) + "?format=" + url.QueryEscape(string(f))
	if _, err := s.c.do(ctx, "GET", path, nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Approve decides a call that waits for approval: allow true or false
// (deny), with a reason for the log. The decider recorded is the token's
// principal.
func (s *Session) Approve(ctx context.Context, call string, allow bool, reason string) error {
	d := "deny"
	if allow {
		d = "allow"
	}
	b, err := marshal(map[string]string{"decision": d, "reason": reason})
	if err != nil {
		return err
	}
	_, err = s.c.send(ctx, "POST", "/v1/sessions/"+url.PathEscape(s.ID)+"/approvals/"+url.PathEscape(call), b, nil, false)
	return err
}

// Approvals lists the running turn's calls that wait for approval, as the
// node answers them.
func (s *Session) Approvals(ctx context.Context) ([]json.RawMessage, error) {
	var a struct {
		Approvals []json.RawMessage `json:"approvals"`
	}
	_, err := s.c.do(ctx, "GET", "/v1/sessions/"+url.PathEscape(s.ID)+"/approvals", nil, &a)
	return a.Approvals, err
}

// Answer answers a question call with any JSON value.
func (s *Session) Answer(ctx context.Context, call string, answer any) error {
	b, err := marshal(map[string]any{"answer": answer})
	if err != nil {
		return err
	}
	_, err = s.c.send(ctx, "POST", "/v1/sessions/"+url.PathEscape(s.ID)+"/answers/"+url.PathEscape(call), b, nil, false)
	return err
}

// Transcript returns the session's transcript: every turn's results and
// notices, from the log.
func (s *Session) Transcript(ctx context.Context) ([]Answer, error) {
	var t struct {
		Turns []Answer `json:"turns"`
	}
	_, err := s.c.do(ctx, "GET", "/v1/sessions/"+url.PathEscape(s.ID)+"/transcript", nil, &t)
	return t.Turns, err
}

// Close closes the session.
func (s *Session) Close(ctx context.Context, reason string) error {
	b, err := marshal(map[string]string{"reason": reason})
	if err != nil {
		return err
	}
	_, err = s.c.send(ctx, "POST", "/v1/sessions/"+url.PathEscape(s.ID)+"/close", b, nil, false)
	return err
}

// Event is one event of a session's log, as GET .../events gives it.
type Event struct {
	Seq       uint64          `json:"seq"`
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Time      time.Time       `json:"time"`
	Tenant    string          `json:"tenant"`
	Session   string          `json:"session"`
	Causation string          `json:"causation,omitempty"`
	Prev      string          `json:"prev,omitempty"`
	Data      json.RawMessage `json:"data"`
}

// Events yields the session's events after sequence after, in order, as
// Server-Sent Events. With follow it stays live until ctx ends, and when
// the connection drops it reconnects with Last-Event-ID, the last
// sequence it yielded, so nothing is missed or seen twice; without follow
// it yields what is recorded and stops. An error ends the sequence.
func (s *Session) Events(ctx context.Context, after uint64, follow bool) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		last := after
		r := s.c.retry.start()
		for {
			var h http.Header
			done, progressed, err := s.stream(ctx, last, follow, &h, func(ev Event) bool {
				last = ev.Seq
				return yield(ev, nil)
			})
			if done || ctx.Err() != nil {
				return
			}
			if progressed {
				r.progressed()
			}
			var apiErr *Error
			if asError(err, &apiErr) && !retryable(apiErr.Status, h) && !gateway(apiErr.Status) || !r.wait(ctx, h) {
				if ctx.Err() == nil {
					yield(Event{}, err)
				}
				return
			}
		}
	}
}

func asError(err error, target **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*target = e
	}
	return ok
}

// stream reads one connection's events. done: the stream ended as asked
// (not followed, or the consumer stopped); progressed: it yielded at
// least one event.
// A refusal's header goes to *h.
func (s *Session) stream(ctx context.Context, after uint64, follow bool, h *http.Header, yield func(Event) bool) (done, progressed bool, err error) {
	path := fmt.Sprintf("%s/v1/sessions/%s/events?follow=%t", s.c.base, url.PathEscape(s.ID), follow)
	req, err := http.NewRequestWithContext(ctx, "GET", path, nil)
	if err != nil {
		return true, false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.FormatUint(after, 10))
	if s.c.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.c.token)
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return false, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		*h = resp.Header
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		return false, false, apiError(resp.StatusCode, []byte(b.String()))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var ev Event
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return true, progressed, fmt.Errorf("callsheet: event after %d is not JSON: %w", after, err)
			}
			data.Reset()
			progressed = true
			if !yield(ev) {
				return true, true, nil
			}
		case strings.HasPrefix(line, "data:"):
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := sc.Err(); err != nil {
		return false, progressed, err
	}
	// The answer ended: as asked without follow, a drop with it.
	return !follow, progressed, fmt.Errorf("callsheet: event stream of %s ended", s.ID)
}
