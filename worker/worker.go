package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a Worker.
const (
	// DefaultConcurrency is how many tasks a Worker runs at once.
	DefaultConcurrency = 4
	// DefaultWait is how long one poll is held when no task is there (the
	// node allows at most 60 s).
	DefaultWait = 30 * time.Second
	// DefaultHeartbeat is how often a running task heartbeats when its tool
	// declares no heartbeat_timeout (so the worker learns of a cancel);
	// with one, it heartbeats three times within it.
	DefaultHeartbeat = 5 * time.Second
)

// ErrInvalidOption wraps every error about a bad Option.
var ErrInvalidOption = errors.New("worker: invalid option")

// ErrPermanent marks a handler error that trying again cannot fix: the
// attempt is failed with "permanent": true, so a safe tool is not retried.
var ErrPermanent = errors.New("worker: permanent failure")

// Permanent wraps err so that the attempt fails permanently.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPermanent, err)
}

// Part is one piece of a result (docs/spec.md §8): text, JSON or an image.
type Part struct {
	Type string          `json:"type"`
	Text string          `json:"text,omitempty"`
	JSON json.RawMessage `json:"json,omitempty"`
	MIME string          `json:"mime,omitempty"`
	// Data is the image's bytes (sent base64-encoded).
	Data []byte `json:"data,omitempty"`
}

// Text returns a result of one text part.
func Text(s string) []Part { return []Part{{Type: "text", Text: s}} }

// JSON returns a result of one JSON part holding v.
func JSON(v any) ([]Part, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return []Part{{Type: "json", JSON: b}}, nil
}

// Spec is a tool's registration (PUT /v1/tools/{name}). Whatever is left
// empty is strictest: side_effecting, never, exclusive, the default timeout,
// no heartbeat.
type Spec struct {
	Description string          `json:"description"`
	Guidelines  []string        `json:"guidelines"`
	InputSchema json.RawMessage `json:"input_schema"`
	Effect      string          `json:"effect,omitempty"`
	Replay      string          `json:"replay,omitempty"`
	Concurrency string          `json:"concurrency,omitempty"`
	// Timeout and HeartbeatTimeout are durations such as "30s".
	Timeout          string `json:"timeout,omitempty"`
	HeartbeatTimeout string `json:"heartbeat_timeout,omitempty"`
}

// Task is one attempt of a call handed to this worker.
type Task struct {
	Token          string          `json:"task"`
	Session        string          `json:"session"`
	Turn           string          `json:"turn"`
	Call           string          `json:"call"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotency_key"`
	Deadline       time.Time       `json:"deadline"`
	// HeartbeatTimeoutMS is the tool's heartbeat_timeout in milliseconds.
	HeartbeatTimeoutMS int64 `json:"heartbeat_timeout_ms,omitempty"`

	w *Worker
}

// Heartbeat reports progress now (Run heartbeats on its own; call this to
// send details) and answers whether the call was cancelled.
func (t *Task) Heartbeat(ctx context.Context, details any) (cancel bool, err error) {
	body := map[string]any{}
	if details != nil {
		body["details"] = details
	}
	var a struct {
		Cancel bool `json:"cancel"`
	}
	status, err := t.w.post(ctx, "/v1/tasks/"+t.Token+"/heartbeat", body, &a)
	if status == http.StatusConflict {
		return true, err // settled: whatever the handler does no longer counts
	}
	return a.Cancel, err
}

// Handler runs one task. ctx ends at the task's deadline, when the call is
// cancelled, or when Run's context ends. A nil error completes the attempt
// with the parts; an error fails it (Permanent for no retry).
type Handler func(ctx context.Context, t *Task) ([]Part, error)

// Option configures New.
type Option func(*Worker) error

// WithToken sets the tenant's bearer token (none by default: a node without
// tenants).
func WithToken(tok string) Option {
	return func(w *Worker) error { w.token = tok; return nil }
}

// WithID names this worker in polls (logged by the node with what it takes);
// default "go-worker".
func WithID(id string) Option {
	return func(w *Worker) error {
		if strings.TrimSpace(id) == "" {
			return fmt.Errorf("%w: WithID(%q): give a non-empty id", ErrInvalidOption, id)
		}
		w.id = id
		return nil
	}
}

// WithConcurrency sets how many tasks run at once; default
// DefaultConcurrency.
func WithConcurrency(n int) Option {
	return func(w *Worker) error {
		if n < 1 || n > 64 {
			return fmt.Errorf("%w: WithConcurrency(%d): use 1..64", ErrInvalidOption, n)
		}
		w.concurrency = n
		return nil
	}
}

// WithWait sets how long a poll is held when no task is there; default
// DefaultWait, at most 60 s.
func WithWait(d time.Duration) Option {
	return func(w *Worker) error {
		if d < 0 || d > 60*time.Second {
			return fmt.Errorf("%w: WithWait(%s): use 0..60s", ErrInvalidOption, d)
		}
		w.wait = d
		return nil
	}
}

// WithHTTPClient sets the HTTP client; default one without a timeout of
// its own (each request has its context).
func WithHTTPClient(c *http.Client) Option {
	return func(w *Worker) error {
		if c == nil {
			return fmt.Errorf("%w: WithHTTPClient(nil)", ErrInvalidOption)
		}
		w.http = c
		return nil
	}
}

// WithLogger sets where the Worker logs problems (a failed poll, a result
// the node refused); default discards.
func WithLogger(l *slog.Logger) Option {
	return func(w *Worker) error {
		if l == nil {
			return fmt.Errorf("%w: WithLogger(nil)", ErrInvalidOption)
		}
		w.log = l
		return nil
	}
}

// WithAnswerAndPoll sets whether a finished task's answer also asks for the
// worker's next task ("next" in complete and fail, one exchange instead of
// two); default true. false posts plain answers and polls separately, as
// workers did before "next".
func WithAnswerAndPoll(on bool) Option {
	return func(w *Worker) error { w.next = on; return nil }
}

// Worker serves harness tools' tasks from one node (or a load balancer in
// front of a fleet). Register and Handle before Run; its methods are safe
// for concurrent use.
type Worker struct {
	base        string
	token       string
	id          string
	concurrency int
	wait        time.Duration
	http        *http.Client
	log         *slog.Logger

	next  bool        // answers ask for the next task (WithAnswerAndPoll)
	plain atomic.Bool // the node refused "next": plain answers only

	mu       sync.Mutex
	handlers map[string]Handler
}

// New returns a Worker for the node at base (http://HOST:PORT).
func New(base string, opts ...Option) (*Worker, error) {
	w := &Worker{base: strings.TrimRight(base, "/"), id: "go-worker", concurrency: DefaultConcurrency, wait: DefaultWait, next: true,
		http: &http.Client{}, log: slog.New(slog.DiscardHandler), handlers: map[string]Handler{}}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Register registers (or replaces) the tool name with the node.
func (w *Worker) Register(ctx context.Context, name string, s Spec) error {
	_, err := w.do(ctx, http.MethodPut, "/v1/tools/"+name, s, nil)
	return err
}

// Unregister removes the tool name.
func (w *Worker) Unregister(ctx context.Context, name string) error {
	_, err := w.do(ctx, http.MethodDelete, "/v1/tools/"+name, nil, nil)
	return err
}

// Handle makes h serve the tasks of tool name.
func (w *Worker) Handle(name string, h Handler) {
	w.mu.Lock()
	w.handlers[name] = h
	w.mu.Unlock()
}

// Run polls for the handled tools' tasks and runs them until ctx ends, then
// cancels the tasks still running, waits for them and returns ctx's error.
// A failed poll is retried with backoff (at most 5 s apart).
//
// The worker keeps one poll out at a time. A finished task's goroutine
// that finds no poll out posts its answer with "next" and is handed its
// next task in the same exchange (the node holds it as a poll); otherwise
// it posts a plain complete or fail. A node that does not know "next"
// gets plain answers from then on.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	var tools []string
	for name := range w.handlers {
		tools = append(tools, name)
	}
	w.mu.Unlock()
	if len(tools) == 0 {
		return errors.New("worker: no handlers: call Handle before Run")
	}
	r := &runner{w: w, ctx: ctx, tools: tools, slots: make(chan struct{}, w.concurrency),
		poller: make(chan struct{}, 1), posting: make(chan struct{}, w.concurrency)}
	defer r.wg.Wait()
	backoff := 100 * time.Millisecond
	for {
		// A free slot, then the poller's turn, so that a task's goroutine
		// asking for its next task with its answer holds no slot it
		// cannot use.
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case r.poller <- struct{}{}:
		case <-ctx.Done():
			<-r.slots
			return ctx.Err()
		}
		free := 1 + r.grab()
		tasks, err := w.poll(ctx, tools, free)
		<-r.poller
		if ctx.Err() != nil {
			r.start(nil, free)
			return ctx.Err()
		}
		if err != nil {
			w.log.Warn("worker: poll failed", "err", err, "retry_in", backoff)
			r.start(nil, free)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
			}
			backoff = min(backoff*2, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		r.start(tasks, free)
	}
}

// runner is one Run: its slots (one per task running or being answered)
// and the poller's turn (held by whoever has a poll out).
type runner struct {
	w       *Worker
	ctx     context.Context
	tools   []string
	slots   chan struct{}
	poller  chan struct{}
	posting chan struct{} // plain answers on their way, their slots freed
	wg      sync.WaitGroup
}

// grab takes the free slots there are, without waiting, and says how many.
func (r *runner) grab() int {
	n := 0
	for {
		select {
		case r.slots <- struct{}{}:
			n++
		default:
			return n
		}
	}
}

// start runs each task in a slot of the n held and gives back the rest.
func (r *runner) start(tasks []*Task, n int) {
	for i := range n {
		if i >= len(tasks) {
			<-r.slots
			continue
		}
		r.wg.Add(1)
		go r.serve(tasks[i])
	}
}

// serve runs t and then the tasks handed to it with its answers, in its
// slot. An answer posted plainly frees the slot as it is posted, so the
// next poll may go out while it travels (posting bounds those answers).
func (r *runner) serve(t *Task) {
	defer r.wg.Done()
	for t != nil {
		parts, err := r.w.run(r.ctx, t)
		if r.ctx.Err() != nil {
			<-r.slots
			return // stopping: the node settles the call by its replay policy
		}
		asked := 0
		if r.w.next && !r.w.plain.Load() {
			select {
			case r.poller <- struct{}{}:
				asked = 1 + r.grab()
			default: // a poll is out: it asks for this slot's next task
			}
		}
		if asked == 0 {
			r.posting <- struct{}{}
			<-r.slots
			r.w.answer(r.ctx, t, parts, err, r.tools, 0)
			<-r.posting
			return
		}
		next := r.w.answer(r.ctx, t, parts, err, r.tools, asked)
		<-r.poller
		t = nil
		if len(next) > 0 {
			t = next[0]
			r.start(next[1:], asked-1)
		} else {
			r.start(nil, asked)
		}
	}
}

// poll asks for at most n tasks.
func (w *Worker) poll(ctx context.Context, tools []string, n int) ([]*Task, error) {
	var a struct {
		Tasks []*Task `json:"tasks"`
	}
	status, err := w.do(ctx, http.MethodPost, "/v1/workers/poll", w.pollBody(tools, n), &a)
	if err != nil || status == http.StatusNoContent {
		return nil, err
	}
	for _, t := range a.Tasks {
		t.w = w
	}
	return a.Tasks, nil
}

func (w *Worker) pollBody(tools []string, n int) map[string]any {
	return map[string]any{"worker": w.id, "tools": tools, "max": n, "wait_ms": w.wait.Milliseconds()}
}

// run runs one task's handler under a context that ends at the deadline
// or on cancel, a heartbeat beside it.
func (w *Worker) run(ctx context.Context, t *Task) ([]Part, error) {
	w.mu.Lock()
	h := w.handlers[t.Tool]
	w.mu.Unlock()
	tctx, cancel := context.WithCancel(ctx)
	if !t.Deadline.IsZero() {
		tctx, cancel = context.WithDeadline(ctx, t.Deadline)
	}
	defer cancel()
	every := DefaultHeartbeat
	if t.HeartbeatTimeoutMS > 0 {
		every = time.Duration(t.HeartbeatTimeoutMS) * time.Millisecond / 3
	}
	beats := make(chan struct{})
	go func() { // owned by this task: ends with it
		defer close(beats)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				if stop, _ := t.Heartbeat(tctx, nil); stop {
					cancel()
					return
				}
			case <-tctx.Done():
				return
			}
		}
	}()
	parts, err := runHandler(tctx, h, t)
	cancel()
	<-beats
	return parts, err
}

// answer posts t's complete (parts) or fail (err). With n > 0 it asks for
// at most n next tasks in the same exchange and returns those handed over;
// if that exchange fails before the node answered (a dropped connection,
// Run stopping), the answer is posted again plainly, and a node that
// refuses "next" (older than it) gets plain answers from then on.
func (w *Worker) answer(ctx context.Context, t *Task, parts []Part, err error, tools []string, n int) []*Task {
	path := "/v1/tasks/" + t.Token + "/complete"
	body := map[string]any{}
	if err != nil {
		path = "/v1/tasks/" + t.Token + "/fail"
		body["error"], body["permanent"] = err.Error(), errors.Is(err, ErrPermanent)
	} else {
		if parts == nil {
			parts = []Part{}
		}
		body["content"] = parts
	}
	if n > 0 {
		// Held as a poll: ends when Run's context does, or well after the
		// poll's wait.
		rctx, cancel := context.WithTimeout(context.Background(), w.wait+30*time.Second)
		stop := context.AfterFunc(ctx, cancel)
		body["next"] = w.pollBody(tools, n)
		var a struct {
			Tasks []*Task `json:"tasks"`
		}
		_, perr := w.post(rctx, path, body, &a)
		stop()
		cancel()
		delete(body, "next")
		var e *Error
		switch {
		case perr == nil:
			for _, nt := range a.Tasks {
				nt.w = w
			}
			return a.Tasks
		case errors.As(perr, &e) && e.Status == http.StatusBadRequest && strings.Contains(e.Message, `unknown field "next"`):
			w.plain.Store(true)
		case errors.As(perr, &e):
			w.log.Warn("worker: answering a task failed", "tool", t.Tool, "call", t.Call, "err", perr)
			return nil
		}
		// No answer from the node: post the answer again, plainly; a 409
		// saying it was taken is the first post's doing.
	}
	// The answer is posted with its own short context: the task's own may
	// have ended (the node then answers 409, which is logged).
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if _, err := w.post(pctx, path, body, nil); err != nil {
		var e *Error
		if n > 0 && errors.As(err, &e) && e.Status == http.StatusConflict && (strings.Contains(e.Message, "settled (completed") || strings.Contains(e.Message, "settled (failed")) {
			return nil
		}
		w.log.Warn("worker: answering a task failed", "tool", t.Tool, "call", t.Call, "err", err)
	}
	return nil
}

// runHandler runs h, turning a panic into an error.
func runHandler(ctx context.Context, h Handler, t *Task) (parts []Part, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler of %s panicked: %v", t.Tool, v)
		}
	}()
	if h == nil {
		return nil, Permanent(fmt.Errorf("this worker has no handler for %s", t.Tool))
	}
	return h(ctx, t)
}

func (w *Worker) post(ctx context.Context, path string, body, out any) (int, error) {
	return w.do(ctx, http.MethodPost, path, body, out)
}

// Error is the node's error answer.
type Error struct {
	Status  int
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string {
	return fmt.Sprintf("callsheet: %d %s: %s", e.Status, e.Code, e.Message)
}

// do sends one request and decodes a 2xx answer into out, or returns the
// node's *Error.
func (w *Worker) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, w.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if w.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.token)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 300 {
		var eb struct {
			Error Error `json:"error"`
		}
		_ = json.Unmarshal(b, &eb)
		eb.Error.Status = resp.StatusCode
		return resp.StatusCode, &eb.Error
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("worker: undecodable answer to %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}
