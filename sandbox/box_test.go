package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"
)

// newBox builds a sandbox from cfg and fails the test when it cannot run
// commands here.
func newBox(t *testing.T, cfg Config) *Sandbox {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("the sandbox cannot run commands on this machine: %v\n%v", err, s.Report())
	}
	return s
}

// workspace makes a workspace the sandbox's uid may write.
func workspace(t *testing.T, s *Sandbox) string {
	t.Helper()
	ws := t.TempDir()
	uid, gid := s.Owner("")
	if err := os.Chown(ws, uid, gid); err != nil {
		t.Fatal(err)
	}
	return ws
}

// runIn runs script with bash in s, in workspace ws, and returns its
// combined output, exit code and the sandbox's setup error.
func runIn(t *testing.T, s *Sandbox, ws string, r Run, script string, args ...string) (string, int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{"-c", script, "bash"}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"}
	cmd.Dir = ws
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if r.Workspace == "" {
		r.Workspace = ws
	}
	a, err := s.Attach(cmd, r)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	if err := cmd.Start(); err != nil {
		a.Finish()
		t.Fatalf("start: %v", err)
	}
	a.Started()
	werr := cmd.Wait()
	ferr := a.Finish()
	var exit *exec.ExitError
	if werr != nil && !errors.As(werr, &exit) {
		t.Fatalf("wait: %v", werr)
	}
	return out.String(), cmd.ProcessState.ExitCode(), ferr
}

// goneWithin waits until no process holds marker, killing any left.
func goneWithin(t *testing.T, marker string, d time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := procs.Marked(marker)
		if len(left) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sleepMark() string { return fmt.Sprintf("40.%09d", rand.IntN(1e9)) }

// TestReport: on this machine (Linux with user namespaces, Landlock and
// seccomp) every boundary is available, and each line says what it does.
func TestReport(t *testing.T) {
	s := newBox(t, Config{})
	for _, b := range s.Report() {
		t.Log(b)
		if !b.Available {
			t.Errorf("%s unavailable here: %s", b.Name, b.Detail)
		}
		if !strings.HasPrefix(b.String(), b.Name+": available: ") {
			t.Errorf("line %q, want %q...", b, b.Name+": available: ")
		}
	}
	if got := len(s.Report()); got != len(Boundaries) {
		t.Errorf("%d boundaries reported, want %d", got, len(Boundaries))
	}
	host := newBox(t, Config{Network: NetworkHost})
	if b := host.Report().Get(BoundaryNetwork); b.Available || b.Required {
		t.Errorf("network with sandbox.network host: %+v, want off and not required", b)
	}
}

// TestReady plays a kernel without a boundary: refused, unless accepted.
func TestReady(t *testing.T) {
	s := newBox(t, Config{})
	weak := *s
	weak.report = slices.Clone(s.report)
	for i := range weak.report {
		if weak.report[i].Name == BoundaryPID {
			weak.report[i].Available, weak.report[i].Detail = false, "test kernel"
		}
	}
	err := weak.Ready()
	if !errors.Is(err, ErrWeaker) || !strings.Contains(err.Error(), "pid (test kernel)") || !strings.Contains(err.Error(), `"accept_weaker": ["pid"]`) {
		t.Errorf("Ready()=%v, want ErrWeaker naming pid and how to accept it", err)
	}
	for i := range weak.report {
		if weak.report[i].Name == BoundaryPID {
			weak.report[i].Accepted = true
		}
	}
	if err := weak.Ready(); err != nil {
		t.Errorf("accepted: Ready()=%v, want nil", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"network", Config{Network: "bridge"}, `network "bridge"`},
		{"uid", Config{UID: -1}, "uid -1"},
		{"read-only", Config{ReadOnly: []string{"rel"}}, `read-only path "rel"`},
		{"hidden", Config{Hidden: []string{"/"}}, `hidden path "/"`},
		{"limits", Config{Limits: Limits{Processes: -1}}, "negative"},
		{"accept", Config{AcceptWeaker: []string{"nothing"}}, `accept_weaker "nothing"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate()=%v, want ErrInvalidConfig saying %q", err, tc.want)
			}
		})
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}

// TestNetworkNamespace: nothing the host listens on is reachable (TCP to its
// loopback, UDP to it, an abstract UNIX socket), while the sandbox's own
// loopback works; with NetworkHost the host's TCP listener answers.
func TestNetworkNamespace(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	abstract := fmt.Sprintf("callsheet-sandbox-test-%d", rand.Int64())
	al, err := net.Listen("unix", "@"+abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	tcpPort := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	udpPort := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)

	out, _, err := runIn(t, s, ws, Run{}, `exec 3<>/dev/tcp/127.0.0.1/$1 && echo tcp-connected
echo probe > /dev/udp/127.0.0.1/$2
perl -MSocket -e 'socket(S, AF_UNIX, SOCK_STREAM, 0) or die; connect(S, pack_sockaddr_un("\0$ARGV[0]")) and print "abstract-connected\n"' $3
perl -MIO::Socket::INET -e '$l = IO::Socket::INET->new(Listen => 1, LocalAddr => "127.0.0.1:0") or die $!; print "own-loopback\n" if IO::Socket::INET->new(PeerAddr => "127.0.0.1:" . $l->sockport)'
true`, tcpPort, udpPort, abstract)
	if err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"tcp-connected", "abstract-connected"} {
		if strings.Contains(out, leak) {
			t.Errorf("the sandbox reached the host (%s):\n%s", leak, out)
		}
	}
	if !strings.Contains(out, "own-loopback") {
		t.Errorf("the sandbox's own loopback does not work:\n%s", out)
	}
	udp.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, _, err := udp.ReadFrom(make([]byte, 16)); err == nil {
		t.Errorf("a %d-byte UDP datagram reached the host", n)
	}

	host := newBox(t, Config{Network: NetworkHost})
	out, _, err = runIn(t, host, ws, Run{}, `exec 3<>/dev/tcp/127.0.0.1/$1 && echo tcp-connected`, tcpPort)
	if err != nil || !strings.Contains(out, "tcp-connected") {
		t.Errorf("network host: %q %v, want the host's listener reached", out, err)
	}
}

// TestPIDNamespace: the sandbox sees only its own processes; everything the
// command starts, setsid or not, is gone when it ends.
func TestPIDNamespace(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	m1, m2 := sleepMark(), sleepMark()
	out, code, err := runIn(t, s, ws, Run{}, `kill -0 $1 2>/dev/null && echo test-visible
ls -d /proc/[0-9]* | wc -l
setsid sleep $2 </dev/null >/dev/null 2>&1 &
( nohup sleep $3 </dev/null >/dev/null 2>&1 & ) &
sleep 0.1; echo started`, strconv.Itoa(os.Getpid()), m1, m2)
	if err != nil || code != 0 {
		t.Fatalf("%q %d %v", out, code, err)
	}
	if strings.Contains(out, "test-visible") {
		t.Errorf("the sandbox sees the test process:\n%s", out)
	}
	if n, _ := strconv.Atoi(strings.Fields(out)[0]); n > 6 {
		t.Errorf("%d processes visible in the sandbox, want only its own few:\n%s", n, out)
	}
	for _, m := range []string{m1, m2} {
		if !goneWithin(t, m, 5*time.Second) {
			t.Errorf("sleep %s outlived the command", m)
		}
	}
}

// TestMountView: system directories are read-only, the workspace and /tmp
// writable, a hidden path absent even under a read-only path shown, other
// entries of that path there; the private /tmp is gone afterwards.
func TestMountView(t *testing.T) {
	extra, err := os.MkdirTemp("", "callsheet-sandbox-extra-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(extra)
	os.Chmod(extra, 0o755)
	for _, d := range []string{"shown", "secret"} {
		os.MkdirAll(filepath.Join(extra, d), 0o755)
		os.WriteFile(filepath.Join(extra, d, "f.txt"), []byte(d+"\n"), 0o644)
	}
	outside := t.TempDir()
	s := newBox(t, Config{ReadOnly: []string{extra}, Hidden: []string{filepath.Join(extra, "secret"), outside}})
	ws := workspace(t, s)
	out, code, err := runIn(t, s, ws, Run{}, `cat $1/shown/f.txt
test -e $1/secret && echo secret-visible
ls $1
{ echo x > $1/shown/new; } 2>/dev/null || echo shown-read-only
{ echo x > /usr/callsheet-test; } 2>/dev/null || echo usr-read-only
{ echo x > /callsheet-test; } 2>/dev/null || echo root-read-only
test -e $2 && echo outside-visible
echo w > in-workspace && echo t > /tmp/in-tmp && echo written
test -e /sys/kernel && echo sys-visible
true`, extra, outside)
	if err != nil || code != 0 {
		t.Fatalf("%q %d %v", out, code, err)
	}
	want := "shown\nshown\nshown-read-only\nusr-read-only\nroot-read-only\nwritten\n"
	if out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "in-workspace")); err != nil || string(b) != "w\n" {
		t.Errorf("workspace file: %q %v", b, err)
	}
	if m, _ := filepath.Glob(filepath.Join(os.TempDir(), "callsheet-sandbox-*", "tmp", "in-tmp")); len(m) > 0 {
		t.Errorf("the private /tmp outlived the run: %v", m)
	}
}

// TestUser: the command runs as the sandbox's uid, with no capability, and
// what it writes in the workspace is that uid's on the host.
func TestUser(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `id -u; grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status | awk '{print $2}' | sort -u; touch mine`)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := s.Owner("")
	if want := fmt.Sprintf("%d\n0000000000000000\n", uid); out != want {
		t.Errorf("output %q, want %q (the uid, every capability set empty)", out, want)
	}
	fi, err := os.Stat(filepath.Join(ws, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Sys().(*syscall.Stat_t).Uid; int(got) != uid {
		t.Errorf("the file the command made is uid %d's on the host, want %d", got, uid)
	}
	if os.Geteuid() == 0 && uid == 0 {
		t.Errorf("a root node runs commands as root")
	}
}

// TestUserNamed: the command's uid and gid have names, "sandbox" where the
// host's files have none for them, in a sandbox set up for the call and in
// a prepared one; the files are the host's but for that line, read-only,
// and nothing of how they were made is left in the view.
func TestUserNamed(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	uid, gid := s.Owner("")
	hostLines := func(name string) int {
		b, err := os.ReadFile("/etc/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("\n"))
	}
	name, group := sandboxUser, sandboxUser
	added := 1
	if uid == os.Geteuid() {
		// A node that is not root runs commands as itself, named already.
		name, group, added = "", "", 0
	}
	script := `id -un; id -gn; grep -c . /etc/passwd; grep -c . /etc/group
{ echo x >> /etc/passwd; } 2>/dev/null || echo passwd-read-only
ls -A / | grep -x -e .passwd -e .group; true`
	for _, how := range []struct {
		name string
		run  func() (string, int, error)
	}{
		{"attached", func() (string, int, error) { return runIn(t, s, ws, Run{}, script) }},
		{"prepared", func() (string, int, error) {
			out, code, err, _ := startIn(t, s, ws, Run{}, script)
			return out, code, err
		}},
	} {
		out, code, err := how.run()
		if err != nil || code != 0 {
			t.Fatalf("%s: %q %d %v", how.name, out, code, err)
		}
		if name == "" {
			u, g := "", ""
			if f := strings.Fields(out); len(f) >= 2 {
				u, g = f[0], f[1]
			}
			name, group = u, g
		}
		want := fmt.Sprintf("%s\n%s\n%d\n%d\npasswd-read-only\n", name, group, hostLines("passwd")+added, hostLines("group")+added)
		if out != want {
			t.Errorf("%s (uid %d, gid %d): output\n%s\nwant\n%s", how.name, uid, gid, out, want)
		}
	}
}

// TestLimits: each limit bites.
func TestLimits(t *testing.T) {
	s := newBox(t, Config{Limits: Limits{Processes: 32, FileSize: 1 << 20, Memory: 256 << 20, CPU: time.Second}})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `{ head -c 4M /dev/zero > big; } 2>/dev/null; echo "size $(stat -c %s big)"
perl -e '$x = "a" x (512 << 20); print "allocated\n"' 2>/dev/null || echo "memory refused"
timeout 10 sh -c 'while :; do :; done'; echo "spin status $?"
perl -e 'my $n = 0; for (1 .. 100) { my $p = fork; last unless defined $p; if (!$p) { sleep 20; exit } $n++ } print "forked $n\n"'`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "size 1048576\n") {
		t.Errorf("file size not capped at 1 MiB:\n%s", out)
	}
	if m := regexp.MustCompile(`forked (\d+)`).FindStringSubmatch(out); m == nil {
		t.Errorf("no fork count:\n%s", out)
	} else if n, _ := strconv.Atoi(m[1]); n >= 32 {
		t.Errorf("forked %d processes, want fewer than the limit of 32", n)
	}
	if !strings.Contains(out, "memory refused") {
		t.Errorf("a 512 MiB allocation passed the 256 MiB limit:\n%s", out)
	}
	if !strings.Contains(out, "spin status 137") && !strings.Contains(out, "spin status 152") {
		t.Errorf("a CPU spin was not stopped by the 1 s CPU limit (SIGXCPU or SIGKILL):\n%s", out)
	}
}

// TestSeccomp: namespace creation, mounts, keyrings and foreign socket
// families are refused inside.
func TestSeccomp(t *testing.T) {
	s := newBox(t, Config{})
	ws := workspace(t, s)
	out, _, err := runIn(t, s, ws, Run{}, `unshare -U true 2>&1 | grep -o 'Operation not permitted'
unshare -r true 2>&1 | grep -o 'Operation not permitted'
perl -e 'socket(S, 40, 1, 0) or print "vsock: $!\n"'
perl -e 'socket(S, 2, 1, 0) and print "inet ok\n"'
perl -e 'syscall(250, 0, 0, 0, 0, 0) == -1 and print "keyctl: $!\n"'
true`)
	if err != nil {
		t.Fatal(err)
	}
	want := "Operation not permitted\nOperation not permitted\nvsock: Address family not supported by protocol\ninet ok\nkeyctl: Operation not permitted\n"
	if runtime.GOARCH == "amd64" && out != want {
		t.Errorf("output:\n%s\nwant:\n%s", out, want)
	}
}

// TestWorkspaceSwapped: the workspace is bound from the directory opened at
// Attach, not from its path at start: a symlink swapped in between leads
// nowhere else.
func TestWorkspaceSwapped(t *testing.T) {
	s := newBox(t, Config{})
	base := t.TempDir()
	ws, moved, elsewhere := filepath.Join(base, "ws"), filepath.Join(base, "moved"), filepath.Join(base, "elsewhere")
	for _, d := range []string{ws, elsewhere} {
		os.Mkdir(d, 0o755)
		uid, gid := s.Owner("")
		os.Chown(d, uid, gid)
	}
	cmd := exec.Command("bash", "-c", "echo here > marker")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = ws
	a, err := s.Attach(cmd, Run{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	// Swap: the workspace path now names a symlink to another directory.
	if err := os.Rename(ws, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, ws); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.Started()
	cmd.Wait()
	ferr := a.Finish()
	if _, err := os.Stat(filepath.Join(elsewhere, "marker")); err == nil {
		t.Errorf("the command ran in the symlink's target: %q %v", out.String(), ferr)
	}
	// A root node moved the very directory it opened in place (the
	// command ran there); one that is not root refuses the swapped path.
	if os.Geteuid() == 0 {
		if b, err := os.ReadFile(filepath.Join(moved, "marker")); err != nil || string(b) != "here\n" {
			t.Errorf("marker in the opened directory: %q %v (output %q, %v)", b, err, out.String(), ferr)
		}
	} else if !errors.Is(ferr, ErrSetup) {
		t.Errorf("Finish()=%v, want ErrSetup for a swapped workspace", ferr)
	}
}

// TestWorkspaceOpened: given the directory already opened (Run.Opened),
// the sandbox binds that one, whatever the path names by the time it
// starts.
func TestWorkspaceOpened(t *testing.T) {
	s := newBox(t, Config{})
	base := t.TempDir()
	ws, moved, elsewhere := filepath.Join(base, "ws"), filepath.Join(base, "moved"), filepath.Join(base, "elsewhere")
	uid, gid := s.Owner("")
	for _, d := range []string{ws, elsewhere} {
		os.Mkdir(d, 0o755)
		os.Chown(d, uid, gid)
	}
	opened, err := os.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer opened.Close()
	if err := os.Rename(ws, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, ws); err != nil {
		t.Fatal(err)
	}
	out, code, err := runIn(t, s, ws, Run{Opened: opened}, "echo here > marker")
	if _, serr := os.Stat(filepath.Join(elsewhere, "marker")); serr == nil {
		t.Errorf("the command ran in the symlink's target: %q %d %v", out, code, err)
	}
	if os.Geteuid() == 0 {
		if b, rerr := os.ReadFile(filepath.Join(moved, "marker")); rerr != nil || string(b) != "here\n" {
			t.Errorf("marker in the opened directory: %q %v (output %q, %v)", b, rerr, out, err)
		}
	} else if !errors.Is(err, ErrSetup) {
		t.Errorf("setup error %v, want ErrSetup: the path no longer names the opened directory", err)
	}
}

// TestDiesWithTheNode: when the process that started the sandbox dies by
// SIGKILL, everything in the sandbox dies with it. A child of this test
// binary plays the node.
func TestDiesWithTheNode(t *testing.T) {
	if os.Getenv("CALLSHEET_TEST_NODE") != "" {
		return // the child's own run of this test
	}
	m := sleepMark()
	child := exec.Command("/proc/self/exe", "-test.run=^TestPlayNode$")
	child.Env = playerEnv(t, "CALLSHEET_TEST_NODE="+m)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for len(procs.Marked(m)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the sandboxed processes did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	child.Process.Kill()
	child.Wait()
	if !goneWithin(t, m, 5*time.Second) {
		t.Errorf("sandboxed processes (sleep %s) outlived the node's SIGKILL", m)
	}
}

// playerEnv is the environment of a child of this test binary that plays a
// node: this process's, plus kv, with TMPDIR in a temporary directory of t.
// The child is killed, so its own t.TempDir is never removed by the child:
// it goes with t's.
func playerEnv(t *testing.T, kv ...string) []string {
	t.Helper()
	return append(append(os.Environ(), kv...), "TMPDIR="+t.TempDir())
}

// TestPlayNode is the node of TestDiesWithTheNode: it starts a sandboxed
// command that leaves a setsid child and waits to be killed.
func TestPlayNode(t *testing.T) {
	m := os.Getenv("CALLSHEET_TEST_NODE")
	if m == "" {
		t.Skip("run by TestDiesWithTheNode")
	}
	s := newBox(t, Config{})
	ws := workspace(t, s)
	cmd := exec.Command("bash", "-c", "setsid sleep "+m+" </dev/null >/dev/null 2>&1 & sleep "+m)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = ws
	a, err := s.Attach(cmd, Run{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.Started()
	cmd.Wait()
}

// TestUnprivileged runs this file's tests again as an unprivileged user
// (unprivilegedUID, no account), as a node that is not root: the sandbox then rests on an
// unprivileged user namespace, maps the node's own uid, and checks the
// workspace it binds by device and inode rather than cloning its mount.
//
// The uid is one no other test runs as: RLIMIT_NPROC counts every process
// and thread of a uid, and TestLimits caps it at 32, so a node another
// package's test runs as nobody (65534) at the same time left the sandbox
// helper no room to start ("stopped while it was being set up", seen in a
// full run).
func TestUnprivileged(t *testing.T) {
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
		"-test.run=^(TestReport|TestNetworkNamespace|TestPIDNamespace|TestMountView|TestUser|TestLimits|TestSeccomp|TestWorkspaceSwapped|TestWorkspaceOpened|TestDiesWithTheNode|TestWeakerAccepted|TestCountedBudget|TestSetIDBitsNeverSet|TestNothingInherited|TestSandboxedProcessesGoFirst|TestCgroups|TestHiddenByWhatTheyAre)$")
	// The helper is this binary, as in TestPreparedUnprivileged: building it
	// from the sources as this uid would first download the module's
	// dependencies into a module cache of its own under tmp.
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + tmp, "HOME=" + tmp, HelperEnv + "=self"}
	cmd.Dir = tmp
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: unprivilegedUID, Gid: unprivilegedUID}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid %d:\n%s", unprivilegedUID, out)
	if err != nil || !bytes.Contains(out, []byte("PASS")) {
		t.Fatalf("the tests as uid %d: %v\n%s", unprivilegedUID, err, out)
	}
}

// unprivilegedUID is the uid TestUnprivileged runs the tests as.
const unprivilegedUID = 65531

// TestWeakerAccepted plays a kernel without the namespaces whose lack the
// config accepts: commands run under the Landlock helper with the limits,
// writes still confined to the workspace and a private temporary directory.
func TestWeakerAccepted(t *testing.T) {
	s := newBox(t, Config{Limits: Limits{FileSize: 1 << 20}})
	weak := *s
	weak.ns = false
	weak.report = slices.Clone(s.report)
	for i := range weak.report {
		switch weak.report[i].Name {
		case BoundaryNetwork, BoundaryPID, BoundaryMount:
			weak.report[i].Available, weak.report[i].Accepted = false, true
		}
	}
	if err := weak.Ready(); err != nil {
		t.Fatal(err)
	}
	ws := workspace(t, &weak)
	outside := t.TempDir()
	out, code, err := runIn(t, &weak, ws, Run{}, `{ echo x > $1/escaped; } 2>/dev/null || echo refused
echo t > "$TMPDIR/t" && echo tmp-ok
{ head -c 4M /dev/zero > big; } 2>/dev/null; echo "size $(stat -c %s big)"`, outside)
	if err != nil || code != 0 {
		t.Fatalf("%q %d %v", out, code, err)
	}
	if out != "refused\ntmp-ok\nsize 1048576\n" {
		t.Errorf("output %q, want the write outside refused, TMPDIR writable, the file size capped", out)
	}
}

// TestDeadlineWithoutTheNode: a sandbox given a deadline ends by itself
// then, even when the node that started it cannot act (it is stopped, as a
// node partitioned past its lease is): every process of the sandbox,
// setsid or not, is gone (docs/spec.md §7: a fleet cap's slot must not
// outlive its call).
func TestDeadlineWithoutTheNode(t *testing.T) {
	if os.Getenv("CALLSHEET_TEST_NODE") != "" {
		return // the child's own run of this test
	}
	m := sleepMark()
	child := exec.Command("/proc/self/exe", "-test.run=^TestPlayStoppedNode$")
	child.Env = playerEnv(t, "CALLSHEET_TEST_NODE="+m)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		child.Process.Signal(syscall.SIGCONT)
		child.Process.Kill()
		child.Wait()
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(procs.Marked(m)) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the sandboxed processes did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The node stops; its call's deadline (2 s after it started) passes.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if !goneWithin(t, m, 10*time.Second) {
		t.Errorf("sandboxed processes (sleep %s) outlived their deadline while the node was stopped", m)
	}
}

// TestPlayStoppedNode is the node of TestDeadlineWithoutTheNode: it starts
// a sandboxed command with a deadline 2 s away, no context deadline of its
// own, and waits.
func TestPlayStoppedNode(t *testing.T) {
	m := os.Getenv("CALLSHEET_TEST_NODE")
	if m == "" {
		t.Skip("run by TestDeadlineWithoutTheNode")
	}
	s := newBox(t, Config{})
	ws := workspace(t, s)
	cmd := exec.Command("bash", "-c", "setsid sleep "+m+" </dev/null >/dev/null 2>&1 & sleep "+m)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Dir = ws
	a, err := s.Attach(cmd, Run{Workspace: ws, Deadline: time.Now().Add(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.Started()
	cmd.Wait()
}

// TestReadOnlyPathTheSandboxCannotReach: a sandbox.read_only path below a
// directory the sandbox's uid may not search makes the probe report the
// mount boundary unavailable, with the path and what to do, instead of
// hanging the probe (the helper once spun for ever there, so the node never
// listened).
func TestReadOnlyPathTheSandboxCannotReach(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only a root node runs commands as another uid, which a 0700 directory shuts out")
	}
	closed := filepath.Join(t.TempDir(), "closed")
	if err := os.MkdirAll(filepath.Join(closed, "ro"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	done := make(chan *Sandbox, 1)
	go func() {
		s, err := New(Config{ReadOnly: []string{filepath.Join(closed, "ro")}})
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	var s *Sandbox
	select {
	case s = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("probing a sandbox with an unreachable read-only path did not finish within 2 minutes")
	}
	if s == nil {
		return
	}
	if err := s.Ready(); err == nil {
		t.Fatal("Ready() = nil, want the mount boundary unavailable")
	}
	m := s.Report().Get(BoundaryMount)
	if m.Available || !strings.Contains(m.Detail, filepath.Join(closed, "ro")) || !strings.Contains(m.Detail, "sandbox.read_only") {
		t.Fatalf("mount boundary = %+v, want unavailable, naming the path and sandbox.read_only", m)
	}
}
