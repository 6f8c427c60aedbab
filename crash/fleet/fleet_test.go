package fleet

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
)

var (
	trials = flag.Int("fleet.trials", 3, "randomized fleet trials to run (each loses one node)")
	seed   = flag.Uint64("fleet.seed", 0, "seed of the trial sequence (0: from the clock)")
	logDir = flag.String("fleet.logs", "", "where a failed run writes every node's log (default a new directory under $TMPDIR)")
	only   = flag.String("fleet.kinds", "", "the failure kinds to run, comma-separated among owner, leader, pause (default all, each at least once)")
	keep   = flag.Bool("fleet.keeplogs", false, "write every node's log (to -fleet.logs) also when the run passes")
	lease  = flag.Duration("fleet.lease", 0, "the nodes' lease TTL (config fleet.lease_ttl; 0: the default)")
)

// The failures a trial inflicts.
const (
	killOwner  = "kill -9 an owner"
	killLeader = "kill -9 the event stream's leader"
	pauseOwner = "SIGSTOP an owner past its lease, then SIGCONT"
)

// sessionsPerNode is how many sessions each node opens for the trials.
const sessionsPerNode = 2

func nodeBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("the fleet suite builds and kills real node processes")
	}
	return testnode.Node(t, "")
}

// TestFleetSuite runs randomized trials on one fleet of three node
// processes formed from their flags alone (first checked to be one fleet:
// formsOneFleet): sessions under load on every node, then one failure per
// trial (kill -9 of a node owning sessions, kill
// -9 of the node leading the event stream, or SIGSTOP of an owner until its
// sessions were taken, then SIGCONT); the lost node is restarted (or
// resumed) and rejoins before the next trial. It measures takeover time
// (the failure to the first turn each of the lost node's sessions had
// served through a survivor) and checks, over every session at the end:
// no event served was lost or changed, the logs verify, no never-replay
// call ran twice, every message was appended by the session's owner of the
// moment (a paused owner resumed after its lease lapsed appends nothing),
// every turn completed, and the fleet-wide cap was never exceeded.
func TestFleetSuite(t *testing.T) {
	bin := nodeBinary(t)
	w := newWorld(t, bin, true, nil, "")
	runSuite(t, w, trialKinds(t, *only))
}

// TestFleetSuiteExternal runs the trials of TestFleetSuite on three nodes
// connected with --nats to an external cluster of three nats-server
// processes (the version go.mod pins, fsync), so no node leads a stream:
// losing a node loses no stream leader, and takeover is bounded by the
// lease alone. Only owner kills and pauses apply (no node leads the event
// stream). It logs the takeover p99 against the lease TTL + 2 s (the
// target docs/performance.md "Takeover" reports) without failing on it: a
// test does not depend on wall-clock speed.
func TestFleetSuiteExternal(t *testing.T) {
	bin := nodeBinary(t)
	var kinds []string
	for _, k := range trialKinds(t, *only) {
		if k != killLeader {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		t.Skip("-fleet.kinds selects only leader kills: no node leads a stream on an external cluster")
	}
	dir := t.TempDir()
	creds, err := cluster.EnsureCredentials(filepath.Join(dir, "fleet.nk"))
	if err != nil {
		t.Fatal(err)
	}
	ext := testnode.StartNATSCluster(t, testnode.NATSClusterOptions{Dir: filepath.Join(dir, "nats"), User: creds.PublicKey(), SyncAlways: true})
	w := newWorld(t, bin, true, ext, creds.Path())
	times := runSuite(t, w, kinds)
	ttl := *lease
	if ttl == 0 {
		ttl = config.DefaultLeaseTTL
	}
	bound := ttl + 2*time.Second
	for _, m := range []struct {
		what string
		ds   []time.Duration
	}{{"the failure to the turn served", times.served}, {"the failure to the OwnershipTaken", times.taken}, {"the failure to the turn served, less its wait for a cap slot", times.unqueued}} {
		p99 := percentile(m.ds, 99)
		t.Logf("external cluster: %s: p99 %s against the lease TTL %s + 2 s = %s: within %v", m.what, p99.Round(time.Millisecond), ttl, bound, p99 <= bound)
	}
}

// runSuite runs the trials of TestFleetSuite on w, choosing among kinds,
// checks the promises at the end and returns every takeover time.
func runSuite(t *testing.T, w *world, kinds []string) suiteTimes {
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("fleet suite seed %d (rerun with -fleet.seed=%d)", s, s)
	r := rand.New(rand.NewPCG(s, 0))
	js := w.js()
	for _, p := range w.f.Procs {
		for range sessionsPerNode {
			w.open(t, p)
		}
	}
	w.formsOneFleet()
	w.waitHealthy(js)
	// takeovers: the failure to the first turn served; taken: to the
	// OwnershipTaken; unqueued: takeovers less the time the turn's calls
	// waited for a fleet cap's slot (a slot the lost node held stays held
	// until its call's deadline + cluster.CapGrace, so that the cap is
	// never exceeded: that wait is the cap's, not the takeover's).
	var takeovers, taken, unqueued []time.Duration
	byKind := map[string][]time.Duration{}
	kills, pauses, unsettled := 0, 0, 0
	for i := range *trials {
		kind := kinds[(i+r.IntN(len(kinds)))%len(kinds)]
		if i < len(kinds) {
			kind = kinds[i] // every kind at least once when there are trials enough
		}
		stop := make(chan struct{})
		wait := w.load(r, stop)
		time.Sleep(time.Duration(500+r.IntN(1500)) * time.Millisecond)

		victim := w.pick(kind, js)
		affected := map[string]bool{}
		w.mu.Lock()
		sessions := slices.Clone(w.sessions)
		w.mu.Unlock()
		for _, ss := range sessions {
			if owner, _, _ := w.status(ss); owner == victim.Name {
				affected[ss] = true
			}
		}
		n := len(affected)
		w.mu.Lock()
		w.affected, w.firstOK = affected, map[string]time.Time{}
		w.mu.Unlock()
		led := w.leaders(js)
		down := time.Now()
		t.Logf("trial %d at %s: %s: node %s, owner of %d sessions", i, down.Format("15:04:05.000"), kind, victim.Name, n)
		elections := w.watchElections(js, victim.Name, led, down)
		if kind == pauseOwner {
			w.mu.Lock()
			w.paused[victim.Name] = true
			w.mu.Unlock()
			if err := victim.Pause(); err != nil {
				t.Fatal(err)
			}
			w.dropNode(victim.Name)
			pauses++
		} else {
			victim.Kill()
			kills++
		}
		w.mu.Lock()
		w.downAt = down
		w.mu.Unlock()
		// Takeover: every session of the lost node has a turn served by a
		// survivor.
		deadline := time.Now().Add(90 * time.Second)
		for {
			w.mu.Lock()
			left := 0
			for ss := range w.affected {
				if w.firstOK[ss].IsZero() {
					left++
				}
			}
			w.mu.Unlock()
			if left == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("trial %d: streams: %s", i, elections())
		w.mu.Lock()
		served := maps.Clone(w.firstOK)
		w.downAt = time.Time{}
		w.mu.Unlock()
		for _, ss := range slices.Sorted(maps.Keys(affected)) {
			if at := served[ss]; at.IsZero() {
				t.Errorf("trial %d: session %s had no turn served within 90 s of losing node %s", i, ss, victim.Name)
			} else {
				story, to := w.takeoverStory(ss, down, at)
				t.Logf("trial %d: session %s: a turn served %s after the failure; %s", i, ss, at.Sub(down).Round(time.Millisecond), story)
				takeovers = append(takeovers, at.Sub(down))
				byKind[kind] = append(byKind[kind], at.Sub(down))
				if to.taken > 0 {
					taken = append(taken, to.taken)
				}
				unqueued = append(unqueued, at.Sub(down)-to.queued)
			}
		}
		if kind == pauseOwner {
			// Its lease has lapsed and its sessions are elsewhere: let it
			// run again. It must append nothing to them (check, below).
			if err := victim.Resume(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3 * time.Second)
			w.mu.Lock()
			w.paused[victim.Name] = false
			w.mu.Unlock()
		}
		close(stop)
		unsettled += wait()
		if kind != pauseOwner {
			w.f.Restart(t, victim.Name)
		}
		w.waitNodes(3)
		// One failure at a time: R3 rides out the loss of one server, so
		// the next trial waits until every stream is whole again (the
		// restarted or resumed server caught up), as an operator would
		// before taking another node down (docs/operations.md, "A fleet").
		w.waitHealthy(js)
		if t.Failed() {
			break
		}
	}
	fd := w.check(js)
	fd.unsettled += unsettled
	w.outside()
	p50, p99 := percentile(takeovers, 50), percentile(takeovers, 99)
	t.Logf("fleet suite: %d trials (%d kills, %d pauses), %d takeovers: p50 %s, p99 %s, max %s",
		*trials, kills, pauses, len(takeovers), p50.Round(time.Millisecond), p99.Round(time.Millisecond), percentile(takeovers, 100).Round(time.Millisecond))
	t.Logf("fleet suite: the failure to the OwnershipTaken: p50 %s, p99 %s; to the turn served less its wait for a cap slot: p50 %s, p99 %s",
		percentile(taken, 50).Round(time.Millisecond), percentile(taken, 99).Round(time.Millisecond),
		percentile(unqueued, 50).Round(time.Millisecond), percentile(unqueued, 99).Round(time.Millisecond))
	for _, k := range kinds {
		if ds := byKind[k]; len(ds) > 0 {
			t.Logf("takeover after %s: %d sessions, p50 %s, p99 %s", k, len(ds), percentile(ds, 50).Round(time.Millisecond), percentile(ds, 99).Round(time.Millisecond))
		}
	}
	fmt.Printf("fleet suite summary: %s: trials=%d kills=%d pauses=%d takeovers=%d takeover_p50=%s takeover_p99=%s taken_p99=%s served_less_cap_wait_p99=%s owner_changes=%d events_lost=%d never_twice=%d stale_appends=%d unsettled=%d cap_overshoots=%d\n",
		t.Name(), *trials, kills, pauses, len(takeovers), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		percentile(taken, 99).Round(time.Millisecond), percentile(unqueued, 99).Round(time.Millisecond), fd.moves,
		fd.eventsLost, fd.neverTwice, fd.staleAppends, fd.unsettled, fd.capOvershoots)
	if fd.eventsLost+fd.neverTwice+fd.staleAppends+fd.unsettled+fd.capOvershoots > 0 {
		t.Fatal("the fleet suite found broken promises")
	}
	// Every change of owner is a takeover a failure explains: one more is
	// a session taken from a live owner, or moved back and forth (the
	// flapping the members watch's currency rule is for).
	if fd.moves != len(takeovers) {
		t.Fatalf("%d changes of owner over every session for %d takeovers: sessions moved that no failure explains", fd.moves, len(takeovers))
	}
	return suiteTimes{served: takeovers, taken: taken, unqueued: unqueued}
}

// suiteTimes are a suite's takeover times (runSuite).
type suiteTimes struct{ served, taken, unqueued []time.Duration }

// slowTakeover is the takeover time past which the suite logs the events a
// session recorded from the failure to its first turn served (what it
// waited for).
const slowTakeover = 8 * time.Second

// takeoverStory says, for the log, who took session s over after the
// failure at down and when its OwnershipTaken was recorded (read from a
// live node), and how long its calls waited for a cap slot until its turn
// was served at served; for a takeover slower than slowTakeover, also the
// events it recorded until then.
func (w *world) takeoverStory(s string, down, served time.Time) (string, takeoverTimes) {
	var evs []events.Event
	var err error
	for _, p := range w.live() {
		if evs, err = events_(p, s); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Sprintf("its events: %v", err), takeoverTimes{}
	}
	story := "no OwnershipTaken after the failure"
	var tt takeoverTimes
	for _, ev := range evs {
		if !ev.Time.After(down) || ev.Time.After(served) {
			continue
		}
		switch ev.Type {
		case events.TypeOwnershipTaken:
			if tt.taken > 0 {
				continue
			}
			var p events.OwnershipTaken
			_ = json.Unmarshal(ev.Data, &p)
			tt.taken = ev.Time.Sub(down)
			story = fmt.Sprintf("taken by %s at epoch %d %s after the failure", p.Node, p.Epoch, tt.taken.Round(time.Millisecond))
		case events.TypeToolCallStarted:
			var p events.ToolCallStarted
			_ = json.Unmarshal(ev.Data, &p)
			tt.queued += time.Duration(p.QueuedMS * float64(time.Millisecond))
		}
	}
	if tt.queued > 0 {
		story += fmt.Sprintf("; its calls waited %s for a cap slot", tt.queued.Round(time.Millisecond))
	}
	if served.Sub(down) < slowTakeover {
		return story, tt
	}
	var b strings.Builder
	b.WriteString(story + "; its events from the failure to the turn served:")
	for _, ev := range evs {
		if ev.Time.Before(down.Add(-time.Second)) || ev.Time.After(served) {
			continue
		}
		data := string(ev.Data)
		if len(data) > 160 {
			data = data[:160] + "..."
		}
		fmt.Fprintf(&b, "\n      +%s %d %s %s", ev.Time.Sub(down).Round(time.Millisecond), ev.Seq, ev.Type, data)
	}
	return b.String(), tt
}

// takeoverTimes are what a session's log says of its takeover: the
// failure to its OwnershipTaken (0: none recorded), and how long the calls
// claimed before its turn was served waited for a fleet cap's slot.
type takeoverTimes struct{ taken, queued time.Duration }

// trialKinds returns the failure kinds the -fleet.kinds flag selects
// (every kind when it is empty).
func trialKinds(t *testing.T, list string) []string {
	all := map[string]string{"owner": killOwner, "leader": killLeader, "pause": pauseOwner}
	if list == "" {
		return []string{killOwner, killLeader, pauseOwner}
	}
	var out []string
	for _, k := range strings.Split(list, ",") {
		kind, ok := all[strings.TrimSpace(k)]
		if !ok {
			t.Fatalf("-fleet.kinds: unknown kind %q: use owner, leader or pause, comma-separated", k)
		}
		out = append(out, kind)
	}
	return out
}

// pick chooses the trial's victim: the node owning the most sessions, or
// the node leading the event stream.
func (w *world) pick(kind string, js jetstream.JetStream) *testnode.Proc {
	w.t.Helper()
	if kind == killLeader {
		if name := w.streamLeader(js); name != "" {
			if p := w.f.Proc(name); p != nil && !p.Exited() {
				return p
			}
		}
	}
	count := map[string]int{}
	w.mu.Lock()
	sessions := slices.Clone(w.sessions)
	w.mu.Unlock()
	for _, s := range sessions {
		owner, _, _ := w.status(s)
		count[owner]++
	}
	var best *testnode.Proc
	for _, p := range w.live() {
		if best == nil || count[p.Name] > count[best.Name] {
			best = p
		}
	}
	return best
}

// formsOneFleet checks that the three processes, formed from their flags
// alone, are one fleet: a session opened on n1 is n1's at epoch 1, its
// turns are served from every node (forwarded to its owner) and its log is
// read on every node.
func (w *world) formsOneFleet() {
	t := w.t
	t.Helper()
	s := w.sessions[0]
	if owner, epoch, st := w.status(s); owner != "n1" || epoch != 1 || st != "idle" {
		t.Fatalf("status: owner %q epoch %d %q, want n1, 1, idle", owner, epoch, st)
	}
	for _, p := range w.f.Procs {
		var tv turnAnswer
		id := "t-" + p.Name
		code, err := do(p, 60*time.Second, "POST", "/v1/sessions/"+s+"/turns",
			map[string]any{"id": id, "calls": []map[string]any{{"id": "c0", "name": "bump_never", "arguments": map[string]any{}}}}, &tv)
		if err != nil || code != 200 || len(tv.Results) != 1 || tv.Results[0].Outcome != events.OutcomeOK {
			t.Fatalf("turn via %s: %d %v %+v", p.Name, code, err, tv)
		}
		w.mu.Lock()
		w.turns[s] = append(w.turns[s], turnRecord{id: id, names: []string{"bump_never"}, done: true})
		w.mu.Unlock()
		evs, err := events_(p, s)
		if err != nil || !strings.Contains(fmt.Sprint(typesOf(evs)), "TurnCompleted") {
			t.Fatalf("events via %s: %v %v", p.Name, typesOf(evs), err)
		}
	}
}

func typesOf(evs []events.Event) []events.Type {
	var out []events.Type
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}
