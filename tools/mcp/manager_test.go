package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/mcptest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/tool"
)

// helper is the mcptest server: this test binary, re-executed.
func helper(name string, env ...string) Server {
	e := map[string]string{mcptest.Env: "1"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		e[k] = v
	}
	return Server{Name: name, Command: []string{os.Args[0]}, Env: e}
}

// filesystem is @modelcontextprotocol/server-filesystem over stdio, allowed
// to work in dir.
func filesystem(t *testing.T, name, dir string) Server {
	return Server{Name: name, Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-filesystem/dist/index.js"), dir}}
}

// everythingStdio is @modelcontextprotocol/server-everything over stdio.
func everythingStdio(t *testing.T, name string, env map[string]string) Server {
	return Server{Name: name, Command: []string{testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-everything/dist/index.js"), "stdio"}, Env: env}
}

// everythingHTTP starts server-everything's streamable HTTP transport on a
// free port and returns its /mcp URL; the process ends with the test.
func everythingHTTP(t *testing.T) (string, *exec.Cmd) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(testenv.Node22(t), testenv.NodeModule(t, "@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		once := sync.Once{}
		for sc.Scan() {
			if strings.Contains(sc.Text(), "listening on port") {
				once.Do(func() { close(ready) })
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatal("server-everything did not listen within 60s")
	}
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port), cmd
}

// start makes a Manager over a fresh registry and starts it, waiting up to a
// minute for the first connections; it is closed with the test.
func start(t *testing.T, servers []Server, opts ...Option) (*Manager, *tool.Registry) {
	t.Helper()
	reg := &tool.Registry{}
	opts = append([]Option{WithBackoff(100*time.Millisecond, 2*time.Second), WithLogger(logtest.New(t))}, opts...)
	m, err := New(reg, servers, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	m.Start(context.Background(), time.Minute)
	return m, reg
}

// waitFor polls cond every 20 ms for up to a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mustTool(t *testing.T, reg *tool.Registry, name string) *tool.Tool {
	t.Helper()
	tl, ok := reg.Get(name)
	if !ok {
		var have []string
		for _, x := range reg.All() {
			have = append(have, x.Name)
		}
		t.Fatalf("tool %s is not registered (have %v)", name, have)
	}
	return tl
}

// run validates args as the runtime does, then runs the tool.
func run(t *testing.T, tl *tool.Tool, args string) (tool.Result, error) {
	t.Helper()
	norm, err := tool.NormalizeArguments(json.RawMessage(args))
	if err == nil {
		err = tl.Validate(norm)
	}
	if err != nil {
		return tool.Result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return tl.Run(ctx, norm)
}

func textResult(r tool.Result) string {
	var b strings.Builder
	for _, p := range r.Parts {
		b.WriteString(p.Text)
		b.Write(p.JSON)
	}
	return b.String()
}

// TestFilesystemServer runs the real filesystem server over stdio: its
// tools are registered under mcp__fs__, strictest when untrusted, read-only
// when trusted, and a write then a read go through to the disk.
func TestFilesystemServer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello, disk\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	untrusted := filesystem(t, "fs", dir)
	trusted := filesystem(t, "fst", dir)
	trusted.TrustAnnotations = true
	trusted.Overrides = map[string]Override{"write_file": {Replay: tool.ReplaySafe, Timeout: 7 * time.Second}}
	m, reg := start(t, []Server{untrusted, trusted})
	for _, st := range m.Status() {
		if !st.Connected || len(st.Tools) < 5 {
			t.Fatalf("status %+v: want connected with its tools", st)
		}
	}

	read := mustTool(t, reg, "mcp__fs__read_text_file")
	if read.Declarations != tool.Strictest {
		t.Errorf("untrusted read_text_file declarations=%+v, want the strictest", read.Declarations)
	}
	tread := mustTool(t, reg, "mcp__fst__read_text_file")
	if tread.Effect != tool.EffectReadOnly || tread.Replay != tool.ReplaySafe || tread.Concurrency != tool.ConcurrencyParallelSafe {
		t.Errorf("trusted read_text_file declarations=%+v, want read_only/safe/parallel_safe", tread.Declarations)
	}
	twrite := mustTool(t, reg, "mcp__fst__write_file")
	if twrite.Effect != tool.EffectSideEffecting || twrite.Replay != tool.ReplaySafe || twrite.Timeout != 7*time.Second {
		t.Errorf("trusted write_file=%+v timeout %s, want side_effecting with the override's safe replay and 7s", twrite.Declarations, twrite.Timeout)
	}
	if !strings.Contains(strings.Join(labels(twrite), ","), "irreversible") {
		t.Errorf("write_file labels=%v, want irreversible from its destructiveHint", twrite.Labels)
	}

	write := mustTool(t, reg, "mcp__fs__write_file")
	target := filepath.Join(dir, "out.txt")
	if _, err := run(t, write, fmt.Sprintf(`{"path": %q, "content": "written through MCP"}`, target)); err != nil {
		t.Fatalf("write_file: %v", err)
	}
	if b, err := os.ReadFile(target); err != nil || string(b) != "written through MCP" {
		t.Fatalf("file after write_file = %q, %v", b, err)
	}
	res, err := run(t, read, fmt.Sprintf(`{"path": %q}`, filepath.Join(dir, "hello.txt")))
	if err != nil || !strings.Contains(textResult(res), "hello, disk") {
		t.Fatalf("read_text_file = %q, %v", textResult(res), err)
	}
	// Arguments are checked against the server's schema before anything is
	// sent: a wrong type and a missing field are refused here.
	for _, bad := range []string{`{"path": 5}`, `{}`, `{"path": "x", "surprise": true}`} {
		if _, err := run(t, read, bad); !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("read_text_file %s: err=%v, want invalid arguments", bad, err)
		}
	}
	// The server's own refusal (a path outside its allowed directory) is an
	// error result, not a lost call.
	_, err = run(t, read, `{"path": "/etc/passwd"}`)
	if err == nil || errors.Is(err, tool.ErrLost) || errors.Is(err, tool.ErrNotSent) {
		t.Fatalf("read outside the allowed dir: err=%v, want the server's error", err)
	}
}

func labels(t *tool.Tool) []string {
	var out []string
	for _, l := range t.Labels {
		out = append(out, string(l))
	}
	return out
}
