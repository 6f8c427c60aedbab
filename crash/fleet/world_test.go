package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/core"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
)

// capLimit is the fleet-wide cap of the suite's capped tool.
const capLimit = 2

// suiteConfig is every node's config: four command tools that record each
// run in the counter directory (outside any workspace, so they run outside
// the sandbox), fast retries, fsync durability.
//
//   - bump_never: side-effecting, never replayed: may run at most once;
//   - bump_safe: side-effecting, safe: may run again;
//   - bump_ro: read-only and safe: runs without a durable claim;
//   - bump_cap: never replayed, with a fleet-wide cap of capLimit: it
//     writes when it starts and when it ends, so overlaps can be counted;
//   - slow_safe: sleeps 3 s, safe: a turn that is still running when its
//     owner is killed (TestTurnMeetsTakeover); not in the suite's load;
//   - hold_cap: a fleet cap of one, runs for as long as it is told
//     (TestCapSlotFreesWithItsNode); not in the suite's load.
func suiteConfig(counters string) map[string]any {
	tool := func(name, replay, script string) map[string]any {
		return map[string]any{
			"name": name, "description": "records a run in the fleet suite's counter directory",
			"guidelines": []string{"fleet suite only"},
			// n and s carry what the hash chain must hash exactly: an
			// integer a double cannot hold and a lone surrogate (runTurn).
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}, "s": map[string]any{"type": "string"}}},
			"command":      []string{"sh", "-c", script},
			"replay":       replay, "env": map[string]string{"COUNTER_DIR": counters},
			"timeout": "10s", "sandbox": false,
		}
	}
	// The effect first, then a sleep: a kill during the tool lands after it.
	bump := `echo "$CALLSHEET_ATTEMPT" >> "$COUNTER_DIR/$CALLSHEET_IDEMPOTENCY_KEY"; sleep 0.3; echo done`
	ro := tool("bump_ro", "safe", bump)
	ro["effect"], ro["concurrency"] = "read_only", "parallel_safe"
	// watcher notes in "$f.alive" the last moment the run's shell was
	// neither gone nor a zombie (a killed run's shell stays one until its
	// parent reaps it, which a stopped node does not).
	watcher := `setsid sh -c 't=$(date +%s%N); while :; do s=$(cut -d" " -f3 /proc/$0/stat 2>/dev/null); case "$s" in ""|Z|X) break;; esac; t=$(date +%s%N); sleep 0.005; done; echo "$t" > "$1.alive"' "$$" "$f" </dev/null >/dev/null 2>&1 & `
	// The capped tool notes its start and its end. A run killed before its
	// end (its process group, at its deadline or a cancel) has its end
	// noted by a watcher in a session of its own, which outlives the kill:
	// the last moment it saw the run's shell alive, so an overlap counted
	// from it is one that surely happened.
	capped := tool("bump_cap", "never", `f="$COUNTER_DIR/cap-$CALLSHEET_IDEMPOTENCY_KEY-$CALLSHEET_ATTEMPT"; echo "$CALLSHEET_ATTEMPT" >> "$COUNTER_DIR/$CALLSHEET_IDEMPOTENCY_KEY"; date +%s%N >> "$f"; `+
		watcher+
		`sleep 0.5; date +%s%N >> "$f"; echo done`)
	capped["fleet_cap"], capped["fleet_cap_scope"], capped["timeout"] = capLimit, "fleet", "4s"
	// The held tool: a fleet cap of one, a long timeout, and a run as long
	// as its "secs" says; it notes each start in hold-<tag>, its watcher the
	// last moment it ran in hold-<tag>.alive.
	held := tool("hold_cap", "never", `in=$(cat); secs=$(printf %s "$in" | sed -n 's/.*"secs": *\([0-9]*\).*/\1/p'); tag=$(printf %s "$in" | sed -n 's/.*"tag": *"\([a-z0-9-]*\)".*/\1/p'); `+
		`f="$COUNTER_DIR/hold-$tag"; date +%s%N >> "$f"; `+
		watcher+
		`sleep "$secs"; echo done`)
	held["fleet_cap"], held["fleet_cap_scope"], held["timeout"] = 1, "fleet", "60s"
	held["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"secs": map[string]any{"type": "integer"}, "tag": map[string]any{"type": "string"}}}
	return map[string]any{
		"durability": "fsync",
		"retry":      map[string]any{"initial_delay": "10ms", "max_delay": "50ms", "max_attempts": 5},
		"command_tools": []any{
			tool("bump_never", "never", bump), tool("bump_safe", "safe", bump), ro, capped,
			tool("slow_safe", "safe", `sleep 3; echo done`), held,
		},
	}
}

var toolNames = []string{"bump_never", "bump_safe", "bump_ro", "bump_cap"}

// world is a running fleet and what the suite saw of it.
type world struct {
	t        *testing.T
	f        *testnode.Fleet
	ext      *testnode.NATSCluster // the external cluster, or nil: the nodes embed theirs
	counters string

	mu     sync.Mutex
	paused map[string]bool
	// inflight cancels the turns posted to each node and not yet
	// answered: a failed node's are cancelled when it fails, as a load
	// balancer in front of the fleet drops a node it sees go.
	inflight map[string]map[int]context.CancelFunc
	nextReq  int
	seen     map[string]map[uint64]string // session → seq → event id, as served
	sessions []string
	turns    map[string][]turnRecord // session → its turns, in order
	// Takeover: when the victim went, which sessions it owned, and when
	// each first had a turn served after that.
	downAt   time.Time
	affected map[string]bool
	firstOK  map[string]time.Time
}

// turnRecord is one turn a session ran: its id and calls.
type turnRecord struct {
	id    string
	names []string
	done  bool
}

// newWorld starts the fleet: nodes embedding a clustered server each, or,
// with ext, nodes connected to that external cluster with the nkey seed
// file creds, the user it admits.
func newWorld(t *testing.T, nodeBin string, shared bool, ext *testnode.NATSCluster, creds string) *world {
	t.Helper()
	dir := t.TempDir()
	counters := filepath.Join(dir, "counters")
	if err := os.MkdirAll(counters, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := suiteConfig(counters)
	if *lease > 0 {
		cfg["fleet"] = map[string]any{"lease_ttl": lease.String()}
	}
	fo := testnode.FleetOptions{Dir: dir, Config: cfg, SharedWorkspaces: shared}
	if ext != nil {
		fo.NATS, fo.Creds = ext.URL(), creds
	}
	f := testnode.StartFleet(t, nodeBin, fo)
	logs := *logDir
	if logs == "" {
		logs = filepath.Join(os.TempDir(), fmt.Sprintf("callsheet-fleet-%s-%d", t.Name(), time.Now().Unix()))
	}
	if *keep {
		f.DumpAlways(t, logs)
	} else {
		f.DumpOnFailure(t, logs)
	}
	w := &world{t: t, f: f, ext: ext, counters: counters, paused: map[string]bool{}, inflight: map[string]map[int]context.CancelFunc{}, seen: map[string]map[uint64]string{},
		turns: map[string][]turnRecord{}, firstOK: map[string]time.Time{}}
	w.waitNodes(3)
	return w
}

// dropNode cancels every turn posted to the node and not yet answered.
func (w *world) dropNode(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, cancel := range w.inflight[name] {
		cancel()
	}
}

// live returns the nodes that run and are not paused.
func (w *world) live() []*testnode.Proc {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []*testnode.Proc
	for _, p := range w.f.Alive() {
		if !w.paused[p.Name] {
			out = append(out, p)
		}
	}
	return out
}

// do sends one request to p, bounded in time (a paused or killed node
// never answers).
func do(p *testnode.Proc, d time.Duration, method, path string, body, out any) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return p.DoCtx(ctx, p.Token, method, path, body, out)
}

// waitNodes waits until every live node lists want alive nodes.
func (w *world) waitNodes(want int) {
	w.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok := true
		for _, p := range w.live() {
			var got struct {
				Nodes []struct {
					Name  string
					Alive bool
				}
			}
			code, err := do(p, 5*time.Second, "GET", "/v1/nodes", nil, &got)
			n := 0
			for _, nd := range got.Nodes {
				if nd.Alive {
					n++
				}
			}
			if err != nil || code != 200 || n != want {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the nodes do not all see %d live nodes", want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// open opens a session on p.
func (w *world) open(t testing.TB, p *testnode.Proc) string {
	t.Helper()
	var open struct{ Session string }
	// A 503 (the node's lease or a stream's leader moving after a node
	// came back) is retried, as the clients do (docs/clients.md, Retries).
	var code int
	var err error
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		code, err = do(p, 60*time.Second, "POST", "/v1/sessions", map[string]any{}, &open)
		if err != nil || code != 503 || time.Now().After(end) {
			break
		}
	}
	if err != nil || code != 201 {
		t.Fatalf("open a session on %s: %d %v", p.Name, code, err)
	}
	w.mu.Lock()
	w.sessions = append(w.sessions, open.Session)
	w.mu.Unlock()
	return open.Session
}

// status is GET /v1/sessions/{s} from any live node.
func (w *world) status(s string) (owner string, epoch uint64, state string) {
	for _, p := range w.live() {
		var st struct {
			Owner  string
			Epoch  uint64
			Status string
		}
		if code, err := do(p, 10*time.Second, "GET", "/v1/sessions/"+s, nil, &st); err == nil && code == 200 {
			return st.Owner, st.Epoch, st.Status
		}
	}
	return "", 0, ""
}

// turnAnswer is a complete turn as the API answers it.
type turnAnswer struct {
	Turn    string
	Status  string
	Results []events.Result
}

// runTurn posts one turn of calls (names) to a live node picked at random
// and, on any failure, posts it again (the same turn id, which runs nothing
// twice) to any live node, until it is complete or deadline. It records
// what it served.
func (w *world) runTurn(r *rand.Rand, s, id string, names []string, deadline time.Time) bool {
	var calls []map[string]any
	for i, n := range names {
		args := json.RawMessage(`{}`)
		if i == 0 {
			args = json.RawMessage(`{"n":12345678901234567891,"s":"\ud800 lone, \u003c\u2028"}`)
		}
		calls = append(calls, map[string]any{"id": fmt.Sprintf("c%d", i), "name": n, "arguments": args})
	}
	w.mu.Lock()
	w.turns[s] = append(w.turns[s], turnRecord{id: id, names: names})
	k := len(w.turns[s]) - 1
	w.mu.Unlock()
	for time.Now().Before(deadline) {
		live := w.live()
		if len(live) == 0 {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		p := live[r.IntN(len(live))]
		var tv turnAnswer
		ctx, done := w.request(p, 60*time.Second)
		code, err := p.DoCtx(ctx, p.Token, "POST", "/v1/sessions/"+s+"/turns", map[string]any{"id": id, "calls": calls}, &tv)
		done()
		if err != nil || code != 200 || tv.Status != projections.StatusComplete {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		now := time.Now()
		w.mu.Lock()
		w.turns[s][k].done = true
		if w.affected[s] && !w.downAt.IsZero() && w.firstOK[s].IsZero() {
			w.firstOK[s] = now
		}
		w.mu.Unlock()
		w.record(p, s)
		return true
	}
	return false
}

// request is the context of a request to p, cancelled when p fails
// (dropNode), or at once if it is paused already: the load never waits on a
// node a load balancer would have dropped.
func (w *world) request(p *testnode.Proc, d time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.paused[p.Name] {
		cancel()
		return ctx, cancel
	}
	w.nextReq++
	req := w.nextReq
	if w.inflight[p.Name] == nil {
		w.inflight[p.Name] = map[int]context.CancelFunc{}
	}
	w.inflight[p.Name][req] = cancel
	return ctx, func() {
		w.mu.Lock()
		delete(w.inflight[p.Name], req)
		w.mu.Unlock()
		cancel()
	}
}

// record notes the session's events as p serves them now: the suite's
// evidence of what was committed. A node that fails meanwhile is not waited
// for (the evidence is then read at the end).
func (w *world) record(p *testnode.Proc, s string) {
	ctx, done := w.request(p, 20*time.Second)
	evs, err := eventsCtx(ctx, p, s)
	done()
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.seen[s]
	if m == nil {
		m = map[uint64]string{}
		w.seen[s] = m
	}
	for _, ev := range evs {
		if _, ok := m[ev.Seq]; !ok {
			m[ev.Seq] = ev.ID
		}
	}
}

func events_(p *testnode.Proc, s string) ([]events.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return eventsCtx(ctx, p, s)
}

// eventsCtx is s's log as p serves it, within ctx.
func eventsCtx(ctx context.Context, p *testnode.Proc, s string) ([]events.Event, error) {
	var raw []byte
	code, err := p.DoCtx(ctx, p.Token, "GET", "/v1/sessions/"+s+"/events?follow=false", nil, &raw)
	if err != nil || code != http.StatusOK {
		return nil, fmt.Errorf("events of %s from %s: %d %v", s, p.Name, code, err)
	}
	var out []events.Event
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// load runs turns on every session until stop is closed, one turn at a
// time per session; it returns once every session finished its turn.
func (w *world) load(r *rand.Rand, stop chan struct{}) (wait func() (unsettled int)) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	unsettled := 0
	w.mu.Lock()
	sessions := slices.Clone(w.sessions)
	w.mu.Unlock()
	for i, s := range sessions {
		rs := rand.New(rand.NewPCG(r.Uint64(), uint64(i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				n := 1 + rs.IntN(3)
				var names []string
				for range n {
					names = append(names, toolNames[rs.IntN(len(toolNames))])
				}
				id := fmt.Sprintf("t%d-%d", time.Now().UnixNano(), k)
				if !w.runTurn(rs, s, id, names, time.Now().Add(120*time.Second)) {
					mu.Lock()
					unsettled += n
					mu.Unlock()
					w.t.Errorf("turn %s of session %s never completed", id, s)
					return
				}
			}
		}()
	}
	return func() int { wg.Wait(); return unsettled }
}

// natsURLs are the servers' client URLs: the external cluster's, or the
// embedded servers', from the lines the nodes log at start.
func (w *world) natsURLs() []string {
	if w.ext != nil {
		return []string{w.ext.URL()}
	}
	re := regexp.MustCompile(`embedded JetStream at (nats://[0-9.:]+)`)
	var out []string
	for _, p := range w.f.Procs {
		if m := re.FindStringSubmatch(p.Stderr()); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

// js connects to the fleet's NATS cluster with its credentials.
func (w *world) js() jetstream.JetStream {
	w.t.Helper()
	return testnode.JetStream(w.t, strings.Join(w.natsURLs(), ","), w.f.Creds)
}

// fleetStreams are the replicated streams a fleet's nodes use.
var fleetStreams = []string{natslog.DefaultStream, "KV_" + cluster.NodesBucket, "KV_" + cluster.OwnersBucket, "KV_" + cluster.CapsBucket}

// waitHealthy waits until every fleet stream has a leader and all its
// replicas are current.
func (w *world) waitHealthy(js jetstream.JetStream) {
	w.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		var behind []string
		for _, name := range fleetStreams {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s, err := js.Stream(ctx, name)
			var info *jetstream.StreamInfo
			if err == nil {
				info, err = s.Info(ctx)
			}
			cancel()
			switch {
			case err != nil:
				behind = append(behind, fmt.Sprintf("%s: %v", name, err))
			case info.Cluster == nil || info.Cluster.Leader == "":
				behind = append(behind, name+": no leader")
			default:
				for _, r := range info.Cluster.Replicas {
					if !r.Current || r.Offline {
						behind = append(behind, fmt.Sprintf("%s: replica %s behind", name, r.Name))
					}
				}
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("the fleet's streams are not whole after 90 s: %v", behind)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// streamLeader names the node whose server leads the event stream.
func (w *world) streamLeader(js jetstream.JetStream) string {
	for range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := js.Stream(ctx, natslog.DefaultStream)
		if err == nil {
			info, err := s.Info(ctx)
			cancel()
			if err == nil && info.Cluster != nil && info.Cluster.Leader != "" {
				return info.Cluster.Leader
			}
		} else {
			cancel()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return ""
}

// rawMsg is one stored message of a session: its writer and its events.
type rawMsg struct {
	seq    uint64
	writer string
	evs    []events.Event
}

// rawMessages reads every stored message of a session from the stream,
// asking again (for up to a minute) while the cluster answers with an error:
// the server the suite's connection is on may have just resumed from a
// SIGSTOP, and its JetStream API answers "no responders" for a moment.
func rawMessages(t *testing.T, js jetstream.JetStream, s string) []rawMsg {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, err := rawMessagesOnce(t, js, s)
		if err == nil {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("read the stored messages of %s: %v", s, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func rawMessagesOnce(t *testing.T, js jetstream.JetStream, s string) ([]rawMsg, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, natslog.DefaultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natslog.DefaultSubjectPrefix + ".default." + s + ".>"}})
	if err != nil {
		return nil, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, err
	}
	want := info.NumPending
	var out []rawMsg
	for uint64(len(out)) < want {
		batch, err := cons.Fetch(int(min(want-uint64(len(out)), 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			rm := rawMsg{writer: m.Headers().Get(natslog.WriterHeader)}
			if md != nil {
				rm.seq = md.Sequence.Stream
			}
			data := m.Data()
			if len(data) > 0 && data[0] == '[' {
				if err := json.Unmarshal(data, &rm.evs); err != nil {
					t.Fatalf("stored message %d of %s: %v", rm.seq, s, err)
				}
			} else {
				var ev events.Event
				if err := json.Unmarshal(data, &ev); err != nil {
					t.Fatalf("stored message %d of %s: %v", rm.seq, s, err)
				}
				rm.evs = []events.Event{ev}
			}
			out = append(out, rm)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return nil, err
		}
	}
	return out, nil
}

// findings are what the suite's checks count: each must be zero.
type findings struct {
	eventsLost, neverTwice, staleAppends, unsettled, capOvershoots int
	// moves counts the changes of owner over every session (its epoch
	// past the first): one per takeover a failure explains, more when
	// nodes took sessions from live owners (measured, not asserted).
	moves int
}

// check verifies every session: nothing seen is lost, the log is sound, no
// never call ran twice, no message was appended by a node that did not own
// the session, and the capped tool never ran more than capLimit at once.
func (w *world) check(js jetstream.JetStream) findings {
	t := w.t
	t.Helper()
	var fd findings
	live := w.live()
	if len(live) == 0 {
		t.Fatal("no live node to check with")
	}
	w.mu.Lock()
	sessions := slices.Clone(w.sessions)
	w.mu.Unlock()
	for _, s := range sessions {
		var evs []events.Event
		var err error
		for range 50 {
			if evs, err = events_(live[0], s); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("events of %s: %v", s, err)
		}
		// Nothing served before is gone or changed; no gaps, no repeats.
		w.mu.Lock()
		seen := w.seen[s]
		w.mu.Unlock()
		got := map[uint64]string{}
		ids := map[string]bool{}
		for k, ev := range evs {
			if ev.Seq != uint64(k+1) || ids[ev.ID] {
				t.Errorf("session %s: event %d has seq %d (id %s repeated: %v)", s, k, ev.Seq, ev.ID, ids[ev.ID])
				fd.eventsLost++
			}
			ids[ev.ID] = true
			got[ev.Seq] = ev.ID
		}
		for seq, id := range seen {
			if got[seq] != id {
				t.Errorf("session %s: event %d (%s), served before, is now %q", s, seq, id, got[seq])
				fd.eventsLost++
			}
		}
		if ps := replay.Verify("default", s, evs); replay.Failed(ps) {
			t.Errorf("session %s: replay.Verify: %v", s, ps)
			fd.eventsLost++
		}
		// The hash chain holds across every change of owner: each new
		// owner went on from the head it rebuilt from the log.
		if rep := replay.VerifyLog("default", s, evs, replay.VerifyOptions{RequireChain: true}); len(rep.Problems) > 0 || rep.Events != len(evs) {
			t.Errorf("session %s: replay.VerifyLog: %+v", s, rep.Problems)
			fd.eventsLost++
		}
		// Never calls ran at most once, and ok only if they ran.
		state := core.NewSession("default", s)
		for _, ev := range evs {
			if err := state.Apply(ev); err != nil {
				t.Fatalf("session %s: fold: %v", s, err)
			}
		}
		if state.Epoch > 1 {
			fd.moves += int(state.Epoch - 1)
		}
		for _, id := range state.Turns() {
			turn, _ := state.Turn(id)
			for i, c := range turn.Calls {
				res := turn.States[i].Result
				if !turn.Completed || res == nil {
					continue
				}
				runs := w.runs(core.IdempotencyKey("default", s, id, i))
				switch c.Name {
				case "bump_never", "bump_cap":
					if runs > 1 || (res.Outcome == events.OutcomeOK && runs != 1) {
						t.Errorf("session %s turn %s: never call %s (%s) is %s after %d runs", s, id, c.ID, c.Name, res.Outcome, runs)
						fd.neverTwice++
					}
				case "bump_safe", "bump_ro":
					if res.Outcome != events.OutcomeOK {
						t.Errorf("session %s turn %s: safe call %s (%s) ended %s", s, id, c.ID, c.Name, res.Outcome)
						fd.unsettled++
					}
				}
			}
		}
		w.mu.Lock()
		for _, tr := range w.turns[s] {
			tv, ok := state.Turn(tr.id)
			if !ok || !tv.Completed {
				t.Errorf("session %s: turn %s is not complete in the log; the log ends:\n%s", s, tr.id, logTail(evs, 12))
				fd.unsettled += len(tr.names)
			}
		}
		w.mu.Unlock()
		// Every message was written by the node that owned the session
		// then: a message of an earlier owner is an append its fence
		// should have refused.
		owner := ""
		for _, m := range rawMessages(t, js, s) {
			for _, ev := range m.evs {
				if ev.Type == events.TypeOwnershipTaken {
					var p events.OwnershipTaken
					_ = json.Unmarshal(ev.Data, &p)
					owner = p.Node
				}
			}
			if m.writer != owner {
				t.Errorf("session %s: stream message %d (%s...) written by %q while %q owned the session", s, m.seq, m.evs[0].Type, m.writer, owner)
				fd.staleAppends++
			}
		}
	}
	fd.capOvershoots = w.capOvershoots()
	return fd
}

// logTail describes the last n events of a session's log, for a failure.
func logTail(evs []events.Event, n int) string {
	var b strings.Builder
	for _, ev := range evs[max(0, len(evs)-n):] {
		data := string(ev.Data)
		if len(data) > 240 {
			data = data[:240] + "..."
		}
		fmt.Fprintf(&b, "  %d %s %s %s\n", ev.Seq, ev.Time.Format("15:04:05.000"), ev.Type, data)
	}
	return b.String()
}

// runs counts the runs a call left in its counter file.
func (w *world) runs(key string) int {
	b, err := os.ReadFile(filepath.Join(w.counters, key))
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "\n")
}

// capOvershoots counts the moments more than capLimit calls of bump_cap
// ran at once, from the start and end each run wrote (a killed run ends
// when its watcher last saw it alive; a run still going counts as running
// until now).
func (w *world) capOvershoots() int {
	type iv struct {
		name       string
		start, end int64
	}
	var ivs []iv
	ents, _ := os.ReadDir(w.counters)
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), "cap-") || strings.HasSuffix(e.Name(), ".alive") {
			continue
		}
		b, _ := os.ReadFile(filepath.Join(w.counters, e.Name()))
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		v := iv{name: e.Name(), end: time.Now().UnixNano()}
		v.start, _ = strconv.ParseInt(f[0], 10, 64)
		if len(f) > 1 {
			v.end, _ = strconv.ParseInt(f[1], 10, 64)
		} else if b, err := os.ReadFile(filepath.Join(w.counters, e.Name()+".alive")); err == nil {
			v.end, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		}
		ivs = append(ivs, v)
	}
	over := 0
	for _, a := range ivs {
		at := 0
		for _, b := range ivs {
			if b.start <= a.start && a.start < b.end {
				at++
			}
		}
		if at > capLimit {
			var runs []string
			for _, b := range ivs {
				if b.start <= a.start && a.start < b.end {
					runs = append(runs, fmt.Sprintf("%s [%s, %s]", b.name, time.Unix(0, b.start).Format("15:04:05.000"), time.Unix(0, b.end).Format("15:04:05.000")))
				}
			}
			w.t.Errorf("%d runs of bump_cap (fleet cap %d) overlapped at %s: %s", at, capLimit, time.Unix(0, a.start).Format("15:04:05.000"), strings.Join(runs, "; "))
			over++
		}
	}
	return over
}

// percentile returns the p-th percentile (0..100) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	k := int(float64(len(s)-1)*p/100 + 0.5)
	return s[k]
}

// outside exports every session through a live node's API (replay --url,
// which needs no token on a node without tenants), checks each with
// replay --verify --url (the chain, and its latest checkpoint, written by
// whichever node owned it last), and runs the outside verifier of the hash
// chain (scripts/verify-chain.mjs: JavaScript written from docs/events.md
// alone, with a standard RFC 8785 library) over them all. Every session
// holds, on purpose, integers a double cannot hold and lone surrogates.
func (w *world) outside() {
	t := w.t
	t.Helper()
	replayBin := testnode.Replay(t)
	live := w.live()
	dir := t.TempDir()
	w.mu.Lock()
	sessions := slices.Clone(w.sessions)
	w.mu.Unlock()
	var files []string
	for _, s := range sessions {
		cmd := exec.Command(replayBin, "--url", live[0].Base, "--session", s, "--export")
		cmd.Env = append(os.Environ(), "CALLSHEET_TOKEN="+live[0].Token)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("replay --export of %s: %v", s, err)
		}
		if !strings.Contains(string(b), "12345678901234567891") || !strings.Contains(string(b), `\ud800 lone`) {
			t.Fatalf("session %s holds no integer beyond a double or no lone surrogate", s)
		}
		f := filepath.Join(dir, s+".ndjson")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		cmd = exec.Command(replayBin, "--url", live[0].Base, "--session", s, "--verify")
		cmd.Env = append(os.Environ(), "CALLSHEET_TOKEN="+live[0].Token)
		if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "checkpoints: 1;") {
			t.Errorf("replay --verify --url of %s: %v\n%s", s, err, out)
		}
	}
	out, err := testnode.Outsider(t, files...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fmt.Printf("outside verifier: %d sessions of the fleet suite: %s\n", len(files), lines[len(lines)-1])
	if err != nil || !strings.Contains(out, fmt.Sprintf("exports: %d ok, 0 failed, 0 not checked", len(files))) {
		t.Fatalf("the outside verifier does not recompute every session's chain: %v\n%s", err, out)
	}
}

// leaders names each fleet stream's leader (a server name: on an embedded
// fleet, a node's name); a stream it cannot ask is left out.
func (w *world) leaders(js jetstream.JetStream) map[string]string {
	out := map[string]string{}
	for _, name := range fleetStreams {
		if l := leaderOf(js, name, 2*time.Second); l != "" {
			out[name] = l
		}
	}
	return out
}

func leaderOf(js jetstream.JetStream, stream string, d time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return ""
	}
	info, err := s.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// watchElections watches, from down on, every stream in led (stream →
// leader before the failure) that victim led until another server leads
// it, and returns a function that stops watching and says, per stream,
// when its new leader was seen (what bounds a takeover on an embedded
// fleet: nats-server elects a new leader only after a randomized 4–9 s
// election timeout, raft.go).
func (w *world) watchElections(js jetstream.JetStream, victim string, led map[string]string, down time.Time) func() string {
	stop := make(chan struct{})
	var mu sync.Mutex
	seen := map[string]time.Duration{}
	var wg sync.WaitGroup
	var streams []string
	for name, l := range led {
		if l != victim {
			continue
		}
		streams = append(streams, name)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if l := leaderOf(js, name, time.Second); l != "" && l != victim {
					mu.Lock()
					seen[name] = time.Since(down)
					mu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	sort.Strings(streams)
	return func() string {
		close(stop)
		wg.Wait()
		if len(streams) == 0 {
			return "it led no fleet stream"
		}
		var parts []string
		for _, name := range streams {
			if d, ok := seen[name]; ok {
				parts = append(parts, fmt.Sprintf("%s re-led after %s", name, d.Round(100*time.Millisecond)))
			} else {
				parts = append(parts, name+" not re-led by the time every session was served")
			}
		}
		return "it led " + strings.Join(parts, ", ")
	}
}
