package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startGroup starts `sleep 60` as the leader of a process group of its own.
func startGroup(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return cmd
}

// gone reports whether pid ended within d (a zombie counts as ended).
func gone(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); ; {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(st)); len(f) > 2 && f[2] == "Z" {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestReaperKillsAGroupAtItsTime(t *testing.T) {
	rp, err := StartReaper()
	if err != nil {
		t.Fatal(err)
	}
	due, later, released := startGroup(t), startGroup(t), startGroup(t)
	start := time.Now()
	for _, h := range []struct {
		c  *exec.Cmd
		at time.Time
	}{{due, start.Add(time.Hour)}, {later, start.Add(time.Hour)}, {released, start.Add(300 * time.Millisecond)}} {
		if err := rp.Hold(h.c.Process.Pid, h.at); err != nil {
			t.Fatal(err)
		}
	}
	// Moved earlier, and forgotten: a Hold moves either way, a Release
	// keeps the group from being killed at all.
	if err := rp.Hold(due.Process.Pid, start.Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	rp.Release(released.Process.Pid)
	if !gone(due.Process.Pid, 5*time.Second) {
		t.Fatal("the group held until 300 ms from now still runs after 5 s")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Fatalf("the group was killed after %v, before its time", took)
	}
	if err := due.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("the held group's end: %v, want killed", err)
	}
	if gone(later.Process.Pid, 200*time.Millisecond) || gone(released.Process.Pid, 0) {
		t.Fatal("a group held for an hour, or forgotten, was killed")
	}
	// Closing the reaper kills what it still holds, not what it forgot.
	if err := rp.Close(); err != nil {
		t.Fatal(err)
	}
	if !gone(later.Process.Pid, 5*time.Second) {
		t.Fatal("a group still held when the reaper closed runs on")
	}
	if gone(released.Process.Pid, 200*time.Millisecond) {
		t.Fatal("the reaper killed a group it had forgotten")
	}
	if err := rp.Hold(later.Process.Pid, time.Now().Add(time.Hour)); err == nil {
		t.Fatal("a closed reaper took a hold")
	}
}

// TestReaperOutlivesItsNode runs a node of its own (this binary, as
// reaperNode) that holds a group with the reaper, and stops or kills it: the
// reaper still ends the group, at its time when the node is stopped, at once
// when it is killed.
func TestReaperOutlivesItsNode(t *testing.T) {
	for _, c := range []struct {
		name   string
		sig    syscall.Signal
		holdMS int
	}{{"stopped", syscall.SIGSTOP, 500}, {"killed", syscall.SIGKILL, 3_600_000}} {
		t.Run(c.name, func(t *testing.T) {
			node := exec.Command(os.Args[0], "-test.run=^TestReaperNode$")
			node.Env = append(os.Environ(), "REAPER_NODE_HOLD_MS="+strconv.Itoa(c.holdMS))
			node.Stderr = os.Stderr
			out, err := node.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := node.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = node.Process.Kill(); _ = node.Wait() })
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil {
				t.Fatalf("the node said nothing: %v", err)
			}
			var group, reaper int
			if _, err := fmt.Sscanf(line, "group %d reaper %d", &group, &reaper); err != nil {
				t.Fatalf("the node said %q: %v", line, err)
			}
			t.Cleanup(func() { _ = syscall.Kill(-group, syscall.SIGKILL); _ = syscall.Kill(reaper, syscall.SIGKILL) })
			if err := node.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			if !gone(group, 5*time.Second) {
				t.Fatalf("the node's held group runs on 5 s after the node was %s", c.name)
			}
			if c.sig == syscall.SIGKILL && !gone(reaper, 5*time.Second) {
				t.Fatal("the reaper runs on after its node died")
			}
			if c.sig == syscall.SIGSTOP {
				_ = node.Process.Signal(syscall.SIGCONT)
			}
		})
	}
}

// TestReaperNode is the node of TestReaperOutlivesItsNode: it starts a
// reaper and a group, holds the group for REAPER_NODE_HOLD_MS, says both
// pids, and waits to be stopped or killed.
func TestReaperNode(t *testing.T) {
	ms, err := strconv.Atoi(os.Getenv("REAPER_NODE_HOLD_MS"))
	if err != nil {
		t.Skip("run by TestReaperOutlivesItsNode")
	}
	rp, err := StartReaper()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := rp.Hold(cmd.Process.Pid, time.Now().Add(time.Duration(ms)*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("group %d reaper %d\n", cmd.Process.Pid, rp.cmd.Process.Pid)
	time.Sleep(time.Minute)
}

func TestParseReaperLine(t *testing.T) {
	for _, c := range []struct {
		in   string
		pgid int
		at   int64
		err  string
	}{
		{"42 1700000000000000000", 42, 1700000000000000000, ""},
		{"42 0", 42, 0, ""},
		{"1 5", 0, 0, "process group"},
		{"0 5", 0, 0, "process group"},
		{"-7 5", 0, 0, "process group"},
		{"42", 0, 0, "want"},
		{"42 -1", 0, 0, "time"},
		{"42 5 6", 0, 0, "time"},
		{"x 5", 0, 0, "process group"},
	} {
		pgid, at, err := parseReaperLine([]byte(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want one naming %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || pgid != c.pgid || at != c.at {
			t.Errorf("%q: %d %d %v, want %d %d", c.in, pgid, at, err, c.pgid, c.at)
		}
	}
}

func FuzzParseReaperLine(f *testing.F) {
	f.Add([]byte("42 1700000000000000000"))
	f.Add([]byte("42 0"))
	f.Add([]byte("1 2 3"))
	f.Fuzz(func(t *testing.T, line []byte) {
		pgid, at, err := parseReaperLine(line)
		if err != nil {
			if pgid != 0 || at != 0 {
				t.Fatalf("%q: an error with values %d %d", line, pgid, at)
			}
			return
		}
		if pgid <= 1 || at < 0 {
			t.Fatalf("%q: accepted group %d, time %d", line, pgid, at)
		}
		back := strconv.Itoa(pgid) + " " + strconv.FormatInt(at, 10)
		if p2, a2, err := parseReaperLine([]byte(back)); err != nil || p2 != pgid || a2 != at {
			t.Fatalf("%q: read back as %q: %d %d %v", line, back, p2, a2, err)
		}
	})
}
