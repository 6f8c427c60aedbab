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

// needLandlock skips the test, saying why, on a kernel without Landlock.
func needLandlock(t *testing.T) sandbox.Status {
	t.Helper()
	st := sandbox.Probe()
	if !st.Available() {
		t.Skipf("the sandbox is not asserted here: %s", st)
	}
	return st
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
	needLandlock(t)
	e := newEnv(t)
	sh := builtin(t, "shell") // Builtins sandboxes by default
	outsideFile := filepath.Join(e.outside, "escaped.txt")

	got := runText(t, e, sh, fmt.Sprintf(`{"command": "echo x > %s"}`, outsideFile))
	mustContain(t, got, "Permission denied", "exit code 1")
	if _, err := os.Stat(outsideFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (err=%v): the sandbox let a write outside the workspace through", outsideFile, err)
	}

	got = runText(t, e, sh, `{"command": "mkdir -p d && echo in > d/in.txt && mv d/in.txt moved.txt && cat moved.txt"}`)
	if got != "in\nexit code 0" {
		t.Errorf("write in the workspace: text=%q, want %q", got, "in\nexit code 0")
	}
	if got := readFile(t, filepath.Join(e.root, "moved.txt")); got != "in\n" {
		t.Errorf("moved.txt=%q, want %q", got, "in\n")
	}
}

func TestShellSandboxTempDir(t *testing.T) {
	needLandlock(t)
	e := newEnv(t)
	sh := builtin(t, "shell")
	got := runText(t, e, sh, `{"command": "echo $TMPDIR; echo t > $TMPDIR/t.txt && cat $TMPDIR/t.txt && f=$(mktemp) && echo made-in-tmpdir ${f%/*}"}`)
	lines := strings.Split(got, "\n")
	if len(lines) != 4 {
		t.Fatalf("text=%q, want 4 lines", got)
	}
	tmp := lines[0]
	if want := []string{tmp, "t", "made-in-tmpdir " + tmp, "exit code 0"}; strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("text=%q, want %q", got, strings.Join(want, "\n"))
	}
	if !filepath.IsAbs(tmp) || strings.HasPrefix(tmp, e.root) {
		t.Errorf("TMPDIR=%q, want an absolute directory outside the workspace", tmp)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("TMPDIR %s still exists after the call (err=%v)", tmp, err)
	}

	// /tmp itself is not writable: only the call's own directory in it.
	direct := filepath.Join(os.TempDir(), "callsheet-sandbox-test-"+strconv.Itoa(os.Getpid()))
	t.Cleanup(func() { os.Remove(direct) })
	got = runText(t, e, sh, fmt.Sprintf(`{"command": "echo x > %s"}`, direct))
	mustContain(t, got, "Permission denied")
	if _, err := os.Stat(direct); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists (err=%v): /tmp is writable in the sandbox", direct, err)
	}
}

func TestShellTempDirRemovedEvenIfReadOnly(t *testing.T) {
	e := newEnv(t)
	for _, opts := range []ShellOptions{{}, {Sandbox: ShellSandboxOff}} {
		if opts.Sandbox == "" && !sandbox.Probe().Available() {
			continue
		}
		got := runText(t, e, shellWith(t, opts), `{"command": "mkdir $TMPDIR/ro && touch $TMPDIR/ro/f && chmod 500 $TMPDIR/ro && chmod 500 $TMPDIR && echo $TMPDIR"}`)
		tmp := strings.SplitN(got, "\n", 2)[0]
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
	st := needLandlock(t)
	if !strings.HasSuffix(shellPath(), "bash") {
		t.Skip("bash not found: the test connects with its /dev/tcp")
	}
	e := newEnv(t)
	// bash's /dev/tcp is a plain TCP connect(2), which Landlock governs.
	connect := fmt.Sprintf(`{"command": "exec 3<>/dev/tcp/127.0.0.1/%d && echo connected"}`, listen(t))

	got := runText(t, e, shellWith(t, ShellOptions{}), connect)
	if st.Network {
		mustContain(t, got, "Permission denied")
		if strings.Contains(got, "connected") || strings.Contains(got, "exit code 0") {
			t.Errorf("network off: text=%q, want the connection refused", got)
		}
	} else {
		t.Logf("network restriction not asserted: %s", st)
		mustContain(t, got, "note: the sandbox could not keep this command off the network")
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

// TestShellWithoutLandlock plays a kernel without Landlock: a sandboxed call
// is refused with an error that says how to opt out, and runs nothing; an
// escalated call and a shell with the sandbox off still run.
func TestShellWithoutLandlock(t *testing.T) {
	defer func(orig func() sandbox.Status) { sandboxStatus = orig }(sandboxStatus)
	sandboxStatus = func() sandbox.Status { return sandbox.Status{Reason: "test kernel"} }
	e := newEnv(t)

	_, err := call(t, e.ctx, shellWith(t, ShellOptions{}), `{"command": "echo ran > ran.txt"}`)
	if err == nil {
		t.Fatal("err=nil, want the call refused")
	}
	mustContain(t, err.Error(), "nothing ran", "lacks Landlock", "test kernel", `"shell": {"sandbox": "off"}`)
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
