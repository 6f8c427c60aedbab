package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// The fleet rows (docs/performance.md, "A fleet"): calls/s of three nodes
// on this machine against one node alone, and how long a fleet takes to
// serve a session again after its owner is killed.

// fleetNodes is how many nodes the fleet rows start.
const fleetNodes = 3

// fleetSessionsPerNode is how many sessions each node of the fleet owns in
// fleet/throughput (the single node gets as many in all).
const fleetSessionsPerNode = 16

// fleetRig is fleetNodes in-process nodes, each embedding a clustered
// server routed to the others (R3 streams), and the sessions each owns.
type fleetRig struct {
	dir      string
	nodes    []*node.Node
	sessions []fleetSession
}

type fleetSession struct {
	n  *node.Node
	id string
}

// freeAddrs returns n loopback addresses whose ports were free a moment ago.
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		out = append(out, ln.Addr().String())
		defer ln.Close()
	}
	return out, nil
}

func startFleet(ctx context.Context, durability string) (*fleetRig, error) {
	dir, err := os.MkdirTemp("", "csbench-fleet-*")
	if err != nil {
		return nil, err
	}
	r := &fleetRig{dir: dir, nodes: make([]*node.Node, fleetNodes)}
	creds := filepath.Join(dir, "fleet.nk")
	if _, err := cluster.EnsureCredentials(creds); err != nil {
		r.close()
		return nil, err
	}
	listens, err := freeAddrs(fleetNodes)
	if err != nil {
		r.close()
		return nil, err
	}
	var routes []string
	for _, l := range listens {
		routes = append(routes, "nats-route://"+l)
	}
	rg, err := ripgrep()
	if err != nil {
		r.close()
		return nil, err
	}
	cfg := config.DefaultConfig()
	cfg.Durability = durability
	// The nodes start at once: each waits for a majority of the cluster.
	errs := make([]error, fleetNodes)
	var wg sync.WaitGroup
	for i := range fleetNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tools, err := benchTools(&blocker{})
			if err != nil {
				errs[i] = err
				return
			}
			name := fmt.Sprintf("n%d", i+1)
			r.nodes[i], errs[i] = node.New(ctx, node.Options{DataDir: filepath.Join(dir, name), Config: &cfg, Tools: tools, Ripgrep: rg,
				Name: name, ClusterListen: listens[i], Routes: routes, NATSCredentials: creds})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		r.close()
		return nil, fmt.Errorf("start the fleet (%s): %w", durability, err)
	}
	return r, nil
}

// prepare opens n sessions, spread over the nodes: each is owned by the
// node that opened it, and its turns go to that node.
func (r *fleetRig) prepare(ctx context.Context, n int) error {
	for i := len(r.sessions); i < n; i++ {
		nd := r.nodes[i%len(r.nodes)]
		info, err := nd.OpenSession(ctx, tenant, "", "")
		if err != nil {
			return fmt.Errorf("open a session on %s: %w", nd.Name(), err)
		}
		r.sessions = append(r.sessions, fleetSession{n: nd, id: info.Session})
	}
	return nil
}

func (r *fleetRig) call(ctx context.Context, w int) error {
	s := r.sessions[w]
	t, err := s.n.SubmitTurn(ctx, tenant, s.id, "", oneCall(toolNoop), true)
	if err != nil {
		return err
	}
	if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
		return fmt.Errorf("no-op turn %s: %+v", t.Turn, t.Results)
	}
	return nil
}

func (r *fleetRig) close() {
	// All at once: a node closing after the others lost the cluster's
	// quorum would wait for its last appends in vain.
	var wg sync.WaitGroup
	for _, n := range r.nodes {
		if n != nil {
			wg.Add(1)
			go func() { defer wg.Done(); n.Close() }()
		}
	}
	wg.Wait()
	os.RemoveAll(r.dir)
}

// benchFleetThroughput measures calls/s of three nodes, each owning
// fleetSessionsPerNode sessions that submit one-call no-op turns in a loop
// to their owner, against one node alone with as many sessions in all.
func benchFleetThroughput(ctx context.Context, s *suite, durability string) ([]sample, error) {
	sessions := fleetNodes * fleetSessionsPerNode
	var single, fleet float64
	err := labelled(ctx, "node", func(ctx context.Context) error {
		r, err := startNode(ctx, durability)
		if err != nil {
			return err
		}
		defer r.close()
		single, err = measureThroughput(ctx, r, sessions, s.cfg.Duration)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("one node: %w", err)
	}
	err = labelled(ctx, "fleet", func(ctx context.Context) error {
		r, err := startFleet(ctx, durability)
		if err != nil {
			return err
		}
		defer r.close()
		fleet, err = measureThroughput(ctx, r, sessions, s.cfg.Duration)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("the fleet: %w", err)
	}
	return []sample{{name: fmt.Sprintf("fleet/throughput/%s/s%d", durability, sessions), value: fleet, unit: "calls/s", better: Higher, floor: single,
		conditions: fmt.Sprintf("%s, %d nodes in one process on this machine, each its own clustered embedded server (R3 stream, KV and object buckets), %d sessions each, one-call no-op turns in a loop to the session's owner, %s; floor: one node alone (R1) with %d sessions",
			durability, fleetNodes, fleetSessionsPerNode, s.cfg.Duration, sessions)}}, nil
}

// benchFleetTakeover starts three node processes (cmd/callsheet-node, built once) and,
// s.cfg.Runs times, opens a session on one, runs a turn, kills that node
// (SIGKILL) and times how long until the session's next turn is served
// through a survivor; the node is then restarted and rejoins. The floor is
// the lease TTL: no takeover can be quicker than the lease it waits out.
func benchFleetTakeover(ctx context.Context, s *suite) ([]sample, error) {
	s.logf("fleet/takeover: building cmd/callsheet-node")
	dir, bin, err := buildNode(ctx, "csbench-takeover-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	creds := filepath.Join(dir, "fleet.nk")
	if _, err := cluster.EnsureCredentials(creds); err != nil {
		return nil, err
	}
	listens, err := freeAddrs(fleetNodes)
	if err != nil {
		return nil, err
	}
	var routes []string
	for _, l := range listens {
		routes = append(routes, "nats-route://"+l)
	}
	rg, err := ripgrep()
	if err != nil {
		return nil, err
	}
	procs := make([]*benchProc, fleetNodes)
	start := func(i int) error {
		name := fmt.Sprintf("n%d", i+1)
		p, err := startProc(ctx, bin, []string{"CALLSHEET_RG=" + rg}, "--data", filepath.Join(dir, name), "--http", "127.0.0.1:0", "--name", name,
			"--cluster-listen", listens[i], "--routes", strings.Join(routes, ","), "--nats-creds", creds)
		procs[i] = p
		return err
	}
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	errs := make([]error, fleetNodes)
	var wg sync.WaitGroup
	for i := range fleetNodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = start(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	turn := func(p *benchProc, session, id string, wait time.Duration) error {
		body := fmt.Sprintf(`{"id": %q, "calls": [{"id": "c", "name": "todo_get", "arguments": {}}]}`, id)
		code, b, err := p.post(ctx, "/v1/sessions/"+session+"/turns", body, wait)
		if err != nil {
			return err
		}
		if code != http.StatusOK || !strings.Contains(b, `"complete"`) {
			return fmt.Errorf("turn %s: %d %s", id, code, b)
		}
		return nil
	}
	var samples []sample
	for run := range s.cfg.Runs {
		victim, survivor := procs[run%fleetNodes], procs[(run+1)%fleetNodes]
		var session string
		if err := retryFor(ctx, 60*time.Second, func() error {
			code, b, err := victim.post(ctx, "/v1/sessions", `{}`, 10*time.Second)
			if err != nil || code != http.StatusCreated {
				return fmt.Errorf("open a session: %d %s %v", code, b, err)
			}
			var open struct{ Session string }
			if err := json.Unmarshal([]byte(b), &open); err != nil || open.Session == "" {
				return fmt.Errorf("open a session: %s %v", b, err)
			}
			session = open.Session
			return turn(survivor, session, "t1", 30*time.Second)
		}); err != nil {
			return nil, err
		}
		killed := time.Now()
		victim.kill()
		if err := retryFor(ctx, 60*time.Second, func() error { return turn(survivor, session, "t2", 5*time.Second) }); err != nil {
			return nil, fmt.Errorf("after the kill: %w", err)
		}
		took := time.Since(killed)
		s.logf("fleet/takeover: run %d: %s", run+1, took.Round(time.Millisecond))
		samples = append(samples, sample{name: "fleet/takeover", value: took.Seconds(), unit: "s", better: Lower, floor: config.DefaultLeaseTTL.Seconds(),
			conditions: fmt.Sprintf("%d node processes (cmd/callsheet-node) on this machine, SIGKILL of a session's owner to that session's next one-call turn served through a survivor; floor: the lease TTL (%s)", fleetNodes, config.DefaultLeaseTTL)})
		i := slices.Index(procs, victim)
		if err := start(i); err != nil {
			return nil, fmt.Errorf("restart n%d: %w", i+1, err)
		}
		// The restarted node is a member again before the next run.
		if err := retryFor(ctx, 60*time.Second, func() error {
			code, b, err := survivor.get(ctx, "/v1/nodes")
			if err != nil || code != http.StatusOK || strings.Count(b, `"alive":true`) != fleetNodes {
				return fmt.Errorf("nodes: %d %s %v", code, b, err)
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return samples, nil
}

// benchProc is a node process the bench started.
type benchProc struct {
	cmd  *exec.Cmd
	base string
	done chan struct{}
}

// startProc starts bin with args (and env added to the bench's own) and
// waits for its "listening on" line.
func startProc(ctx context.Context, bin string, env []string, args ...string) (*benchProc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &benchProc{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addr <- a
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	select {
	case p.base = <-addr:
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("node %v exited before listening: %s", args, stderr.String())
	case <-time.After(2 * time.Minute):
		p.kill()
		return nil, fmt.Errorf("node %v did not listen within 2 minutes", args)
	case <-ctx.Done():
		p.kill()
		return nil, ctx.Err()
	}
}

func (p *benchProc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}

func (p *benchProc) post(ctx context.Context, path, body string, wait time.Duration) (int, string, error) {
	return p.do(ctx, http.MethodPost, path, body, wait)
}

func (p *benchProc) get(ctx context.Context, path string) (int, string, error) {
	return p.do(ctx, http.MethodGet, path, "", 10*time.Second)
}

func (p *benchProc) do(ctx context.Context, method, path, body string, wait time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, err = bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, b.String(), err
}

// retryFor runs f until it succeeds, every 50 ms, for at most d.
func retryFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// tailBuffer keeps the last 4 KiB written to it (a node's log, for the
// error when it does not start). Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > 4096 {
		b.buf = b.buf[len(b.buf)-4096:]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
