package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// Defaults of a Client.
const (
	// DefaultRetryFor is how long a request is sent again after its first
	// failure: longer than a fleet's takeover (docs/operations.md), which
	// answers 503 with Retry-After meanwhile.
	DefaultRetryFor = 30 * time.Second
	// DefaultBackoff is the wait before the first retry when the answer
	// names none; it doubles after each one, up to DefaultMaxBackoff, and
	// each wait is jittered down by up to half.
	DefaultBackoff = 200 * time.Millisecond
	// DefaultMaxBackoff caps the doubling wait.
	DefaultMaxBackoff = 5 * time.Second
)

// ErrInvalidOption wraps every error about a bad Option or argument.
var ErrInvalidOption = errors.New("client: invalid option")

// Error is an answer of the API that is not a success: its HTTP status and
// the code and message of its {"error": {"code", "message"}} body (codes in
// docs/spec.md §8, such as "turn_id_reused" or "no_tool_calls").
type Error struct {
	Status  int
	Code    string
	Message string
}

// Error returns "callsheet: CODE (STATUS): MESSAGE".
func (e *Error) Error() string {
	return fmt.Sprintf("callsheet: %s (%d): %s", e.Code, e.Status, e.Message)
}

// Option configures New.
type Option func(*Client) error

// WithToken sends token as the bearer token of every request.
func WithToken(token string) Option {
	return func(c *Client) error { c.token = token; return nil }
}

// WithHTTPClient sets the HTTP client; default a client without a timeout
// (a turn waits for its calls).
func WithHTTPClient(h *http.Client) Option {
	return func(c *Client) error {
		if h == nil {
			return fmt.Errorf("%w: WithHTTPClient(nil)", ErrInvalidOption)
		}
		c.http = h
		return nil
	}
}

// WithRetryFor sets how long after its first failure a request that may
// be sent again is (0: never); default DefaultRetryFor. A wait that would
// end past it, or past ctx's deadline, is not taken: the last answer is
// returned.
func WithRetryFor(d time.Duration) Option {
	return func(c *Client) error {
		if d < 0 {
			return fmt.Errorf("%w: WithRetryFor(%s): use a duration ≥ 0", ErrInvalidOption, d)
		}
		c.retry.For = d
		return nil
	}
}

// WithBackoff sets the wait before the first retry of an answer that names
// no Retry-After and the most it doubles to; default DefaultBackoff and
// DefaultMaxBackoff.
func WithBackoff(first, most time.Duration) Option {
	return func(c *Client) error {
		if first <= 0 || most < first {
			return fmt.Errorf("%w: WithBackoff(%s, %s): use 0 < first ≤ most", ErrInvalidOption, first, most)
		}
		c.retry.Backoff, c.retry.MaxBackoff = first, most
		return nil
	}
}

// WithRetries caps how many times a request is sent again within its
// RetryFor (0: never; default no cap) and sets the first wait.
func WithRetries(n int, backoff time.Duration) Option {
	return func(c *Client) error {
		if n < 0 || backoff <= 0 {
			return fmt.Errorf("%w: WithRetries(%d, %s): use n ≥ 0 and a backoff > 0", ErrInvalidOption, n, backoff)
		}
		c.retry.Max, c.retry.Backoff = n, backoff
		c.retry.MaxBackoff = max(c.retry.MaxBackoff, backoff)
		return nil
	}
}

// Client talks to one node (or a load balancer in front of a fleet). It is
// safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
	retry retryPolicy
}

// New returns a client of the node at base ("http://127.0.0.1:7700").
func New(base string, opts ...Option) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: url %q: want http://host:port", ErrInvalidOption, base)
	}
	c := &Client{base: strings.TrimRight(base, "/"), http: &http.Client{}, retry: retryPolicy{
		For: DefaultRetryFor, Backoff: DefaultBackoff, MaxBackoff: DefaultMaxBackoff, Max: -1,
	}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// NewTurnID returns a fresh turn id (a ULID), for a caller that wants to
// know the id before it posts.
func NewTurnID() string { return ulid.Make().String() }

// do sends one idempotent request (a GET, or a POST of a turn whose id is
// fixed), again on a 503, a 429 with Retry-After, a dropped connection or
// a proxy's 502 or 504 within the client's RetryFor, and decodes a 2xx answer into out (when not
// nil). It returns the status.
func (c *Client) do(ctx context.Context, method, path string, body []byte, out any) (int, error) {
	return c.send(ctx, method, path, body, out, true)
}

// send is do; with drops false a dropped connection, a 502 or a 504 is not
// retried (the request may have taken effect, and a repeat would be
// refused), only a 503 or a 429 with Retry-After.
func (c *Client) send(ctx context.Context, method, path string, body []byte, out any, drops bool) (int, error) {
	r := c.retry.start()
	for {
		status, h, b, err := c.once(ctx, method, path, body)
		retry := drops && (err != nil && ctx.Err() == nil || gateway(status)) || retryable(status, h)
		if retry && r.wait(ctx, h) {
			continue
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err != nil {
			return 0, err
		}
		if status >= 300 {
			return status, apiError(status, b)
		}
		if out != nil && len(b) > 0 {
			if err := json.Unmarshal(b, out); err != nil {
				return status, fmt.Errorf("callsheet: %s %s: answer is not the expected JSON: %w", method, path, err)
			}
		}
		return status, nil
	}
}

func (c *Client) once(ctx context.Context, method, path string, body []byte) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err // dropped mid-answer
	}
	return resp.StatusCode, resp.Header, b, nil
}

func apiError(status int, b []byte) *Error {
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) != nil || eb.Error.Code == "" {
		return &Error{Status: status, Code: "http", Message: strings.TrimSpace(string(b))}
	}
	return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message}
}

func marshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: body does not encode as JSON: %v", ErrInvalidOption, err)
	}
	return b, nil
}

// SessionOptions are what a new session may name (docs/spec.md §8).
type SessionOptions struct {
	// Workspace is a directory under the node's workspace root; empty
	// makes a fresh one.
	Workspace string `json:"workspace,omitempty"`
	// Agent names a configured agent; empty is the default.
	Agent string `json:"agent,omitempty"`
}

// OpenSession opens a session.
func (c *Client) OpenSession(ctx context.Context, o SessionOptions) (*Session, error) {
	b, err := marshal(o)
	if err != nil {
		return nil, err
	}
	var s struct {
		Session   string `json:"session"`
		Workspace string `json:"workspace"`
	}
	// Not retried: a repeated open would open a second session.
	status, _, body, err := c.once(ctx, "POST", "/v1/sessions", b)
	if err != nil {
		return nil, err
	}
	if status != http.StatusCreated {
		return nil, apiError(status, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("callsheet: open session: %w", err)
	}
	return &Session{c: c, ID: s.Session, Workspace: s.Workspace}, nil
}

// Session returns the session with id, for one opened earlier.
func (c *Client) Session(id string) *Session { return &Session{c: c, ID: id} }

// Tools returns GET /v1/tools: the tool definitions in format ("openai",
// "openai_responses", "anthropic") for agent ("" for the default), as the
// node answers them ({"format", "tools", "system"?, ...}).
func (c *Client) Tools(ctx context.Context, format, agent string) (Tools, error) {
	q := url.Values{}
	if format != "" {
		q.Set("format", format)
	}
	if agent != "" {
		q.Set("agent", agent)
	}
	var t Tools
	_, err := c.do(ctx, "GET", "/v1/tools?"+q.Encode(), nil, &t)
	return t, err
}

// Tools is the answer of GET /v1/tools. Tools is the provider's tool list,
// to decode into the SDK's type (DecodeTools).
type Tools struct {
	Format string          `json:"format"`
	Tools  json.RawMessage `json:"tools"`
	System string          `json:"system,omitempty"`
}

// DecodeTools decodes the tool list into v (for instance
// *[]openai.ChatCompletionToolUnionParam or *[]anthropic.ToolUnionParam).
func (t Tools) DecodeTools(v any) error { return json.Unmarshal(t.Tools, v) }
