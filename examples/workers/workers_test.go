// Package workers_test runs the three example workers (worker.py, worker.ts,
// goworker) as separate processes against a real node process: each serves
// its registered tools with results in call order, never sees a call with
// invalid arguments, sees the idempotency key, and, killed while it holds a
// never-replay task, leaves the call indeterminate, never handed out again,
// with the retry notice on the next turn (docs/workers.md).
package workers_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

func TestMain(m *testing.M) {
	testenv.Main(m, nil, testnode.Cleanup)
}

// proc is a worker process whose stdout lines are kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  []string
	errb strings.Builder
	done chan struct{}
}

func (p *proc) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// waitLine waits until a stdout line holds s.
func (p *proc) waitLine(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, l := range p.lines() {
			if strings.Contains(l, s) {
				return
			}
		}
		select {
		case <-p.done:
			t.Fatalf("worker exited before printing %q: %v\nstdout %q\nstderr %s", s, p.cmd.ProcessState, p.lines(), p.stderr())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("worker did not print %q within 60 s; stdout %q\nstderr %s", s, p.lines(), p.stderr())
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errb.String()
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.errb.Write(b)
}

func start(t *testing.T, argv []string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = lockedWriter{p}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", argv, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// workers are the three example workers, each as the argv that runs it.
func workers(t *testing.T) map[string][]string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed to run worker.py: %v", err)
	}
	bin := testnode.Build(t, "examples/workers/goworker", "")
	return map[string][]string{
		"python":     {py, "worker.py"},
		"typescript": {testenv.Node22(t), "worker.ts"},
		"go":         {bin},
	}
}

func TestExampleWorkers(t *testing.T) {
	node := testnode.Node(t, "")
	cfg := map[string]any{"tenants": map[string]any{"acme": map[string]any{"token": "tok-acme"}, "globex": map[string]any{"token": "tok-globex"}}}
	for name, argv := range workers(t) {
		t.Run(name, func(t *testing.T) {
			p := testnode.Start(t, node, testnode.Options{Data: filepath.Join(t.TempDir(), "data"), Config: cfg, Token: "tok-acme",
				Args: []string{"--metrics-listen", "127.0.0.1:0"}})
			var s struct{ Session string }
			if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &s); err != nil || code != http.StatusCreated {
				t.Fatalf("open session: %d %v", code, err)
			}
			one := start(t, argv, "CALLSHEET_URL="+p.Base, "CALLSHEET_TOKEN=tok-acme", "WORKER_ID="+name+"-0", "WORKER_CONCURRENCY=1")
			one.waitLine(t, "registered")
			chains(t, p, s.Session)
			_ = one.cmd.Process.Kill()
			<-one.done
			w := start(t, argv, "CALLSHEET_URL="+p.Base, "CALLSHEET_TOKEN=tok-acme", "WORKER_ID="+name+"-1")
			w.waitLine(t, "registered")
			serves(t, p, w, s.Session)
			vanishes(t, p, w, s.Session)
		})
	}
}

// chains: a worker with one slot answers each task asking for its next
// (docs/workers.md, "Answering and asking for the next task in one
// exchange"), so six charges run one after another over one or two polls,
// not one poll each.
func chains(t *testing.T, p *testnode.Proc, session string) {
	t.Helper()
	polls := func() int {
		resp, err := http.Get(p.OperatorURL() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		n := 0
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "callsheet_http_requests_total{") && strings.Contains(l, `route="/v1/workers/poll"`) {
				var v float64
				if _, err := fmt.Sscan(l[strings.LastIndexByte(l, ' ')+1:], &v); err == nil {
					n += int(v)
				}
			}
		}
		return n
	}
	before := polls()
	var calls []any
	for i := range 6 {
		calls = append(calls, map[string]any{"id": fmt.Sprintf("k%d", i), "name": "charge", "arguments": map[string]any{"order": "A-1", "cents": 100 + i}})
	}
	var tr projections.Turn
	if code, err := p.Do("POST", "/v1/sessions/"+session+"/turns", map[string]any{"calls": calls}, &tr); err != nil || code != http.StatusOK {
		t.Fatalf("turn: %d %v", code, err)
	}
	for _, r := range tr.Results {
		if r.Outcome != events.OutcomeOK {
			t.Fatalf("charge %s: %+v", r.ID, r)
		}
	}
	if n := polls() - before; n > 2 {
		t.Errorf("six charges in a row took %d polls answered, want at most 2: the worker does not answer with next", n)
	}
}

// serves: results in call order, the invalid call never reaches the
// worker, and the worker sees each call's idempotency key.
func serves(t *testing.T, p *testnode.Proc, w *proc, session string) {
	t.Helper()
	var tr projections.Turn
	body := map[string]any{"calls": []any{
		map[string]any{"id": "l1", "name": "lookup_order", "arguments": map[string]any{"order": "A-1"}},
		map[string]any{"id": "bad", "name": "charge", "arguments": map[string]any{"order": "A-1", "cents": "lots"}},
		map[string]any{"id": "l2", "name": "lookup_order", "arguments": `{"order": "C-3"}`},
		map[string]any{"id": "c1", "name": "charge", "arguments": map[string]any{"order": "B-2", "cents": 500}},
		map[string]any{"id": "l3", "name": "lookup_order", "arguments": map[string]any{"order": "Z-9"}},
	}}
	code, err := p.Do("POST", "/v1/sessions/"+session+"/turns", body, &tr)
	if err != nil || code != http.StatusOK {
		t.Fatalf("turn: %d %v", code, err)
	}
	ids := []string{}
	for _, r := range tr.Results {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, ",") != "l1,bad,l2,c1,l3" {
		t.Fatalf("results %v: want call order l1,bad,l2,c1,l3", ids)
	}
	keys := map[string]bool{}
	for _, i := range []int{0, 2} {
		r := tr.Results[i]
		var got struct {
			Order          string `json:"order"`
			IdempotencyKey string `json:"idempotency_key"`
		}
		if r.Outcome != events.OutcomeOK || len(r.Content) != 1 || json.Unmarshal(r.Content[0].JSON, &got) != nil || got.IdempotencyKey == "" {
			t.Fatalf("result %s: %+v: want ok JSON with the idempotency key", r.ID, r)
		}
		keys[got.IdempotencyKey] = true
	}
	if len(keys) != 2 {
		t.Fatalf("idempotency keys %v: want one per call", keys)
	}
	if r := tr.Results[1]; r.Outcome != events.OutcomeBlocked || r.Block != events.BlockInvalidArguments {
		t.Fatalf("bad call: %+v, want blocked/invalid_arguments", r)
	}
	if r := tr.Results[3]; r.Outcome != events.OutcomeOK || !strings.Contains(r.Content[0].Text, "charged B-2 500 cents (key cs_") {
		t.Fatalf("charge: %+v", r)
	}
	if r := tr.Results[4]; r.Outcome != events.OutcomeError || r.Attempts != 1 || !strings.Contains(r.Content[0].Text, "no order Z-9") {
		t.Fatalf("unknown order: %+v, want an error after one attempt (the worker failed it permanently)", r)
	}
	for _, l := range w.lines() {
		if strings.Contains(l, "call=bad ") {
			t.Fatalf("the call with invalid arguments reached the worker: %q", l)
		}
	}
}

// vanishes: the worker is killed holding a never-replay task.
func vanishes(t *testing.T, p *testnode.Proc, w *proc, session string) {
	t.Helper()
	var a struct{ Turn string }
	body := map[string]any{"calls": []any{map[string]any{"id": "slow", "name": "charge", "arguments": map[string]any{"order": "A-1", "cents": 100, "delay_ms": 60000}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+session+"/turns?wait=0", body, &a); err != nil || code != http.StatusAccepted {
		t.Fatalf("turn: %d %v", code, err)
	}
	w.waitLine(t, "call=slow ")
	_ = w.cmd.Process.Kill() // kill -9: no heartbeat, no answer
	<-w.done
	var tr projections.Turn
	deadline := time.Now().Add(60 * time.Second)
	for tr.Status != projections.StatusComplete && time.Now().Before(deadline) {
		if _, err := p.Do("GET", "/v1/sessions/"+session+"/turns/"+a.Turn, nil, &tr); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(tr.Results) != 1 || tr.Results[0].Outcome != events.OutcomeIndeterminate || !strings.Contains(tr.Results[0].Content[0].Text, "heartbeat") {
		t.Fatalf("turn %+v: want the charge indeterminate (missed heartbeat)", tr)
	}
	// Never handed out again: a poll finds nothing.
	code, err := p.Do("POST", "/v1/workers/poll", map[string]any{"worker": "probe", "tools": []string{"charge"}, "wait_ms": 2500}, nil)
	if err != nil || code != http.StatusNoContent {
		t.Fatalf("poll after the loss: %d %v, want 204", code, err)
	}
	var next projections.Turn
	body = map[string]any{"calls": []any{map[string]any{"id": "g", "name": "glob", "arguments": map[string]any{"pattern": "*"}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+session+"/turns", body, &next); err != nil || code != http.StatusOK {
		t.Fatalf("next turn: %d %v", code, err)
	}
	if len(next.Notices) != 1 || next.Notices[0].Call != "slow" || next.Notices[0].Tool != "charge" {
		t.Fatalf("next turn's notices %+v: want the notice of call slow (charge)", next.Notices)
	}
}

// TestNodeDies: the node waiting on a worker's never-replay task is killed
// (kill -9) and restarted on the same data: the call is settled by its
// replay policy (indeterminate, with its notice), it is not handed out
// again, and the worker's late complete is a 409. The registration
// survived the restart.
func TestNodeDies(t *testing.T) {
	bin := testnode.Node(t, "")
	data := filepath.Join(t.TempDir(), "data")
	p := testnode.Start(t, bin, testnode.Options{Data: data})
	spec := map[string]any{"description": "charge", "guidelines": []string{"g"}, "timeout": "60s",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"order": map[string]any{"type": "string"}}}}
	if code, err := p.Do("PUT", "/v1/tools/charge", spec, nil); err != nil || code != http.StatusOK {
		t.Fatalf("register: %d %v", code, err)
	}
	var s struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &s); err != nil || code != http.StatusCreated {
		t.Fatalf("open: %d %v", code, err)
	}
	body := map[string]any{"id": "t1", "calls": []any{map[string]any{"id": "c1", "name": "charge", "arguments": map[string]any{"order": "A-1"}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+s.Session+"/turns?wait=0", body, nil); err != nil || code != http.StatusAccepted {
		t.Fatalf("turn: %d %v", code, err)
	}
	var polled struct {
		Tasks []struct {
			Task string `json:"task"`
			Call string `json:"call"`
		} `json:"tasks"`
	}
	if code, err := p.Do("POST", "/v1/workers/poll", map[string]any{"worker": "w", "tools": []string{"charge"}, "wait_ms": 30000}, &polled); err != nil || code != http.StatusOK || len(polled.Tasks) != 1 {
		t.Fatalf("poll: %d %v %+v", code, err, polled)
	}
	p.Kill()
	p = testnode.Start(t, bin, testnode.Options{Data: data})
	var tr projections.Turn
	deadline := time.Now().Add(60 * time.Second)
	for tr.Status != projections.StatusComplete && time.Now().Before(deadline) {
		if _, err := p.Do("GET", "/v1/sessions/"+s.Session+"/turns/t1", nil, &tr); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(tr.Results) != 1 || tr.Results[0].Outcome != events.OutcomeIndeterminate {
		t.Fatalf("after the restart: %+v, want the call indeterminate", tr)
	}
	code, err := p.Do("POST", "/v1/tasks/"+polled.Tasks[0].Task+"/complete", map[string]any{"content": []any{}}, nil)
	if code != http.StatusConflict {
		t.Fatalf("late complete after the restart: %d %v, want 409", code, err)
	}
	if code, _ := p.Do("POST", "/v1/workers/poll", map[string]any{"worker": "w", "tools": []string{"charge"}, "wait_ms": 2000}, nil); code != http.StatusNoContent {
		t.Fatalf("poll after the restart: %d, want 204 (registered, nothing to hand out)", code)
	}
	var next projections.Turn
	body = map[string]any{"calls": []any{map[string]any{"id": "g", "name": "glob", "arguments": map[string]any{"pattern": "*"}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+s.Session+"/turns", body, &next); err != nil || code != http.StatusOK || len(next.Notices) != 1 || next.Notices[0].Call != "c1" {
		t.Fatalf("next turn: %d %v %+v, want the notice of c1", code, err, next.Notices)
	}
}

// TestFleetOwnerDies: in a fleet of three node processes, the worker polls
// one node and holds a never-replay task of a session another node owns;
// the owner, where the call waits, is killed (kill -9). A survivor takes
// the session and settles the call by its policy (indeterminate, with the
// notice on the next turn); the task is not handed out again, and the
// worker's late complete through any node is a 409. Nothing is stranded.
func TestFleetOwnerDies(t *testing.T) {
	bin := testnode.Node(t, "")
	began := time.Now()
	f := testnode.StartFleet(t, bin, testnode.FleetOptions{Dir: t.TempDir()})
	n1, n2, n3 := f.Procs[0], f.Procs[1], f.Procs[2]
	t.Logf("fleet up after %s", time.Since(began).Round(time.Millisecond))
	spec := map[string]any{"description": "charge", "guidelines": []string{"g"}, "timeout": "60s",
		"input_schema": map[string]any{"type": "object", "properties": map[string]any{"order": map[string]any{"type": "string"}}}}
	if code, err := n1.Do("PUT", "/v1/tools/charge", spec, nil); err != nil || code != http.StatusOK {
		t.Fatalf("register: %d %v", code, err)
	}
	var s struct{ Session string }
	if code, err := n2.Do("POST", "/v1/sessions", map[string]any{}, &s); err != nil || code != http.StatusCreated {
		t.Fatalf("open: %d %v", code, err)
	}
	var raw []byte
	var st struct{ Owner string }
	if code, err := n3.Do("GET", "/v1/sessions/"+s.Session, nil, &raw); err != nil || code != http.StatusOK || json.Unmarshal(raw, &st) != nil || st.Owner != "n2" {
		t.Fatalf("status through n3: %d %v %s, want owner n2", code, err, raw)
	}
	body := map[string]any{"id": "t1", "calls": []any{map[string]any{"id": "c1", "name": "charge", "arguments": map[string]any{"order": "A-1"}}}}
	var code int
	var err error
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) { // n3 may not know the tool yet
		if code, err = n3.Do("POST", "/v1/sessions/"+s.Session+"/turns?wait=0", body, nil); err == nil && code == http.StatusAccepted {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusAccepted {
		t.Fatalf("turn via n3: %d %v", code, err)
	}
	var polled struct {
		Tasks []struct {
			Task string `json:"task"`
		} `json:"tasks"`
	}
	if code, err := n1.Do("POST", "/v1/workers/poll", map[string]any{"worker": "w", "tools": []string{"charge"}, "wait_ms": 30000}, &polled); err != nil || code != http.StatusOK || len(polled.Tasks) != 1 {
		t.Fatalf("poll on n1: %d %v %+v", code, err, polled)
	}
	t.Logf("task held after %s", time.Since(began).Round(time.Millisecond))
	killed := time.Now()
	n2.Kill()
	// The takeover waits for n2's lease to lapse; on a loaded machine that
	// and the survivors' rebuild take their time: poll generously.
	var tr projections.Turn
	var last string
	deadline = time.Now().Add(4 * time.Minute)
	for tr.Status != projections.StatusComplete && time.Now().Before(deadline) {
		tr = projections.Turn{}
		code, err := n3.Do("GET", "/v1/sessions/"+s.Session+"/turns/t1", nil, &tr)
		last = fmt.Sprintf("GET via n3: %d %v", code, err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("settled %s after the kill", time.Since(killed).Round(time.Millisecond))
	if len(tr.Results) != 1 || tr.Results[0].Outcome != events.OutcomeIndeterminate {
		t.Fatalf("after the owner died: %+v (last %s), want the call indeterminate\nn1: %s\nn3: %s", tr, last, n1.Stderr(), n3.Stderr())
	}
	for _, p := range []*testnode.Proc{n1, n3} {
		if code, err := p.Do("POST", "/v1/tasks/"+polled.Tasks[0].Task+"/complete", map[string]any{"content": []any{}}, nil); code != http.StatusConflict {
			t.Fatalf("late complete via %s: %d %v, want 409", p.Name, code, err)
		}
	}
	if code, _ := n3.Do("POST", "/v1/workers/poll", map[string]any{"worker": "w", "tools": []string{"charge"}, "wait_ms": 2000}, nil); code != http.StatusNoContent {
		t.Fatalf("poll after the takeover: %d, want 204", code)
	}
	var next projections.Turn
	body = map[string]any{"calls": []any{map[string]any{"id": "g", "name": "todo_get", "arguments": map[string]any{}}}}
	if code, err := n1.Do("POST", "/v1/sessions/"+s.Session+"/turns", body, &next); err != nil || code != http.StatusOK || len(next.Notices) != 1 || next.Notices[0].Call != "c1" {
		t.Fatalf("next turn via n1: %d %v %+v, want the notice of c1", code, err, next.Notices)
	}
}
