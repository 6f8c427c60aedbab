package security

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// The attacks on a node's lease (docs/spec.md §7; docs/operations.md, "What
// each failure does"): a full disk under its store, and load on its process.

// turnOnce posts a one-call write turn and reports whether it completed,
// with what the node answered otherwise. A request is bounded: a node
// whose store does not answer must not hold the test.
func turnOnce(p *testnode.Proc, session, id string) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tv projections.Turn
	body := map[string]any{"id": id, "calls": []any{map[string]any{"id": "c1", "name": "write",
		"arguments": map[string]any{"path": id + ".txt", "content": "x"}}}}
	code, err := p.DoCtx(ctx, "", "POST", "/v1/sessions/"+session+"/turns", body, &tv)
	if err != nil || code != http.StatusOK || tv.Status != "complete" {
		return false, fmt.Sprintf("%d %v %s", code, err, tv.Status)
	}
	return true, ""
}

// waitEvent waits up to d for session's log to hold an event of type typ,
// reading the log (which wakes no session actor), and fails the test if it
// does not.
func waitEvent(t *testing.T, p *testnode.Proc, session string, typ events.Type, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		evs, err := p.Events(session)
		for _, ev := range evs {
			if ev.Type == typ {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: no %s within %s (%v; %d events)\n%s", session, typ, d, err, len(evs), p.Stderr())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestDiskFullLeaseIsRetakenOnceSpaceIsFreed: a node's data dir (its
// JetStream store and its workspaces) sits on a 32 MiB file system that a
// writer from outside fills to ENOSPC. The node must stop acting (its lease
// lost, turns refused), and once the space is freed it must hold its lease
// again and complete a turn within 15 s, without a restart.
func TestDiskFullLeaseIsRetakenOnceSpaceIsFreed(t *testing.T) {
	disk := testenv.SmallDisk(t, 32)
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{
		Data: filepath.Join(disk, "data"), Config: map[string]any{"fleet": map[string]any{"lease_ttl": cluster.MinLeaseTTL.String()}},
	})
	s := open(t, p, "")
	if ok, why := turnOnce(p, s, "before"); !ok {
		t.Fatalf("a turn before the disk filled: %s", why)
	}
	// Another session's turn runs a call across the fill; nobody asks for
	// that session afterwards.
	running := open(t, p, "running")
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		body := map[string]any{"id": "across", "calls": []any{map[string]any{"id": "c1", "name": "shell", "arguments": map[string]any{"command": "sleep 3"}}}}
		_, _ = p.DoCtx(ctx, "", "POST", "/v1/sessions/"+running+"/turns", body, nil)
	}()
	waitEvent(t, p, running, events.TypeToolCallStarted, 20*time.Second)

	fill := filepath.Join(disk, "fill")
	out, _ := exec.Command("dd", "if=/dev/zero", "of="+fill, "bs=1M").CombinedOutput()
	if !strings.Contains(string(out), "No space left") {
		t.Fatalf("dd did not fill the disk: %s", out)
	}
	// The node's writes meet ENOSPC: its lease lapses, and turns are refused.
	refused := ""
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; !strings.Contains(p.Stderr(), "lease lost") || refused == ""; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the disk filled: lease lost %v, a turn refused %q\n%s", strings.Contains(p.Stderr(), "lease lost"), refused, p.Stderr())
		}
		if ok, why := turnOnce(p, s, fmt.Sprintf("full%d", i)); !ok {
			refused = why
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("disk full: the lease is lost and a turn answered %s", refused)

	if err := os.Remove(fill); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	const bound = 15 * time.Second
	for i := 0; ; i++ {
		ok, why := turnOnce(p, s, fmt.Sprintf("after%d", i))
		if ok {
			break
		}
		if time.Since(freed) > bound {
			t.Fatalf("%s after the space was freed the node still refuses turns (%s):\n%s", bound, why, p.Stderr())
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("a turn completed %s after the space was freed", time.Since(freed).Round(time.Millisecond))
	// The session whose turn ran across the fill goes on by itself once the
	// lease is held again: its turn completes (the call settled by its
	// replay policy) without a request for it.
	waitEvent(t, p, running, events.TypeTurnCompleted, bound-time.Since(freed)+5*time.Second)
	evs, _ := p.Events(running)
	var settled []events.Type
	for _, ev := range evs {
		switch ev.Type {
		case events.TypeToolCallCompleted, events.TypeToolCallFailed, events.TypeToolCallIndeterminate, events.TypeRetryScheduled:
			settled = append(settled, ev.Type)
		}
	}
	t.Logf("the call that ran across the fill: %v", settled)
	// The log says what happened: the store's fault, the lease lost,
	// JetStream restarted, the lease held again.
	said := func() bool {
		log := p.Stderr()
		lost := strings.LastIndex(log, "lease lost")
		return strings.Contains(log, "does not take writes") && strings.Contains(log, "restarted JetStream from its store") &&
			lost >= 0 && strings.Contains(log[lost:], "lease regained")
	}
	for deadline := time.Now().Add(5 * time.Second); !said(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the node's log does not tell the fault, the restart and the lease held again:\n%s", p.Stderr())
		}
	}
	// And its metrics count the loss, and the lease held.
	if lost, _ := metric(t, p, "callsheet_lease_losses_total"); lost < 1 {
		t.Errorf("callsheet_lease_losses_total %v after the lease was lost", lost)
	}
	if held, _ := metric(t, p, "callsheet_lease_held"); held != 1 {
		t.Errorf("callsheet_lease_held %v after the lease was taken again", held)
	}
}

// newCPUFence makes a cgroupFence that holds a node, and everything it
// starts, to one CPU (v1's cpu.cfs_quota_us, or v2's cpu.max), so that a CPU
// attack on the node takes one of the machine's cores, never all; or skips
// the test, saying why, when this machine gives no writable cpu cgroup.
// The fence weighs ten times a process beside it (cpu.shares, cpu.weight),
// so that it gets its CPU on a machine busy with other work: what the node
// and the attack inside share is the CPU of a machine of their own. Start
// the node through its wrap.
func newCPUFence(t *testing.T) *cgroupFence {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fencing a CPU attack needs a cgroup of its own, which only root can make here; the attack is not run unfenced")
	}
	v2, v1 := cgroupMounts(t)
	name := fmt.Sprintf("callsheet-test-fence-%d-%d", os.Getpid(), time.Now().UnixNano())
	f := &cgroupFence{dirs: map[string]string{}}
	t.Cleanup(f.remove)
	var dir string
	limit := map[string]string{}
	if b, err := os.ReadFile(filepath.Join(v2, ownCgroup(""), "cgroup.controllers")); v2 != "" && err == nil && strings.Contains(" "+strings.TrimSpace(string(b))+" ", " cpu ") {
		parent := filepath.Join(v2, ownCgroup(""))
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			t.Skipf("cannot enable the cpu controller below %s to fence the attack: %v", parent, err)
		}
		dir, limit["cpu.max"], limit["cpu.weight"] = filepath.Join(parent, name), "100000 100000", "1000"
	} else if v1["cpu"] != "" {
		dir = filepath.Join(v1["cpu"], ownCgroup("cpu"), name)
		limit["cpu.cfs_period_us"], limit["cpu.cfs_quota_us"], limit["cpu.shares"] = "100000", "100000", "10240"
	} else {
		t.Skip("no cpu cgroup controller on this machine to fence the attack")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cpu cgroup to fence the attack: %v", err)
	}
	f.dirs["cpu"] = dir
	for _, file := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.shares", "cpu.max", "cpu.weight"} {
		if v, ok := limit[file]; ok {
			if err := os.WriteFile(filepath.Join(dir, file), []byte(v), 0); err != nil {
				t.Fatalf("fence %s: %v", file, err)
			}
		}
	}
	return f
}

// metric reads the value of a metric without labels from p's /metrics,
// and whether p has it.
func metric(t *testing.T, p *testnode.Proc, name string) (float64, bool) {
	t.Helper()
	var raw []byte
	if code, err := p.Do("GET", "/metrics", nil, &raw); err != nil || code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f, true
			}
		}
	}
	return 0, false
}

// TestLeaseHeldUnderLoad: a node held to one CPU, whose tenant runs 64
// background shells that each spin a CPU while four clients read a session
// of 39 MiB at once, again and again for 15 s. The node must hold its lease
// throughout: its lease counts no loss (callsheet_lease_losses_total), and
// its log says none.
func TestLeaseHeldUnderLoad(t *testing.T) {
	const ttl = cluster.MinLeaseTTL // the strictest: the node acts until 1.5 s after its last renewal was sent
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Wrap: newCPUFence(t).wrap(""),
		Data:   filepath.Join(t.TempDir(), "data"),
		Config: map[string]any{"fleet": map[string]any{"lease_ttl": ttl.String()}},
	})
	big, n := bigSession(t, p, 20, 10, 100<<10)
	t.Logf("a session of %d events (%d MiB of write arguments, each twice in the log)", n, (20*10*100)>>10)

	burner := open(t, p, "burn")
	var calls []any
	for i := range 64 {
		calls = append(calls, map[string]any{"id": fmt.Sprintf("b%d", i), "name": "shell",
			"arguments": map[string]any{"command": "timeout 25 sh -c 'while :; do :; done'", "background": true}})
	}
	var tv projections.Turn
	if code, err := p.Do("POST", "/v1/sessions/"+burner+"/turns", map[string]any{"calls": calls}, &tv); err != nil || code != http.StatusOK || tv.Status != "complete" {
		t.Fatalf("starting the burners: %d %v %+v", code, err, tv)
	}
	start := time.Now()
	const window = 15 * time.Second
	var (
		mu    sync.Mutex
		codes = map[int]int{}
		wg    sync.WaitGroup
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < window {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				code, err := p.DoCtx(ctx, "", "GET", "/v1/sessions/"+big+"/events?follow=false", nil, nil)
				cancel()
				if err != nil {
					code = -1
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	lost, _ := metric(t, p, "callsheet_lease_losses_total")
	gap, _ := metric(t, p, "callsheet_lease_longest_gap_seconds")
	logged := strings.Count(p.Stderr(), "lease lost")
	t.Logf("under load for %s: reads answered %v; the lease lost %v times (%d in the log), the longest gap between two renewals %.3fs (TTL %s)",
		time.Since(start).Round(time.Millisecond), codes, lost, logged, gap, ttl)
	if lost > 0 || logged > 0 {
		t.Errorf("the node lost its lease under load:\n%s", p.Stderr())
	}
}
