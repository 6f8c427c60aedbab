package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html"
	"image/color"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/testenv"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
	"github.com/callsheet/callsheet/replay"
	"github.com/callsheet/callsheet/tool"
)

// The timeline page (docs/audit.md) of real sessions on a real node: its
// content, its tenancy, its live updates, and its rendering by a real
// headless Chromium.

type napArgs struct {
	MS int `json:"ms" jsonschema:"milliseconds to sleep"`
}

type echoArgs struct {
	Text string `json:"text" jsonschema:"what to answer"`
}

// timelineTools are Go tools with each behaviour the page draws: parallel
// reads, a read that fails its first attempt, a big output, a side effect
// that can outlive its timeout, and an echo of any text.
func timelineTools(t *testing.T) []*tool.Tool {
	t.Helper()
	sleep := func(ctx context.Context, a napArgs) (tool.Result, error) {
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
		case <-ctx.Done():
			return tool.Result{}, ctx.Err()
		}
		return tool.Text(fmt.Sprintf("slept %d ms", a.MS)), nil
	}
	readOnly := tool.WithDeclarations(tool.Declarations{Effect: tool.EffectReadOnly, Replay: tool.ReplaySafe, Concurrency: tool.ConcurrencyParallelSafe})
	mk := func(tl *tool.Tool, err error) *tool.Tool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return tl
	}
	return []*tool.Tool{
		mk(tool.New("nap", "sleeps, read-only", sleep, tool.WithGuidelines("test"), readOnly)),
		mk(tool.New("flaky", "fails its first attempt", func(ctx context.Context, a napArgs) (tool.Result, error) {
			if c, _ := tool.CallFrom(ctx); c.Attempt == 1 {
				return tool.Result{}, errors.New("connection reset by peer")
			}
			return sleep(ctx, a)
		}, tool.WithGuidelines("test"), readOnly)),
		mk(tool.New("big", "prints 20 kB", func(ctx context.Context, a napArgs) (tool.Result, error) {
			var b strings.Builder
			for i := 0; b.Len() < 20_000; i++ {
				fmt.Fprintf(&b, "line %05d %s\n", i, strings.Repeat("x", 40))
			}
			return tool.Text(b.String()), nil
		}, tool.WithGuidelines("test"), readOnly)),
		mk(tool.New("mutate", "sleeps, side-effecting", sleep, tool.WithGuidelines("test"))),
		mk(tool.New("echo", "answers its text", func(ctx context.Context, a echoArgs) (tool.Result, error) {
			return tool.Text(a.Text), nil
		}, tool.WithGuidelines("test"), readOnly)),
	}
}

// timelineEnv is a node with timelineTools behind the API, serving one
// tenants, acme and globex, with bearer tokens (the env acts for acme's
// harness; alice, of acme too, decides approvals with her own token):
// writes ask for approval, a retry waits 150 ms, mutate times out after
// 100 ms, results are cut at 2 kB.
func timelineEnv(t *testing.T, opts ...Option) *env {
	t.Helper()
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{
		"acme":   {Tokens: []config.TenantToken{{Token: "tok-acme", Principal: "harness"}, {Token: "tok-alice", Principal: "alice"}}},
		"globex": {Token: "tok-globex"},
	}
	cfg.Permission.Rules = []config.Rule{{ID: "ask-write", Tool: "write", Action: config.ActionAsk}}
	cfg.Retry.InitialDelay = config.Duration(150 * time.Millisecond)
	cfg.Timeouts.Tools = map[string]config.Duration{"mutate": config.Duration(100 * time.Millisecond)}
	cfg.ToolOutput.MaxBytes = 2048 // big's 20 kB is cut, and the golden files stay small
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg, Tools: timelineTools(t), Logger: logtest.New(t)})
	if err != nil {
		t.Fatalf("node.New: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	s, err := New(n, append([]Option{WithLogger(logtest.New(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(s.CloseStreams)
	return &env{t: t, node: n, api: s, srv: srv, token: "tok-acme"}
}

// waitFor polls the session's recorded events until cond holds of them.
func (e *env) waitFor(session, what string, cond func([]EventItem) bool) {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if cond(e.events(session, "")) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func has(typ events.Type, call string) func([]EventItem) bool {
	return func(evs []EventItem) bool {
		for _, ev := range evs {
			var c struct{ Call string }
			_ = json.Unmarshal(ev.Data, &c)
			if ev.Type == typ && (call == "" || c.Call == call) {
				return true
			}
		}
		return false
	}
}

// richSession runs, on a real node, a session with every mark the page
// draws: parallel calls, a retry, two blocked calls, an approval decided by
// alice, a checkpoint, a truncated output, an indeterminate call, the retry
// notice about it, and the close.
func richSession(e *env) string {
	e.t.Helper()
	s := e.open().Session
	e.must("POST", "/v1/sessions/"+s+"/turns?wait=0", `{"id":"t1","calls":[
		{"id":"a","name":"nap","arguments":{"ms":240}},
		{"id":"b","name":"nap","arguments":{"ms":120}},
		{"id":"f","name":"flaky","arguments":{"ms":60}},
		{"id":"x","name":"no_such_tool","arguments":{}},
		{"id":"y","name":"nap","arguments":{"ms":"soon"}},
		{"id":"w","name":"write","arguments":{"path":"NOTES.md","content":"notes\n"}},
		{"id":"z","name":"big","arguments":{"ms":0}}]}`, http.StatusAccepted, nil)
	// The write waits for a person; alice allows it once the flaky read
	// has been retried and committed.
	e.waitFor(s, "the approval request", has(events.TypeApprovalRequested, "w"))
	e.waitFor(s, "the flaky call's commit", has(events.TypeResultCommitted, "f"))
	e.approve(s, "w", `{"decision":"allow","reason":"notes only"}`)
	e.waitFor(s, "turn t1", has(events.TypeTurnCompleted, ""))
	e.must("POST", "/v1/sessions/"+s+"/turns", `{"id":"t2","calls":[{"id":"slow","name":"mutate","arguments":{"ms":3000}}]}`, http.StatusOK, nil)
	e.must("POST", "/v1/sessions/"+s+"/turns", `{"id":"t3","calls":[{"id":"e","name":"nap","arguments":{"ms":20}},{"id":"e2","name":"nap","arguments":{"ms":40}}]}`, http.StatusOK, nil)
	e.must("POST", "/v1/sessions/"+s+"/close", `{"reason":"audit demo"}`, http.StatusOK, nil)
	return s
}

// approve decides an approval as alice: the decider is the principal her
// token names.
func (e *env) approve(session, call, body string) {
	e.t.Helper()
	defer func(tok string) { e.token = tok }(e.token)
	e.token = "tok-alice"
	e.must("POST", "/v1/sessions/"+session+"/approvals/"+call, body, http.StatusOK, nil)
}

func (e *env) timeline(session, query string) (*http.Response, string) {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+session+"/timeline"+query, ""))
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, string(b)
}

func TestTimelinePage(t *testing.T) {
	e := timelineEnv(t)
	s := richSession(e)
	resp, page := e.timeline(s, "")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET timeline: %d %s", resp.StatusCode, page)
	}
	for h, want := range map[string]string{
		"Content-Type":            "text/html; charset=utf-8",
		"Content-Security-Policy": replay.TimelinePolicy(),
		"X-Content-Type-Options":  "nosniff",
		"Cache-Control":           "no-store",
		"Referrer-Policy":         "no-referrer",
	} {
		if got := resp.Header.Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if p := resp.Header.Get("Content-Security-Policy"); !strings.HasPrefix(p, "default-src 'none'; ") || !strings.Contains(p, "frame-ancestors 'none'") || strings.Contains(p, "unsafe") {
		t.Errorf("policy %q: want nothing allowed but the page's own hashed style and script", p)
	}
	for _, want := range []string{
		"final: the session is closed",
		// each call, with its outcome
		"1. nap <code>a</code>", "2. nap <code>b</code>", "3. flaky <code>f</code>", "4. no_such_tool <code>x</code>",
		"5. nap <code>y</code>", "6. write <code>w</code>", "7. big <code>z</code>", "1. mutate <code>slow</code>",
		`<span class="badge ok">ok</span> 1. nap`, `<span class="badge blocked">blocked</span> 4. no_such_tool`,
		`<span class="badge indeterminate">indeterminate</span> 1. mutate`,
		"blocked: unavailable", "blocked: invalid_arguments",
		// the retry, with its attempt numbers
		`class="attempt">#1</text>`, `class="attempt">#2</text>`, "attempts #1 error, #2 ok", "connection reset by peer",
		// the approval: who decided, when
		"allowed by alice at ", "<dt>Approval</dt><dd>asked at +", "rule ask-write",
		// checkpoint, truncation, notice, close
		"<dt>Checkpoint</dt><dd>NOTES.md (did not exist; a rewind removes it) before attempt 1", `class="mk ckpt"`,
		"truncated: full output 20020 bytes", "retry notice: call slow (mutate, turn t2, attempt 1)",
		"<dt>Closed</dt>", "audit demo",
	} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, bad := range []string{"http://", "https://", " src=", " href=", "url(", "@import"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q", bad)
		}
	}
	// It is the page replay.Timeline renders from the log.
	evs, err := e.node.Events(context.Background(), "acme", s, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var all []events.Event
	for ev := range evs {
		all = append(all, ev)
	}
	if want := string(replay.Timeline(projections.FoldAudit("acme", s, all))); page != want {
		t.Error("the route's page differs from replay.Timeline of the session's events")
	}
	if *updateGolden {
		writeGolden(t, "timeline", all)
	}

	// Tenant-scoped like every route.
	e.token = "tok-globex"
	status, b := e.do("GET", "/v1/sessions/"+s+"/timeline", "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound)
	e.token = ""
	status, b = e.do("GET", "/v1/sessions/"+s+"/timeline", "")
	wantError(t, status, b, http.StatusUnauthorized, CodeUnauthorized)
	e.token = "tok-acme"
	status, b = e.do("GET", "/v1/sessions/"+s+"/timeline?live=maybe", "")
	wantError(t, status, b, http.StatusBadRequest, CodeInvalidRequest, "live")
	status, b = e.do("GET", "/v1/sessions/NOSUCH/timeline", "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound)
	// HEAD answers the headers, even for a live page.
	if resp, err := http.DefaultClient.Do(e.request("HEAD", "/v1/sessions/"+s+"/timeline?live=1", "")); err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("HEAD timeline: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// A closed session's live page is complete at once.
	if resp, live := e.timeline(s, "?live=1"); resp.StatusCode != http.StatusOK || live != page {
		t.Errorf("live page of a closed session: %d, same as the page: %v", resp.StatusCode, live == page)
	}
}

var updateGolden = flag.Bool("update", false, "rewrite projections/testdata/timeline.* from the session of TestTimelinePage")

// writeGolden stores a real session's events, transcript and audit model
// beside the other golden streams (projections/testdata).
func writeGolden(t *testing.T, name string, evs []events.Event) {
	t.Helper()
	dir := filepath.Join("..", "projections", "testdata")
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, ev := range evs {
		if err := enc.Encode(ev); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := projections.Fold(evs[0].Session, evs)
	if err != nil {
		t.Fatal(err)
	}
	trb, _ := projections.Marshal(tr)
	ab, _ := projections.Marshal(projections.FoldAudit(evs[0].Tenant, evs[0].Session, evs))
	for file, data := range map[string][]byte{name + ".events.jsonl": b.Bytes(), name + ".transcript.json": trb, name + ".audit.json": ab} {
		if err := os.WriteFile(filepath.Join(dir, file), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// liveReader reads a live page as it streams.
type liveReader struct {
	t    *testing.T
	body io.ReadCloser
	got  bytes.Buffer
	ch   chan []byte
}

func (e *env) live(session string) *liveReader {
	e.t.Helper()
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+session+"/timeline?live=1", ""))
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("live timeline: %d %s", resp.StatusCode, b)
	}
	lr := &liveReader{t: e.t, body: resp.Body, ch: make(chan []byte, 64)}
	go func() {
		defer close(lr.ch)
		r := bufio.NewReader(resp.Body)
		for {
			buf := make([]byte, 32<<10)
			n, err := r.Read(buf)
			if n > 0 {
				lr.ch <- buf[:n]
			}
			if err != nil {
				return
			}
		}
	}()
	e.t.Cleanup(func() { resp.Body.Close() })
	return lr
}

// until reads the page until it holds want, and returns what was read.
func (lr *liveReader) until(want string) string {
	lr.t.Helper()
	timeout := time.After(60 * time.Second)
	for !strings.Contains(lr.got.String(), want) {
		select {
		case b, ok := <-lr.ch:
			if !ok {
				lr.t.Fatalf("the live page ended without %q:\n%s", want, lr.got.String())
			}
			lr.got.Write(b)
		case <-timeout:
			lr.t.Fatalf("timed out waiting for %q in the live page", want)
		}
	}
	return lr.got.String()
}

// rest reads the page to its end.
func (lr *liveReader) rest() string {
	lr.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case b, ok := <-lr.ch:
			if !ok {
				return lr.got.String()
			}
			lr.got.Write(b)
		case <-timeout:
			lr.t.Fatal("timed out waiting for the live page to end")
		}
	}
}

var swapRE = regexp.MustCompile(`(?s)<template data-cs-swap="([^"]+)">(.*?)</template><i data-cs-done></i>`)

// TestTimelineLive follows a session through a live page: the page so far
// at once, then each change as an update while the turn waits for its
// approval and runs, keep-alives meanwhile, and the end when the session
// closes; the updates bring the page to exactly the page of the whole log.
func TestTimelineLive(t *testing.T) {
	e := timelineEnv(t, WithKeepAlive(20*time.Millisecond))
	s := e.open().Session
	lr := e.live(s)
	lr.until("live: this page follows the session")
	lr.until("<script>") // the whole first part, the page's script included
	e.must("POST", "/v1/sessions/"+s+"/turns?wait=0", `{"id":"t1","calls":[
		{"id":"r","name":"nap","arguments":{"ms":10}},
		{"id":"w","name":"write","arguments":{"path":"a.txt","content":"A"}}]}`, http.StatusAccepted, nil)
	lr.until(`<template data-cs-swap="cs-turn-0">`)
	lr.until("awaiting approval since")
	lr.until(replay.TimelineKeepAlive)
	e.approve(s, "w", `{"decision":"allow"}`)
	lr.until("allowed by alice at ")
	e.waitFor(s, "turn t1", has(events.TypeTurnCompleted, ""))
	e.must("POST", "/v1/sessions/"+s+"/close", `{}`, http.StatusOK, nil)
	page := lr.rest()
	if !strings.HasSuffix(page, "</body>\n</html>\n") {
		t.Fatalf("the live page did not end when the session closed:\n%s", page[max(0, len(page)-400):])
	}
	if strings.Count(strings.ToLower(page), "<script") != 1 {
		t.Errorf("the live page holds %d scripts, want its own only", strings.Count(strings.ToLower(page), "<script"))
	}
	// The last version of each element equals the complete page's.
	_, final := e.timeline(s, "")
	latest := map[string]string{}
	for _, m := range swapRE.FindAllStringSubmatch(page, -1) {
		latest[m[1]] = m[2]
	}
	for id, re := range map[string]*regexp.Regexp{
		"cs-head":   regexp.MustCompile(`(?s)<header id="cs-head">.*?</header>`),
		"cs-turn-0": regexp.MustCompile(`(?s)<section class="turn" id="cs-turn-0">.*?</section>`),
	} {
		if want := re.FindString(final); want == "" || latest[id] != want {
			t.Errorf("the live page's last %s:\n%s\nwant the complete page's:\n%s", id, latest[id], want)
		}
	}
}

// chromium finds the headless browser scripts/ensure-chromium installs.
func chromium(t *testing.T) string { return testenv.Chromium(t) }

// browse opens page (written to a file) in a fresh headless Chromium with no
// network, and returns what it printed; mode is --screenshot=FILE or
// --dump-dom. It is bounded: the browser and its children are killed after
// two minutes.
func browse(t *testing.T, page []byte, mode string) []byte {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "timeline.html")
	if err := os.WriteFile(file, page, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium(t),
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--force-device-scale-factor=1",
		// No network at all: a page that needed one would show it.
		"--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--window-size=1280,1800",
		mode, "file://"+file)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Chromium's singleton socket and shared memory files go in TMPDIR,
	// and stay there when its helpers are killed: a directory of the test's.
	cmd.Env = append(os.Environ(), "TMPDIR="+testenv.ShortTempDir(t))
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // any helper left behind
	}
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", mode, err, stderr.String())
	}
	return stdout.Bytes()
}

// Lane colours of replay/timeline.css, each of which the screenshot must
// show.
var laneColours = map[string]color.RGBA{
	"ok":            {0x2d, 0xa4, 0x4e, 0xff},
	"error":         {0xcf, 0x22, 0x2e, 0xff},
	"blocked":       {0xbc, 0x4c, 0x00, 0xff},
	"approval":      {0xd4, 0xa7, 0x2c, 0xff},
	"indeterminate": {0x82, 0x50, 0xdf, 0xff},
}

// checkScreenshot decodes a PNG and checks it is a drawn page, not blank:
// many distinct colours, a good part of it not white, and each lane colour
// present.
func checkScreenshot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s is not a PNG: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() < 1000 || b.Dy() < 1000 {
		t.Fatalf("screenshot is %dx%d, want the window's 1280x1800", b.Dx(), b.Dy())
	}
	counts := map[color.RGBA]int{}
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			counts[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	white := counts[color.RGBA{0xff, 0xff, 0xff, 0xff}]
	total := b.Dx() * b.Dy()
	t.Logf("screenshot %dx%d: %d distinct colours, %.1f%% not white", b.Dx(), b.Dy(), len(counts), 100*float64(total-white)/float64(total))
	if len(counts) < 200 {
		t.Errorf("the screenshot has %d distinct colours, want a drawn page (200 or more)", len(counts))
	}
	if float64(total-white) < 0.08*float64(total) {
		t.Errorf("the screenshot is %.1f%% white: nearly blank", 100*float64(white)/float64(total))
	}
	for name, c := range laneColours {
		if counts[c] < 40 {
			t.Errorf("the screenshot has %d pixels of the %s colour %v: that lane is not drawn", counts[c], name, c)
		}
	}
}

// TestTimelineInChromium renders the timeline of a real session (parallel
// calls, a blocked call, a retry, an approval) in a real headless Chromium:
// the page's own script runs under its policy, and the screenshot shows
// the lanes. The screenshot is kept where CALLSHEET_SCREENSHOT names, to
// look at.
func TestTimelineInChromium(t *testing.T) {
	chromium(t)
	e := timelineEnv(t)
	s := richSession(e)
	_, page := e.timeline(s, "")
	dom := string(browse(t, []byte(page), "--dump-dom"))
	if !strings.Contains(dom, `data-cs-ready="1"`) {
		t.Fatalf("the page's script did not run in Chromium (its hash is not in the policy?):\n%.600s", dom)
	}
	if !strings.Contains(dom, "allowed by alice at ") || !strings.Contains(dom, "attempts #1 error, #2 ok") {
		t.Error("Chromium's DOM lacks the approval or the retry")
	}
	shot := filepath.Join(t.TempDir(), "timeline.png")
	if p := os.Getenv("CALLSHEET_SCREENSHOT"); p != "" {
		shot = p
	}
	browse(t, []byte(page), "--screenshot="+shot)
	checkScreenshot(t, shot)
}

// TestTimelineHostileOutputInChromium: a tool returns model text that tries
// every way out of its element, through a real node, onto a live page that
// receives it as updates; in Chromium none of it runs, the page's own
// script does, and the updates are swapped in.
func TestTimelineHostileOutputInChromium(t *testing.T) {
	chromium(t)
	e := timelineEnv(t)
	s := e.open().Session
	lr := e.live(s)
	lr.until("<script>")
	pwn := func(n int) string { return fmt.Sprintf("document.documentElement.setAttribute('data-pwned','%d')", n) }
	payloads := []string{
		"</script><script>" + pwn(1) + "</script>",
		`<img src=x onerror="` + pwn(2) + `">`,
		`"><svg onload="` + pwn(3) + `">`,
		`</pre></details></section></template><i data-cs-done></i><template data-cs-swap="cs-head"><header id="cs-head">forged</header></template><i data-cs-done></i>`,
		`</title></svg><iframe srcdoc="<script>` + pwn(5) + `</script>"></iframe>`,
	}
	var calls []string
	for i, p := range payloads {
		args, _ := json.Marshal(map[string]string{"text": p})
		id, _ := json.Marshal(fmt.Sprintf("c%d%s", i, p))
		calls = append(calls, fmt.Sprintf(`{"id":%s,"name":"echo","arguments":%s}`, id, args))
	}
	var turn struct{ Results []events.Result }
	e.must("POST", "/v1/sessions/"+s+"/turns", `{"id":"t1","calls":[`+strings.Join(calls, ",")+`]}`, http.StatusOK, &turn)
	for i, r := range turn.Results {
		if r.Outcome != events.OutcomeOK || r.Content[0].Text != payloads[i] {
			t.Fatalf("echo %d: %+v, want ok with the payload", i, r)
		}
	}
	e.must("POST", "/v1/sessions/"+s+"/close", `{}`, http.StatusOK, nil)
	page := lr.rest()
	if !strings.Contains(page, `<template data-cs-swap="cs-turn-0">`) {
		t.Fatal("the results did not arrive as a live update")
	}
	dom := string(browse(t, []byte(page), "--dump-dom"))
	if !strings.Contains(dom, `data-cs-ready="1"`) {
		t.Fatalf("the page's script did not run:\n%.600s", dom)
	}
	if strings.Contains(dom, `data-pwned="`) {
		i := strings.Index(dom, `data-pwned="`)
		t.Fatalf("model output ran in the page: %q", dom[max(0, i-200):min(len(dom), i+100)])
	}
	for _, bad := range []string{"<iframe", "<img", "forged</header>"} {
		if strings.Contains(dom, bad) {
			t.Errorf("model output became markup %q in Chromium's DOM", bad)
		}
	}
	// The updates were applied: the templates are gone, the turn and the
	// final header are in place, and the payloads are there as text.
	if strings.Contains(dom, "<template") {
		t.Error("an update template was left in the DOM: the page's script did not swap it in")
	}
	turns, heads := strings.Count(dom, `<section class="turn" id="cs-turn-0">`), strings.Count(dom, `<header id="cs-head">`)
	if turns != 1 || heads != 1 || !strings.Contains(dom, "final: the session is closed") {
		t.Errorf("Chromium's DOM holds %d turn and %d header elements, want one each, the final header among them", turns, heads)
	}
	if !strings.Contains(dom, "&lt;img src=x onerror=") {
		t.Error("the payload is not shown as text")
	}
}

// TestTimelineCutsLargeValues: a call whose arguments are far over
// replay.TimelineClip is shown by its first bytes, with a link to the
// route that answers them whole, as sent and as run; the route refuses
// other tenants, unknown calls and a bad ?as=.
func TestTimelineCutsLargeValues(t *testing.T) {
	e := timelineEnv(t)
	s := e.open().Session
	content := strings.Repeat("line of a large file <&>\n", 2000) // 50 kB
	args, _ := json.Marshal(map[string]string{"path": "big.txt", "content": content})
	e.must("POST", "/v1/sessions/"+s+"/turns?wait=0", `{"id":"t1","calls":[{"id":"w","name":"write","arguments":`+string(args)+`}]}`, http.StatusAccepted, nil)
	e.waitFor(s, "the approval request", has(events.TypeApprovalRequested, "w"))
	e.approve(s, "w", `{"decision":"allow"}`)
	e.waitFor(s, "turn t1", has(events.TypeTurnCompleted, ""))

	_, page := e.timeline(s, "")
	link := "/v1/sessions/" + s + "/turns/t1/calls/w/arguments"
	if !strings.Contains(page, `href="`+link+`"`) || !strings.Contains(page, fmt.Sprintf("of %d bytes", len(args))) {
		t.Fatalf("the page does not link the whole arguments (%s) nor say their size", link)
	}
	if len(page) > 40_000 || strings.Count(page, "line of a large file") > 2*replay.TimelineClip/25 {
		t.Fatalf("the page (%d bytes) holds more than the first %d bytes of the arguments", len(page), replay.TimelineClip)
	}
	got := e.must("GET", link, "", http.StatusOK, nil)
	if !bytes.Equal(got, args) {
		t.Fatalf("the arguments route answered %d bytes, want the %d sent", len(got), len(args))
	}
	var run map[string]string
	e.must("GET", link+"?as=run", "", http.StatusOK, &run)
	if run["content"] != content {
		t.Fatalf("the arguments as run differ from those sent")
	}
	status, b := e.do("GET", link+"?as=mine", "")
	wantError(t, status, b, http.StatusBadRequest, CodeInvalidRequest, "as=")
	status, b = e.do("GET", "/v1/sessions/"+s+"/turns/t1/calls/nope/arguments", "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound, `"nope"`)
	e.token = "tok-globex"
	status, b = e.do("GET", link, "")
	wantError(t, status, b, http.StatusNotFound, CodeNotFound)
}
