package datalock

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// holderEnv makes the test binary a process that takes the lock of the
// directory it names, prints "held", and waits to be killed.
const holderEnv = "DATALOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		l, err := Acquire(dir, Record{Program: ProgramNode, Node: "holder", HTTP: "http://127.0.0.1:7700"})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		_ = l.Update(func(r *Record) { r.NATS = "nats://127.0.0.1:4222" })
		fmt.Println("held")
		select {}
	}
	os.Exit(m.Run())
}

// hold starts a process holding dir's lock and returns it once it holds it.
func hold(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "held\n" {
		t.Fatalf("holder: %q %v", line, err)
	}
	return cmd
}

// TestSecondHolderRefusedUntilTheFirstDies: while a process holds the lock
// another is refused with the holder's record; once the holder is killed
// with SIGKILL (no chance to clean up) the lock is free.
func TestSecondHolderRefusedUntilTheFirstDies(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	holder := hold(t, dir)

	_, err := Acquire(dir, Record{Program: ProgramNode, Node: "second"})
	var locked *LockedError
	if !errors.As(err, &locked) || !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire: err=%v, want a *LockedError", err)
	}
	if !locked.Known || locked.Record.PID != holder.Process.Pid || locked.Record.Node != "holder" || locked.Record.NATS != "nats://127.0.0.1:4222" {
		t.Fatalf("record %+v (known %v), want the holder's (pid %d)", locked.Record, locked.Known, holder.Process.Pid)
	}
	for _, want := range []string{dir, `callsheet-node "holder"`, fmt.Sprintf("pid %d", holder.Process.Pid), "serving http://127.0.0.1:7700", "since "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if err := Check(dir); !errors.As(err, &locked) || locked.Record.PID != holder.Process.Pid {
		t.Fatalf("Check while held: %v", err)
	}

	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	if err := Check(dir); err != nil {
		t.Fatalf("Check after the holder died: %v", err)
	}
	l, err := Acquire(dir, Record{Program: ProgramReplay})
	if err != nil {
		t.Fatalf("Acquire after the holder died: %v", err)
	}
	defer l.Release()
	rec, known := readRecord(filepath.Join(dir, FileName))
	if !known || rec.PID != os.Getpid() || rec.Program != ProgramReplay || rec.Node != "" || rec.NATS != "" {
		t.Fatalf("record after taking over: %+v, want this process's alone", rec)
	}
}

// TestReleaseFreesTheLock: within one process, a second Lock is refused
// while the first is held, and taken once it is released; Update rewrites
// the record, shorter or longer, as one parsable line.
func TestReleaseFreesTheLock(t *testing.T) {
	dir := t.TempDir()
	l, err := Acquire(dir, Record{Program: ProgramNode, Node: "a-rather-long-node-name", HTTP: "http://[::1]:65535"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(dir, Record{Program: ProgramNode}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Acquire in the same process: %v, want ErrLocked", err)
	}
	if err := l.Update(func(r *Record) { r.Node, r.HTTP = "n", "" }); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, FileName))
	if strings.Count(string(b), "\n") != 1 || !strings.HasSuffix(string(b), "\n") || strings.Contains(string(b), "long") {
		t.Fatalf("lock file after a shorter record: %q", b)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if err := l.Update(func(*Record) {}); err == nil {
		t.Fatal("Update after Release succeeded")
	}
	l2, err := Acquire(dir, Record{Program: ProgramNode})
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}

// TestLockFileIsNotFollowed: a lock file replaced by a symbolic link is
// refused rather than followed.
func TestLockFileIsNotFollowed(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.WriteFile(target, []byte("keep\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if l, err := Acquire(dir, Record{Program: ProgramNode}); err == nil {
		l.Release()
		t.Fatal("Acquire followed a symbolic link")
	}
	if b, _ := os.ReadFile(target); string(b) != "keep\n" {
		t.Fatalf("the link's target was written: %q", b)
	}
}

// TestCheckWithoutLockFile: a directory no process ever locked is free, and
// Check creates nothing.
func TestCheckWithoutLockFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	if err := Check(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Check created %s", dir)
	}
}

func TestRecordString(t *testing.T) {
	r := Record{Program: ProgramNode, PID: 7, Host: "h", Node: "n1", HTTP: "http://x:1", Started: time.Date(2026, 12, 1, 9, 13, 33, 0, time.UTC)}
	if got, want := r.String(), `callsheet-node "n1" (pid 7 on host h, serving http://x:1, since 2026-12-01T09:13:33Z)`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
