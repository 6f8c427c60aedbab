package security

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testnode"
)

// dialAPI opens a raw TCP connection to p's API, closed at the end of the test.
func dialAPI(t *testing.T, p *testnode.Proc) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(p.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestSlowBodyIsCutOff: a client that sends a request body one byte a
// second (slowloris) holds its connection and handler for at most
// http.body_timeout (2 s here), then gets 408 and the connection closes;
// before, the node waited for as long as the client kept sending.
func TestSlowBodyIsCutOff(t *testing.T) {
	p := node(t, map[string]any{"http": map[string]any{"body_timeout": "2s"}})
	c := dialAPI(t, p)
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	const patience = 20 * time.Second
	_ = c.SetReadDeadline(start.Add(patience))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	held := time.Since(start)
	if err != nil {
		t.Fatalf("no answer to a body sent a byte a second, after %s: %v", held.Round(time.Millisecond), err)
	}
	body, _ := io.ReadAll(resp.Body)
	t.Logf("a body sent a byte a second was answered after %s: %d %s", held.Round(time.Millisecond), resp.StatusCode, body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "http.body_timeout") {
		t.Errorf("answer %d %s, want 408 naming http.body_timeout", resp.StatusCode, body)
	}
	if held > 8*time.Second {
		t.Errorf("the node held the slow body %s, want about http.body_timeout (2s)", held)
	}
}

// TestIdleConnectionIsClosed: a kept-alive connection that sends no second
// request is closed after http.idle_timeout (1 s here); before, it stayed
// open for good, each one a descriptor of the node's.
func TestIdleConnectionIsClosed(t *testing.T) {
	p := node(t, map[string]any{"http": map[string]any{"idle_timeout": "1s"}})
	c := dialAPI(t, p)
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(15 * time.Second))
	_, err = br.ReadByte()
	held := time.Since(start)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("an idle kept-alive connection: %v after %s, want closed by the node", err, held.Round(time.Millisecond))
	}
	t.Logf("an idle kept-alive connection was closed after %s", held.Round(time.Millisecond))
}

// TestIdleConnectionsCannotExhaustDescriptors: a node whose file
// descriptor limit is 256 is flooded with 300 unauthenticated connections
// that each send one request and then idle, and 300 that send nothing,
// while a turn runs that needs descriptors of its own (a file written, a
// shell command with its pipes and sandbox). The node must take at most
// half its limit for connections, the turn must complete, and the node must
// serve once the flood ends.
func TestIdleConnectionsCannotExhaustDescriptors(t *testing.T) {
	wrapper := filepath.Join(t.TempDir(), "node-256")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n 256 || exit 1\nexec %s \"$@\"\n", testnode.Node(t, ""))
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := testnode.Start(t, wrapper, testnode.Options{Data: filepath.Join(t.TempDir(), "data")})
	s := open(t, p, "")
	base := descriptors(t, p.PID())

	// The turn: a shell command that waits for the flood, then writes.
	turn := map[string]any{"id": "t1", "calls": []any{map[string]any{"id": "c1", "name": "shell",
		"arguments": map[string]any{"command": "sleep 4; echo done > out.txt; cat out.txt"}}}}
	var started struct{ Turn string }
	if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns?wait=0", turn, &started); err != nil || code != http.StatusAccepted {
		t.Fatalf("start the turn: %d %v", code, err)
	}

	addr := strings.TrimPrefix(p.Base, "http://")
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for i := range 600 {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			t.Logf("connection %d: %v", i, err)
			continue
		}
		flood = append(flood, c)
		if i%2 == 0 {
			fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		}
	}
	time.Sleep(time.Second)
	held := descriptors(t, p.PID())
	t.Logf("descriptors of the node: %d before the flood, %d during it (limit 256)", base, held)
	if held > 128+base+16 {
		t.Errorf("the node holds %d descriptors during the flood, from %d: connections took more than half its limit", held, base)
	}

	// The turn completes while the flood goes on.
	deadline := time.Now().Add(30 * time.Second)
	var tv struct {
		Status  string
		Results []struct {
			Outcome string
			Content []struct{ Text string }
		}
	}
	for {
		for _, c := range flood {
			c.Close()
		}
		flood = nil
		if code, err := p.Do("GET", "/v1/sessions/"+s+"/turns/"+started.Turn, nil, &tv); err == nil && code == http.StatusOK && tv.Status == "complete" {
			break
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("the turn did not complete (node exited: %v): %+v\n%s", p.Exited(), tv, lastBytes(p.Stderr(), 3000))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(tv.Results) != 1 || tv.Results[0].Outcome != "ok" || !strings.Contains(tv.Results[0].Content[0].Text, "done") {
		t.Fatalf("the turn during the flood: %+v\n%s", tv, lastBytes(p.Stderr(), 3000))
	}
	if strings.Contains(p.Stderr(), "too many open files") {
		t.Errorf("the node ran out of descriptors:\n%s", lastBytes(p.Stderr(), 3000))
	}
}

// descriptors counts the open file descriptors of process pid.
func descriptors(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}
