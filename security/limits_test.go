package security

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/projections"
)

// The attacks on the limits boundary (docs/spec.md §10, "Limits"; docs/security.md, "Limits"):
// large bodies, arguments and outputs, many calls, duplicate keys, and the
// per-tenant quotas, each against a real node process.

// apiError is the API's error body.
type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// send sends body (raw bytes or a value to marshal) and returns the status
// and the raw answer.
func send(t *testing.T, p *testnode.Proc, path string, body any) (int, []byte) {
	t.Helper()
	var raw []byte
	code, err := p.Do("POST", path, body, &raw)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return code, raw
}

// wantRefusal checks an error answer: its status, and a message holding
// every one of msgs.
func wantRefusal(t *testing.T, what string, code int, raw []byte, wantCode int, msgs ...string) {
	t.Helper()
	var e apiError
	if code != wantCode || json.Unmarshal(raw, &e) != nil || e.Error.Message == "" {
		t.Fatalf("%s: status %d %s, want %d with an error body", what, code, raw, wantCode)
	}
	for _, m := range msgs {
		if !strings.Contains(e.Error.Message, m) {
			t.Errorf("%s: message %q does not name %q", what, e.Error.Message, m)
		}
	}
}

// resultText is the text of a result's parts.
func resultText(r events.Result) string {
	var b strings.Builder
	for _, p := range r.Content {
		b.WriteString(p.Text)
		b.Write(p.JSON)
	}
	return b.String()
}

// bigText is n bytes of text that needs JSON escaping (quotes, backslashes,
// control characters, non-ASCII), in lines, from a fixed seed.
func bigText(n int) string {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "x", "y", "z", " ", " ", " ", "0", "9", "{", "}", "(", ")",
		"\"", "\\", "\t", "é", "→", "<", ">", "&"}
	var b strings.Builder
	b.Grow(n + 8)
	for b.Len() < n {
		if r.IntN(60) == 0 {
			b.WriteByte('\n')
			continue
		}
		b.WriteString(alphabet[r.IntN(len(alphabet))])
	}
	return b.String()[:n]
}

// replayJSON runs cmd/callsheet-replay --format json on a stopped node's data dir.
func replayJSON(t *testing.T, data, session string) []byte {
	t.Helper()
	out, err := exec.Command(testnode.Replay(t), "--data", data, "--session", session, "--format", "json").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("replay %s: %v\n%s", session, err, stderr)
	}
	return out
}

// TestLargeWriteWorksAndReplays: a 4 MiB write, four times NATS's default
// message payload, goes API → log → tool → result, and the replayed
// transcript is the API's byte for byte. Before arguments travelled by
// reference, every turn over ~1 MB answered 503 "maximum payload exceeded".
func TestLargeWriteWorksAndReplays(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	content := bigText(4 << 20)
	tv := call(t, p, s, "write", map[string]any{"path": "big.txt", "content": content})
	if r := tv.Results[0]; r.Outcome != events.OutcomeOK {
		t.Fatalf("4 MiB write: %s %s", r.Outcome, resultText(r))
	}
	// The tool received the arguments whole.
	got, err := os.ReadFile(filepath.Join(p.Data, "workspaces", "default", s, "big.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != content {
		t.Fatalf("the written file is %d bytes and differs from the %d bytes sent", len(got), len(content))
	}
	// A second call in the same session reads back the arguments' event.
	evs, err := p.Events(s)
	if err != nil {
		t.Fatal(err)
	}
	var requested int
	for _, ev := range evs {
		if ev.Type != events.TypeToolCallRequested {
			continue
		}
		var r events.ToolCallRequested
		if err := json.Unmarshal(ev.Data, &r); err != nil {
			t.Fatal(err)
		}
		var a struct{ Content string }
		if err := json.Unmarshal(r.Arguments, &a); err != nil || a.Content != content {
			t.Fatalf("the recorded request's arguments hold %d bytes of content (%v), want the %d sent", len(a.Content), err, len(content))
		}
		requested++
	}
	if requested != 1 {
		t.Fatalf("%d ToolCallRequested events, want 1", requested)
	}
	var live []byte
	if code, err := p.Do("GET", "/v1/sessions/"+s+"/transcript", nil, &live); err != nil || code != http.StatusOK {
		t.Fatalf("transcript: %d %v", code, err)
	}
	p.Stop(t)
	if replayed := replayJSON(t, p.Data, s); !bytes.Equal(replayed, live) {
		t.Fatalf("replayed transcript (%d bytes) differs from the API's (%d bytes)", len(replayed), len(live))
	}
}

// TestTenThousandCalls: a turn of 10,000 calls is refused up front, before
// anything is recorded, with a 413 naming the calls-per-turn limit and its
// config key; a turn at the default limit works, and so do 10,000 calls
// once the operator raises the limit.
func TestTenThousandCalls(t *testing.T) {
	calls := func(n int) []map[string]any {
		out := make([]map[string]any, n)
		for i := range out {
			out[i] = map[string]any{"id": "c" + strconv.Itoa(i), "name": "todo_get", "arguments": map[string]any{}}
		}
		return out
	}
	t.Run("refused", func(t *testing.T) {
		p := node(t, nil)
		s := open(t, p, "")
		code, raw := send(t, p, "/v1/sessions/"+s+"/turns", map[string]any{"calls": calls(10_000)})
		wantRefusal(t, "10,000 calls", code, raw, http.StatusRequestEntityTooLarge, "10000 calls", "limits.calls_per_turn", "1000")
		evs, err := p.Events(s)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 {
			t.Fatalf("the refused turn left %d events, want only SessionOpened and OwnershipTaken", len(evs))
		}
		// At the limit: a turn of 1,000 calls, 500 of them blocked (one
		// append of over 1,000 events), completes.
		cs := calls(1000)
		for i := 0; i < len(cs); i += 2 {
			cs[i]["name"] = "no_such_tool"
		}
		var tv projections.Turn
		if code, err := p.Do("POST", "/v1/sessions/"+s+"/turns", map[string]any{"calls": cs}, &tv); err != nil || code != http.StatusOK {
			t.Fatalf("1,000 calls: %d %v", code, err)
		}
		if len(tv.Results) != 1000 || tv.Results[0].Outcome != events.OutcomeBlocked || tv.Results[1].Outcome != events.OutcomeOK {
			t.Fatalf("1,000 calls: %d results, first %+v", len(tv.Results), tv.Results[0])
		}
	})
	t.Run("raised", func(t *testing.T) {
		p := node(t, map[string]any{"durability": "interval", "limits": map[string]any{"calls_per_turn": 10_000, "calls_in_flight_per_tenant": 10_000}})
		s := open(t, p, "")
		var tv projections.Turn
		start := time.Now()
		code, err := p.Do("POST", "/v1/sessions/"+s+"/turns", map[string]any{"calls": calls(10_000)}, &tv)
		if err != nil || code != http.StatusOK {
			t.Fatalf("10,000 calls with limits.calls_per_turn 10000: %d %v", code, err)
		}
		t.Logf("10,000 calls took %s", time.Since(start))
		if len(tv.Results) != 10_000 {
			t.Fatalf("%d results, want 10,000", len(tv.Results))
		}
		for i, r := range tv.Results {
			if r.ID != "c"+strconv.Itoa(i) || r.Outcome != events.OutcomeOK {
				t.Fatalf("result %d: %+v", i, r)
			}
		}
		var live []byte
		if code, err := p.Do("GET", "/v1/sessions/"+s+"/transcript", nil, &live); err != nil || code != http.StatusOK {
			t.Fatalf("transcript: %d %v", code, err)
		}
		p.Stop(t)
		if replayed := replayJSON(t, p.Data, s); !bytes.Equal(replayed, live) {
			t.Fatalf("replayed transcript (%d bytes) differs from the API's (%d bytes)", len(replayed), len(live))
		}
	})
}

// memory reads a process's resident set size and its peak (VmRSS, VmHWM),
// in bytes.
func memory(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			peak = kb << 10
		}
	}
	return rss, peak
}

// resetPeak makes a process's VmHWM its current RSS (writing 5 to
// clear_refs), so a later reading is the peak since.
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
}

// TestLargeShellOutputKeepsMemoryFlat: a shell command that writes 200 MB
// does not make the node hold it, while it runs, while its full output is
// kept, or while a client reads that back. Before output was streamed to a
// spill file, it took the node from 29 MB to a 436 MB peak.
func TestLargeShellOutputKeepsMemoryFlat(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	call(t, p, s, "shell", map[string]any{"command": "echo warm"})
	resetPeak(t, p.PID())
	before, _ := memory(t, p.PID())
	const total = 200_000_000
	tv := call(t, p, s, "shell", map[string]any{"command": fmt.Sprintf("yes 'a line of build output, 40 bytes long' | head -c %d", total), "timeout_ms": 300000})
	r := tv.Results[0]
	if r.Outcome != events.OutcomeOK || !r.Truncated || r.FullOutput == nil {
		t.Fatalf("200 MB output: outcome %s truncated %v full %v: %.300s", r.Outcome, r.Truncated, r.FullOutput, resultText(r))
	}
	afterCall, peakCall := memory(t, p.PID())
	resetPeak(t, p.PID())
	var full []byte
	if code, err := p.Do("GET", "/v1/outputs/"+r.FullOutput.Object, nil, &full); err != nil || code != http.StatusOK {
		t.Fatalf("full output: %d %v", code, err)
	}
	afterRead, peakRead := memory(t, p.PID())
	t.Logf("node RSS: %d MiB before; during the 200 MB output peak %d MiB, %d MiB after; reading its 64 MiB full output back peak %d MiB, %d MiB after",
		before>>20, peakCall>>20, afterCall>>20, peakRead>>20, afterRead>>20)
	// The default keeps 64 MiB of a call's output; the rest is counted and
	// dropped, and the kept output says so.
	if int64(len(full)) != r.FullOutput.Bytes || len(full) < 64<<20 || len(full) > 65<<20 {
		t.Errorf("the kept output is %d bytes (the ref says %d), want the 64 MiB of limits.output_bytes_per_call and a note", len(full), r.FullOutput.Bytes)
	}
	if !bytes.HasPrefix(full, []byte("a line of build output, 40 bytes long\n")) || !bytes.Contains(full[len(full)-400:], []byte("limits.output_bytes_per_call")) {
		t.Errorf("the kept output does not start with the command's output or does not end with a note naming limits.output_bytes_per_call: ...%q", full[max(len(full)-400, 0):])
	}
	// Holding the kept 64 MiB whole, at any step, would grow the peak by
	// more than that.
	if grew := peakCall - before; grew >= 64<<20 {
		t.Errorf("the node's peak RSS grew by %d MiB during a 200 MB output, want under 64 MiB", grew>>20)
	}
	if grew := peakRead - afterCall; grew >= 64<<20 {
		t.Errorf("the node's peak RSS grew by %d MiB while a client read a 64 MiB output, want under 64 MiB", grew>>20)
	}
}

// TestLimitsAreRefused: each configured limit, hit, is refused with its
// status and a message naming the limit and its config key.
func TestLimitsAreRefused(t *testing.T) {
	p := node(t, map[string]any{"limits": map[string]any{
		"body_bytes":                 1 << 20,
		"calls_per_turn":             3,
		"sessions_per_tenant":        3,
		"calls_in_flight_per_tenant": 3,
		"output_bytes_per_call":      1 << 20,
		"output_bytes_per_tenant":    3 << 20,
	}})
	s := open(t, p, "")

	t.Run("body", func(t *testing.T) {
		body := fmt.Sprintf(`{"calls":[{"id":"c1","name":"write","arguments":{"path":"x","content":%q}}]}`, strings.Repeat("x", 1<<20))
		code, raw := send(t, p, "/v1/sessions/"+s+"/turns", body)
		wantRefusal(t, "a body over limits.body_bytes", code, raw, http.StatusRequestEntityTooLarge, "1048576", "limits.body_bytes")
	})
	t.Run("calls per turn", func(t *testing.T) {
		cs := make([]map[string]any, 4)
		for i := range cs {
			cs[i] = map[string]any{"id": "c" + strconv.Itoa(i), "name": "todo_get", "arguments": map[string]any{}}
		}
		code, raw := send(t, p, "/v1/sessions/"+s+"/turns", map[string]any{"calls": cs})
		wantRefusal(t, "4 calls", code, raw, http.StatusRequestEntityTooLarge, "4 calls", "limits.calls_per_turn", "3")
	})
	t.Run("output per call", func(t *testing.T) {
		tv := call(t, p, s, "shell", map[string]any{"command": "head -c 3000000 /dev/zero | tr '\\0' x"})
		r := tv.Results[0]
		if r.Outcome != events.OutcomeOK || r.FullOutput == nil {
			t.Fatalf("3 MB output: %s %v %.200s", r.Outcome, r.FullOutput, resultText(r))
		}
		var full []byte
		if code, err := p.Do("GET", "/v1/outputs/"+r.FullOutput.Object, nil, &full); err != nil || code != http.StatusOK {
			t.Fatalf("full output: %d %v", code, err)
		}
		if len(full) > 1<<20+1024 || !bytes.Contains(full, []byte("limits.output_bytes_per_call")) {
			t.Fatalf("the kept output is %d bytes, want at most 1 MiB and a note naming limits.output_bytes_per_call: ...%q", len(full), full[max(len(full)-300, 0):])
		}
	})
	t.Run("output per tenant", func(t *testing.T) {
		// 1 MiB kept above; two more fill the 3 MiB; the next is not kept.
		var last events.Result
		for i := 0; i < 3; i++ {
			last = call(t, p, s, "shell", map[string]any{"command": "head -c 2000000 /dev/zero | tr '\\0' y"}).Results[0]
		}
		if last.Outcome != events.OutcomeOK || !last.Truncated || last.FullOutput != nil || !strings.Contains(resultText(last), "limits.output_bytes_per_tenant") {
			t.Fatalf("over the tenant's output quota: outcome %s truncated %v full %v, text ...%q; want a cut result saying the full output was not kept (limits.output_bytes_per_tenant)",
				last.Outcome, last.Truncated, last.FullOutput, lastBytes(resultText(last), 300))
		}
	})
	t.Run("sessions per tenant", func(t *testing.T) {
		s2 := open(t, p, "")
		open(t, p, "")
		code, raw := send(t, p, "/v1/sessions", map[string]any{})
		wantRefusal(t, "a 4th open session", code, raw, http.StatusTooManyRequests, "3 open sessions", "limits.sessions_per_tenant")
		if code, raw := send(t, p, "/v1/sessions/"+s2+"/close", map[string]any{}); code != http.StatusOK {
			t.Fatalf("close: %d %s", code, raw)
		}
		s4 := open(t, p, "") // closing one freed its place
		// Closing twice frees one place only.
		for range 2 {
			if code, raw := send(t, p, "/v1/sessions/"+s4+"/close", map[string]any{}); code != http.StatusOK {
				t.Fatalf("close: %d %s", code, raw)
			}
		}
		s5 := open(t, p, "")
		code, raw = send(t, p, "/v1/sessions", map[string]any{})
		wantRefusal(t, "a 4th open session after closing one twice", code, raw, http.StatusTooManyRequests, "limits.sessions_per_tenant")
		if code, raw := send(t, p, "/v1/sessions/"+s5+"/close", map[string]any{}); code != http.StatusOK {
			t.Fatalf("close: %d %s", code, raw)
		}
	})
	t.Run("calls in flight", func(t *testing.T) {
		s3 := open(t, p, "w3")
		_ = s3
		// The running turn holds 2 calls in flight (the 2nd waits behind
		// the 1st: shell is exclusive).
		busy := map[string]any{"id": "busy", "calls": []any{
			map[string]any{"id": "a", "name": "shell", "arguments": map[string]any{"command": "sleep 60"}},
			map[string]any{"id": "b", "name": "shell", "arguments": map[string]any{"command": "sleep 60"}},
		}}
		if code, raw := send(t, p, "/v1/sessions/"+s+"/turns?wait=0", busy); code != http.StatusAccepted {
			t.Fatalf("busy turn: %d %s", code, raw)
		}
		two := map[string]any{"calls": []any{
			map[string]any{"id": "x", "name": "todo_get", "arguments": map[string]any{}},
			map[string]any{"id": "y", "name": "todo_get", "arguments": map[string]any{}},
		}}
		code, raw := send(t, p, "/v1/sessions/"+s3+"/turns", two)
		wantRefusal(t, "2 more calls beside 2 in flight", code, raw, http.StatusTooManyRequests, "limits.calls_in_flight_per_tenant", "3")
		// Nothing of the refused turn was recorded.
		if evs, err := p.Events(s3); err != nil || len(evs) != 2 {
			t.Fatalf("the refused turn left %d events (%v), want only SessionOpened and OwnershipTaken", len(evs), err)
		}
		if code, raw := send(t, p, "/v1/sessions/"+s+"/turns/busy/cancel", map[string]any{}); code != http.StatusAccepted {
			t.Fatalf("cancel: %d %s", code, raw)
		}
		// Once the busy turn has completed its calls are no longer in
		// flight, and the same turn is accepted.
		deadline := time.Now().Add(60 * time.Second)
		for {
			var tv projections.Turn
			if code, err := p.Do("GET", "/v1/sessions/"+s+"/turns/busy", nil, &tv); err == nil && code == http.StatusOK && tv.Status == projections.StatusComplete {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the cancelled turn did not complete within 60s")
			}
			time.Sleep(50 * time.Millisecond)
		}
		for {
			code, raw = send(t, p, "/v1/sessions/"+s3+"/turns", two)
			if code == http.StatusOK {
				break
			}
			if code != http.StatusTooManyRequests || time.Now().After(deadline) {
				t.Fatalf("after the busy turn completed: %d %s", code, raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// lastBytes is the last n bytes of s.
func lastBytes(s string, n int) string { return s[max(len(s)-n, 0):] }

// TestDuplicateKeysAreRefused: a body with a key twice, at any depth, is a
// 400 that names the key and where it is, and nothing runs. encoding/json
// keeps the last of them, so a call that says "read" to one reader and
// "shell" to another was run as shell.
func TestDuplicateKeysAreRefused(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	ws := filepath.Join(p.Data, "workspaces", "default", s)
	for _, c := range []struct {
		name, body string
		msgs       []string
	}{
		{"name twice", `{"calls":[{"id":"c1","name":"read","arguments":{"path":"."},"name":"shell","arguments":{"command":"touch pwned"}}]}`, []string{`"name"`, "calls[0]"}},
		{"name in two cases", `{"calls":[{"id":"c1","name":"read","Name":"shell","arguments":{"command":"touch pwned"}}]}`, []string{`"Name"`, "calls[0]"}},
		{"argument twice", `{"calls":[{"id":"c1","name":"shell","arguments":{"command":"true","command":"touch pwned"}}]}`, []string{`"command"`, "calls[0].arguments"}},
		{"calls twice", `{"calls":[{"id":"c1","name":"todo_get","arguments":{}}],"calls":[{"id":"c2","name":"shell","arguments":{"command":"touch pwned"}}]}`, []string{`"calls"`, "the body"}},
	} {
		code, raw := send(t, p, "/v1/sessions/"+s+"/turns", c.body)
		wantRefusal(t, c.name, code, raw, http.StatusBadRequest, append(c.msgs, "twice")...)
	}
	if _, err := os.Stat(filepath.Join(ws, "pwned")); err == nil {
		t.Fatal("a call of a refused body ran")
	}
	if evs, err := p.Events(s); err != nil || len(evs) != 2 {
		t.Fatalf("refused bodies left %d events (%v), want only SessionOpened and OwnershipTaken", len(evs), err)
	}
}

// TestPermanentErrorsAreNotRetried: a failure no retry can fix is tried
// once, even for a replay-safe tool.
func TestPermanentErrorsAreNotRetried(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	ws := filepath.Join(p.Data, "workspaces", "default", s)
	if err := syscall.Mkfifo(filepath.Join(ws, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		tool string
		args map[string]any
	}{
		{"blocked address", "webfetch", map[string]any{"url": "http://127.0.0.1:1/"}},
		{"bad scheme", "webfetch", map[string]any{"url": "ftp://example.com/x"}},
		{"bad glob", "glob", map[string]any{"pattern": "a/[b"}},
		{"bad regex", "grep", map[string]any{"pattern": "a(b"}},
		{"name too long", "read", map[string]any{"path": strings.Repeat("n", 300)}},
		{"FIFO", "read", map[string]any{"path": "fifo"}},
		{"missing file", "read", map[string]any{"path": "secret"}},
	} {
		r := call(t, p, s, c.tool, c.args).Results[0]
		if r.Outcome != events.OutcomeError || r.Attempts != 1 {
			t.Errorf("%s: outcome %s after %d attempts (%s), want error after 1", c.name, r.Outcome, r.Attempts, resultText(r))
		}
		if c.name == "missing file" && !strings.Contains(resultText(r), "no such file") {
			t.Errorf("%s: the error %q lost its words to the redactor", c.name, resultText(r))
		}
	}
}

// TestRefusedRewindIs4xx: a rewind the session cannot do is the caller's
// mistake, answered 4xx with what was wrong.
func TestRefusedRewindIs4xx(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	path := "/v1/sessions/" + s + "/rewind"
	code, raw := send(t, p, path, map[string]any{"call": "c1"})
	wantRefusal(t, "rewind before any call", code, raw, http.StatusNotFound, "c1")
	call(t, p, s, "todo_get", map[string]any{})
	code, raw = send(t, p, path, map[string]any{"call": "c1"})
	wantRefusal(t, "rewind to a call that checkpointed nothing", code, raw, http.StatusNotFound, "c1")
	code, raw = send(t, p, path, map[string]any{"call": "nope", "turn": "no-such-turn"})
	wantRefusal(t, "rewind to a call of no turn", code, raw, http.StatusNotFound, "nope")
	code, raw = send(t, p, path, map[string]any{"call": strings.Repeat("x", 10_000)})
	if code < 400 || code >= 500 {
		t.Errorf("rewind to a 10,000-byte call id: %d %s, want 4xx", code, raw)
	}
	busy := map[string]any{"id": "busy", "calls": []any{map[string]any{"id": "w", "name": "shell", "arguments": map[string]any{"command": "sleep 60"}}}}
	if code, raw := send(t, p, "/v1/sessions/"+s+"/turns?wait=0", busy); code != http.StatusAccepted {
		t.Fatalf("busy turn: %d %s", code, raw)
	}
	code, raw = send(t, p, path, map[string]any{"call": "c1"})
	wantRefusal(t, "rewind while a turn runs", code, raw, http.StatusConflict, "running")
	send(t, p, "/v1/sessions/"+s+"/turns/busy/cancel", map[string]any{})
	code, raw = send(t, p, "/v1/sessions/no-such-session/rewind", map[string]any{"call": "c1"})
	wantRefusal(t, "rewind of no session", code, raw, http.StatusNotFound)
}

// TestRewindOverAChangedWorkspaceIs4xx: a rewind whose files the session has
// since replaced (a directory where a file was, a symlink out of the
// workspace) is refused with a 4xx naming the path, not a 500.
func TestRewindOverAChangedWorkspaceIs4xx(t *testing.T) {
	p := node(t, nil)
	s := open(t, p, "")
	path := "/v1/sessions/" + s + "/rewind"
	for _, c := range []struct{ name, dir, replace string }{
		{"directory", "d1", "rm -rf d1 && mkdir -p d1/f/g"},
		{"symlink out", "d2", "rm -rf d2 && ln -s / d2"},
	} {
		for _, content := range []string{"before", "after"} {
			if r := call(t, p, s, "write", map[string]any{"path": c.dir + "/f", "content": content}).Results[0]; r.Outcome != events.OutcomeOK {
				t.Fatalf("%s: write: %s", c.name, resultText(r))
			}
		}
		var tr projections.Transcript
		if code, err := p.Do("GET", "/v1/sessions/"+s+"/transcript", nil, &tr); err != nil || code != 200 {
			t.Fatal(code, err)
		}
		turn := tr.Turns[len(tr.Turns)-1].Turn
		call(t, p, s, "shell", map[string]any{"command": c.replace, "escalate": false})
		code, raw := send(t, p, path, map[string]any{"call": "c1", "turn": turn})
		if code < 400 || code >= 500 {
			t.Errorf("%s: rewind: %d %s, want 4xx", c.name, code, raw)
		}
	}
}
