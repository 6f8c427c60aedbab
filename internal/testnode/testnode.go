// Package testnode builds cmd/callsheet-node and cmd/callsheet-replay and runs them as real
// processes, for the suites that must kill, stop or attack a node from the
// outside: the crash suite (crash/), the security suite (security/) and the
// fleet suite. A test binary using it calls Cleanup when it ends (from
// TestMain, usually as testenv.Main's teardown), which removes the built
// binaries.
//
// Processes are started with the caller's environment (so CALLSHEET_RG from
// testenv reaches them) plus Options.Env. Every Proc is killed at the end of
// the test that started it, if it still runs.
package testnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testenv"
)

// Module is the import path of the module the binaries are built from.
const Module = "github.com/callsheet/callsheet"

// StartTimeout bounds how long Start waits for the "listening on" line.
const StartTimeout = 60 * time.Second

var (
	buildMu sync.Mutex
	built   = map[string]string{} // package+tags → binary
	binDir  string
)

// Build builds the main package pkg of the module ("cmd/callsheet-node", "cmd/callsheet-replay")
// with the given build tags (may be empty) once per test binary, and returns
// the binary's path. It fails the test when the build fails.
func Build(t testing.TB, pkg, tags string) string {
	t.Helper()
	return build(t, Module+"/"+pkg, tags)
}

// build builds the main package at importPath (of this module or one it
// requires, at the version go.mod pins) once per test binary.
func build(t testing.TB, pkg, tags string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	key := pkg + "|" + tags
	if bin, ok := built[key]; ok {
		return bin
	}
	if binDir == "" {
		d, err := os.MkdirTemp("", "callsheet-testnode-")
		if err != nil {
			t.Fatal(err)
		}
		binDir = d
	}
	// The binary keeps its package's name (callsheet-node, as in a
	// process list or an OOM report); builds with tags go in a directory
	// named for them.
	dir := binDir
	if tags != "" {
		dir = filepath.Join(binDir, strings.ReplaceAll(tags, ",", "_"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, binaryName(pkg))
	args := []string{"build", "-o", bin}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	out, err := exec.Command("go", append(args, pkg)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s (tags %q): %v\n%s", pkg, tags, err, out)
	}
	built[key] = bin
	return bin
}

// binaryName is the name go build gives pkg's binary: its last element,
// or the one before a major version suffix (nats-server/v2: nats-server).
func binaryName(pkg string) string {
	name := path.Base(pkg)
	if len(name) > 1 && name[0] == 'v' && strings.Trim(name[1:], "0123456789") == "" {
		return path.Base(path.Dir(pkg))
	}
	return name
}

// Node builds cmd/callsheet-node with tags (see Build).
func Node(t testing.TB, tags string) string { return Build(t, "cmd/callsheet-node", tags) }

// Replay builds cmd/callsheet-replay (see Build).
func Replay(t testing.TB) string { return Build(t, "cmd/callsheet-replay", "") }

// Cleanup removes the binaries Build made. Call it once, when the test
// binary ends.
func Cleanup() {
	buildMu.Lock()
	defer buildMu.Unlock()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	binDir, built = "", map[string]string{}
}

// Options say how to start a node process.
type Options struct {
	// Data is the --data directory; required.
	Data string
	// Config, when not nil, is written as JSON next to Data and passed with
	// --config. A string is taken as the path of an existing file.
	Config any
	// Args are more flags (--http 127.0.0.1:0 is always given first, so a
	// later --http wins).
	Args []string
	// Env is added to the test process's environment.
	Env []string
	// Token is sent as the bearer token by Do.
	Token string
	// Wrap, when set, starts the node through this command: Wrap[0] is
	// run with Wrap[1:], then the node's binary and its arguments (a shell
	// that enters a cgroup or lowers a limit and then execs "$0" "$@"). The
	// wrapper must exec the node, so that the process is the node's.
	Wrap []string
	// ExtraFiles are inherited by the node as descriptors 3, 4, ... (as
	// exec.Cmd.ExtraFiles), standing for files a careless parent left open.
	ExtraFiles []*os.File
	// Credential, when set, runs the node as that uid and gid (the test
	// must be root); the binary, data dir and config must be theirs to use.
	Credential *syscall.Credential
}

// Proc is a running node process. Its methods are safe for concurrent use.
type Proc struct {
	Cmd *exec.Cmd
	// Base is the API's base URL, http://HOST:PORT.
	Base string
	// Data is the node's data directory.
	Data string
	// Token is the bearer token Do sends; may be empty.
	Token string

	// Name is the node's --name, when Start was given one.
	Name string

	bin    string
	opts   Options
	stderr *testenv.Buffer
	done   chan struct{}
	err    error
}

// Start starts bin (a cmd/callsheet-node binary) as o says and waits until it prints
// "listening on". It fails the test when the node exits first or does not
// listen within StartTimeout; the process is killed at the end of the test.
func Start(t testing.TB, bin string, o Options) *Proc {
	t.Helper()
	p, err := startAsync(t, bin, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startAsync is Start for any goroutine: it reports what went wrong
// instead of failing the test (the process is still killed at the end of
// the test).
func startAsync(t testing.TB, bin string, o Options) (*Proc, error) {
	if o.Data == "" {
		return nil, errors.New("testnode.Start: Options.Data is empty")
	}
	args := []string{"--data", o.Data, "--http", "127.0.0.1:0"}
	switch c := o.Config.(type) {
	case nil:
	case string:
		args = append(args, "--config", c)
	default:
		path := filepath.Join(filepath.Dir(filepath.Clean(o.Data)), filepath.Base(o.Data)+"-config.json")
		b, err := json.MarshalIndent(c, "", "  ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return nil, err
		}
		if c := o.Credential; c != nil {
			if err := os.Chown(path, int(c.Uid), int(c.Gid)); err != nil {
				return nil, err
			}
		}
		args = append(args, "--config", path)
	}
	args = append(args, o.Args...)
	cmd := exec.Command(bin, args...)
	if len(o.Wrap) > 0 {
		cmd = exec.Command(o.Wrap[0], append(append(o.Wrap[1:len(o.Wrap):len(o.Wrap)], bin), args...)...)
	}
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.ExtraFiles = o.ExtraFiles
	if o.Credential != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.Credential}
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, Data: o.Data, Token: o.Token, Name: flagValue(o.Args, "--name"), bin: bin, opts: o, stderr: &testenv.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(stdout)
		for lines.Scan() {
			if a, ok := strings.CutPrefix(lines.Text(), "listening on "); ok {
				select {
				case addr <- a:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Signal(syscall.SIGCONT) // a paused process dies on SIGKILL too, but reap it promptly
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	select {
	case a := <-addr:
		p.Base = a
	case <-p.done:
		return nil, fmt.Errorf("node exited before listening: %v\n%s", p.err, p.stderr.String())
	case <-time.After(StartTimeout):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("node did not listen within %s\n%s", StartTimeout, p.stderr.String())
	}
	return p, nil
}

// flagValue returns the value given to flag in args ("--flag V" or
// "--flag=V"), or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// Restart starts the node again as it was started (same binary, data,
// flags and environment), once the process has exited, and returns the new
// Proc.
func (p *Proc) Restart(t testing.TB) *Proc {
	t.Helper()
	<-p.done
	return Start(t, p.bin, p.opts)
}

// Pause stops the process (SIGSTOP): it runs nothing, its connections stay
// open, and its children go on, as a node cut off by a partition would.
func (p *Proc) Pause() error { return p.Cmd.Process.Signal(syscall.SIGSTOP) }

// Resume lets a paused process go on (SIGCONT).
func (p *Proc) Resume() error { return p.Cmd.Process.Signal(syscall.SIGCONT) }

// Done is closed when the process has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is the process's exit error, once Done is closed.
func (p *Proc) Err() error { <-p.done; return p.err }

// OperatorURL returns the base URL of the node's operator listener
// (--metrics-listen), as its start-up log names it, or "".
func (p *Proc) OperatorURL() string {
	_, rest, ok := strings.Cut(p.stderr.String(), "operator listener on ")
	if !ok {
		return ""
	}
	url, _, _ := strings.Cut(rest, ": ") // "http://HOST:PORT: /metrics, ..."
	return url
}

// Stderr returns what the process wrote on standard error so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// PID is the process id.
func (p *Proc) PID() int { return p.Cmd.Process.Pid }

// Stop ends the node with SIGTERM and waits; it fails the test when the
// node does not stop within 30 s (it is then killed).
func (p *Proc) Stop(t testing.TB) {
	t.Helper()
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-p.done
		t.Fatalf("node did not stop on SIGTERM within 30s\n%s", p.stderr.String())
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Signal sends sig to the process (SIGSTOP and SIGCONT for partitions).
func (p *Proc) Signal(sig syscall.Signal) error { return p.Cmd.Process.Signal(sig) }

// Do sends a JSON request with p's token and decodes the answer into out
// (a *[]byte receives the raw body). It returns the status code.
func (p *Proc) Do(method, path string, body, out any) (int, error) {
	return p.DoAs(p.Token, method, path, body, out)
}

// DoAs is Do with another bearer token ("" sends none).
func (p *Proc) DoAs(token, method, path string, body, out any) (int, error) {
	return p.DoCtx(context.Background(), token, method, path, body, out)
}

// DoCtx is DoAs bounded by ctx (a paused node never answers).
func (p *Proc) DoCtx(ctx context.Context, token, method, path string, body, out any) (int, error) {
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	case string:
		r = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return 0, err
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, p.Base+path, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if bp, ok := out.(*[]byte); ok {
			*bp = b
		} else if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
	}
	return resp.StatusCode, nil
}

// Events reads a session's recorded events through the API (follow=false).
func (p *Proc) Events(session string) ([]events.Event, error) {
	var raw []byte
	code, err := p.Do("GET", "/v1/sessions/"+session+"/events?follow=false", nil, &raw)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("events of %s: %d %s", session, code, raw)
	}
	var out []events.Event
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var ev events.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return nil, fmt.Errorf("event line %q: %w", line, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// WriteJSON writes v as indented JSON to path (mode 0600), failing the test
// on error.
func WriteJSON(t testing.TB, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
