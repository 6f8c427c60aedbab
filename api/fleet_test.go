package api

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/replay"
)

// fleetNode is one node of an in-process fleet, behind its API.
type fleetNode struct {
	*env
	name   string
	closed bool
}

// newFleet starts n nodes on an external cluster of three nats-server
// processes (one shared credentials file), behind their HTTP APIs, and
// waits until every node sees the others; tune changes each node's options.
// The servers run outside the test's process: nats-server 2.15 has a data
// race of its own between a batch's commit and its stream's apply
// (jetstream_batching.go, batchStagedDiff.commit, against
// applyStreamMsgOp) that the race detector reports in whichever test
// embeds a cluster of it. The embedded cluster is tested as node processes
// (crash/fleet) and in cluster/.
func newFleet(t *testing.T, n int, cfg *config.Config, tune ...func(name string, o *node.Options)) []*fleetNode {
	t.Helper()
	return newFleetAs(t, n, cfg, "", tune...)
}

// newFleetAs is newFleet whose nodes' envs send token; mods change each
// node's options (given its name), for all nodes at once (concurrently).
func newFleetAs(t *testing.T, n int, cfg *config.Config, token string, mods ...func(name string, o *node.Options)) []*fleetNode {
	t.Helper()
	root := t.TempDir()
	creds, err := cluster.EnsureCredentials(filepath.Join(root, "fleet.nk"))
	if err != nil {
		t.Fatal(err)
	}
	ext := testnode.StartNATSCluster(t, testnode.NATSClusterOptions{Dir: filepath.Join(root, "nats"), User: creds.PublicKey()})
	nodes := make([]*fleetNode, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("n%d", i+1)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				errs[i] = err
				return
			}
			opts := node.Options{
				DataDir: filepath.Join(root, name), Config: cfg, Name: name, NATSURL: ext.URL(), NATSCredentials: creds.Path(),
				HTTPAdvertise: "http://" + ln.Addr().String(), Logger: logtest.New(t).With("node", name),
			}
			for _, m := range mods {
				m(name, &opts)
			}
			nd, err := node.New(context.Background(), opts)
			if err != nil {
				ln.Close()
				errs[i] = err
				return
			}
			s, err := New(nd, WithLogger(logtest.New(t).With("node", name)))
			if err != nil {
				errs[i] = err
				return
			}
			srv := httptest.NewUnstartedServer(s)
			srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			nodes[i] = &fleetNode{env: &env{t: t, node: nd, api: s, srv: srv, token: token}, name: name}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start n%d: %v", i+1, err)
		}
	}
	t.Cleanup(func() {
		// All at once, as a fleet is stopped.
		var wg sync.WaitGroup
		for _, fn := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); fn.close() }()
		}
		wg.Wait()
	})
	// Every node sees every other.
	eventually(t, "every node sees the fleet", func() error {
		for _, fn := range nodes {
			var got nodesAnswer
			code, b := fn.do("GET", "/v1/nodes", "")
			if code != 200 || json.Unmarshal(b, &got) != nil {
				return fmt.Errorf("%s: GET /v1/nodes: %d %s", fn.name, code, b)
			}
			if len(got.Nodes) != n {
				return fmt.Errorf("%s sees %d nodes: %s", fn.name, len(got.Nodes), b)
			}
		}
		return nil
	})
	return nodes
}

func (fn *fleetNode) close() {
	if fn.closed {
		return
	}
	fn.closed = true
	fn.api.CloseStreams()
	fn.srv.Close()
	fn.node.Close()
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// served sends a request and returns status, body and the node that served
// it (X-Callsheet-Node).
func (fn *fleetNode) served(method, path, body string, header ...string) (int, []byte, string) {
	fn.t.Helper()
	resp, err := http.DefaultClient.Do(fn.request(method, path, body, header...))
	if err != nil {
		fn.t.Fatalf("%s %s on %s: %v", method, path, fn.name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		fn.t.Fatalf("%s %s on %s: reading body: %v", method, path, fn.name, err)
	}
	return resp.StatusCode, b, resp.Header.Get(HeaderNode)
}

func sessionStatus(t *testing.T, fn *fleetNode, s string) node.SessionStatus {
	t.Helper()
	var st node.SessionStatus
	code, b := fn.do("GET", "/v1/sessions/"+s, "")
	if code != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("GET /v1/sessions/%s on %s: %d %s", s, fn.name, code, b)
	}
	return st
}

// TestFleetServesAnySessionFromAnyNode checks docs/spec.md §7's routing on a
// real three-server NATS cluster: a session opened on one node is served
// from every node (its actor's calls forwarded to the owner, its log read
// anywhere), GET /v1/sessions/{s} and GET /v1/nodes say who owns what, and a
// graceful shutdown of the owner hands the session to a survivor, which
// serves the next turn at the next epoch.
func TestFleetServesAnySessionFromAnyNode(t *testing.T) {
	fl := newFleet(t, 3, nil)
	a, b, c := fl[0], fl[1], fl[2]
	code, body := a.do("POST", "/v1/sessions", `{}`)
	if code != 201 {
		t.Fatalf("open on n1: %d %s", code, body)
	}
	var open struct{ Session string }
	_ = json.Unmarshal(body, &open)
	s := open.Session
	if st := sessionStatus(t, c, s); st.Owner != "n1" || st.Epoch != 1 || st.Status != node.StatusIdle {
		t.Fatalf("status from n3: %+v, want owner n1 at epoch 1, idle", st)
	}
	// A turn posted to n3 is served by n1, the owner.
	code, body, by := c.served("POST", "/v1/sessions/"+s+"/turns", `{"id": "t1", "calls": [{"id": "c1", "name": "todo_get", "arguments": {}}]}`)
	if code != 200 || by != "n1" {
		t.Fatalf("turn via n3: %d (served by %q) %s, want 200 from n1", code, by, body)
	}
	// The owner's answer is the answer, whichever node asked.
	code, body2, by := b.served("GET", "/v1/sessions/"+s+"/turns/t1", "")
	if code != 200 || by != "n1" || !strings.Contains(string(body2), `"status":"complete"`) {
		t.Fatalf("turn via n2: %d (served by %q) %s", code, by, body2)
	}
	// The log is read on any node, without forwarding.
	code, tr, by := b.served("GET", "/v1/sessions/"+s+"/transcript", "")
	if code != 200 || by != "" || !strings.Contains(string(tr), `"c1"`) {
		t.Fatalf("transcript on n2: %d (forwarded to %q) %s", code, by, tr)
	}
	code, evs := c.do("GET", "/v1/sessions/"+s+"/events?follow=false", "")
	if code != 200 || !strings.Contains(string(evs), `"OwnershipTaken"`) || !strings.Contains(string(evs), `"TurnCompleted"`) {
		t.Fatalf("events on n3: %d %s", code, evs)
	}
	var nodes nodesAnswer
	_, nb := b.do("GET", "/v1/nodes", "")
	_ = json.Unmarshal(nb, &nodes)
	eventually(t, "n1 shown with the session", func() error {
		_, nb := b.do("GET", "/v1/nodes", "")
		nodes = nodesAnswer{}
		_ = json.Unmarshal(nb, &nodes)
		for _, nd := range nodes.Nodes {
			if nd.Name == "n1" && nd.Sessions == 1 && nd.Alive && nd.HTTP == a.srv.URL {
				return nil
			}
		}
		return fmt.Errorf("nodes %+v", nodes)
	})
	// The Go API of a node that does not own the session says who does.
	if _, err := c.node.SubmitTurn(context.Background(), "default", s, "t9", nil, true); err == nil || !strings.Contains(err.Error(), "n1") {
		t.Fatalf("SubmitTurn on n3's Go API: err=%v, want one naming the owner n1", err)
	}

	// n1 shuts down gracefully: the session is released and taken at once.
	a.close()
	var st node.SessionStatus
	eventually(t, "a survivor takes the released session", func() error {
		st = sessionStatus(t, b, s)
		if st.Epoch != 2 || (st.Owner != "n2" && st.Owner != "n3") {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	code, body, by = b.served("POST", "/v1/sessions/"+s+"/turns", `{"id": "t2", "calls": [{"id": "c2", "name": "todo_get", "arguments": {}}]}`)
	if code != 200 || by != st.Owner {
		t.Fatalf("turn after the handover: %d (served by %q, owner %s) %s", code, by, st.Owner, body)
	}
	// Nothing recorded before the handover is lost, and the handover is in
	// the log.
	code, evs = c.do("GET", "/v1/sessions/"+s+"/events?follow=false", "")
	for _, want := range []string{`"OwnershipReleased"`, `"t1"`, `"t2"`} {
		if code != 200 || !strings.Contains(string(evs), want) {
			t.Fatalf("events after the handover lack %s: %d %s", want, code, evs)
		}
	}
	// The new owner closes the session, signing its head with its own key.
	owner := b
	if st.Owner == "n3" {
		owner = c
	}
	if code, body := c.do("POST", "/v1/sessions/"+s+"/close", `{"reason": "done"}`); code != 200 && code != 204 {
		t.Fatalf("close via n3: %d %s", code, body)
	}
	// The hash chain holds across the change of owner: the new owner went
	// on from the head it rebuilt from the log (docs/events.md, "The hash
	// chain"), and its signature of the closed head verifies.
	pub, _ := owner.node.SigningKey()
	var log []events.Event
	eventually(t, "the close and its signature in the log", func() error {
		ch, err := c.node.Events(context.Background(), "default", s, 0, false)
		if err != nil {
			return err
		}
		log = log[:0]
		for ev := range ch {
			log = append(log, ev)
		}
		if len(log) == 0 || log[len(log)-1].Type != events.TypeHeadSigned {
			return fmt.Errorf("the log ends with %v", log[len(log)-1].Type)
		}
		return nil
	})
	rep := replay.VerifyLog("default", s, log, replay.VerifyOptions{Keys: []ed25519.PublicKey{pub}, RequireChain: true})
	if len(rep.Problems) > 0 || rep.Signed != log[len(log)-2].Seq || rep.Events != len(log) {
		t.Fatalf("VerifyLog after the handover: %+v", rep)
	}
	var takes int
	for _, ev := range log {
		if ev.Type == events.TypeOwnershipTaken {
			takes++
		}
	}
	if takes != 2 {
		t.Fatalf("%d OwnershipTaken in the log, want 2 (n1's, then the survivor's)", takes)
	}
}

// TestFleetForgedHopsHeaderMovesNothing sends, as a client, the header
// nodes mark a forwarded call with (HeaderHops) to a node that does not own
// the session: that node then asks its own session actor, whatever its owners
// index says (docs/spec.md §7; the fix for calls bouncing between two nodes
// over a stale index). The actor reads the log, finds the live owner, and
// the call is served by that owner: the forged mark moves no session, takes
// no ownership, and runs nothing off the owner.
func TestFleetForgedHopsHeaderMovesNothing(t *testing.T) {
	fl := newFleet(t, 3, nil)
	a, c := fl[0], fl[2]
	code, body := a.do("POST", "/v1/sessions", `{}`)
	if code != 201 {
		t.Fatalf("open on n1: %d %s", code, body)
	}
	var open struct{ Session string }
	_ = json.Unmarshal(body, &open)
	s := open.Session
	for i, hops := range []string{"1", "2"} {
		turn := fmt.Sprintf("t%d", i+1)
		code, body, by := c.served("POST", "/v1/sessions/"+s+"/turns",
			`{"id": "`+turn+`", "calls": [{"id": "c1", "name": "todo_get", "arguments": {}}]}`, HeaderHops, hops)
		t.Logf("turn %s via n3 with %s %s: %d from %q", turn, HeaderHops, hops, code, by)
		if code == 200 && by != "n1" {
			t.Fatalf("turn %s via n3 with %s: %s served it, not the owner n1: %s", turn, HeaderHops, by, body)
		}
		if code != 200 && code != 503 {
			t.Fatalf("turn %s via n3 with %s %s: %d %s, want 200 from n1 or 503", turn, HeaderHops, hops, code, body)
		}
	}
	if st := sessionStatus(t, a, s); st.Owner != "n1" || st.Epoch != 1 {
		t.Fatalf("after the forged calls: %+v, want owner n1 at epoch 1", st)
	}
	code, evs := a.do("GET", "/v1/sessions/"+s+"/events?follow=false", "")
	if code != 200 {
		t.Fatalf("events: %d %s", code, evs)
	}
	if n := strings.Count(string(evs), `"OwnershipTaken"`); n != 1 {
		t.Fatalf("%d OwnershipTaken in the log after the forged calls, want n1's one: %s", n, evs)
	}
	if strings.Contains(string(evs), `"node":"n3"`) {
		t.Fatalf("an event names n3 after the forged calls: %s", evs)
	}
}

// interval is when one call of the stamp tool ran, as it printed.
type interval struct{ start, end int64 }

// TestFleetCapHoldsAcrossNodes runs calls of a tool with a fleet-wide cap
// of 2 in sessions owned by three nodes at once: at no moment do more than
// two run, the calls that waited say how long in their claims
// (ToolCallStarted.queued_ms), and every call still runs.
func TestFleetCapHoldsAcrossNodes(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.CommandTools = []config.CommandTool{{
		Name: "stamp", Description: "prints when it starts and ends", Guidelines: []string{"tests"},
		InputSchema: json.RawMessage(`{"type": "object", "properties": {}}`),
		Command:     []string{"sh", "-c", "date +%s%N; sleep 0.3; date +%s%N"},
		Replay:      "never", Concurrency: "exclusive", FleetCap: 2, FleetCapScope: "fleet",
	}}
	fl := newFleet(t, 3, &cfg)
	const perNode, turns = 2, 2
	type sess struct {
		fn *fleetNode
		id string
	}
	var ss []sess
	for _, fn := range fl {
		for range perNode {
			code, body := fn.do("POST", "/v1/sessions", `{}`)
			if code != 201 {
				t.Fatalf("open on %s: %d %s", fn.name, code, body)
			}
			var open struct{ Session string }
			_ = json.Unmarshal(body, &open)
			ss = append(ss, sess{fn, open.Session})
		}
	}
	var mu sync.Mutex
	var runs []interval
	var wg sync.WaitGroup
	for _, s := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range turns {
				body := fmt.Sprintf(`{"id": "t%d", "calls": [{"id": "c", "name": "stamp", "arguments": {}}]}`, k)
				code, b := s.fn.do("POST", "/v1/sessions/"+s.id+"/turns", body)
				var tv struct {
					Results []struct {
						Outcome string
						Content []struct{ Text string }
					}
				}
				if code != 200 || json.Unmarshal(b, &tv) != nil || len(tv.Results) != 1 || tv.Results[0].Outcome != "ok" {
					t.Errorf("turn %d of %s on %s: %d %s", k, s.id, s.fn.name, code, b)
					return
				}
				var iv interval
				if _, err := fmt.Sscan(tv.Results[0].Content[0].Text, &iv.start, &iv.end); err != nil {
					t.Errorf("stamp output %q: %v", tv.Results[0].Content[0].Text, err)
					return
				}
				mu.Lock()
				runs = append(runs, iv)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if len(runs) != len(ss)*turns {
		t.Fatalf("%d calls ran, want %d", len(runs), len(ss)*turns)
	}
	most := 0
	for _, a := range runs {
		at := 0
		for _, b := range runs {
			if b.start <= a.start && a.start < b.end {
				at++
			}
		}
		most = max(most, at)
	}
	if most > 2 {
		t.Fatalf("%d calls of a tool with a fleet cap of 2 ran at once", most)
	}
	// 12 calls of 0.3 s, two at a time: some waited, and their claims say so.
	queued := 0
	for _, s := range ss {
		_, evs := fl[0].do("GET", "/v1/sessions/"+s.id+"/events?follow=false", "")
		queued += strings.Count(string(evs), `"queued_ms":`)
	}
	if queued == 0 {
		t.Fatal("no claim records a wait for the fleet cap")
	}
	t.Logf("%d calls, at most %d at once, %d claims record a wait", len(runs), most, queued)
}
