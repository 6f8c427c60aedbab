// Package clienttest runs a real node process for the client libraries'
// tests (client/, clients/python, clients/typescript) and, in front of it,
// a proxy that fails the way networks do, so the clients' retries and
// resumes are tested against real faults:
//
//   - a turn posted with an id that starts with "drop-" reaches the node,
//     whose answer is then thrown away and the connection closed, the first
//     time (the work was done; the client never heard);
//   - a turn posted with an id that starts with "busy-" is answered 503
//     unavailable the first time, without reaching the node;
//   - a turn posted with an id that starts with "gateway-" reaches the
//     node, whose answer is then replaced by a 502 Bad Gateway the first
//     time (a load balancer whose upstream timed out: the work was done);
//   - the same for a streamed turn's batches and its end (POST
//     .../turns/{t}/calls and .../end): for a turn id that starts with
//     "drop-" each distinct batch, and the end, reaches the node and its
//     answer is lost the first time; "busy-" is answered 503 the first time;
//   - a followed event stream of a session is cut after 3 events the first
//     time it is opened;
//   - a turn whose id starts with "moving-" (posted, streamed, or read with
//     GET .../turns/{t}) meets a takeover, as a fleet node answers it
//     (api/fleet.go): for Hold from its first request every request for it
//     is answered 503 unavailable with Retry-After: 1 and the node's plain
//     message, without reaching the node; "moving-date-" says Retry-After
//     as an HTTP-date 2 s ahead instead;
//   - a turn whose id starts with "limited-" is answered 429 with
//     Retry-After: 1 the first time;
//   - opening a session (POST /v1/sessions) whose workspace starts with
//     "busy-" is answered 503 with Retry-After: 1 the first time (a client
//     must not send it again: it has no id).
//
// GET /clienttest/attempts/{id} answers {"attempts": [ms, ...]}: when each
// request for a turn id with one of these prefixes came, in milliseconds
// after the first, so a test can check the client waited as told.
// Everything else passes through unchanged.
package clienttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testnode"
)

// Token is the bearer token of the node's one tenant, "acme".
const Token = "tok-acme"

// Hold is how long a "moving-" turn meets a takeover: longer than the
// clients' old budget of 4 retries from 200 ms (3 s), shorter than a
// fleet's takeover (about 8 s, docs/operations.md).
const Hold = 5 * time.Second

// Env is a running node and the faulty proxy in front of it.
type Env struct {
	// Node is the node process; URL its API.
	Node *testnode.Proc
	URL  string
	// Flaky is the proxy's URL.
	Flaky string
}

// Start builds and starts a node with one tenant (Token) and the proxy;
// both stop at the end of the test.
func Start(t *testing.T) *Env {
	t.Helper()
	bin := testnode.Node(t, "")
	cfg := map[string]any{
		"tenants":    map[string]any{"acme": map[string]any{"token": Token}},
		"permission": map[string]any{"rules": []any{map[string]any{"id": "ask-charge", "tool": "write", "match": "charges/*", "action": "ask"}}},
	}
	p := testnode.Start(t, bin, testnode.Options{Data: filepath.Join(t.TempDir(), "data"), Config: cfg, Token: Token})
	target, err := url.Parse(p.Base)
	if err != nil {
		t.Fatal(err)
	}
	f := &flaky{seen: map[string]bool{}, since: map[string]time.Time{}, attempts: map[string][]int64{}, proxy: httputil.NewSingleHostReverseProxy(target)}
	f.proxy.FlushInterval = -1 // event streams flow at once
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return &Env{Node: p, URL: p.Base, Flaky: srv.URL}
}

// Environ is the environment a client's test process gets: CALLSHEET_URL,
// CALLSHEET_TOKEN and CALLSHEET_FLAKY_URL.
func (e *Env) Environ() []string {
	return []string{"CALLSHEET_URL=" + e.URL, "CALLSHEET_TOKEN=" + Token, "CALLSHEET_FLAKY_URL=" + e.Flaky}
}

type flaky struct {
	proxy *httputil.ReverseProxy
	mu    sync.Mutex
	seen  map[string]bool
	// since is when each "moving-" turn was first asked for; attempts
	// when each request for a recorded turn id came (ms after the first).
	since    map[string]time.Time
	attempts map[string][]int64
}

// note records a request for id and answers how long ago the first came.
func (f *flaky) note(id string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	first, ok := f.since[id]
	if !ok {
		first = time.Now()
		f.since[id] = first
	}
	d := time.Since(first)
	f.attempts[id] = append(f.attempts[id], d.Milliseconds())
	return d
}

// refuse answers as a node does a call it cannot serve now: status, code,
// the message and a Retry-After.
func refuse(w http.ResponseWriter, status int, code, msg, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", retryAfter)
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": msg}})
	_, _ = w.Write(b)
}

// recorded reports whether requests for a turn id are recorded.
func recorded(id string) bool {
	return strings.HasPrefix(id, "moving-") || strings.HasPrefix(id, "limited-")
}

// takeover answers a request for a "moving-" turn id while its Hold lasts,
// and reports whether it did; limited answers a "limited-" one's first.
func (f *flaky) takeover(w http.ResponseWriter, session, id string) bool {
	if !recorded(id) {
		return false
	}
	since := f.note(id)
	switch {
	case strings.HasPrefix(id, "moving-") && since < Hold:
		ra := "1"
		if strings.HasPrefix(id, "moving-date-") {
			ra = time.Now().Add(2 * time.Second).UTC().Format(http.TimeFormat)
		}
		refuse(w, http.StatusServiceUnavailable, "unavailable", "session "+session+" is moving to another node (node n1, which owned it, was lost while it served this call): retry with the same turn id", ra)
		return true
	case strings.HasPrefix(id, "limited-") && f.first("limited "+id):
		refuse(w, http.StatusTooManyRequests, "limit_exceeded", "the test proxy limits this turn once", "1")
		return true
	}
	return false
}

// first reports whether key is seen for the first time.
func (f *flaky) first(key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen[key] {
		return false
	}
	f.seen[key] = true
	return true
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	streamed := r.Method == "POST" && len(parts) == 6 && parts[3] == "turns" && (parts[5] == "calls" || parts[5] == "end")
	switch {
	case r.Method == "GET" && len(parts) == 3 && parts[0] == "clienttest" && parts[1] == "attempts":
		f.mu.Lock()
		b, _ := json.Marshal(map[string]any{"attempts": append([]int64{}, f.attempts[parts[2]]...)})
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
		return
	case r.Method == "POST" && len(parts) == 2 && parts[1] == "sessions":
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var o struct {
			Workspace string `json:"workspace"`
		}
		_ = json.Unmarshal(body, &o)
		if strings.HasPrefix(o.Workspace, "busy-") && f.first("open "+o.Workspace) {
			refuse(w, http.StatusServiceUnavailable, "unavailable", "the test proxy is busy once", "1")
			return
		}
	case r.Method == "GET" && len(parts) == 5 && parts[3] == "turns":
		if f.takeover(w, parts[2], parts[4]) {
			return
		}
	case r.Method == "POST" && len(parts) == 4 && parts[3] == "turns", streamed:
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		id := r.URL.Query().Get("turn")
		if id == "" {
			var b struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(body, &b)
			id = b.ID
		}
		key := id
		if streamed {
			// Each batch (and the end) of a streamed turn fails once.
			id = parts[4]
			key = id + " " + parts[5] + " " + r.URL.RawQuery + " " + string(body)
		}
		if f.takeover(w, parts[2], id) {
			return
		}
		switch {
		case strings.HasPrefix(id, "busy-") && f.first("busy "+key):
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"the test proxy is busy once"}}`)
			return
		case strings.HasPrefix(id, "gateway-") && f.first("gateway "+key):
			f.proxy.ServeHTTP(httptest.NewRecorder(), r) // the node does the work
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
			return
		case strings.HasPrefix(id, "drop-") && f.first("drop "+key):
			rec := httptest.NewRecorder()
			f.proxy.ServeHTTP(rec, r) // the node does the work
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close() // and the answer is lost
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
	case r.Method == "GET" && len(parts) == 4 && parts[3] == "events" && r.URL.Query().Get("follow") != "false" && f.first("events "+parts[2]):
		f.proxy.ServeHTTP(&cutter{ResponseWriter: w, left: 3}, r)
		return
	}
	f.proxy.ServeHTTP(w, r)
}

// cutter passes an SSE answer through until left events have gone by,
// then fails every write, so the proxy drops the connection.
type cutter struct {
	http.ResponseWriter
	left int
	buf  bytes.Buffer
}

func (c *cutter) Write(b []byte) (int, error) {
	if c.left <= 0 {
		return 0, http.ErrAbortHandler
	}
	c.buf.Write(b)
	sc := bufio.NewScanner(bytes.NewReader(c.buf.Bytes()))
	events := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "id: ") {
			events++
		}
	}
	n, err := c.ResponseWriter.Write(b)
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
	if events >= 3 {
		c.left = 0
	}
	return n, err
}

func (c *cutter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
