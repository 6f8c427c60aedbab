package crash

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/faults"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

var (
	trials = flag.Int("crash.trials", 50, "randomized crash trials to run")
	seed   = flag.Uint64("crash.seed", 0, "seed of the trial sequence (0: from the clock)")
)

var points = []string{faults.AfterRequested, faults.AfterClaim, faults.DuringTool, faults.AfterReturn, faults.AfterResult}

// binaries builds cmd/callsheet-node (with crash points) and cmd/callsheet-replay once per test
// binary (internal/testnode).
func binaries(t *testing.T) (nodeBin, replayBin string) {
	t.Helper()
	return testnode.Node(t, "faults"), testnode.Replay(t)
}

// startNode starts a node on data with the config at cfg and the crash
// point fault ("" for none).
func startNode(t *testing.T, bin, data, cfg, fault string) *testnode.Proc {
	t.Helper()
	return testnode.Start(t, bin, testnode.Options{Data: data, Config: cfg, Env: []string{"CALLSHEET_FAULT=" + fault}})
}

func writeConfig(t *testing.T, dir string) string {
	return writeConfigSleep(t, dir, "0.3", "20s")
}

// writeConfigSleep writes a config whose counter tools sleep for sleep
// seconds after their side effect, with the given timeout.
func writeConfigSleep(t *testing.T, dir, sleep, timeout string) string {
	t.Helper()
	tool := func(name, replay string) map[string]any {
		t := map[string]any{
			"name": name, "description": "appends a line to a counter file, then sleeps",
			"guidelines": []string{"crash suite only"},
			// n and s carry what the hash chain must hash exactly: an
			// integer a double cannot hold and a lone surrogate (trial).
			"input_schema": map[string]any{"type": "object", "properties": map[string]any{"n": map[string]any{"type": "number"}, "s": map[string]any{"type": "string"}}},
			// The side effect comes first, then a sleep: a kill during the
			// tool lands after the effect.
			"command": []string{"sh", "-c", `echo "$CALLSHEET_CALL_ID $CALLSHEET_ATTEMPT" >> "$COUNTER_DIR/$CALLSHEET_CALL_ID"; sleep ` + sleep + `; echo done`},
			"replay":  replay, "env": map[string]string{"COUNTER_DIR": dir},
			"timeout": timeout,
			// The counter is the suite's instrument, outside the
			// workspace: the tool runs outside the sandbox to reach it.
			"sandbox": false,
		}
		if name == "bump_ro" {
			// Read-only and safe: runs without a durable claim.
			t["effect"], t["concurrency"] = "read_only", "parallel_safe"
		}
		return t
	}
	cfg := map[string]any{
		"durability":    "fsync",
		"retry":         map[string]any{"initial_delay": "10ms", "max_delay": "50ms", "max_attempts": 5},
		"command_tools": []any{tool("bump_never", "never"), tool("bump_safe", "safe"), tool("bump_ro", "safe")},
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

type summary struct {
	trials, killed, duplicates, unsettled, lostOrDuplicated, mismatched int
}

func TestCrashSuite(t *testing.T) {
	if testing.Short() {
		t.Skip("crash suite builds and kills real node processes")
	}
	nodeBin, replayBin := binaries(t)
	exports := t.TempDir()
	s := *seed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("crash suite seed %d (rerun with -crash.seed=%d)", s, s)
	r := rand.New(rand.NewPCG(s, 0))
	var sum summary
	for i := range *trials {
		point := points[r.IntN(len(points))]
		n := 1 + r.IntN(3)
		var calls []string
		for range n {
			calls = append(calls, []string{"bump_never", "bump_safe", "bump_ro"}[r.IntN(3)])
		}
		hit := 1 + r.IntN(n)
		if !trial(t, nodeBin, replayBin, exports, i, fmt.Sprintf("%s:%d", point, hit), calls, &sum) {
			break
		}
	}
	outside(t, exports)
	t.Logf("crash suite: %d trials (%d killed at their point), %d duplicates of never tools, %d unsettled calls, %d lost or duplicated committed events, %d transcript mismatches",
		sum.trials, sum.killed, sum.duplicates, sum.unsettled, sum.lostOrDuplicated, sum.mismatched)
	fmt.Printf("crash suite summary: trials=%d killed=%d never_duplicates=%d unsettled=%d lost_or_duplicated_events=%d transcript_mismatches=%d\n",
		sum.trials, sum.killed, sum.duplicates, sum.unsettled, sum.lostOrDuplicated, sum.mismatched)
	if sum.duplicates+sum.unsettled+sum.lostOrDuplicated+sum.mismatched > 0 {
		t.Fatal("the crash suite found broken promises")
	}
}

func trial(t *testing.T, nodeBin, replayBin, exports string, i int, fault string, names []string, sum *summary) bool {
	t.Helper()
	sum.trials++
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir)
	label := fmt.Sprintf("trial %d (%s, calls %v)", i, fault, names)

	p := startNode(t, nodeBin, data, cfg, fault)
	var open struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &open); err != nil || code != 201 {
		t.Errorf("%s: open session: %d %v", label, code, err)
		p.Kill()
		return false
	}
	var calls []map[string]any
	for j, name := range names {
		args := json.RawMessage(`{}`)
		if j == 0 {
			args = json.RawMessage(`{"n":12345678901234567891,"s":"\ud800 lone, \u003c\u2028"}`)
		}
		calls = append(calls, map[string]any{"id": fmt.Sprintf("c%d", j), "name": name, "arguments": args})
	}
	_, _ = p.Do("POST", "/v1/sessions/"+open.Session+"/turns?wait=0", map[string]any{"id": "t1", "calls": calls}, nil)
	// Watch what is committed until the node dies at its point (or the turn
	// completes without reaching it).
	var seen []events.Event
	deadline := time.Now().Add(30 * time.Second)
	killed := false
	for time.Now().Before(deadline) {
		select {
		case <-p.Done():
			killed = true
		default:
		}
		if killed {
			break
		}
		if evs, err := p.Events(open.Session); err == nil {
			seen = evs
			if len(evs) > 0 && evs[len(evs)-1].Type == events.TypeTurnCompleted {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	if killed {
		sum.killed++
	} else {
		p.Stop(t)
	}

	// Restart without a fault: the node resumes the session and settles it.
	p = startNode(t, nodeBin, data, cfg, "")
	var turn projections.Turn
	deadline = time.Now().Add(60 * time.Second)
	for {
		code, err := p.Do("GET", "/v1/sessions/"+open.Session+"/turns/t1", nil, &turn)
		if err == nil && code == 200 && turn.Status == projections.StatusComplete {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%s: turn not complete 60s after restart: %d %+v %v", label, code, turn, err)
			sum.unsettled += len(names)
			p.Stop(t)
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	after, err := p.Events(open.Session)
	if err != nil {
		t.Fatal(err)
	}
	var live []byte
	p.Do("GET", "/v1/sessions/"+open.Session+"/transcript", nil, &live)
	p.Stop(t)

	// Every call settled, once, in call order.
	if len(turn.Results) != len(names) {
		t.Errorf("%s: %d results for %d calls", label, len(turn.Results), len(names))
		sum.unsettled += len(names) - len(turn.Results)
	}
	for j, res := range turn.Results {
		runs := countRuns(t, dir, fmt.Sprintf("c%d", j))
		switch names[j] {
		case "bump_never":
			if runs > 1 {
				t.Errorf("%s: never call c%d ran %d times", label, j, runs)
				sum.duplicates++
			}
			if res.Outcome != events.OutcomeOK && res.Outcome != events.OutcomeIndeterminate && !(runs == 0 && res.Outcome == events.OutcomeError) {
				t.Errorf("%s: never call c%d outcome %s after %d runs", label, j, res.Outcome, runs)
				sum.unsettled++
			}
			if res.Outcome == events.OutcomeOK && runs != 1 {
				t.Errorf("%s: never call c%d ok but ran %d times", label, j, runs)
				sum.duplicates++
			}
		case "bump_safe", "bump_ro":
			if res.Outcome != events.OutcomeOK {
				t.Errorf("%s: safe call c%d ended %s, want ok", label, j, res.Outcome)
				sum.unsettled++
			}
		}
	}
	// Nothing the first node had recorded was lost or changed; no event is
	// stored twice; sequences have no gaps.
	ids := map[string]bool{}
	for k, ev := range after {
		if ev.Seq != uint64(k+1) || ids[ev.ID] {
			t.Errorf("%s: event %d has seq %d (id %s seen before: %v)", label, k, ev.Seq, ev.ID, ids[ev.ID])
			sum.lostOrDuplicated++
		}
		ids[ev.ID] = true
	}
	for k, ev := range seen {
		if k >= len(after) || after[k].ID != ev.ID {
			t.Errorf("%s: event %d (%s %s) seen before the crash is gone after it", label, ev.Seq, ev.ID, ev.Type)
			sum.lostOrDuplicated++
			break
		}
	}
	// The transcript the node serves equals the one replayed from the log.
	out, err := exec.Command(replayBin, "--data", data, "--session", open.Session, "--format", "json").Output()
	if err != nil {
		t.Errorf("%s: replay: %v", label, err)
		sum.mismatched++
	} else if !bytes.Equal(out, live) {
		t.Errorf("%s: replayed transcript differs from the live one:\n%s\nlive:\n%s", label, out, live)
		sum.mismatched++
	}
	if v, err := exec.Command(replayBin, "--data", data, "--session", open.Session, "--verify").CombinedOutput(); err != nil {
		t.Errorf("%s: replay --verify: %v\n%s", label, err, v)
		sum.lostOrDuplicated++
	}
	// The session exported, for the outside verifier (outside).
	if b, err := exec.Command(replayBin, "--data", data, "--session", open.Session, "--export").Output(); err != nil {
		t.Errorf("%s: replay --export: %v", label, err)
	} else if err := os.WriteFile(filepath.Join(exports, fmt.Sprintf("trial-%03d.ndjson", i)), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return !t.Failed()
}

// outside runs the outside verifier of the hash chain (scripts/verify-chain.mjs:
// JavaScript written from docs/events.md alone, with a standard RFC 8785
// library) over every session the suite exported, and fails unless it
// recomputes every link of each.
func outside(t *testing.T, exports string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(exports, "*.ndjson"))
	if len(files) == 0 {
		return
	}
	// Every session holds, on purpose, what a standard JCS library cannot
	// read alike: an integer a double cannot hold, a lone surrogate.
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "12345678901234567891") || !strings.Contains(string(b), `\ud800 lone`) {
			t.Fatalf("%s holds no integer beyond a double or no lone surrogate", f)
		}
	}
	out, err := testnode.Outsider(t, files...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	fmt.Printf("outside verifier: %d sessions of the crash suite: %s\n", len(files), lines[len(lines)-1])
	if err != nil || !strings.Contains(out, fmt.Sprintf("exports: %d ok, 0 failed, 0 not checked", len(files))) {
		t.Fatalf("the outside verifier does not recompute every session's chain: %v\n%s", err, out)
	}
}

// countRuns counts the side effects a call left in its counter file.
func countRuns(t *testing.T, dir, call string) int {
	b, err := os.ReadFile(filepath.Join(dir, call))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}
