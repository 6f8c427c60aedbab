package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/worker"
)

func TestMain(m *testing.M) { testenv.Main(m, nil, nil) }

// rig is a node behind the API on a test HTTP server.
func rig(t *testing.T) (*node.Node, string) {
	t.Helper()
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(func() { s.CloseStreams(); srv.Close(); n.Close() })
	return n, srv.URL
}

var schema = json.RawMessage(`{"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]}`)

func submit(t *testing.T, n *node.Node, session string, calls ...events.CallSpec) projections.Turn {
	t.Helper()
	tr, err := n.SubmitTurn(context.Background(), config.DefaultTenant, session, "", calls, true)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestConcurrencyAndCancel: the worker runs at most its concurrency of
// tasks at once, a cancelled call cancels its handler's context (learned
// from the heartbeat), and Run returns once its context ends, having
// cancelled what still ran.
func TestConcurrencyAndCancel(t *testing.T) {
	n, url := rig(t)
	w, err := worker.New(url, worker.WithID("t"), worker.WithConcurrency(2), worker.WithWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Register(ctx, "nap", worker.Spec{Description: "sleeps", Guidelines: []string{"g"}, InputSchema: schema,
		Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe", HeartbeatTimeout: "1500ms"}); err != nil {
		t.Fatal(err)
	}
	var running, peak atomic.Int32
	cancelled := make(chan string, 8)
	w.Handle("nap", func(ctx context.Context, tk *worker.Task) ([]worker.Part, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		var a struct{ MS int }
		_ = json.Unmarshal(tk.Arguments, &a)
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
			return worker.Text(tk.Call), nil
		case <-ctx.Done():
			cancelled <- tk.Call
			return nil, ctx.Err()
		}
	})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()

	info, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var calls []events.CallSpec
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		calls = append(calls, events.CallSpec{ID: id, Name: "nap", Arguments: json.RawMessage(`{"ms": 300}`)})
	}
	tr := submit(t, n, info.Session, calls...)
	for i, r := range tr.Results {
		if r.Outcome != events.OutcomeOK || r.Content[0].Text != calls[i].ID {
			t.Fatalf("result %d: %+v", i, r)
		}
	}
	if p := peak.Load(); p != 2 {
		t.Fatalf("peak concurrency %d, want 2 (the worker's cap)", p)
	}

	// A long call, cancelled while the worker runs it.
	turn, err := n.SubmitTurn(ctx, config.DefaultTenant, info.Session, "", []events.CallSpec{{ID: "long", Name: "nap", Arguments: json.RawMessage(`{"ms": 60000}`)}}, false)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for running.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.CancelTurn(ctx, config.DefaultTenant, info.Session, turn.Turn, "", "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-cancelled:
		if c != "long" {
			t.Fatalf("cancelled %s, want long", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context did not end after the call was cancelled")
	}

	// Run ends with its context, cancelling a running handler.
	if _, err := n.SubmitTurn(ctx, config.DefaultTenant, info.Session, "", []events.CallSpec{{ID: "last", Name: "nap", Arguments: json.RawMessage(`{"ms": 60000}`)}}, false); err != nil {
		t.Fatal(err)
	}
	for running.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if c := <-cancelled; c != "last" {
		t.Fatalf("cancelled %s, want last", c)
	}
}

// TestPermanentAndPanic: Permanent stops retries of a safe tool; a panic
// in a handler fails the attempt instead of the worker.
func TestPermanentAndPanic(t *testing.T) {
	n, url := rig(t)
	w, _ := worker.New(url, worker.WithWait(time.Second))
	ctx := context.Background()
	for _, name := range []string{"perm", "boom"} {
		if err := w.Register(ctx, name, worker.Spec{Description: "d", Guidelines: []string{"g"}, InputSchema: schema, Effect: "read_only", Replay: "safe"}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	attempts := map[string]int{}
	w.Handle("perm", func(ctx context.Context, tk *worker.Task) ([]worker.Part, error) {
		mu.Lock()
		attempts[tk.Call]++
		mu.Unlock()
		return nil, worker.Permanent(errors.New("no such order"))
	})
	w.Handle("boom", func(ctx context.Context, tk *worker.Task) ([]worker.Part, error) { panic("kaboom") })
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = w.Run(rctx) }()
	info, _ := n.OpenSession(ctx, config.DefaultTenant, "", "")
	tr := submit(t, n, info.Session, events.CallSpec{ID: "p", Name: "perm", Arguments: json.RawMessage(`{"ms": 0}`)}, events.CallSpec{ID: "b", Name: "boom", Arguments: json.RawMessage(`{"ms": 0}`)})
	if r := tr.Results[0]; r.Outcome != events.OutcomeError || r.Attempts != 1 {
		t.Fatalf("permanent: %+v, want an error after one attempt", r)
	}
	if r := tr.Results[1]; r.Outcome != events.OutcomeError || r.Attempts != 3 {
		t.Fatalf("panic: %+v, want an error after the default 3 attempts", r)
	}
	if err := w.Register(ctx, "read", worker.Spec{Description: "d", Guidelines: []string{"g"}, InputSchema: schema}); err == nil {
		t.Fatal("registering a built-in's name succeeded")
	} else if e := (*worker.Error)(nil); !errors.As(err, &e) || e.Status != 409 {
		t.Fatalf("registering read: %v, want a 409 *worker.Error", err)
	}
}

// TestPollsWhileAnswerPosted: with plain answers (WithAnswerAndPoll(false))
// a finished task frees its slot as its answer is posted, so the worker
// (concurrency 1) is already polling for the next task while the node takes
// the answer. The node's API sits behind a proxy
// that holds each complete until a poll comes in (at most 5 s).
func TestPollsWhileAnswerPosted(t *testing.T) {
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan struct{}, 16)
	var held, overlapped atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/workers/poll":
			select {
			case polled <- struct{}{}:
			default:
			}
		case strings.HasSuffix(r.URL.Path, "/complete"):
			for len(polled) > 0 { // polls before this answer do not count
				<-polled
			}
			held.Add(1)
			select {
			case <-polled:
				overlapped.Add(1)
			case <-time.After(5 * time.Second):
			}
		}
		s.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { s.CloseStreams(); srv.Close(); n.Close() })

	w, err := worker.New(srv.URL, worker.WithID("t"), worker.WithConcurrency(1), worker.WithWait(time.Second), worker.WithAnswerAndPoll(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := w.Register(ctx, "nap", worker.Spec{Description: "sleeps", Guidelines: []string{"g"}, InputSchema: schema,
		Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe"}); err != nil {
		t.Fatal(err)
	}
	w.Handle("nap", func(ctx context.Context, tk *worker.Task) ([]worker.Part, error) { return worker.Text(tk.Call), nil })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	defer func() { stop(); <-done }()

	info, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		tr := submit(t, n, info.Session, events.CallSpec{ID: id, Name: "nap", Arguments: json.RawMessage(`{"ms": 0}`)})
		if r := tr.Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != id {
			t.Fatalf("result of %s: %+v", id, r)
		}
	}
	if h, o := held.Load(), overlapped.Load(); h != 2 || o != 2 {
		t.Fatalf("%d of %d completes saw the next poll while they were held; want every one", o, h)
	}
}

// proxied is a node's API behind a proxy that calls see before the API
// does; see may answer the request itself (true).
func proxied(t *testing.T, see func(w http.ResponseWriter, r *http.Request, body []byte) bool) (*node.Node, string) {
	t.Helper()
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Logger: logtest.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		if !see(w, r, b) {
			s.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() { s.CloseStreams(); srv.Close(); n.Close() })
	return n, srv.URL
}

// serveTurns runs w (tool nap, answering its call's id) and submits one
// one-call turn after another, checking each result; stopped says how long
// Run took to return once its context ended. An answer lost fails its turn
// at the call's timeout (10 s).
func serveTurns(t *testing.T, n *node.Node, w *worker.Worker, ids ...string) (stopped time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := w.Register(ctx, "nap", worker.Spec{Description: "sleeps", Guidelines: []string{"g"}, InputSchema: schema,
		Effect: "read_only", Replay: "safe", Concurrency: "parallel_safe", Timeout: "10s"}); err != nil {
		t.Fatal(err)
	}
	w.Handle("nap", func(ctx context.Context, tk *worker.Task) ([]worker.Part, error) { return worker.Text(tk.Call), nil })
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx) }()
	info, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		tr := submit(t, n, info.Session, events.CallSpec{ID: id, Name: "nap", Arguments: json.RawMessage(`{"ms": 0}`)})
		if r := tr.Results[0]; r.Outcome != events.OutcomeOK || r.Content[0].Text != id {
			t.Fatalf("result of %s: %+v", id, r)
		}
	}
	start := time.Now()
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	return time.Since(start)
}

// TestAnswerCarriesNextTask: by default a finished task's complete asks for
// the next task ("next") and is answered with it, so a worker of
// concurrency 1 polls once, keeps one request in flight, and receives every
// later task in the answer to the previous one's complete; Run's end ends
// the held answer long before its wait (and posts that answer again,
// plainly, not knowing whether the node had it).
func TestAnswerCarriesNextTask(t *testing.T) {
	var polls, withNext, plain, inFlight, peak atomic.Int32
	n, url := proxied(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		switch {
		case r.URL.Path == "/v1/workers/poll":
			polls.Add(1)
		case strings.HasSuffix(r.URL.Path, "/complete") && bytes.Contains(body, []byte(`"next"`)):
			withNext.Add(1)
		case strings.HasSuffix(r.URL.Path, "/complete"):
			plain.Add(1)
		default:
			return false
		}
		now := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		return false
	})
	w, err := worker.New(url, worker.WithID("t"), worker.WithConcurrency(1), worker.WithWait(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	stopped := serveTurns(t, n, w, "a", "b", "c", "d")
	if p, c, pl, pk := polls.Load(), withNext.Load(), plain.Load(), peak.Load(); p != 1 || c != 4 || pl > 1 || pk != 1 {
		t.Fatalf("%d polls, %d completes with next, %d plain, at most %d requests in flight; want 1, 4, at most 1 (the last answer again, its held exchange cut by Run's end), 1", p, c, pl, pk)
	}
	if stopped > 20*time.Second {
		t.Fatalf("Run took %s to return: the held answer outlived its context", stopped)
	}
}

// TestAnswerWithoutNextOnOlderNode: a node that refuses "next" (as nodes
// before it did, 400 naming the unknown field) gets the answer again,
// plainly, and plain answers from then on; every turn completes.
func TestAnswerWithoutNextOnOlderNode(t *testing.T) {
	var refused, plain atomic.Int32
	n, url := proxied(t, func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !strings.HasPrefix(r.URL.Path, "/v1/tasks/") {
			return false
		}
		if bytes.Contains(body, []byte(`"next"`)) {
			refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"code":"invalid_body","message":"request body has unknown field \"next\""}}`+"\n")
			return true
		}
		plain.Add(1)
		return false
	})
	w, err := worker.New(url, worker.WithID("t"), worker.WithConcurrency(1), worker.WithWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	serveTurns(t, n, w, "a", "b", "c")
	if r, p := refused.Load(), plain.Load(); r != 1 || p != 3 {
		t.Fatalf("%d answers refused for next, %d plain; want 1 and 3", r, p)
	}
}
