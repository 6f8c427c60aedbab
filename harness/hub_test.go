package harness

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/tool"
)

// startServer starts an embedded JetStream server on a temp dir.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// connect opens one "node": its own NATS connection and JetStream.
func connect(t *testing.T, s *server.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func newHub(t *testing.T, s *server.Server) *Hub {
	t.Helper()
	nc, js := connect(t, s)
	h, err := New(context.Background(), nc, js, WithLogger(logtest.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// callCtx is the context the pool gives a call.
func callCtx(timeout time.Duration, tenant, call string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	return tool.WithCall(ctx, tool.Call{Tenant: tenant, Session: "s1", Turn: "t1", ID: call, Attempt: 1, IdempotencyKey: "cs_key_" + call}), cancel
}

type ran struct {
	res tool.Result
	err error
}

func runAsync(h *Hub, ctx context.Context, tenant, name string, hb time.Duration) <-chan ran {
	ch := make(chan ran, 1)
	go func() {
		res, err := h.Run(ctx, tenant, name, hb, json.RawMessage(`{"x":1}`))
		ch <- ran{res, err}
	}()
	return ch
}

func pollOne(t *testing.T, h *Hub, tenant, name string) Task {
	t.Helper()
	ts, err := h.Poll(context.Background(), tenant, PollRequest{Worker: "w", Tools: []string{name}, Max: 1, Wait: 10 * time.Second})
	if err != nil || len(ts) != 1 {
		t.Fatalf("poll: %v, %d tasks; want one", err, len(ts))
	}
	return ts[0]
}

// TestAcrossNodes: the call waits on one node, the worker polls and
// completes through another: everything travels over NATS.
func TestAcrossNodes(t *testing.T) {
	s := startServer(t)
	a, b := newHub(t, s), newHub(t, s)
	ctx, cancel := callCtx(30*time.Second, "acme", "c1")
	defer cancel()
	done := runAsync(a, ctx, "acme", "lookup", 0)
	tk := pollOne(t, b, "acme", "lookup")
	if tk.Call != "c1" || tk.IdempotencyKey != "cs_key_c1" || string(tk.Arguments) != `{"x":1}` || tk.Deadline.IsZero() {
		t.Fatalf("task %+v", tk)
	}
	if _, err := b.Heartbeat(context.Background(), "acme", tk.Task, nil); err != nil {
		t.Fatalf("heartbeat through the other node: %v", err)
	}
	if err := b.Complete(context.Background(), "acme", tk.Task, []tool.Part{{Type: "text", Text: "done"}}); err != nil {
		t.Fatalf("complete through the other node: %v", err)
	}
	r := <-done
	if r.err != nil || len(r.res.Parts) != 1 || r.res.Parts[0].Text != "done" {
		t.Fatalf("run = %+v, %v", r.res, r.err)
	}
	// Settled: 409 from either node, saying why once the record is in.
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := a.Complete(context.Background(), "acme", tk.Task, nil)
		if !errors.Is(err, ErrNotWaiting) {
			t.Fatalf("late complete: %v, want ErrNotWaiting", err)
		}
		if strings.Contains(err.Error(), "completed at") || time.Now().After(deadline) {
			if !strings.Contains(err.Error(), "completed at") {
				t.Fatalf("late complete: %v, want it to say the attempt completed", err)
			}
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHandedOutOnce: many pollers on two nodes race for a handful of tasks;
// each is handed out exactly once.
func TestHandedOutOnce(t *testing.T) {
	s := startServer(t)
	hubs := []*Hub{newHub(t, s), newHub(t, s)}
	const calls = 20
	var runs []<-chan ran
	for i := range calls {
		ctx, cancel := callCtx(30*time.Second, "acme", "c"+string(rune('a'+i)))
		defer cancel()
		runs = append(runs, runAsync(hubs[i%2], ctx, "acme", "t", 0))
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hubs[i%2]
			for {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				if n >= calls {
					return
				}
				ts, err := h.Poll(context.Background(), "acme", PollRequest{Worker: "w", Tools: []string{"t"}, Max: 3, Wait: 200 * time.Millisecond})
				if err != nil {
					t.Error(err)
					return
				}
				for _, tk := range ts {
					mu.Lock()
					seen[tk.Call]++
					mu.Unlock()
					if err := h.Complete(context.Background(), "acme", tk.Task, []tool.Part{{Type: "text", Text: tk.Call}}); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for c, n := range seen {
		if n != 1 {
			t.Errorf("call %s handed out %d times", c, n)
		}
	}
	for i, ch := range runs {
		if r := <-ch; r.err != nil || r.res.Parts[0].Text != "c"+string(rune('a'+i)) {
			t.Errorf("run %d: %+v %v", i, r.res, r.err)
		}
	}
}

// TestRunOutcomes: what each way of ending a call returns to the pool,
// which settles it by the replay policy.
func TestRunOutcomes(t *testing.T) {
	s := startServer(t)
	h := newHub(t, s)
	bg := context.Background()

	t.Run("not taken", func(t *testing.T) {
		ctx, cancel := callCtx(300*time.Millisecond, "acme", "n")
		defer cancel()
		_, err := h.Run(ctx, "acme", "nobody", 0, nil)
		if !errors.Is(err, tool.ErrNotSent) || !strings.Contains(err.Error(), "no worker took") {
			t.Fatalf("err = %v, want ErrNotSent saying no worker took it", err)
		}
	})
	t.Run("heartbeat missed", func(t *testing.T) {
		ctx, cancel := callCtx(30*time.Second, "acme", "h")
		defer cancel()
		done := runAsync(h, ctx, "acme", "hb", time.Second)
		tk := pollOne(t, h, "acme", "hb")
		r := <-done
		if !errors.Is(r.err, tool.ErrLost) || !strings.Contains(r.err.Error(), `worker "w"`) {
			t.Fatalf("err = %v, want ErrLost naming the worker", r.err)
		}
		if err := h.Complete(bg, "acme", tk.Task, nil); !errors.Is(err, ErrNotWaiting) || !strings.Contains(err.Error(), "lost") {
			t.Fatalf("late complete: %v, want ErrNotWaiting saying lost", err)
		}
	})
	t.Run("heartbeats keep it", func(t *testing.T) {
		ctx, cancel := callCtx(30*time.Second, "acme", "k")
		defer cancel()
		done := runAsync(h, ctx, "acme", "hb2", time.Second)
		tk := pollOne(t, h, "acme", "hb2")
		for range 6 { // 3 s: three heartbeat timeouts' worth
			time.Sleep(500 * time.Millisecond)
			if c, err := h.Heartbeat(bg, "acme", tk.Task, json.RawMessage(`{"pct": 10}`)); err != nil || c {
				t.Fatalf("heartbeat: %v, cancel %v", err, c)
			}
		}
		if err := h.Fail(bg, "acme", tk.Task, "quota", true); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if !errors.Is(r.err, tool.ErrPermanent) || !strings.Contains(r.err.Error(), "quota") {
			t.Fatalf("err = %v, want a permanent failure saying quota", r.err)
		}
	})
	t.Run("timed out", func(t *testing.T) {
		ctx, cancel := callCtx(time.Second, "acme", "o")
		defer cancel()
		done := runAsync(h, ctx, "acme", "slow", 0)
		tk := pollOne(t, h, "acme", "slow")
		r := <-done
		if !errors.Is(r.err, context.DeadlineExceeded) || errors.Is(r.err, tool.ErrNotSent) {
			t.Fatalf("err = %v, want the deadline (the pool: timed out, indeterminate for never)", r.err)
		}
		if _, err := h.Heartbeat(bg, "acme", tk.Task, nil); !errors.Is(err, ErrNotWaiting) {
			t.Fatalf("heartbeat after the timeout: %v, want ErrNotWaiting", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := callCtx(30*time.Second, "acme", "x")
		done := runAsync(h, ctx, "acme", "cx", 0)
		tk := pollOne(t, h, "acme", "cx")
		cancel()
		if r := <-done; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("err = %v, want Canceled", r.err)
		}
		if c, err := h.Heartbeat(bg, "acme", tk.Task, nil); err != nil || !c {
			t.Fatalf("heartbeat after cancel: %v, cancel %v; want cancel true", err, c)
		}
		if err := h.Complete(bg, "acme", tk.Task, nil); !errors.Is(err, ErrNotWaiting) {
			t.Fatalf("complete after cancel: %v, want ErrNotWaiting", err)
		}
	})
	t.Run("bad answers", func(t *testing.T) {
		ctx, cancel := callCtx(30*time.Second, "acme", "b")
		defer cancel()
		done := runAsync(h, ctx, "acme", "b", 0)
		tk := pollOne(t, h, "acme", "b")
		for _, parts := range [][]tool.Part{{{Type: "video"}}, {{Type: "json", JSON: json.RawMessage(`{`)}}, {{Type: "image", MIME: "text/html", Data: []byte("x")}}} {
			if err := h.Complete(bg, "acme", tk.Task, parts); !errors.Is(err, ErrInvalid) {
				t.Fatalf("complete %+v: %v, want ErrInvalid", parts, err)
			}
		}
		if err := h.Fail(bg, "acme", tk.Task, " ", false); !errors.Is(err, ErrInvalid) {
			t.Fatalf("fail without a message: %v, want ErrInvalid", err)
		}
		big := strings.Repeat("x", int(h.nc.MaxPayload()))
		if err := h.Complete(bg, "acme", tk.Task, []tool.Part{{Type: "text", Text: big}}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("complete of %d bytes: %v, want ErrTooLarge", len(big), err)
		}
		// None of it settled the attempt: the worker can still answer.
		if err := h.Complete(bg, "acme", tk.Task, []tool.Part{}); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.err != nil || len(r.res.Parts) != 0 {
			t.Fatalf("run = %+v %v, want an empty ok result", r.res, r.err)
		}
	})
}

// TestTokens: tokens are unguessable in form, bound to their tenant, and
// a token of one tenant cannot reach another's task.
func TestTokens(t *testing.T) {
	s := startServer(t)
	h := newHub(t, s)
	seen := map[string]bool{}
	for range 1000 {
		tok, _ := newToken()
		if seen[tok] || len(tok) != 46 {
			t.Fatalf("token %q repeated or not 256 bits", tok)
		}
		seen[tok] = true
		if _, _, ok := TokenID(tok); !ok {
			t.Fatalf("TokenID refuses a minted token %q", tok)
		}
	}
	for _, bad := range []string{"", "tk_", "tk_" + strings.Repeat("A", 42), "tk_" + strings.Repeat("*", 43), "xx_" + strings.Repeat("A", 43)} {
		if _, _, ok := TokenID(bad); ok {
			t.Fatalf("TokenID accepts %q", bad)
		}
	}
	ctx, cancel := callCtx(30*time.Second, "acme", "c")
	defer cancel()
	done := runAsync(h, ctx, "acme", "pay", 0)
	if ts, _ := h.Poll(context.Background(), "globex", PollRequest{Worker: "w", Tools: []string{"pay"}, Wait: 500 * time.Millisecond}); len(ts) != 0 {
		t.Fatalf("globex polled acme's task: %+v", ts)
	}
	tk := pollOne(t, h, "acme", "pay")
	if err := h.Complete(context.Background(), "globex", tk.Task, []tool.Part{{Type: "text", Text: "forged"}}); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("globex's complete on acme's token: %v, want ErrNotWaiting", err)
	}
	// A post straight onto the task's subject naming the wrong tenant (as a
	// node with a bug would send) is refused by the waiting call itself.
	id, digest, _ := TokenID(tk.Task)
	_ = digest
	b, _ := json.Marshal(post{Op: "complete", Tenant: "globex", Digest: "00", Content: []tool.Part{}})
	m, err := h.nc.Request(taskSubject("acme", id), b, 5*time.Second)
	if err != nil || !strings.Contains(string(m.Data), "names no attempt") {
		t.Fatalf("forged post: %v %s", err, m.Data)
	}
	if err := h.Complete(context.Background(), "acme", tk.Task, []tool.Part{{Type: "text", Text: "real"}}); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || r.res.Parts[0].Text != "real" {
		t.Fatalf("run = %+v %v", r.res, r.err)
	}
}

// TestStoreDurable: registrations reach every store on the bucket, and a
// store opened later (a restart) reads them all back before it returns.
func TestStoreDurable(t *testing.T) {
	s := startServer(t)
	_, jsA := connect(t, s)
	_, jsB := connect(t, s)
	type seenSet struct {
		mu sync.Mutex
		m  map[string]map[string]Spec
	}
	apply := func(ss *seenSet) Apply {
		return func(tenant string, specs map[string]Spec) {
			ss.mu.Lock()
			ss.m[tenant] = specs
			ss.mu.Unlock()
		}
	}
	a := &seenSet{m: map[string]map[string]Spec{}}
	b := &seenSet{m: map[string]map[string]Spec{}}
	sa, err := OpenStore(context.Background(), jsA, 1, apply(a), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	sb, err := OpenStore(context.Background(), jsB, 1, apply(b), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	sp := Spec{Description: "d", Guidelines: []string{"g"}, InputSchema: json.RawMessage(`{"type":"object"}`), Timeout: 5e9}
	if err := sa.Put(context.Background(), "acme", "lookup", sp); err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	if _, ok := a.m["acme"]["lookup"]; !ok {
		t.Fatal("Put returned before its own store applied it")
	}
	a.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		got, ok := b.m["acme"]["lookup"]
		b.mu.Unlock()
		if ok {
			if got.Timeout != sp.Timeout {
				t.Fatalf("the other store got %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other store never saw the registration")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, jsC := connect(t, s)
	c := &seenSet{m: map[string]map[string]Spec{}}
	sc, err := OpenStore(context.Background(), jsC, 1, apply(c), logtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.m["acme"]["lookup"]; !ok {
		t.Fatal("a store opened later does not have the registration when OpenStore returns")
	}
	sc.Close()
	if err := sb.Delete(context.Background(), "acme", "lookup"); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	if len(b.m["acme"]) != 0 {
		t.Fatal("Delete returned before its own store applied it")
	}
	b.mu.Unlock()
	if err := sb.Delete(context.Background(), "acme", "lookup"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

// TestPollLimit: a tenant cannot hold more than MaxPollsPerTenant polls on
// a node; another tenant still can.
func TestPollLimit(t *testing.T) {
	s := startServer(t)
	h := newHub(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range MaxPollsPerTenant {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = h.Poll(ctx, "acme", PollRequest{Worker: "w", Tools: []string{"t"}, Wait: MaxWait})
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		n := h.polls["acme"]
		h.mu.Unlock()
		if n == MaxPollsPerTenant || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := h.Poll(context.Background(), "acme", PollRequest{Worker: "w", Tools: []string{"t"}}); !errors.Is(err, ErrLimit) {
		t.Fatalf("poll beyond the limit: %v, want ErrLimit", err)
	}
	if _, err := h.Poll(context.Background(), "globex", PollRequest{Worker: "w", Tools: []string{"t"}}); err != nil {
		t.Fatalf("another tenant's poll: %v", err)
	}
	cancel()
	wg.Wait()
	if _, err := h.Poll(context.Background(), "acme", PollRequest{Worker: "w", Tools: []string{"t"}}); err != nil {
		t.Fatalf("poll after the others ended: %v", err)
	}
}

// TestLocalCallSkipsNATS: a poll, heartbeat and complete served by the
// node where the call waits reach it directly: nothing goes to the offer
// or task subjects (a third connection listening there hears nothing),
// while the same through another node does go over NATS.
func TestLocalCallSkipsNATS(t *testing.T) {
	s := startServer(t)
	a, b := newHub(t, s), newHub(t, s)
	snc, _ := connect(t, s)
	var mu sync.Mutex
	heard := map[string]int{}
	ready := make(chan struct{}, 8)
	for _, subj := range []string{subjectPrefix + ".offer.>", subjectPrefix + ".task.>", subjectPrefix + ".ready.>"} {
		if _, err := snc.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			heard[strings.Split(m.Subject, ".")[2]]++
			mu.Unlock()
			if strings.Contains(m.Subject, ".ready.") {
				ready <- struct{}{}
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := snc.Flush(); err != nil {
		t.Fatal(err)
	}
	counts := func() (offer, task int) {
		mu.Lock()
		defer mu.Unlock()
		return heard["offer"], heard["task"]
	}
	for _, via := range []struct {
		name   string
		served *Hub
		remote bool
	}{{"same node", a, false}, {"other node", b, true}} {
		o0, t0 := counts()
		ctx, cancel := callCtx(30*time.Second, "acme", "c-"+via.name)
		done := runAsync(a, ctx, "acme", "lookup", 0)
		<-ready // on offer: the other nodes were told
		tk := pollOne(t, via.served, "acme", "lookup")
		if _, err := via.served.Heartbeat(context.Background(), "acme", tk.Task, nil); err != nil {
			t.Fatalf("%s: heartbeat: %v", via.name, err)
		}
		if err := via.served.Complete(context.Background(), "acme", tk.Task, []tool.Part{{Type: "text", Text: "done"}}); err != nil {
			t.Fatalf("%s: complete: %v", via.name, err)
		}
		if r := <-done; r.err != nil || r.res.Parts[0].Text != "done" {
			t.Fatalf("%s: run = %+v, %v", via.name, r.res, r.err)
		}
		cancel()
		if err := snc.Flush(); err != nil {
			t.Fatal(err)
		}
		o1, t1 := counts()
		for end := time.Now().Add(5 * time.Second); via.remote && o1-o0+t1-t0 == 0 && time.Now().Before(end); o1, t1 = counts() {
			time.Sleep(5 * time.Millisecond) // the listener's handler runs on its own goroutine
		}
		if got := o1 - o0 + t1 - t0; (got > 0) != via.remote {
			t.Errorf("%s: %d asks on the offer subject and %d posts on the task subject; want them over NATS only from another node", via.name, o1-o0, t1-t0)
		}
	}
}
