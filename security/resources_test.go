package security

// Resource attacks on the node (docs/security.md "Resources"): a tenant's
// fork bombs and memory hogs must end in its own sandboxes, never take the
// node or another tenant's calls with them. Every attack runs fenced (a
// cgroup this test makes, or a process limit on a node that is not root), so
// that what it exhausts is the fence and never the machine.

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/procs"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// twoTenants is a config with tenants acme and umbrella, and more
// sections.
func twoTenants(more map[string]any) map[string]any {
	cfg := map[string]any{"tenants": map[string]any{
		"acme":     map[string]any{"token": acmeToken},
		"umbrella": map[string]any{"token": umbrellaToken},
	}}
	for k, v := range more {
		cfg[k] = v
	}
	return cfg
}

const (
	acmeToken     = "tok-acme-resources"
	umbrellaToken = "tok-umbrella-resources"
)

// shellAs runs command in session with token, within timeout, and returns
// the outcome and text of its result.
func shellAs(t *testing.T, p *testnode.Proc, token, session, command string, timeout time.Duration) (events.Outcome, string) {
	t.Helper()
	var tv projections.Turn
	body := map[string]any{"calls": []any{map[string]any{"id": "c1", "name": "shell",
		"arguments": map[string]any{"command": command, "timeout_ms": timeout.Milliseconds()}}}}
	code, err := p.DoAs(token, "POST", "/v1/sessions/"+session+"/turns", body, &tv)
	if err != nil || code != http.StatusOK || len(tv.Results) != 1 {
		return "", fmt.Sprintf("turn: %d %v %+v", code, err, tv)
	}
	return tv.Results[0].Outcome, text(tv.Results[0])
}

// bombsThenProbe starts three fork bombs in three of umbrella's sessions
// (background shells, each ended by its timeout), then has acme run a
// shell call every half second for six seconds: each must work, and the
// node must live throughout.
func bombsThenProbe(t *testing.T, p *testnode.Proc) {
	t.Helper()
	acme := mustOpen(t, p, acmeToken, "")
	var marks []string
	for i := range 3 {
		s := mustOpen(t, p, umbrellaToken, "")
		m := marker()
		marks = append(marks, m)
		body := map[string]any{"calls": []any{map[string]any{"id": "bomb", "name": "shell", "arguments": map[string]any{
			"command": ": " + m + "; b() { b | b & }; b; sleep 8", "background": true, "timeout_ms": 10000}}}}
		var tv projections.Turn
		if code, err := p.DoAs(umbrellaToken, "POST", "/v1/sessions/"+s+"/turns", body, &tv); err != nil || code != http.StatusOK {
			t.Fatalf("bomb %d: %d %v\n%s", i, code, err, p.Stderr())
		}
		t.Logf("bomb %d: %s %s", i, tv.Results[0].Outcome, text(tv.Results[0]))
	}
	time.Sleep(time.Second) // the bombs fill what they can
	for i := range 12 {
		if p.Exited() {
			t.Fatalf("the node died under three fork bombs (probe %d): %v\n%s", i, p.Err(), tail(p.Stderr(), 3000))
		}
		if i == 0 {
			t.Logf("node's uid runs %d tasks", tasksOf(nodeUID))
		}
		out, txt := shellAs(t, p, acmeToken, acme, "echo alive", 10*time.Second)
		if out != events.OutcomeOK || !strings.HasPrefix(txt, "alive\n") {
			t.Fatalf("acme's call %d while umbrella's fork bombs ran: %s %q\n%s", i, out, txt, tail(p.Stderr(), 3000))
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, m := range marks {
		waitGone(m)
	}
	if p.Exited() {
		t.Fatalf("the node died after the fork bombs: %v\n%s", p.Err(), tail(p.Stderr(), 3000))
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// TestForkBombsLeaveTheNodeAlive: three fork bombs in three sessions of one
// tenant, each sandbox allowed 250 processes, on a node whose whole share
// of the machine is 600 tasks (a cgroup fence standing for pid_max, or the
// node's RLIMIT_NPROC when it is not root): the node lives, and the other
// tenant's calls keep working throughout.
func TestForkBombsLeaveTheNodeAlive(t *testing.T) {
	const share = 600
	cfg := twoTenants(map[string]any{"sandbox": map[string]any{"limits": map[string]any{"processes": 250}}})

	t.Run("root node in a pids cgroup", func(t *testing.T) {
		f := newFence(t, share, 0)
		p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: cfg, Wrap: f.wrap("")})
		bombsThenProbe(t, p)
		t.Logf("fence: pids.peak %s of %d", f.read("pids", "pids.peak"), share)
	})
	t.Run("root node in a pids cgroup, sandbox cgroups off", func(t *testing.T) {
		// The budget kept by counting: a root node that may not make
		// cgroups of its own is in the same place.
		f := newFence(t, share, 0)
		off := twoTenants(map[string]any{"sandbox": map[string]any{"cgroups": "off", "limits": map[string]any{"processes": 250}}})
		p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: off, Wrap: f.wrap("")})
		bombsThenProbe(t, p)
		t.Logf("fence: pids.peak %s of %d", f.read("pids", "pids.peak"), share)
	})
	t.Run("node that is not root, under RLIMIT_NPROC", func(t *testing.T) {
		var (
			bin string
			o   testnode.Options
		)
		uid := os.Getuid()
		if uid == 0 {
			bin, o = unprivileged(t, cfg)
			uid = nodeUID
		} else {
			bin, o = testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: cfg}
		}
		// Whatever uid already runs counts against its limit too.
		limit := tasksOf(uid) + share
		o.Wrap = []string{"/bin/bash", "-c", "ulimit -u " + strconv.Itoa(limit) + " && exec \"$0\" \"$@\""}
		p := testnode.Start(t, bin, o)
		bombsThenProbe(t, p)
	})
}

// memoryHog is a shell command that starts n perl processes holding mb MiB
// each (written, so resident), waits for them, and prints how many the
// kernel killed.
func memoryHog(n, mb int) string {
	return fmt.Sprintf(`for i in $(seq %d); do perl -e '$x = "a" x (%d << 20); sleep 5' & done
killed=0; for j in $(jobs -p); do wait $j; [ $? -ge 128 ] && killed=$((killed+1)); done; echo "killed $killed of %d"`, n, mb, n)
}

// TestMemoryAttackKillsTheSandboxNotTheNode: 80 processes of 24 MiB in one
// sandbox, on a node whose share of the machine is 768 MiB (a memory cgroup
// fence): the OOM killer ends sandboxed processes, never the node, and the
// other tenant's calls keep working; with the sandbox's memory cgroups, and
// without them (oom_score_adj alone then makes the sandbox the OOM
// killer's pick).
func TestMemoryAttackKillsTheSandboxNotTheNode(t *testing.T) {
	for _, cgroups := range []string{"auto", "off"} {
		t.Run("cgroups "+cgroups, func(t *testing.T) {
			memoryAttack(t, cgroups)
		})
	}
}

func memoryAttack(t *testing.T, cgroups string) {
	f := newFence(t, 0, 768<<20)
	cfg := twoTenants(map[string]any{"sandbox": map[string]any{"cgroups": cgroups, "limits": map[string]any{"processes": 200}}})
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: cfg, Wrap: f.wrap("")})
	acme, umbrella := mustOpen(t, p, acmeToken, ""), mustOpen(t, p, umbrellaToken, "")
	out, txt := shellAs(t, p, umbrellaToken, umbrella, memoryHog(80, 24), 60*time.Second)
	t.Logf("the attack: %s %q; fence: max usage %s bytes, %s", out, txt, f.read("memory", "memory.max_usage_in_bytes")+f.read("memory", "memory.peak"),
		strings.ReplaceAll(f.read("memory", "memory.oom_control")+f.read("memory", "memory.events"), "\n", ", "))
	t.Logf("the OOM killer's picks in the fence:\n%s", oomKills(filepath.Base(f.dirs["memory"])))
	// Without memory cgroups the fence stays at its limit while the OOM
	// killer takes umbrella's processes one by one, and the node, though
	// never the pick, may answer 503 meanwhile: acme is served once the
	// storm is over.
	start := time.Now()
	for {
		o, txt := shellAs(t, p, acmeToken, acme, "echo alive", 10*time.Second)
		if o == events.OutcomeOK && strings.HasPrefix(txt, "alive\n") {
			t.Logf("acme served %s after the attack", time.Since(start).Round(time.Millisecond))
			break
		}
		select {
		case <-p.Done():
			t.Fatalf("the OOM killer took the node: %v\n%s", p.Err(), tail(p.Stderr(), 2000))
		case <-time.After(500 * time.Millisecond):
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("acme's call 30 s after umbrella's memory attack: %s %q", o, txt)
		}
	}
}

// oomKills returns the kernel log's lines of processes the OOM killer
// killed in cgroups whose path holds name (needs the kernel log readable:
// root, or kernel.dmesg_restrict=0).
func oomKills(name string) string {
	var picks []string
	for range 20 { // the kernel's lines may lag the kill
		out, err := exec.Command("dmesg").Output()
		if err != nil {
			return fmt.Sprintf("(the kernel log is not readable: %v)", err)
		}
		lines := strings.Split(string(out), "\n")
		for i, l := range lines {
			if strings.Contains(l, "oom-kill:") && strings.Contains(l, name) && i+1 < len(lines) {
				task := l[strings.LastIndex(l, "task_memcg="):]
				picks = append(picks, strings.TrimSpace(lines[i+1][strings.Index(lines[i+1], "]")+1:])+" ("+task+")")
			}
		}
		if len(picks) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return strings.Join(picks, "\n")
}

// cgroupOf returns pid's cgroup path in the hierarchy of controller ("" for
// cgroup v2's).
func cgroupOf(pid int, controller string) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && (controller == "" && parts[0] == "0" || slices.Contains(strings.Split(parts[1], ","), controller)) {
			return parts[2]
		}
	}
	return ""
}

// TestCPUWeightPerTenant: each tenant's sandboxed processes share one cgroup
// of the tenant's with the same CPU weight as every other tenant's, however
// many processes it runs, and the node has a cgroup of its own with ten
// times that weight: one tenant's CPU burners cannot take another's share,
// nor the node's (the figures: bench fairness/cpu).
func TestCPUWeightPerTenant(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root node can make cgroups on this machine (a v2 cgroup delegated to the node's user would do too)")
	}
	v2, v1 := cgroupMounts(t)
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: t.TempDir() + "/data", Config: twoTenants(nil)})
	ctl, mount, weightFile, unit := "cpu", v1["cpu"], "cpu.shares", 1024
	if v1["cpu"] == "" {
		ctl, mount, weightFile, unit = "", v2, "cpu.weight", 100
		if b, _ := os.ReadFile(filepath.Join(v2, ownCgroup(""), "cgroup.controllers")); !slices.Contains(strings.Fields(string(b)), "cpu") {
			mount = ""
		}
	}
	if mount == "" {
		t.Skip("this machine has no cpu controller (neither a v1 hierarchy nor cgroup v2)")
	}
	node := cgroupOf(p.PID(), ctl)
	if !strings.HasSuffix(node, "/node") {
		t.Fatalf("the node is in cgroup %q, not one of its own; its report: %s", node, limitsLine(p.Stderr()))
	}
	marks := map[string][]string{}
	for tenant, token := range map[string]string{"acme": acmeToken, "umbrella": umbrellaToken} {
		n := map[string]int{"acme": 1, "umbrella": 3}[tenant]
		for range n {
			s := mustOpen(t, p, token, "")
			m := marker()
			marks[tenant] = append(marks[tenant], m)
			body := map[string]any{"calls": []any{map[string]any{"id": "bg", "name": "shell", "arguments": map[string]any{"command": "sleep " + m, "background": true}}}}
			if code, err := p.DoAs(token, "POST", "/v1/sessions/"+s+"/turns", body, nil); err != nil || code != http.StatusOK {
				t.Fatalf("background sleep: %d %v", code, err)
			}
		}
	}
	defer func() {
		for _, ms := range marks {
			for _, m := range ms {
				for _, pid := range procs.Marked(m) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}()
	weights := map[string]string{}
	for tenant, ms := range marks {
		for _, m := range ms {
			var pids []int
			deadline := time.Now().Add(20 * time.Second)
			for len(pids) == 0 && time.Now().Before(deadline) {
				pids = procs.Marked(m)
				time.Sleep(20 * time.Millisecond)
			}
			if len(pids) == 0 {
				t.Fatalf("%s's sleep %s did not start", tenant, m)
			}
			cg := cgroupOf(pids[0], ctl)
			want := "/" + tenant + "/run."
			if !strings.Contains(cg, want) || !strings.HasPrefix(cg, strings.TrimSuffix(node, "/node")+"/box.") {
				t.Errorf("%s's sandboxed process is in cgroup %q, want one of its own under the node's box.N%s...", tenant, cg, want)
				continue
			}
			tenantDir := filepath.Join(mount, cg[:strings.LastIndex(cg, "/run.")])
			b, _ := os.ReadFile(filepath.Join(tenantDir, weightFile))
			weights[tenant] = strings.TrimSpace(string(b))
		}
	}
	b, _ := os.ReadFile(filepath.Join(mount, node, weightFile))
	t.Logf("CPU weights (%s): node %s, tenants %v", weightFile, strings.TrimSpace(string(b)), weights)
	if weights["acme"] != strconv.Itoa(unit) || weights["umbrella"] != strconv.Itoa(unit) {
		t.Errorf("tenants' CPU weights %v, want %d each", weights, unit)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(10*unit) {
		t.Errorf("the node's CPU weight %s, want %d", got, 10*unit)
	}
}

// limitsLine is the limits line of a node's start-up report.
func limitsLine(stderr string) string {
	for _, l := range strings.Split(stderr, "\n") {
		if strings.Contains(l, "sandbox: limits:") {
			return l
		}
	}
	return "(none)"
}

// smallFS mounts a tmpfs of size bytes for the test (root only): a disk
// that a fill attack may fill without touching the machine's.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small file system to fence the fill needs root; the attack is not run unfenced")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs to fence the fill: %v", err)
	}
	t.Cleanup(func() {
		// A node killed at the end of the test leaves its tenants' disks
		// mounted in here: those first.
		for _, l := range strings.Split(runOut("findmnt", "-rn", "-o", "TARGET"), "\n") {
			if strings.HasPrefix(l, dir+"/") {
				syscall.Unmount(l, syscall.MNT_DETACH)
			}
		}
		syscall.Unmount(dir, syscall.MNT_DETACH)
	})
	return dir
}

func runOut(name string, args ...string) string {
	out, _ := exec.Command(name, args...).Output()
	return string(out)
}

// TestWorkspaceFillSparesTheLog: the node's data dir (JetStream's store,
// the workspaces) is on a 160 MiB file system; tenant umbrella's shell
// writes 400 MiB into its workspace. With sandbox.limits.tenant_disk_mb its
// workspaces are a 24 MiB file system of their own: the write stops there
// (ENOSPC), the data dir keeps its free space, and tenant acme's turns are
// recorded as before.
func TestWorkspaceFillSparesTheLog(t *testing.T) {
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop devices here (%v): tenants' disks cannot be made", err)
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		if _, err := os.Stat("/usr/sbin/mkfs.ext4"); err != nil {
			t.Skip("no mkfs.ext4 here (e2fsprogs): tenants' disks cannot be made")
		}
	}
	fsDir := smallFS(t, 160<<20)
	cfg := twoTenants(map[string]any{"sandbox": map[string]any{"limits": map[string]any{"tenant_disk_mb": 24}}})
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(fsDir, "data"), Config: cfg})
	acme, umbrella := mustOpen(t, p, acmeToken, ""), mustOpen(t, p, umbrellaToken, "")
	out, txt := shellAs(t, p, umbrellaToken, umbrella, `dd if=/dev/zero of=fill bs=1M count=400 2>&1 | tail -1; ls -l fill; df -m . | tail -1`, 60*time.Second)
	t.Logf("umbrella's fill: %s %q", out, txt)
	var st syscall.Statfs_t
	if err := syscall.Statfs(fsDir, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	t.Logf("the data dir's file system: %d MiB free of %d", free>>20, int64(st.Blocks)*st.Bsize>>20)
	if free < 32<<20 {
		t.Errorf("the fill left %d MiB on the data dir's file system", free>>20)
	}
	if fi, err := os.Stat(filepath.Join(wsDir(p, "umbrella", umbrella), "fill")); err == nil && fi.Size() > 24<<20 {
		t.Errorf("umbrella wrote %d MiB, past its 24 MiB disk", fi.Size()>>20)
	}
	for i := range 5 {
		content := strings.Repeat(fmt.Sprintf("acme line %d\n", i), 1000)
		tv := turnAs(t, p, acmeToken, acme, []map[string]any{
			one("w", "write", map[string]any{"path": "f.txt", "content": content}),
			one("r", "read", map[string]any{"path": "f.txt"}),
		})
		for _, r := range tv.Results {
			if r.Outcome != events.OutcomeOK {
				t.Fatalf("acme's turn %d after umbrella's fill: %s %s", i, r.Outcome, text(r))
			}
		}
	}
}
