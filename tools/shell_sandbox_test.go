package tools

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/sandbox"
	"github.com/callsheet/callsheet/tool"
)

// shellWith builds the shell tool with opts.
func shellWith(t *testing.T, opts ShellOptions) *tool.Tool {
	t.Helper()
	sh, err := ShellTool(opts)
	if err != nil {
		t.Fatalf("ShellTool(%+v): %v", opts, err)
	}
	return sh
}

// needSandbox fails the test, saying why, on a kernel where the default
// sandbox cannot run commands: that is a node whose shell refuses every
// call, which these tests would not show working.
func needSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb := DefaultSandbox()
	if err := sb.Ready(); err != nil {
		t.Fatalf("the sandbox cannot run commands here: %v", err)
	}
	return sb
}

// run runs command with sh and returns the text of its result.
func runText(t *testing.T, e *env, sh *tool.Tool, args string) string {
	t.Helper()
	r, err := call(t, e.ctx, sh, args)
	if err != nil {
		t.Fatalf("%s: err=%v, want a result", args, err)
	}
	return text(t, r)
}

func TestShellSandboxConfinesWrites(t *testing.T) {
	needSandbox(t)
	e := newEnv(t)
	sh := builtin(t, "shell") // Builtins sandboxes by default
	outsideFile := filepath.Join(e.outside, "escaped.txt")

	// A directory outside the workspace is absent from the sandbox.
	got := runText(t, e, sh, fmt.Sprintf(`{"command": "echo x > %s"}`, outsideFile))
	mustContain(t, got, "No such file or directory", "exit code 1")
	if _, err := os.Stat(outsideFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (err=%v): the sandbox let a write outside the workspace through", outsideFile, err)
	}
	// A system directory is there, read-only.
	etc := "/etc/callsheet-sandbox-test-" + strconv.Itoa(os.Getpid())
	got = runText(t, e, sh, fmt.Sprintf(`{"command": "echo x > %s"}`, etc))
	mustContain(t, got, "Read-only file system", "exit code 1")
	if _, err := os.Stat(etc); !errors.Is(err, os.ErrNotExist) {
		os.Remove(etc)
		t.Errorf("%s exists (err=%v): the sandbox wrote a system directory", etc, err)
	}

	got = runText(t, e, sh, `{"command": "mkdir -p d && echo in > d/in.txt && mv d/in.txt moved.txt && cat moved.txt"}`)
	if got != "in\nexit code 0" {
		t.Errorf("write in the workspace: text=%q, want %q", got, "in\nexit code 0")
	}
	if got := readFile(t, filepath.Join(e.root, "moved.txt")); got != "in\n" {
		t.Errorf("moved.txt=%q, want %q", got, "in\n")
	}
}

// privateTemps lists what the sandboxes' private /tmp directories on the
// host hold under name.
func privateTemps(t *testing.T, name string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(os.TempDir(), "callsheet-sandbox-*", "tmp", name))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestShellSandboxTempDir(t *testing.T) {
	needSandbox(t)
	e := newEnv(t)
	sh := builtin(t, "shell")
	name := "t-" + strconv.Itoa(os.Getpid()) + ".txt"
	got := runText(t, e, sh, `{"command": "echo $TMPDIR; echo t > $TMPDIR/`+name+` && cat $TMPDIR/`+name+` && f=$(mktemp) && echo made-in-tmpdir ${f%/*}"}`)
	lines := strings.Split(got, "\n")
	if len(lines) != 4 {
		t.Fatalf("text=%q, want 4 lines", got)
	}
	tmp := lines[0]
	if want := []string{tmp, "t", "made-in-tmpdir " + tmp, "exit code 0"}; strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("text=%q, want %q", got, strings.Join(want, "\n"))
	}
	// Inside, the call's private directory is /tmp itself.
	if tmp != "/tmp" {
		t.Errorf("TMPDIR=%q, want /tmp (the sandbox's private /tmp)", tmp)
	}
	if left := privateTemps(t, name); len(left) > 0 {
		t.Errorf("%v still exist after the call: the private /tmp was not removed", left)
	}

	// /tmp is the call's own: a write there does not reach the host's.
	direct := filepath.Join(os.TempDir(), "callsheet-sandbox-test-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { os.Remove(direct) })
	got = runText(t, e, sh, fmt.Sprintf(`{"command": "echo x > %s && cat %[1]s"}`, direct))
	if got != "x\nexit code 0" {
		t.Errorf("text=%q, want the write to the private /tmp to work", got)
	}
	if _, err := os.Stat(direct); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (err=%v): the sandbox's /tmp is the host's", direct, err)
	}
}

func TestShellTempDirRemovedEvenIfReadOnly(t *testing.T) {
	e := newEnv(t)
	for _, opts := range []ShellOptions{{}, {Sandbox: ShellSandboxOff}} {
		name := "ro-" + strconv.Itoa(os.Getpid())
		got := runText(t, e, shellWith(t, opts), `{"command": "mkdir $TMPDIR/`+name+` && touch $TMPDIR/`+name+`/f && chmod 500 $TMPDIR/`+name+` && chmod 500 $TMPDIR && echo $TMPDIR"}`)
		tmp := strings.SplitN(got, "\n", 2)[0]
		if opts.Sandbox == "" {
			if left := privateTemps(t, name); len(left) > 0 {
				t.Errorf("sandboxed: %v still exist after the call", left)
			}
			continue
		}
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox %q: TMPDIR %s still exists after the call (err=%v)", opts.Sandbox, tmp, err)
		}
	}
}

// listen accepts connections on a loopback port until the test ends and
// returns the port.
func listen(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestShellSandboxNetwork(t *testing.T) {
	needSandbox(t)
	if !strings.HasSuffix(shellPath(), "bash") {
		t.Fatal("bash not found: the test connects with its /dev/tcp")
	}
	e := newEnv(t)
	// bash's /dev/tcp is a plain TCP connect(2) to the host's loopback,
	// which is not the sandbox's.
	connect := fmt.Sprintf(`{"command": "exec 3<>/dev/tcp/127.0.0.1/%d && echo connected"}`, listen(t))

	got := runText(t, e, shellWith(t, ShellOptions{}), connect)
	mustContain(t, got, "Connection refused")
	if strings.Contains(got, "connected") || strings.Contains(got, "exit code 0") {
		t.Errorf("network off: text=%q, want the connection refused", got)
	}
	// The sandbox's own loopback works: a server the command starts is
	// reachable from the command.
	got = runText(t, e, shellWith(t, ShellOptions{}), `{"command": "perl -MIO::Socket::INET -e '$l = IO::Socket::INET->new(Listen => 1, LocalAddr => q(127.0.0.1:0)) or die $!; if (fork) { $c = $l->accept; print <$c>; wait } else { $s = IO::Socket::INET->new(PeerAddr => q(127.0.0.1:) . $l->sockport) or die $!; print $s qq(own loopback\\n) }'"}`)
	if got != "own loopback\nexit code 0" {
		t.Errorf("the sandbox's own loopback: text=%q, want %q", got, "own loopback\nexit code 0")
	}

	got = runText(t, e, shellWith(t, ShellOptions{Network: true}), connect)
	if got != "connected\nexit code 0" {
		t.Errorf("network on: text=%q, want %q", got, "connected\nexit code 0")
	}
}

func TestShellEscalateAndSandboxOff(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		opts ShellOptions
		args string
	}{
		{"escalate", ShellOptions{}, `{"command": "echo out > %s && cat %[1]s", "escalate": true}`},
		{"sandbox off", ShellOptions{Sandbox: ShellSandboxOff}, `{"command": "echo out > %s && cat %[1]s"}`},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(e.outside, "out"+strconv.Itoa(i))
			got := runText(t, e, shellWith(t, tt.opts), fmt.Sprintf(tt.args, p))
			if got != "out\nexit code 0" {
				t.Errorf("text=%q, want %q", got, "out\nexit code 0")
			}
			if got := readFile(t, p); got != "out\n" {
				t.Errorf("%s=%q, want %q", p, got, "out\n")
			}
		})
	}
}

// TestShellWithoutABoundary plays a kernel that cannot give a required
// boundary: a sandboxed call is refused with an error that says which, how
// to accept it and how to opt out, and runs nothing; an escalated call and a
// shell with the sandbox off still run.
func TestShellWithoutABoundary(t *testing.T) {
	defer func(orig func(*sandbox.Sandbox) error) { boxReady = orig }(boxReady)
	boxReady = func(*sandbox.Sandbox) error {
		return fmt.Errorf("%w: this kernel cannot give pid (test kernel). The node's operator can accept running without it with \"sandbox\": {\"accept_weaker\": [\"pid\"]} in the config", sandbox.ErrWeaker)
	}
	e := newEnv(t)

	_, err := call(t, e.ctx, shellWith(t, ShellOptions{}), `{"command": "echo ran > ran.txt"}`)
	if err == nil {
		t.Fatal("err=nil, want the call refused")
	}
	if !errors.Is(err, sandbox.ErrWeaker) {
		t.Errorf("err=%v, want sandbox.ErrWeaker", err)
	}
	mustContain(t, err.Error(), "nothing ran", "test kernel", "accept_weaker", `"shell": {"sandbox": "off"}`)
	if _, err := os.Stat(filepath.Join(e.root, "ran.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ran.txt exists (err=%v): a refused call ran", err)
	}

	for _, tc := range []struct {
		opts ShellOptions
		args string
	}{
		{ShellOptions{}, `{"command": "echo ran", "escalate": true}`},
		{ShellOptions{Sandbox: ShellSandboxOff}, `{"command": "echo ran"}`},
	} {
		if got := runText(t, e, shellWith(t, tc.opts), tc.args); got != "ran\nexit code 0" {
			t.Errorf("%+v %s: text=%q, want %q", tc.opts, tc.args, got, "ran\nexit code 0")
		}
	}
}

func TestShellOptions(t *testing.T) {
	tests := []struct {
		name    string
		opts    ShellOptions
		wantErr error
	}{
		{"zero value", ShellOptions{}, nil},
		{"landlock", ShellOptions{Sandbox: ShellSandboxLandlock, Network: true}, nil},
		{"on", ShellOptions{Sandbox: ShellSandboxOn}, nil},
		{"off", ShellOptions{Sandbox: ShellSandboxOff}, nil},
		{"unknown sandbox", ShellOptions{Sandbox: "docker"}, ErrInvalidShellOption},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sh, err := ShellTool(tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err=%v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			sandboxed := tt.opts.Sandbox != ShellSandboxOff
			if got := strings.Contains(sh.Description, "run in a sandbox"); got != sandboxed {
				t.Errorf("description mentions the sandbox: %v, want %v (%q)", got, sandboxed, sh.Description)
			}
			if sandboxed {
				mustContain(t, sh.Description, map[bool]string{false: "The network is off", true: "The network is reachable"}[tt.opts.Network])
			}
		})
	}
}
