package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/tool"
	"github.com/callsheet/callsheet/tools"
)

// tenant is the tenant every benchmark session belongs to.
const tenant = "bench"

// The benchmark tools. Each is read-only, safe to replay and parallel-safe,
// so the node runs it on the parallel tool actor with nothing but its claim
// standing between the request and the run.
const (
	toolNoop  = "noop"
	toolNap   = "nap"   // sleeps napTime
	toolBlock = "block" // waits until released
	napTime   = 100 * time.Millisecond
)

var benchDecl = tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe}

type noArgs struct {
	Tag string `json:"tag,omitempty" jsonschema:"an optional label"`
}

// blocker is the state of the block tool: calls wait on release.
type blocker struct {
	mu      sync.Mutex
	release chan struct{}
	running atomic.Int64
}

func (b *blocker) gate() chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.release == nil {
		b.release = make(chan struct{})
	}
	return b.release
}

// open releases every waiting call and lets later ones through.
func (b *blocker) open() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.release == nil {
		b.release = make(chan struct{})
	}
	select {
	case <-b.release:
	default:
		close(b.release)
	}
}

func benchTools(b *blocker) ([]*tool.Tool, error) {
	noop, err := tool.New(toolNoop, "does nothing and answers ok", func(context.Context, noArgs) (tool.Result, error) {
		return tool.Text("ok"), nil
	}, tool.WithGuidelines("benchmark only"), tool.WithDeclarations(benchDecl))
	if err != nil {
		return nil, err
	}
	nap, err := tool.New(toolNap, "sleeps 100 ms", func(ctx context.Context, _ noArgs) (tool.Result, error) {
		select {
		case <-time.After(napTime):
			return tool.Text("slept"), nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}, tool.WithGuidelines("benchmark only"), tool.WithDeclarations(benchDecl))
	if err != nil {
		return nil, err
	}
	block, err := tool.New(toolBlock, "waits until the benchmark releases it", func(ctx context.Context, _ noArgs) (tool.Result, error) {
		if b == nil {
			return tool.Text("no gate"), nil
		}
		b.running.Add(1)
		defer b.running.Add(-1)
		select {
		case <-b.gate():
			return tool.Text("released"), nil
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
	}, tool.WithGuidelines("benchmark only"), tool.WithDeclarations(benchDecl))
	if err != nil {
		return nil, err
	}
	return []*tool.Tool{noop, nap, block}, nil
}

// ripgrep finds the rg 14+ a node needs for its built-in glob and grep
// tools (the benchmarks never call them): $CALLSHEET_RG or rg on PATH, else
// the one scripts/ensure-rg installs under the repository's .tools/bin.
var ripgrep = sync.OnceValues(func() (string, error) {
	rg, _, err := tools.FindRipgrep()
	if err == nil {
		return rg, nil
	}
	for _, dir := range []string{".", ".."} { // go run ./bench, go test ./bench
		p, aerr := filepath.Abs(filepath.Join(dir, ".tools", "bin", "rg"))
		if aerr != nil {
			continue
		}
		if _, verr := tools.RipgrepVersion(p); verr == nil {
			return p, nil
		}
	}
	return "", skip("a node needs ripgrep 14+ (run scripts/ensure-rg, or `make bench`, which does): %v", err)
})

// oneCall is a turn of one call of name.
func oneCall(name string) []events.CallSpec {
	return []events.CallSpec{{ID: "c1", Name: name, Arguments: json.RawMessage(`{}`)}}
}

// nodeRig is a node on a fresh embedded JetStream in a temporary directory.
type nodeRig struct {
	n        *node.Node
	dir      string
	block    *blocker
	sessions []string
}

func startNode(ctx context.Context, durability string, tune ...func(*node.Options)) (*nodeRig, error) {
	dir, err := os.MkdirTemp("", "csbench-node-*")
	if err != nil {
		return nil, err
	}
	r := &nodeRig{dir: dir, block: &blocker{}}
	tools, err := benchTools(r.block)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cfg := config.DefaultConfig()
	cfg.Durability = durability
	rg, err := ripgrep()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	opts := node.Options{DataDir: dir, Config: &cfg, Tools: tools, Ripgrep: rg}
	for _, f := range tune {
		f(&opts)
	}
	r.n, err = node.New(ctx, opts)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start node (%s): %w", durability, err)
	}
	return r, nil
}

// open opens sessions until the rig has n, conc at a time.
func (r *nodeRig) open(ctx context.Context, n, conc int) error {
	need := n - len(r.sessions)
	if need <= 0 {
		return nil
	}
	ids := make([]string, need)
	errs := make([]error, need)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conc, need) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= need {
					return
				}
				info, err := r.n.OpenSession(ctx, tenant, "", "")
				ids[i], errs[i] = info.Session, err
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("open session: %w", err)
		}
	}
	r.sessions = append(r.sessions, ids...)
	return nil
}

// prepare makes sure workers 0..n-1 each have a session.
func (r *nodeRig) prepare(ctx context.Context, n int) error { return r.open(ctx, n, 16) }

// call runs one one-call turn of the no-op tool on worker w's session and
// waits until it is committed.
func (r *nodeRig) call(ctx context.Context, w int) error {
	t, err := r.n.SubmitTurn(ctx, tenant, r.sessions[w], "", oneCall(toolNoop), true)
	if err != nil {
		return err
	}
	if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
		return fmt.Errorf("no-op turn %s: %+v", t.Turn, t.Results)
	}
	return nil
}

// appends is the count of appends the node's log stored
// (callsheet_append_seconds), false if the node does not report it.
func (r *nodeRig) appends() (float64, bool) {
	mfs, err := r.n.Gatherer().Gather()
	if err != nil {
		return 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == "callsheet_append_seconds" && len(mf.GetMetric()) == 1 {
			return float64(mf.GetMetric()[0].GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

func (r *nodeRig) close() {
	if r.block != nil {
		r.block.open()
	}
	r.n.Close()
	os.RemoveAll(r.dir)
}

// server is a bare embedded JetStream for the floors, started exactly as a
// node starts its own, with an in-process connection.
type server struct {
	e    *cluster.Embedded
	nc   *nats.Conn
	js   jetstream.JetStream
	dir  string
	sync bool
}

func startServer(durability string) (*server, error) {
	dir, err := os.MkdirTemp("", "csbench-js-*")
	if err != nil {
		return nil, err
	}
	e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: dir, SyncAlways: durability == config.DurabilityFsync})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	nc, err := e.Connect("bench")
	if err != nil {
		e.Shutdown()
		os.RemoveAll(dir)
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		e.Shutdown()
		os.RemoveAll(dir)
		return nil, err
	}
	return &server{e: e, nc: nc, js: js, dir: dir, sync: durability == config.DurabilityFsync}, nil
}

// restart shuts the server down and starts it again on the same store, so
// that it holds no block in memory: what a read after a node's restart or
// a crash finds (the operating system's page cache stays warm).
func (s *server) restart() error {
	_ = s.nc.Drain()
	s.nc.Close()
	s.e.Shutdown()
	e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: s.dir, SyncAlways: s.sync})
	if err != nil {
		return err
	}
	nc, err := e.Connect("bench")
	if err != nil {
		e.Shutdown()
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		e.Shutdown()
		return err
	}
	s.e, s.nc, s.js = e, nc, js
	return nil
}

func (s *server) close() {
	_ = s.nc.Drain()
	s.nc.Close()
	s.e.Shutdown()
	os.RemoveAll(s.dir)
}

// probe is what one one-call turn of the no-op tool writes today, read back
// from a session's log: the events after SessionOpened, in order.
type probe struct {
	opened events.Event   // the session's SessionOpened
	writes []events.Event // the call's events
	sizes  []int          // their stored sizes (events.Marshal)
}

func (p *probe) bytes() int {
	n := 0
	for _, s := range p.sizes {
		n += s
	}
	return n
}

// describe lists the writes as "Type size B, ...".
func (p *probe) describe() string {
	parts := make([]string, len(p.writes))
	for i, ev := range p.writes {
		parts[i] = fmt.Sprintf("%s %d B", ev.Type, p.sizes[i])
	}
	return strings.Join(parts, ", ")
}

// getProbe runs one call on a fresh node and reads back what it wrote.
func (s *suite) getProbe(ctx context.Context) (*probe, error) {
	if s.probe != nil {
		return s.probe, nil
	}
	r, err := startNode(ctx, config.DurabilityInterval)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.prepare(ctx, 1); err != nil {
		return nil, err
	}
	if err := r.call(ctx, 0); err != nil {
		return nil, err
	}
	ch, err := r.n.Events(ctx, tenant, r.sessions[0], 0, false)
	if err != nil {
		return nil, err
	}
	p := &probe{}
	for ev := range ch {
		if ev.Type == events.TypeSessionOpened {
			p.opened = ev
			continue
		}
		if ev.Type == events.TypeOwnershipTaken {
			continue // written once per owner of a session, not per call
		}
		b, err := events.Marshal(ev)
		if err != nil {
			return nil, err
		}
		p.writes = append(p.writes, ev)
		p.sizes = append(p.sizes, len(b))
	}
	if p.opened.ID == "" || len(p.writes) == 0 {
		return nil, fmt.Errorf("probe: the session's log holds no call (%d events)", len(p.writes))
	}
	s.probe = p
	return p, nil
}

func benchProbe(ctx context.Context, s *suite) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	return []sample{
		{name: "probe/writes-per-call", value: float64(len(p.writes)), unit: "events", better: Lower,
			conditions: "events one no-op call (a one-call turn) appends: " + p.describe()},
		{name: "probe/bytes-per-call", value: float64(p.bytes()), unit: "B", better: Lower,
			conditions: "their stored size (JSON envelope + payload), headers not counted"},
	}, nil
}
