package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/callsheet/callsheet/internal/testenv"
)

// runMain starts a Main on a temp dir and a free port, closed at cleanup.
func runMain(t *testing.T, args ...string) (*Main, *bytes.Buffer) {
	t.Helper()
	m := NewMain()
	var stdout bytes.Buffer
	m.Stdout, m.Stderr = &stdout, io.Discard
	if err := m.ParseFlags(append([]string{"--data", t.TempDir(), "--http", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		m.Close()
		t.Fatalf("Run: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m, &stdout
}

func TestMainServes(t *testing.T) {
	m, stdout := runMain(t)
	if got, want := stdout.String(), "listening on http://"+m.Addr()+"\n"; got != want {
		t.Fatalf("stdout=%q, want %q", got, want)
	}
	if strings.HasSuffix(m.Addr(), ":0") {
		t.Fatalf("Addr()=%s: want the bound port", m.Addr())
	}
	resp, err := http.Get("http://" + m.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"ok"`) {
		t.Fatalf("healthz: %d %s", resp.StatusCode, b)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := http.Get("http://" + m.Addr() + "/healthz"); err == nil {
		t.Fatalf("the API still answers after Close")
	}
}

// TestMainCloseEndsStreams: a followed event stream does not hold up a
// graceful shutdown.
func TestMainCloseEndsStreams(t *testing.T) {
	m, _ := runMain(t)
	resp, err := http.Post("http://"+m.Addr()+"/v1/sessions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Session string }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	req, _ := http.NewRequest("GET", "http://"+m.Addr()+"/v1/sessions/"+s.Session+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	stream, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Body.Close()
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, stream.Body); close(ended) }()
	start := time.Now()
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > ShutdownTimeout/2 {
		t.Fatalf("Close took %s with a followed stream open", d)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the followed stream did not end at shutdown")
	}
}

func TestMainWorkspaceRoot(t *testing.T) {
	root := t.TempDir()
	m, _ := runMain(t, "--workspace-root", root)
	resp, err := http.Post("http://"+m.Addr()+"/v1/sessions", "application/json", strings.NewReader(`{"workspace": "proj"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s struct{ Workspace string }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	if resp.StatusCode != http.StatusCreated || !strings.HasPrefix(s.Workspace, root) {
		t.Fatalf("status %d workspace %q, want 201 under %s", resp.StatusCode, s.Workspace, root)
	}
}

func TestMainBadConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "callsheet.json")
	if err := os.WriteFile(path, []byte("{\n  \"concurrency\": {\"tool_calls\": 0}\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := NewMain()
	m.Stdout, m.Stderr = io.Discard, io.Discard
	if err := m.ParseFlags([]string{"--data", t.TempDir(), "--http", "127.0.0.1:0", "--config", path}); err != nil {
		t.Fatal(err)
	}
	err := m.Run(context.Background())
	defer m.Close()
	if err == nil {
		t.Fatal("Run accepted a bad config")
	}
	for _, want := range []string{path, "concurrency.tool_calls"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	m2 := NewMain()
	m2.ConfigPath = filepath.Join(t.TempDir(), "missing.json")
	if err := m2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing config: err=%v, want one naming the file", err)
	}
}

func TestMainRefusesPublicWithoutTenants(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:7700", "example.com:80"} {
		m := NewMain()
		m.DataDir, m.HTTPAddr = t.TempDir(), addr
		err := m.Run(context.Background())
		m.Close()
		if err == nil || !strings.Contains(err.Error(), "tenants") {
			t.Errorf("--http %s without tenants: err=%v, want a refusal naming tenants", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:7700", "localhost:1", "[::1]:0"} {
		if !loopback(addr) {
			t.Errorf("loopback(%q)=false", addr)
		}
	}
}

func TestMainPublicWithTenants(t *testing.T) {
	path := filepath.Join(t.TempDir(), "callsheet.json")
	if err := os.WriteFile(path, []byte(`{"tenants": {"acme": {"token": "s3cret"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := NewMain()
	m.Stdout, m.Stderr = io.Discard, io.Discard
	m.DataDir, m.HTTPAddr, m.ConfigPath = t.TempDir(), "0.0.0.0:0", path
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("Run with tenants on 0.0.0.0: %v", err)
	}
	defer m.Close()
	_, port, _ := strings.Cut(m.Addr(), "]:")
	if port == "" {
		port = m.Addr()[strings.LastIndex(m.Addr(), ":")+1:]
	}
	resp, err := http.Get("http://127.0.0.1:" + port + "/v1/tools")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("tools without a token: %d, want 401", resp.StatusCode)
	}
}

func TestParseFlags(t *testing.T) {
	m := NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"--data", "d", "--http", "127.0.0.1:1", "--workspace-root", "w", "--config", "c.json", "--nats", "nats://x:4222", "--nats-creds", "k.nk"}); err != nil {
		t.Fatal(err)
	}
	if m.DataDir != "d" || m.HTTPAddr != "127.0.0.1:1" || m.WorkspaceRoot != "w" || m.ConfigPath != "c.json" || m.NATSURL != "nats://x:4222" || m.NATSCredentials != "k.nk" {
		t.Fatalf("parsed %+v", m)
	}
	m = NewMain()
	if err := m.ParseFlags([]string{"--name", "n1", "--cluster-listen", "127.0.0.1:6222", "--routes", "nats-route://a:6222,nats-route://b:6222", "--shared-workspaces", "--advertise", "http://n1:7700"}); err != nil {
		t.Fatal(err)
	}
	if m.Name != "n1" || m.ClusterListen != "127.0.0.1:6222" || m.Routes != "nats-route://a:6222,nats-route://b:6222" || !m.SharedWorkspaces || m.Advertise != "http://n1:7700" {
		t.Fatalf("fleet flags parsed %+v", m)
	}
	if err := NewMain().ParseFlags([]string{"extra"}); err == nil {
		t.Errorf("a stray argument was accepted")
	}
	m = NewMain()
	m.Stderr = io.Discard
	if err := m.ParseFlags([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: err=%v, want flag.ErrHelp", err)
	}
	if m := NewMain(); m.DataDir != "./data" || m.HTTPAddr != "127.0.0.1:7700" {
		t.Errorf("defaults %q %q", m.DataDir, m.HTTPAddr)
	}
}

// TestBinary builds the node and runs it as a real process: it prints the
// address, serves a session and a turn, and exits 0 on SIGTERM.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "callsheet-node")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		t.Fatalf("no output; stderr:\n%s", stderr.String())
	}
	addr, ok := strings.CutPrefix(lines.Text(), "listening on http://")
	if !ok {
		t.Fatalf("first line %q, want listening on http://ADDR", lines.Text())
	}
	base := "http://" + addr

	resp, err := http.Post(base+"/v1/sessions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Session, Workspace string }
	_ = json.NewDecoder(resp.Body).Decode(&s)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || s.Session == "" {
		t.Fatalf("open session: %d %+v", resp.StatusCode, s)
	}
	resp, err = http.Post(base+"/v1/sessions/"+s.Session+"/turns", "application/json",
		strings.NewReader(`{"calls":[{"id":"w","name":"write","arguments":{"path":"hello.txt","content":"hi"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var turn struct {
		Status  string
		Results []struct{ Outcome string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&turn)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || turn.Status != "complete" || len(turn.Results) != 1 || turn.Results[0].Outcome != "ok" {
		t.Fatalf("turn: %d %+v", resp.StatusCode, turn)
	}
	if b, err := os.ReadFile(filepath.Join(s.Workspace, "hello.txt")); err != nil || string(b) != "hi" {
		t.Fatalf("hello.txt=%q %v", b, err)
	}

	// A bad config makes the binary exit 1 naming the file and the field.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"durability": "sometimes"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--data", filepath.Join(dir, "other"), "--http", "127.0.0.1:0", "--config", bad).CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), bad) || !strings.Contains(string(out), "durability") {
		t.Errorf("bad config: %v, output %q; want exit 1 naming %s and durability", err, out, bad)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if lines.Scan() {
		t.Errorf("a second stdout line: %q", lines.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
}

// TestMainNATSCredentials: the node makes its credentials at first start,
// readable by its user only; its embedded server refuses a client without
// them; a second node reaches that server with --nats and --nats-creds, and
// without --nats-creds fails at once, naming the flag.
func TestMainNATSCredentials(t *testing.T) {
	data := t.TempDir()
	m, _ := runMain(t, "--data", data)
	creds := filepath.Join(data, "credentials", "nats.nk")
	for path, want := range map[string]os.FileMode{creds: 0o600, filepath.Dir(creds): 0o700} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatalf("credentials after start: %v", err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", path, got, want)
		}
	}
	if got := m.node.NATSCredentials(); got != creds {
		t.Errorf("NATSCredentials()=%q, want %q", got, creds)
	}
	url := m.node.ClientURL()
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatalf("connected to the embedded server at %s without credentials", url)
	}

	other := NewMain()
	other.Stdout, other.Stderr = io.Discard, io.Discard
	if err := other.ParseFlags([]string{"--data", t.TempDir(), "--http", "127.0.0.1:0", "--nats", url, "--name", "other"}); err != nil {
		t.Fatal(err)
	}
	err := other.Run(context.Background())
	other.Close()
	if err == nil || !strings.Contains(err.Error(), "--nats-creds") {
		t.Fatalf("--nats without credentials: err=%v, want one naming --nats-creds", err)
	}
	second, _ := runMain(t, "--nats", url, "--nats-creds", creds, "--name", "second")
	resp, err := http.Post("http://"+second.Addr()+"/v1/sessions", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("open a session on the node using --nats-creds: %d", resp.StatusCode)
	}
}

// TestMainReportsTheSandbox: the start-up log has one line per boundary of
// the sandbox, then what runs in it; the config file is among what the
// sandbox hides.
func TestMainReportsTheSandbox(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "callsheet.json")
	if err := os.WriteFile(cfg, []byte(`{"sandbox": {"limits": {"processes": 77}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	m := NewMain()
	var stderr bytes.Buffer
	m.Stdout, m.Stderr = io.Discard, &stderr
	if err := m.ParseFlags([]string{"--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0", "--config", cfg}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatalf("Run: %v", err)
	}
	defer m.Close()
	log := stderr.String()
	for _, name := range []string{"network", "pid", "mount", "user", "limits", "landlock", "seccomp"} {
		if !strings.Contains(log, "sandbox: "+name+": ") {
			t.Errorf("no start-up line for the %s boundary:\n%s", name, log)
		}
	}
	for _, want := range []string{"processes 77", "shell: ", "glob, grep: "} {
		if !strings.Contains(log, want) {
			t.Errorf("start-up log lacks %q:\n%s", want, log)
		}
	}
}

// A fleet's node waits at start for a majority of its servers; a SIGTERM
// then must end it, not be ignored until a fleet forms that never will.
func TestSignalWhileWaitingForTheFleet(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "callsheet-node")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The route names a port nothing listens on: JetStream never gets a
	// meta leader, so the node waits for it.
	cmd := exec.Command(bin, "--data", filepath.Join(dir, "data"), "--http", "127.0.0.1:0", "--name", "lonely",
		"--cluster-listen", "127.0.0.1:0", "--routes", "nats-route://127.0.0.1:1")
	stderr := &testenv.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stderr.String(), "waiting for JetStream") {
		if time.Now().After(deadline) {
			t.Fatalf("the node never said it waits for JetStream:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("exit: %v, want status 1", err)
		}
		if !strings.Contains(stderr.String(), "stopped by a signal while starting") {
			t.Errorf("stderr does not say why it stopped:\n%s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("SIGTERM did not end a node waiting for its fleet within 30 s:\n%s", stderr.String())
	}
}

// TestConnectionLimitKeepsHalfTheDescriptors: the API's connection limit
// is http.max_connections, but never more than half the descriptor limit.
func TestConnectionLimitKeepsHalfTheDescriptors(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	low := syscall.Rlimit{Cur: 200, Max: old.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ configured, want int }{{1024, 100}, {64, 64}, {1, 1}} {
		if got, nofile := connectionLimit(tc.configured); got != tc.want || nofile != 200 {
			t.Errorf("connectionLimit(%d) with RLIMIT_NOFILE 200 = %d (limit %d), want %d", tc.configured, got, nofile, tc.want)
		}
	}
}
