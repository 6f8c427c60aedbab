package tools

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/procs"
	"github.com/callsheet/callsheet/tool"
)

func TestShellOutputAndExitCode(t *testing.T) {
	e := newEnv(t)
	sh := builtin(t, "shell")
	tests := []struct {
		name, command, want string
	}{
		{"ok", "echo hello", "hello\nexit code 0"},
		{"non-zero exit is a result", "echo out; echo err >&2; exit 3", "out\nerr\nexit code 3"},
		{"interleaved in order", "for i in 1 2 3; do echo o$i; echo e$i >&2; done", "o1\ne1\no2\ne2\no3\ne3\nexit code 0"},
		{"no output", "true", "(no output)\nexit code 0"},
		{"no final newline", "printf abc", "abc\nexit code 0"},
		{"stdin is empty", "cat; echo end", "end\nexit code 0"},
		{"killed by a signal", "kill -9 $$", "(no output)\nexit code 137"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := call(t, e.ctx, sh, fmt.Sprintf(`{"command": %q}`, tt.command))
			if err != nil {
				t.Fatalf("err=%v, want nil", err)
			}
			if got := text(t, r); got != tt.want {
				t.Errorf("text=%q, want %q", got, tt.want)
			}
		})
	}
}

func TestShellRunsInWorkspace(t *testing.T) {
	e := newEnv(t)
	e.file(t, "marker.txt", "here")
	r, err := call(t, e.ctx, builtin(t, "shell"), `{"command": "pwd -P; cat marker.txt; echo; echo made > made.txt"}`)
	if err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(e.root)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), real+"\nhere\nexit code 0"; got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
	if got := readFile(t, filepath.Join(e.root, "made.txt")); got != "made\n" {
		t.Errorf("made.txt=%q", got)
	}
}

func TestShellEnvironment(t *testing.T) {
	e := newEnv(t)
	t.Setenv("CALLSHEET_TEST_LEAK", "leaked")
	r, err := call(t, e.ctx, builtin(t, "shell"), `{"command": "echo id=$CALLSHEET_CALL_ID key=$CALLSHEET_IDEMPOTENCY_KEY session=$CALLSHEET_SESSION turn=$CALLSHEET_TURN attempt=$CALLSHEET_ATTEMPT; echo home=$HOME; echo leak=$CALLSHEET_TEST_LEAK; test -n \"$PATH\" && echo path-set"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("id=call-1 key=idem-1 session=sess-1 turn=turn-1 attempt=2\nhome=%s\nleak=\npath-set\nexit code 0", e.root)
	if got := text(t, r); got != want {
		t.Errorf("text=%q, want %q", got, want)
	}
}

// gone waits until no process has that pid, or only a zombie does (its
// parent has not reaped it yet, but it runs nothing).
func gone(t *testing.T, pid int) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := strings.LastIndexByte(string(stat), ')'); i > 0 && strings.HasPrefix(string(stat[i+1:]), " Z") {
				return true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func readPid(t *testing.T, p string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, p)))
	if err != nil {
		t.Fatalf("pid file %s: %v", p, err)
	}
	return pid
}

func TestShellTimeoutKillsProcessGroup(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	m1, m2 := sleepMarker(), sleepMarker()
	_, err := call(t, e.ctx, builtin(t, "shell"), fmt.Sprintf(`{"command": "sleep %s & echo started; sleep %s", "timeout_ms": 3000}`, m1, m2))
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("the call took %v, want it cut at the timeout", elapsed)
	}
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err=%v, want ErrTimeout wrapping context.DeadlineExceeded", err)
	}
	mustContain(t, err.Error(), "started")
	for _, m := range []string{m1, m2} {
		if !goneMarked(t, m) {
			t.Errorf("processes %v (sleep %s) still run after the timeout", procs.Marked(m), m)
		}
	}
}

func TestShellContextDeadlineIsTimeout(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(e.ctx, 300*time.Millisecond)
	defer cancel()
	_, err := call(t, ctx, builtin(t, "shell"), `{"command": "sleep 30"}`)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err=%v, want ErrTimeout", err)
	}
}

func TestShellCancel(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	// Cancel once the command runs (its pid file is written), however
	// slowly a loaded machine starts it.
	go func() {
		defer cancel()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(e.root, "sh.pid")); err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	m := sleepMarker()
	_, err := call(t, ctx, builtin(t, "shell"), `{"command": "echo $$ > sh.pid; sleep `+m+`"}`)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) {
		t.Fatalf("err=%v, want context.Canceled (cancellation is not a timeout, nor a result)", err)
	}
	if !goneMarked(t, m) {
		t.Errorf("processes %v still run after cancellation", procs.Marked(m))
	}
}

// TestShellKillsLeftovers checks that a background child does not outlive
// the call, nor keep the call waiting on the output pipe it holds.
func TestShellKillsLeftovers(t *testing.T) {
	e := newEnv(t)
	start := time.Now()
	m := sleepMarker()
	r, err := call(t, e.ctx, builtin(t, "shell"), `{"command": "sleep `+m+` & echo done"}`)
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("the call took %v: it waited for the background child", elapsed)
	}
	if got := text(t, r); got != "done\nexit code 0" {
		t.Errorf("text=%q", got)
	}
	if !goneMarked(t, m) {
		t.Errorf("background processes %v outlived the call", procs.Marked(m))
	}
}

func TestShellDeclarations(t *testing.T) {
	sh := builtin(t, "shell")
	want := tool.Declarations{Effect: tool.EffectSideEffecting, Replay: tool.ReplayNever, Concurrency: tool.ConcurrencyExclusive}
	if sh.Declarations != want {
		t.Errorf("declarations=%+v, want %+v", sh.Declarations, want)
	}
	if !sh.Escalation {
		t.Error("shell does not allow escalation")
	}
	if sh.Timeout != MaxShellTimeout {
		t.Errorf("timeout=%v, want %v", sh.Timeout, MaxShellTimeout)
	}
	if err := sh.Validate([]byte(`{"command": "ls", "escalate": true, "timeout_ms": 1000}`)); err != nil {
		t.Errorf("Validate with escalate and timeout_ms: %v", err)
	}
	for _, args := range []string{`{}`, `{"command": "ls", "timeout_ms": 600001}`, `{"command": "ls", "timeout_ms": "5"}`, `{"command": "ls", "cwd": "/"}`} {
		if err := sh.Validate([]byte(args)); !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("Validate(%s) err=%v, want ErrInvalidArguments", args, err)
		}
	}
	e := newEnv(t)
	if _, err := call(t, e.ctx, sh, `{"command": "  "}`); err == nil {
		t.Error("an empty command ran, want an error")
	}
}

func TestCapBuffer(t *testing.T) {
	b := capBuffer{limit: 5}
	for _, s := range []string{"abc", "defg", "hij"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q)=%d, %v; want all of it accepted", s, n, err)
		}
	}
	got := string(b.Bytes())
	if !strings.HasPrefix(got, "abcde\n[output cut at 5 bytes") || !strings.Contains(got, "5 more bytes were discarded") {
		t.Errorf("Bytes()=%q", got)
	}
}

func TestTail(t *testing.T) {
	if got := tail([]byte("short\n"), 100); got != "short" {
		t.Errorf("tail=%q", got)
	}
	long := strings.Repeat("a", 50) + "\n" + strings.Repeat("b", 30)
	if got := tail([]byte(long), 40); got != "…"+strings.Repeat("b", 30) {
		t.Errorf("tail=%q", got)
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	for _, tc := range []struct{ name, args string }{
		{"shell", `{"command": "echo ran > ran.txt"}`},
		{"write", `{"path": "ran.txt", "content": "x"}`},
		{"read", `{"path": "."}`},
	} {
		if _, err := call(t, ctx, builtin(t, tc.name), tc.args); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a cancelled context: err=%v, want context.Canceled", tc.name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.root, "ran.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ran.txt exists (err=%v): a cancelled call ran", err)
	}
}
