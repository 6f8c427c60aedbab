package sandbox

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"
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
	uid, gid := s.Owner()
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
