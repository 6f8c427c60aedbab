package crash

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/projections"
)

// TestKillMidStreamSettlesWhatWasReceived: a node is killed (SIGKILL) while
// a streamed turn is open: its first call, a never tool, runs past its side
// effect, and its second call, posted after, waits behind it. The next node
// process finds both calls in the log: the never call is indeterminate (it
// ran once and is not run again), the other runs once, and the turn, which
// the harness never ended, ends by itself after turns.stream_timeout with
// the two calls and completes. The log verifies.
func TestKillMidStreamSettlesWhatWasReceived(t *testing.T) {
	nodeBin, replayBin := binaries(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfgPath := writeConfigSleep(t, dir, "5", "30s")
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["turns"] = map[string]any{"stream_timeout": "2s"}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}

	p := startNode(t, nodeBin, data, cfgPath, "")
	var open struct{ Session string }
	if code, err := p.Do("POST", "/v1/sessions", map[string]any{}, &open); err != nil || code != 201 {
		t.Fatalf("open: %d %v", code, err)
	}
	base := "/v1/sessions/" + open.Session + "/turns/st1"
	batch := func(p interface {
		Do(string, string, any, any) (int, error)
	}, from int, id, tool string) {
		t.Helper()
		body := map[string]any{"from": from, "calls": []map[string]any{{"id": id, "name": tool, "arguments": map[string]any{}}}}
		if code, err := p.Do("POST", base+"/calls", body, nil); err != nil || code != 202 {
			t.Fatalf("batch %d: %d %v", from, code, err)
		}
	}
	batch(p, 0, "c0", "bump_never")
	deadline := time.Now().Add(30 * time.Second)
	for countRuns(t, dir, "c0") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("c0 never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	batch(p, 1, "c1", "bump_safe") // exclusive: it waits behind c0
	p.Kill()                       // SIGKILL mid-stream, c0 sleeping after its effect

	p = startNode(t, nodeBin, data, cfgPath, "")
	tv := waitTurn(t, p, open.Session, "st1")
	if len(tv.Results) != 2 || tv.Results[0].Outcome != events.OutcomeIndeterminate || tv.Results[1].Outcome != events.OutcomeOK {
		t.Fatalf("after kill -9 the turn is %+v, want c0 indeterminate and c1 ok", tv)
	}
	if r0, r1 := countRuns(t, dir, "c0"), countRuns(t, dir, "c1"); r0 != 1 || r1 != 1 {
		t.Fatalf("c0 ran %d times and c1 %d, want once each", r0, r1)
	}
	// The end: by the timer of the node that took over, with both calls.
	var end projections.Turn
	if code, err := p.Do("POST", base+"/end", map[string]any{"calls": 2}, &end); err != nil || code != 200 || end.Status != projections.StatusComplete {
		t.Fatalf("ending again after the timeout: %d %+v %v, want the turn's answer", code, end, err)
	}
	p.Stop(t)
	out, err := exec.Command(replayBin, "--data", data, "--session", open.Session, "--export").Output()
	if err != nil {
		t.Fatalf("replay --export: %v", err)
	}
	var evs []events.Event
	for _, line := range splitLines(out) {
		var ev events.Event
		if json.Unmarshal(line, &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
	}
	var ended *events.TurnEnded
	for _, ev := range evs {
		if ev.Type == events.TypeTurnEnded {
			p, _ := events.Decode(ev)
			ended = p.(*events.TurnEnded)
		}
	}
	if ended == nil || ended.Reason != events.EndedByTimeout || ended.Calls != 2 {
		t.Fatalf("TurnEnded %+v, want the timeout's with 2 calls", ended)
	}
	if v, err := exec.Command(replayBin, "--data", data, "--session", open.Session, "--verify").CombinedOutput(); err != nil {
		t.Fatalf("replay --verify: %v\n%s", err, v)
	}
	fmt.Printf("kill -9 mid-stream: c0 %s (%d run), c1 %s (%d run), turn ended by %s with %d calls\n",
		tv.Results[0].Outcome, countRuns(t, dir, "c0"), tv.Results[1].Outcome, countRuns(t, dir, "c1"), ended.Reason, ended.Calls)
}

func splitLines(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i, c := range b {
		if c == '\n' {
			out = append(out, b[start:i])
			start = i + 1
		}
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	return out
}
