package security

// Attacks on the sandbox boundary (docs/spec.md §10 "Sandbox"; docs/security.md
// "Sandbox"): each test is a shell call doing what a hostile model would,
// against a real node process, and checks from the outside (the test
// process, standing for the host) that nothing crossed.

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/signing"
)

// sandboxUID is the uid the default tenant's sandboxed commands run as on a
// root node by default (docs/spec.md §10); the suite runs as root in CI.
var sandboxUID, _ = sandbox.Config{}.IDs("default")

// connectPerl connects a socket of the kind in $ARGV[0] ("tcp", "mptcp",
// "udp", "unix", "abstract") to $ARGV[1] (a loopback port, or a socket
// path or abstract name), sends $ARGV[2] when given and prints what comes
// back first. It prints "connected" (or "sent" for UDP) only when the
// connection was made: what a hostile model would write, with nothing but
// the perl every Debian system has.
const connectPerl = `perl - "$@" <<'PERL'
use strict; use warnings; use Socket;
my ($kind, $target, $send) = @ARGV;
my ($s, $addr);
if ($kind eq "tcp" || $kind eq "mptcp") {
	socket($s, AF_INET, SOCK_STREAM, $kind eq "mptcp" ? 262 : 0) or die "socket: $!\n";
	$addr = pack_sockaddr_in($target, inet_aton("127.0.0.1"));
} elsif ($kind eq "udp") {
	socket($s, AF_INET, SOCK_DGRAM, 0) or die "socket: $!\n";
	$addr = pack_sockaddr_in($target, inet_aton("127.0.0.1"));
} else {
	socket($s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n";
	$addr = pack_sockaddr_un($kind eq "abstract" ? "\0$target" : $target);
}
connect($s, $addr) or die "connect: $!\n";
if ($kind eq "udp") { send($s, "callsheet-probe", 0) or die "send: $!\n"; print "sent\n"; exit 0 }
print "connected\n";
syswrite($s, $send) if defined $send;
local $SIG{ALRM} = sub { print "no answer\n"; exit 0 };
alarm 3;
my $line = <$s>;
print "answer: ", (defined $line ? $line : "(eof)\n");
PERL`

// shellText runs command with the shell tool in session and returns the
// text of its result (the output and "exit code N"), failing the test on any
// outcome but ok.
func shellText(t *testing.T, p *testnode.Proc, session, command string, extra ...map[string]any) string {
	t.Helper()
	args := map[string]any{"command": command}
	for _, e := range extra {
		for k, v := range e {
			args[k] = v
		}
	}
	tv := call(t, p, session, "shell", args)
	r := tv.Results[0]
	if r.Outcome != events.OutcomeOK {
		t.Fatalf("shell %q: outcome %s, want ok: %s", command, r.Outcome, resultText(r))
	}
	return resultText(r)
}

// natsPort reads the embedded NATS server's port from the node's start-up
// log ("embedded JetStream at nats://127.0.0.1:PORT").
func natsPort(t *testing.T, p *testnode.Proc) int {
	t.Helper()
	u, err := url.Parse(natsURL(t, p))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(u.Port())
	return port
}

// httpPort is the port of the node's API.
func httpPort(t *testing.T, p *testnode.Proc) int {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(p.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return n
}

// workspaceOf is the workspace directory of a session opened with the
// default workspace name (its id) for the default tenant.
func workspaceOf(p *testnode.Proc, session string) string {
	return filepath.Join(p.Data, "workspaces", "default", session)
}

// TestSandboxNetwork: no socket of any family reaches the host from a
// sandboxed shell: TCP and Multipath TCP to the node's NATS and HTTP ports,
// UDP to a loopback listener, a UNIX socket by path and an abstract one,
// both opened by this test (standing for any service on the host).
func TestSandboxNetwork(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")

	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	sockDir := t.TempDir()
	unixPath := filepath.Join(sockDir, "host.sock")
	abstract := fmt.Sprintf("callsheet-test-%d", rand.Int64())
	for _, addr := range []string{unixPath, "@" + abstract} {
		ln, err := net.Listen("unix", addr)
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
				c.Write([]byte("host service\n"))
				c.Close()
			}
		}()
	}

	nats, api := strconv.Itoa(natsPort(t, p)), strconv.Itoa(httpPort(t, p))
	get := `GET /healthz HTTP/1.0\r\n\r\n`
	for _, tc := range []struct{ name, args string }{
		{"tcp to nats", "tcp " + nats},
		{"mptcp to nats", "mptcp " + nats},
		{"tcp to http", "tcp " + api + ` "$(printf '` + get + `')"`},
		{"mptcp to http", "mptcp " + api + ` "$(printf '` + get + `')"`},
		{"unix by path", "unix " + unixPath},
		{"abstract unix", "abstract " + abstract},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := shellText(t, p, s, "set -- "+tc.args+"\n"+connectPerl)
			if strings.Contains(out, "connected") || strings.Contains(out, "answer:") {
				t.Errorf("a sandboxed shell reached the host (%s):\n%s", tc.name, out)
			}
		})
	}

	t.Run("udp", func(t *testing.T) {
		port := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
		out := shellText(t, p, s, "set -- udp "+port+"\n"+connectPerl)
		// Loopback delivery is synchronous: a datagram sent is queued
		// before the call ends.
		udp.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 64)
		if n, from, err := udp.ReadFrom(buf); err == nil {
			t.Errorf("a sandboxed shell sent a UDP datagram to the host: %q from %v (shell said %q)", buf[:n], from, out)
		}
	})
}

// TestSandboxCannotApproveItself: a background shell polls the node's API
// (over Multipath TCP, which Landlock alone does not cover, then plain TCP)
// for the session's pending approvals and approves the escalated call the
// model makes next. Nothing inside the sandbox reaches the API, so the
// approval stays pending and the escalated command never runs.
func TestSandboxCannotApproveItself(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	ws := workspaceOf(p, s)
	approver := `perl - "$@" <<'PERL' > approver.log 2>&1
use strict; use warnings; use Socket;
my ($port, $session) = @ARGV;
sub req {
	my ($method, $path, $body) = @_;
	my $s;
	socket($s, AF_INET, SOCK_STREAM, 262) or socket($s, AF_INET, SOCK_STREAM, 0) or return "socket: $!";
	connect($s, pack_sockaddr_in($port, inet_aton("127.0.0.1"))) or return "connect: $!";
	syswrite($s, "$method $path HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: " . length($body) . "\r\n\r\n$body");
	local $/; my $resp = <$s>; return defined $resp ? $resp : "(eof)";
}
my $last = "";
for my $i (1 .. 100) {
	$last = req("GET", "/v1/sessions/$session/approvals", "");
	if ($last =~ /"c1"/) {
		print "approving\n";
		print req("POST", "/v1/sessions/$session/approvals/c1", '{"decision":"allow","by":"sandbox"}'), "\n";
		last;
	}
	select(undef, undef, undef, 0.1);
}
print "done: $last\n";
PERL`
	bg := call(t, p, s, "shell", map[string]any{
		"command":    fmt.Sprintf("set -- %d %s\n%s", httpPort(t, p), s, approver),
		"background": true, "timeout_ms": 60000,
	})
	if r := bg.Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("background approver: %s %s", r.Outcome, resultText(r))
	}
	// The escalated call: always an ask (docs/spec.md §6).
	escaped := filepath.Join(t.TempDir(), "escaped")
	body := map[string]any{"id": "t-escalate", "calls": []any{map[string]any{"id": "c1", "name": "shell",
		"arguments": map[string]any{"command": "touch " + escaped, "escalate": true}}}}
	if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns?wait=0", body, nil); err != nil || code/100 != 2 {
		t.Fatalf("escalated turn: %d %v", code, err)
	}
	// Wait for the approver to give up (or to succeed), by its own log.
	deadline := time.Now().Add(60 * time.Second)
	var log []byte
	for {
		log, _ = os.ReadFile(filepath.Join(ws, "approver.log"))
		if strings.Contains(string(log), "done:") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the background approver did not finish; its log:\n%s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var list struct{ Approvals []events.ApprovalRequested }
	if code, err := p.Do("GET", "/v1/sessions/"+s+"/approvals", nil, &list); err != nil || code != http.StatusOK {
		t.Fatalf("approvals: %d %v", code, err)
	}
	if len(list.Approvals) != 1 || list.Approvals[0].Call != "c1" {
		t.Errorf("pending approvals=%+v, want c1 still pending; the approver's log:\n%s", list.Approvals, log)
	}
	if _, err := os.Stat(escaped); err == nil {
		t.Errorf("the escalated command ran: the sandbox approved its own call; the approver's log:\n%s", log)
	}
}

// TestSandboxHidesTheNode: the node's process (its command line and
// environment, which name the config and hold secrets) is invisible, and so
// are the other sessions' workspaces, the JetStream store, the data dir and
// the config file: absent, not merely unreadable.
func TestSandboxHidesTheNode(t *testing.T) {
	canary := fmt.Sprintf("canary-%d", rand.Int64())
	cfg := map[string]any{"agents": map[string]any{canary: map[string]any{"mode": "plan"}}}
	dir := t.TempDir()
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{
		Data: filepath.Join(dir, "data"), Config: cfg,
		Env: []string{"CALLSHEET_TEST_SECRET=" + canary},
	})
	a, b := open(t, p, ""), open(t, p, "")
	if tv := call(t, p, b, "write", map[string]any{"path": "secret.txt", "content": canary + "\n"}); tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("write in session b: %+v", tv.Results[0])
	}
	config := filepath.Join(dir, "data-config.json")
	if _, err := os.Stat(config); err != nil {
		t.Fatalf("the node's config file: %v", err)
	}

	t.Run("node process", func(t *testing.T) {
		pid := strconv.Itoa(p.PID())
		out := shellText(t, p, a, `cat /proc/`+pid+`/environ /proc/`+pid+`/cmdline 2>&1 | tr '\0' '\n'
for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done`)
		for _, leak := range []string{canary, "--data", "--config", p.Data} {
			if strings.Contains(out, leak) {
				t.Errorf("the sandbox sees the node's process (%q in its output):\n%s", leak, out)
			}
		}
	})
	t.Run("files", func(t *testing.T) {
		paths := []string{
			filepath.Join(workspaceOf(p, b), "secret.txt"),
			workspaceOf(p, b),
			filepath.Join(p.Data, "jetstream"),
			config,
		}
		out := shellText(t, p, a, "set -- "+strings.Join(paths, " ")+`
for f in "$@"; do if [ -e "$f" ]; then echo "visible: $f"; cat "$f" 2>&1; ls -la "$f" 2>&1; fi; done
ls -a `+filepath.Join(p.Data, "workspaces", "default")+` 2>&1; ls -a `+p.Data+` 2>&1`)
		if strings.Contains(out, "visible:") || strings.Contains(out, canary) {
			t.Errorf("the sandbox sees what must be absent:\n%s", out)
		}
		if strings.Contains(out, b) || strings.Contains(out, "jetstream") {
			t.Errorf("the sandbox lists another session's workspace or the JetStream store:\n%s", out)
		}
	})
}

// fileState is what a metadata attack could change.
type fileState struct {
	mode     os.FileMode
	uid, gid uint32
	mtime    time.Time
}

func stateOf(t *testing.T, p string) fileState {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileState{fi.Mode(), st.Uid, st.Gid, fi.ModTime()}
}

// TestSandboxCannotChangeMetadataOutside: chmod, chown and touch of a file
// outside the workspace, and of the workspace root above it, change nothing
// on the host.
func TestSandboxCannotChangeMetadataOutside(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	victim := filepath.Join(t.TempDir(), "victim.txt")
	if err := os.WriteFile(victim, []byte("intact\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	os.Chtimes(victim, old, old)
	root := filepath.Join(p.Data, "workspaces")
	tenant := filepath.Join(root, "default")
	targets := []string{victim, root, tenant}
	before := map[string]fileState{}
	for _, f := range targets {
		before[f] = stateOf(t, f)
	}
	out := shellText(t, p, s, "set -- "+strings.Join(targets, " ")+`
for f in "$@"; do chmod 0777 "$f"; chown 12345:12345 "$f"; touch -d '2030-01-01' "$f"; done 2>&1; echo finished`)
	for _, f := range targets {
		if got := stateOf(t, f); got != before[f] {
			t.Errorf("%s changed from the sandbox: %+v, was %+v (shell said:\n%s)", f, got, before[f], out)
		}
	}
}

// waitGone waits up to 10 s until no host process holds marker; it returns
// the pids still there.
func waitGone(marker string) []int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := procs.Marked(marker)
		if len(left) == 0 || time.Now().After(deadline) {
			for _, pid := range left {
				syscall.Kill(pid, syscall.SIGKILL) // do not leave them to the next test
			}
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// marker is a sleep duration no other process uses, so that its command line
// finds it on the host.
func marker() string { return fmt.Sprintf("%d.%06d", 900+rand.IntN(99), rand.IntN(1000000)) }

// TestSandboxDescendantsDie: a setsid child, a double-forked nohup'ed one
// and one that ignores SIGHUP and SIGTERM are all gone when the call ends;
// and when the node itself is killed with SIGKILL, a background call's
// processes die with it.
func TestSandboxDescendantsDie(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	m1, m2, m3 := marker(), marker(), marker()
	out := shellText(t, p, s, fmt.Sprintf(`setsid sleep %s </dev/null >/dev/null 2>&1 &
( nohup sleep %s </dev/null >/dev/null 2>&1 & ) &
setsid bash -c 'trap "" HUP TERM; exec sleep %s' </dev/null >/dev/null 2>&1 &
sleep 0.2; echo started`, m1, m2, m3))
	if !strings.Contains(out, "started") {
		t.Fatalf("shell: %s", out)
	}
	for _, m := range []string{m1, m2, m3} {
		if left := waitGone(m); len(left) > 0 {
			t.Errorf("processes %v (sleep %s) outlived their call", left, m)
		}
	}

	t.Run("kill -9 of the node", func(t *testing.T) {
		m4, m5 := marker(), marker()
		body := map[string]any{"id": "t-bg", "calls": []any{map[string]any{"id": "c1", "name": "shell",
			"arguments": map[string]any{"command": fmt.Sprintf("setsid sleep %s </dev/null >/dev/null 2>&1 & sleep %s", m4, m5), "background": true}}}}
		if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns", body, nil); err != nil || code != http.StatusOK {
			t.Fatalf("background turn: %d %v", code, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(procs.Marked(m4)) == 0 || len(procs.Marked(m5)) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the background command did not start")
			}
			time.Sleep(20 * time.Millisecond)
		}
		p.Kill()
		for _, m := range []string{m4, m5} {
			if left := waitGone(m); len(left) > 0 {
				t.Errorf("processes %v (sleep %s) outlived the node's kill -9", left, m)
			}
		}
	})
}

// limitsConfig caps sandboxed processes low enough to see the caps bite.
var limitsConfig = map[string]any{"sandbox": map[string]any{"limits": map[string]any{"processes": 64, "file_size_mb": 8}}}

// TestSandboxLimits: a fork bomb stops at the process limit and leaves
// nothing behind; a huge file stops at the file size limit; the node keeps
// serving.
func TestSandboxLimits(t *testing.T) {
	p := node(t, limitsConfig)
	s := open(t, p, "")

	t.Run("processes", func(t *testing.T) {
		// perl's fork fails at once at the limit, where bash's retries.
		out := shellText(t, p, s, `perl -e 'my $n = 0; for (1 .. 200) { my $p = fork; last unless defined $p; if (!$p) { sleep 30; exit } $n++ } print "forked: $n\n"'
n=0; for d in /proc/[0-9]*; do n=$((n+1)); done; echo "processes: $n"`)
		m := regexp.MustCompile(`forked: (\d+)\nprocesses: (\d+)`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("shell: %s", out)
		}
		if n, _ := strconv.Atoi(m[1]); n >= 64 {
			t.Errorf("%d processes forked in one sandbox, want fewer than the limit of 64:\n%s", n, out)
		}
		if n, _ := strconv.Atoi(m[2]); n > 64 {
			t.Errorf("%d processes ran in one sandbox, want at most the limit of 64:\n%s", n, out)
		}
	})
	t.Run("fork bomb", func(t *testing.T) {
		m := marker()
		tv := call(t, p, s, "shell", map[string]any{"command": ": " + m + "; b() { b | b & }; b; sleep 3; echo survived", "timeout_ms": 8000})
		t.Logf("fork bomb: %s %s", tv.Results[0].Outcome, firstLine(resultText(tv.Results[0])))
		if left := waitGone(m); len(left) > 0 {
			t.Errorf("%d fork bomb processes outlived the call", len(left))
		}
		if out := shellText(t, p, s, "echo alive"); out != "alive\nexit code 0" {
			t.Errorf("after the fork bomb: %q, want a working shell", out)
		}
	})
	t.Run("file size", func(t *testing.T) {
		out := shellText(t, p, s, `head -c 64M /dev/zero > big.bin; echo "status $?"`)
		fi, err := os.Stat(filepath.Join(workspaceOf(p, s), "big.bin"))
		if err != nil {
			t.Fatalf("big.bin: %v (shell said %q)", err, out)
		}
		if fi.Size() > 8<<20 {
			t.Errorf("big.bin is %d bytes, want at most the 8 MiB limit (shell said %q)", fi.Size(), out)
		}
	})
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// TestSandboxSearchRace: a background shell keeps swapping a directory of
// the workspace for a symlink to a directory outside it while glob and grep
// search the workspace: rg never reads outside.
func TestSandboxSearchRace(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	secret := fmt.Sprintf("SECRET%d", rand.Int64())
	outside := t.TempDir()
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(outside, fmt.Sprintf("outside%d.txt", i)), []byte(secret+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	racer := fmt.Sprintf(`mkdir -p real/a/b && for i in $(seq 1 20); do echo harmless > real/a/b/f$i.txt; done
end=$((SECONDS+25)); while [ $SECONDS -lt $end ]; do
  ln -sfn %[1]s d.link; mv -T d.link d; ln -sfn real d.link; mv -T d.link d
  ln -sfn %[1]s real/a/x.link; mv -T real/a/x.link real/a/b.tmp 2>/dev/null
done`, outside)
	bg := call(t, p, s, "shell", map[string]any{"command": racer, "background": true, "timeout_ms": 30000})
	if r := bg.Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("racer: %s %s", r.Outcome, resultText(r))
	}
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		for _, c := range []struct {
			name string
			args map[string]any
		}{
			{"grep", map[string]any{"pattern": secret}},
			{"glob", map[string]any{"pattern": "**/outside*"}},
			{"grep", map[string]any{"pattern": secret, "path": "d"}},
			{"glob", map[string]any{"pattern": "*", "path": "d"}},
		} {
			var tv projections.Turn
			body := map[string]any{"calls": []any{map[string]any{"id": "c1", "name": c.name, "arguments": c.args}}}
			if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns", body, &tv); err != nil || code != http.StatusOK {
				t.Fatalf("%s: %d %v", c.name, code, err)
			}
			raw, _ := json.Marshal(tv.Results)
			// A match prints "path:1:SECRET"; a listed file its name.
			if strings.Contains(string(raw), ":1:"+secret) || strings.Contains(string(raw), "outside1") {
				t.Fatalf("%s %v read outside the workspace on round %d: %s", c.name, c.args, i, raw)
			}
		}
	}
}

// TestSandboxWritesWhatTheFileToolsWrote: the workspace, and what the node's
// file tools create in it, belong to the uid sandboxed commands run as, so a
// shell call can change a file write made, and write created a directory
// for; outside the workspace nothing is theirs.
func TestSandboxWritesWhatTheFileToolsWrote(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	if tv := call(t, p, s, "write", map[string]any{"path": "sub/dir/a.txt", "content": "one\n"}); tv.Results[0].Outcome != events.OutcomeOK {
		t.Fatalf("write: %+v", tv.Results[0])
	}
	out := shellText(t, p, s, `echo two >> sub/dir/a.txt && touch sub/dir/b.txt && cat sub/dir/a.txt && id -u`)
	if want := "one\ntwo\n" + strconv.Itoa(sandboxUID) + "\nexit code 0"; out != want {
		t.Errorf("shell after write: %q, want %q", out, want)
	}
	for _, f := range []string{"sub", "sub/dir", "sub/dir/a.txt", "sub/dir/b.txt"} {
		fi, err := os.Stat(filepath.Join(workspaceOf(p, s), f))
		if err != nil {
			t.Fatal(err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != sandboxUID {
			t.Errorf("%s is uid %d's, want the sandbox's %d", f, uid, sandboxUID)
		}
	}
}

// TestSandboxHidesTheSigningKey: a fleet's signing key kept outside the
// data dir (--signing-key) is absent in the sandbox, as the data dir's own
// is: a command that could read it could sign a rewritten log as the node
// (docs/audit.md).
func TestSandboxHidesTheSigningKey(t *testing.T) {
	dir := t.TempDir()
	// A directory others may list (as TestMountView's), unlike t.TempDir's.
	keys, err := os.MkdirTemp("", "callsheet-fleet-key-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(keys) })
	key := filepath.Join(keys, "fleet.key")
	if _, _, err := signing.Ensure(key); err != nil {
		t.Fatal(err)
	}
	os.Chmod(keys, 0o755) // Ensure made it the owner's only
	// The key's directory is shown to sandboxed commands (sandbox.read_only,
	// as an operator might show a shared directory); the key in it must
	// still be absent.
	cfg := map[string]any{"sandbox": map[string]any{"read_only": []string{keys}}}
	p := testnode.Start(t, testnode.Node(t, ""), testnode.Options{Data: filepath.Join(dir, "data"), Config: cfg, Args: []string{"--signing-key", key}})
	s := open(t, p, "")
	out := shellText(t, p, s, `ls -a `+keys+`; for f in `+key+` `+signing.DefaultKeyPath(p.Data)+`; do if [ -e "$f" ]; then echo "visible: $f"; head -c 40 "$f" 2>&1; fi; done`)
	if strings.Contains(out, "visible:") || strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("the sandbox sees a signing key:\n%s", out)
	}
	if !strings.Contains(out, "fleet.pub") {
		t.Errorf("the sandbox does not show the read-only directory at all, so this test proves nothing:\n%s", out)
	}
}
