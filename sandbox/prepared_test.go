package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startIn runs script with bash through Start in s (a prepared sandbox
// when one is ready), in workspace ws, and returns its output, exit code,
// setup error and the host pid of the sandbox's first process.
func startIn(t *testing.T, s *Sandbox, ws string, r Run, script string) (string, int, error, int) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if r.Workspace == "" {
		r.Workspace = ws
	}
	p, err := s.Start(Cmd{Args: []string{"bash", "-c", script}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}, Stdout: out, Stderr: out}, r)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid := p.Pid()
	code, _, werr := p.Wait()
	if werr != nil {
		t.Fatalf("Wait: %v", werr)
	}
	ferr := p.Finish()
	b, _ := os.ReadFile(out.Name())
	return string(b), code, ferr, pid
}

// waitPrepared waits until s holds n prepared sandboxes.
func waitPrepared(t *testing.T, s *Sandbox, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s.pool.ready() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes prepared after 30 s, want %d (pool stopped: %q)", s.pool.ready(), n, s.pool.off)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// preparedPids lists the host pids of s's prepared sandboxes.
func preparedPids(s *Sandbox) []int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	var pids []int
	for _, e := range s.pool.keys {
		for _, pr := range e.ready {
			pids = append(pids, pr.proc.Pid())
		}
	}
	return pids
}

// alive reports whether a process pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

// TestPreparedSandboxServesOneCall: calls run in prepared sandboxes, each
// in its own (never one another call had), with a fresh /tmp and nothing
// left of the call before; also when calls arrive at once.
func TestPreparedSandboxServesOneCall(t *testing.T) {
	s := newBox(t, Config{})
	defer s.Close()
	ws := workspace(t, s)
	const script = `test -e /tmp/mark && echo "seen: $(cat /tmp/mark)"; echo $$ > /tmp/mark; ps -e -o pid= > /tmp/ps; wc -l < /tmp/ps`
	pids := map[int]bool{}
	for i := range 6 {
		if i > 0 {
			waitPrepared(t, s, 1)
		}
		out, code, err, pid := startIn(t, s, ws, Run{}, script)
		if err != nil || code != 0 || strings.Contains(out, "seen") {
			t.Fatalf("call %d: %q, exit %d, %v: want a fresh /tmp", i, out, code, err)
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(out)); n != 3 {
			t.Errorf("call %d sees %d processes, want its init, bash and ps: %q", i, n, out)
		}
		if pids[pid] {
			t.Fatalf("call %d ran in sandbox %d, which an earlier call had", i, pid)
		}
		pids[pid] = true
	}
	if s.pool.served < 5 {
		t.Errorf("%d calls ran in prepared sandboxes, want 5 (all but the first)", s.pool.served)
	}

	waitPrepared(t, s, DefaultPrepared)
	const n = 8
	var wg sync.WaitGroup
	got := make([]int, n)
	for i := range n {
		wg.Go(func() {
			out, code, err, pid := startIn(t, s, ws, Run{}, "sleep 0.2; echo ok")
			if err != nil || code != 0 || out != "ok\n" {
				t.Errorf("concurrent call %d: %q, exit %d, %v", i, out, code, err)
			}
			got[i] = pid
		})
	}
	wg.Wait()
	slices.Sort(got)
	for i := 1; i < n; i++ {
		if got[i] == got[i-1] {
			t.Fatalf("two concurrent calls ran in the same sandbox (%d): %v", got[i], got)
		}
		if pids[got[i]] {
			t.Fatalf("a concurrent call ran in sandbox %d, which an earlier call had", got[i])
		}
	}
}

// TestPreparedSandboxesDieWithTheNode: the sandboxes a node prepared die
// when it dies by SIGKILL. A child of this test binary plays the node.
func TestPreparedSandboxesDieWithTheNode(t *testing.T) {
	if os.Getenv("CALLSHEET_TEST_PREPARING_NODE") != "" {
		return // the child's own run of this test
	}
	child := exec.Command("/proc/self/exe", "-test.run=^TestPlayPreparingNode$")
	child.Env = playerEnv(t, "CALLSHEET_TEST_PREPARING_NODE=1")
	child.Stderr = os.Stderr
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	var pids []int
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "prepared "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) == 0 {
		t.Fatal("the playing node reported no prepared sandbox")
	}
	for _, pid := range pids {
		if !alive(pid) {
			t.Fatalf("prepared sandbox %d is not running before the node is killed", pid)
		}
	}
	child.Process.Kill()
	child.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("prepared sandbox %d outlived the node's SIGKILL by 5 s", pid)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestPlayPreparingNode is the node of TestPreparedSandboxesDieWithTheNode:
// it runs a command so that sandboxes are prepared, prints their pids and
// waits to be killed.
func TestPlayPreparingNode(t *testing.T) {
	if os.Getenv("CALLSHEET_TEST_PREPARING_NODE") == "" {
		t.Skip("run by TestPreparedSandboxesDieWithTheNode")
	}
	s := newBox(t, Config{})
	ws := workspace(t, s)
	if _, code, err, _ := startIn(t, s, ws, Run{}, "true"); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	waitPrepared(t, s, DefaultPrepared)
	fmt.Printf("prepared %s\n", strings.Trim(fmt.Sprint(preparedPids(s)), "[]"))
	time.Sleep(time.Minute)
}

// TestPreparedSandboxesCount: prepared sandboxes hold places in the budget
// (counted, without cgroups) and sit in their tenant's cgroup (with them),
// so a tenant's or the node's limits bind them like running ones; a call
// still gets a place a prepared sandbox held.
func TestPreparedSandboxesCount(t *testing.T) {
	t.Run("counted", func(t *testing.T) {
		s := newBox(t, Config{Cgroups: CgroupsOff, Limits: Limits{Processes: 32, NodeProcesses: 96, TenantProcesses: 96}})
		defer s.Close()
		b := s.Budget()
		if b.MaxSandboxes != 3 {
			t.Fatalf("MaxSandboxes = %d, want 3 (96 processes at 32 each)", b.MaxSandboxes)
		}
		ws := workspace(t, s)
		if _, code, err, _ := startIn(t, s, ws, Run{}, "true"); code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		waitPrepared(t, s, DefaultPrepared)
		s.reaping.Wait() // the first call's place is given back once its init is reaped
		s.res.mu.Lock()
		running := s.res.running
		s.res.mu.Unlock()
		if running != DefaultPrepared {
			t.Fatalf("%d places of the budget taken with %d sandboxes prepared and none running, want %d", running, DefaultPrepared, DefaultPrepared)
		}
		// Three calls that wait: each gets a place (a prepared sandbox's, or
		// one evicted for it); the fourth finds none.
		var procs []*Process
		defer func() {
			for _, p := range procs {
				p.Kill()
				p.Wait()
				p.Finish()
			}
		}()
		for i := range 3 {
			p, err := s.Start(Cmd{Args: []string{"sleep", "60"}, Env: []string{"PATH=/usr/bin:/bin"}}, Run{Workspace: ws})
			if err != nil {
				t.Logf("%d sandboxes prepared", s.pool.ready())
				t.Fatalf("call %d of 3: %v", i, err)
			}
			procs = append(procs, p)
		}
		if _, err := s.Start(Cmd{Args: []string{"true"}, Env: []string{"PATH=/usr/bin:/bin"}}, Run{Workspace: ws}); !errors.Is(err, ErrBusy) {
			t.Fatalf("a fourth call: %v, want ErrBusy (3 sandboxes at most)", err)
		}
		s.res.mu.Lock()
		running = s.res.running
		s.res.mu.Unlock()
		if running > b.MaxSandboxes {
			t.Fatalf("%d places taken, more than the budget's %d", running, b.MaxSandboxes)
		}
	})
	t.Run("cgroups", func(t *testing.T) {
		s := newBox(t, Config{Tenants: []string{"t1"}})
		defer s.Close()
		if s.res.box[ctlPids] == "" {
			t.Skipf("no pids cgroup here: %s", s.Budget().NoCgroups)
		}
		ws := t.TempDir()
		uid, gid := s.Owner("t1")
		os.Chown(ws, uid, gid)
		if _, code, err, _ := startIn(t, s, ws, Run{Tenant: "t1"}, "true"); code != 0 || err != nil {
			t.Fatalf("exit %d, %v", code, err)
		}
		waitPrepared(t, s, DefaultPrepared)
		want := filepath.Join(s.res.box[ctlPids], "t1") + "/run."
		for _, pid := range preparedPids(s) {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
			if err != nil {
				t.Fatal(err)
			}
			h := s.res.hier[ctlPids]
			var in string
			for _, line := range strings.Split(string(b), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 && (h.v2 && parts[0] == "0" || !h.v2 && slices.Contains(strings.Split(parts[1], ","), ctlPids)) {
					in = filepath.Join(h.mount, parts[2])
				}
			}
			if !strings.HasPrefix(in, want) {
				t.Errorf("prepared sandbox %d is in pids cgroup %q, want one under %q (its tenant's)", pid, in, want)
			}
		}
	})
}

// TestPreparingStopsOnClose: Close ends the prepared sandboxes and the
// goroutines that prepare them.
func TestPreparingStopsOnClose(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	if _, code, err, _ := startIn(t, s, ws, Run{}, "true"); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	waitPrepared(t, s, DefaultPrepared)
	pids := preparedPids(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.pool.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the preparing goroutines still run 5 s after Close")
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("prepared sandbox %d still runs after Close", pid)
		}
	}
	// A command after Close runs in a sandbox set up for it.
	if out, code, err, _ := startIn(t, s, ws, Run{}, "echo ok"); code != 0 || err != nil || out != "ok\n" {
		t.Fatalf("after Close: %q, exit %d, %v", out, code, err)
	}
	if n := s.pool.ready(); n != 0 {
		t.Errorf("%d sandboxes prepared after Close, want none", n)
	}
}

// TestPreparedSandboxFollowsHiddenPaths: a hidden path that is a symbolic
// link retargeted after sandboxes were prepared (a ConfigMap updated in
// place) is hidden by what it now leads to: the prepared sandboxes built
// while it led elsewhere are not used.
func TestPreparedSandboxFollowsHiddenPaths(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cfg")
	for _, d := range []string{"v1", "v2"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, d, "secret"), []byte("SECRET-"+d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o755)
	link := filepath.Join(dir, "current")
	if err := os.Symlink("v1", link); err != nil {
		t.Fatal(err)
	}
	s := newBox(t, Config{Hidden: []string{link}, ReadOnly: []string{dir}})
	defer s.Close()
	ws := workspace(t, s)
	show := "cat " + dir + "/v1/secret " + dir + "/v2/secret 2>/dev/null; true"
	if out, _, err, _ := startIn(t, s, ws, Run{}, show); err != nil || out != "SECRET-v2" {
		t.Fatalf("before: %q, %v; want v2 shown and v1 hidden", out, err)
	}
	waitPrepared(t, s, DefaultPrepared)
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("v2", link); err != nil {
		t.Fatal(err)
	}
	if out, _, err, _ := startIn(t, s, ws, Run{}, show); err != nil || out != "SECRET-v1" {
		t.Fatalf("after the link moved to v2: %q, %v; want v1 shown and v2 hidden", out, err)
	}
}

// TestPreparedSandboxFollowsMounts: a bind mount made after sandboxes were
// prepared, which shows a hidden file under another name, is seen by the
// next calls (the mount table is read again once it changed): the file stays
// hidden under the new name too.
func TestPreparedSandboxFollowsMounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a bind mount needs root")
	}
	dir := filepath.Join(t.TempDir(), "shown")
	for _, d := range []string{"real", "again"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Dir(dir), 0o755)
	os.Chmod(filepath.Dir(filepath.Dir(dir)), 0o755)
	os.WriteFile(filepath.Join(dir, "real", "secret"), []byte("SECRET"), 0o644)
	os.WriteFile(filepath.Join(dir, "real", "other"), []byte("other"), 0o644)
	s := newBox(t, Config{Hidden: []string{filepath.Join(dir, "real", "secret")}, ReadOnly: []string{dir}})
	defer s.Close()
	ws := workspace(t, s)
	show := "cat " + dir + "/real/secret " + dir + "/again/secret " + dir + "/again/other 2>/dev/null; true"
	if out, _, err, _ := startIn(t, s, ws, Run{}, show); err != nil || out != "" {
		t.Fatalf("before the bind mount: %q, %v; want nothing shown", out, err)
	}
	waitPrepared(t, s, DefaultPrepared)
	again := filepath.Join(dir, "again")
	if err := syscall.Mount(filepath.Join(dir, "real"), again, "", syscall.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(again, syscall.MNT_DETACH)
	// The first call after the mount, and the later ones, whose sandboxes
	// were prepared after it.
	for i := range DefaultPrepared + 2 {
		if out, _, err, _ := startIn(t, s, ws, Run{}, show); err != nil || out != "other" {
			t.Fatalf("call %d after %s was bound on %s: %q, %v; want the secret hidden there too, the other file shown", i+1, filepath.Join(dir, "real"), again, out, err)
		}
		waitPrepared(t, s, DefaultPrepared)
	}
}

// TestPreparedUnprivileged runs this file's tests again as a node that is
// not root (TestUnprivileged's uid): prepared sandboxes there bind the
// workspace by path, checked by device and inode, when the call comes, and
// move into their view only then.
func TestPreparedUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		return // this is the unprivileged run, or the suite runs unprivileged already
	}
	tmp, err := os.MkdirTemp("", "callsheet-sandbox-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	os.Chown(tmp, unprivilegedUID, unprivilegedUID)
	cmd := exec.Command("/proc/self/exe", "-test.count=1", "-test.v",
		"-test.run=^(TestPreparedSandboxServesOneCall|TestPreparedSandboxesDieWithTheNode|TestPreparedSandboxesCount|TestPreparingStopsOnClose|TestPreparedSandboxFollowsHiddenPaths)$")
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + tmp, HelperEnv + "=self"}
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivilegedUID, Gid: unprivilegedUID}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", unprivilegedUID, out)
	if err != nil || !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("the tests as uid %d: %v\n%s", unprivilegedUID, err, out)
	}
}

// preparedBox returns a sandbox that ran one command in workspace ws and
// has DefaultPrepared sandboxes prepared since.
func preparedBox(t *testing.T) (*Sandbox, string) {
	t.Helper()
	s := newBox(t, Config{})
	ws := workspace(t, s)
	if _, code, err, _ := startIn(t, s, ws, Run{}, "true"); code != 0 || err != nil {
		s.Close()
		t.Fatalf("exit %d, %v", code, err)
	}
	waitPrepared(t, s, DefaultPrepared)
	return s, ws
}

// ppid returns the parent pid of process pid, from /proc.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("/proc/%d/stat: %q", pid, b)
	}
	return n
}

// TestPreparedSandboxesComeFromTheSpawner: the node does not fork itself to
// prepare a sandbox (a fork copies its page tables, and makes each page it
// writes next fault); the spawner, a small process of the helper's binary,
// starts them.
func TestPreparedSandboxesComeFromTheSpawner(t *testing.T) {
	s, ws := preparedBox(t)
	defer s.Close()
	spawners := map[int]bool{}
	for _, pid := range preparedPids(s) {
		parent := ppid(t, pid)
		if parent == os.Getpid() {
			t.Fatalf("prepared sandbox %d is the node's child: the node forked itself to start it", pid)
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", parent))
		if args := strings.Split(string(cmdline), "\x00"); len(args) < 2 || args[1] != SpawnerArg {
			t.Errorf("prepared sandbox %d's parent %d runs %q, want the spawner", pid, parent, args)
		}
		if ppid(t, parent) != os.Getpid() {
			t.Errorf("the spawner %d is not the node's child", parent)
		}
		spawners[parent] = true
	}
	// A hostile command cannot reach the spawner: its pid names nothing
	// in the sandbox's PID namespace.
	for sp := range spawners {
		out, _, err, _ := startIn(t, s, ws, Run{}, fmt.Sprintf("kill -9 %d 2>&1; kill -STOP %d 2>&1; echo done", sp, sp))
		if err != nil || !strings.HasSuffix(out, "done\n") {
			t.Fatalf("%q, %v", out, err)
		}
		if !alive(sp) {
			t.Fatalf("a sandboxed command killed the spawner %d: %q", sp, out)
		}
		if _, code, err, _ := startIn(t, s, ws, Run{}, "true"); code != 0 || err != nil {
			t.Fatalf("after the attempt: exit %d, %v", code, err)
		}
	}
}

// TestSpawnerKilled: when the spawner dies (kill -9 from outside), the
// sandboxes it prepared die with it, and commands still run: nothing a
// call asked for is lost.
func TestSpawnerKilled(t *testing.T) {
	s, ws := preparedBox(t)
	defer s.Close()
	pids := preparedPids(s)
	spawner := ppid(t, pids[0])
	if err := syscall.Kill(spawner, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("prepared sandbox %d still runs 5 s after its spawner was killed", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for i := range 4 {
		if out, code, err, _ := startIn(t, s, ws, Run{}, "echo ok"); code != 0 || err != nil || out != "ok\n" {
			t.Fatalf("command %d after the spawner died: %q, exit %d, %v", i, out, code, err)
		}
	}
}

// TestSpawnerStopped: a spawner that stops answering (SIGSTOP) is ended
// after spawnTimeout, and commands still run, in sandboxes the node starts.
func TestSpawnerStopped(t *testing.T) {
	defer func(d time.Duration) { spawnTimeout = d }(spawnTimeout)
	spawnTimeout = 500 * time.Millisecond
	s, ws := preparedBox(t)
	defer s.Close()
	spawner := ppid(t, preparedPids(s)[0])
	if err := syscall.Kill(spawner, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(spawner, syscall.SIGCONT)
	for i := range 5 {
		start := time.Now()
		out, code, err, _ := startIn(t, s, ws, Run{}, "echo ok")
		if code != 0 || err != nil || out != "ok\n" {
			t.Fatalf("command %d with the spawner stopped: %q, exit %d, %v", i, out, code, err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("command %d took %s", i, took)
		}
	}
	if err := s.pool.spawner.gone(); err == nil {
		t.Errorf("the stopped spawner is still taken for alive")
	}
}

// TestFirstCallFromTheSpawner: a tenant's first call, with no sandbox
// prepared for it yet, runs in one the spawner starts on demand: the node
// does not fork itself for it either.
func TestFirstCallFromTheSpawner(t *testing.T) {
	s := newBox(t, Config{})
	defer s.Close()
	ws := workspace(t, s)
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	p, err := s.Start(Cmd{Args: []string{"bash", "-c", "sleep 0.3; echo ok"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: out, Stderr: out}, Run{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	parent := ppid(t, p.Pid())
	code, _, werr := p.Wait()
	if ferr := p.Finish(); code != 0 || werr != nil || ferr != nil {
		t.Fatalf("exit %d, %v, %v", code, werr, ferr)
	}
	if b, _ := os.ReadFile(out.Name()); string(b) != "ok\n" {
		t.Fatalf("output %q", b)
	}
	if parent == os.Getpid() {
		t.Fatalf("the first call's sandbox %d is the node's child: the node forked itself to start it", p.Pid())
	}
}

// TestPreparedSandboxKilledMidCall: a prepared sandbox killed from outside
// (SIGKILL to its first process, as the OOM killer or an operator would)
// after it said it started the call ends the call as killed, promptly: the
// call ran, so the caller is not told it did not (ErrSetup would let a
// caller treat it as never started), nothing it started lives on, and it
// ran once.
func TestPreparedSandboxKilledMidCall(t *testing.T) {
	s := newBox(t, Config{})
	defer s.Close()
	ws := workspace(t, s)
	startIn(t, s, ws, Run{}, "true") // the pool prepares for the runs it has seen
	waitPrepared(t, s, 1)
	served := s.pool.served
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	const marker = "31.4159"
	p, err := s.Start(Cmd{Args: []string{"bash", "-c", "echo ran >> marks; sleep " + marker}, Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin"}, Stdout: out, Stderr: out}, Run{Workspace: ws})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if s.pool.served != served+1 {
		t.Fatalf("the call did not run in a prepared sandbox (%d served, want %d)", s.pool.served, served+1)
	}
	marks := filepath.Join(ws, "marks")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(marks); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatalf("kill the sandbox's first process %d: %v", p.Pid(), err)
	}
	type waited struct {
		code   int
		exited bool
		err    error
	}
	done := make(chan waited, 1)
	go func() {
		code, exited, err := p.Wait()
		done <- waited{code, exited, err}
	}()
	select {
	case w := <-done:
		if w.err != nil || w.exited || w.code != 128+int(syscall.SIGKILL) {
			t.Errorf("Wait after the kill: code %d, exited %v, %v; want killed by SIGKILL (code 137)", w.code, w.exited, w.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return within 10 s of the sandbox's kill")
	}
	if err := p.Finish(); errors.Is(err, ErrSetup) {
		t.Errorf("Finish after a kill mid-call: %v; the command ran, so it must not read as a setup failure", err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for left := sleepers(marker); len(left) > 0; left = sleepers(marker) {
		if time.Now().After(deadline) {
			t.Fatalf("processes the call started outlived its sandbox: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := os.ReadFile(marks); string(b) != "ran\n" {
		t.Errorf("the command ran %q, want once", b)
	}
}

// sleepers lists the pids of processes whose command line holds arg.
func sleepers(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(b, []byte(arg)) && !bytes.Contains(b, []byte("bash")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
