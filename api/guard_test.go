package api

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
)

func TestGuardHost(t *testing.T) {
	local := guard{local: true}
	tenants := guard{allowed: []string{"api.example.com", "*.corp.example", "pinned.example:7700"}}
	tests := []struct {
		name   string
		g      guard
		host   string
		answer bool
	}{
		{"local 127.0.0.1", local, "127.0.0.1:7700", true},
		{"local 127.0.0.2", local, "127.0.0.2", true},
		{"local localhost", local, "localhost:7700", true},
		{"local LOCALHOST.", local, "LOCALHOST.:7700", true},
		{"local ::1", local, "[::1]:7700", true},
		{"local mapped loopback", local, "[::ffff:127.0.0.1]:7700", true},
		{"local rebound name", local, "evil.test:7700", false},
		{"local name ending in localhost", local, "evil.localhost.evil.test", false},
		{"local LAN address", local, "192.168.1.5:7700", false},
		{"local no host", local, "", false},
		{"local allowed list is ignored", guard{local: true, allowed: []string{"api.example.com"}}, "api.example.com", false},
		{"tenants loopback", tenants, "localhost:7700", true},
		{"tenants any address", tenants, "10.0.0.7:7700", true},
		{"tenants IPv6 address", tenants, "[2001:db8::1]:7700", true},
		{"tenants listed", tenants, "API.example.com:443", true},
		{"tenants listed with a dot", tenants, "api.example.com.", true},
		{"tenants subdomain", tenants, "a.b.corp.example", true},
		{"tenants wildcard is not the domain", tenants, "corp.example", false},
		{"tenants suffix is not a subdomain", tenants, "evilcorp.example", false},
		{"tenants pinned port", tenants, "pinned.example:7700", true},
		{"tenants pinned, other port", tenants, "pinned.example:80", false},
		{"tenants pinned, no port", tenants, "pinned.example", false},
		{"tenants rebound name", tenants, "evil.test:7700", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			why := tt.g.hostRefusal(tt.host)
			if (why == "") != tt.answer {
				t.Fatalf("hostRefusal(%q) = %q, want answered=%v", tt.host, why, tt.answer)
			}
		})
	}
}

func TestGuardCrossSite(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		host    string
		headers map[string]string
		refused bool
	}{
		{"a program", "POST", "127.0.0.1:7700", nil, false},
		{"same origin", "POST", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:7700"}, false},
		{"typed in the address bar", "GET", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "none"}, false},
		{"cross-site post", "POST", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.test"}, true},
		{"same-site post (another port)", "POST", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:3000"}, true},
		{"cross-site fetch GET", "GET", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}, true},
		{"cross-site iframe", "GET", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}, true},
		{"cross-site link followed", "GET", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, false},
		{"cross-site form post navigation", "POST", "127.0.0.1:7700", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}, true},
		{"old browser, other origin", "POST", "127.0.0.1:7700", map[string]string{"Origin": "http://evil.test"}, true},
		{"old browser, null origin", "POST", "127.0.0.1:7700", map[string]string{"Origin": "null"}, true},
		{"old browser, own origin", "POST", "127.0.0.1:7700", map[string]string{"Origin": "http://127.0.0.1:7700"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, "http://"+tt.host+"/v1/sessions", nil)
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			why := crossSite(r)
			if (why != "") != tt.refused {
				t.Fatalf("crossSite = %q, want refused=%v", why, tt.refused)
			}
		})
	}
}

// TestGuardEveryRoute: a request with a rebound Host is refused on every
// route, before authentication, routing or the MCP handler see it, and a
// loopback Host is served.
func TestGuardEveryRoute(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	for _, rt := range []struct{ method, path string }{
		{"GET", "/healthz"},
		{"GET", "/metrics"},
		{"POST", "/v1/sessions"},
		{"GET", "/v1/sessions"},
		{"POST", "/v1/sessions/" + s.Session + "/turns"},
		{"GET", "/v1/sessions/" + s.Session + "/events?follow=false"},
		{"GET", "/v1/sessions/" + s.Session + "/timeline"},
		{"POST", "/v1/sessions/" + s.Session + "/approvals/c1"},
		{"GET", "/v1/tools"},
		{"POST", "/v1/workers/poll"},
		{"POST", "/mcp"},
		{"GET", "/no/such/route"},
	} {
		req := e.request(rt.method, rt.path, "{}")
		req.Host = "evil.test:80"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s with Host evil.test: %d, want 403", rt.method, rt.path, resp.StatusCode)
		}
	}
	e.must("GET", "/healthz", "", http.StatusOK, nil)
}

// TestGuardPeerBeyondLoopback: a node without tenants served on the host's
// own interface address (an embedding program may listen anywhere) answers
// no peer but loopback, whatever Host it is sent; a node with tenants
// answers that peer.
func TestGuardPeerBeyondLoopback(t *testing.T) {
	addr := interfaceAddr(t)
	for _, tc := range []struct {
		name    string
		cfg     *config.Config
		token   string
		allowed bool
	}{
		{"without tenants", nil, "", false},
		{"with tenants", tenantConfig(), "tok-acme", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			ln, err := net.Listen("tcp", net.JoinHostPort(addr.String(), "0"))
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewUnstartedServer(e.api)
			srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			t.Cleanup(srv.Close)
			req, _ := http.NewRequest("GET", srv.URL+"/v1/sessions", nil)
			req.Host = "localhost" // a name the Host check admits: the peer is what is judged
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			if got := resp.StatusCode == http.StatusOK; got != tc.allowed {
				t.Fatalf("GET from %s: %d %s, want served=%v", addr, resp.StatusCode, b.String(), tc.allowed)
			}
			if !tc.allowed && !strings.Contains(b.String(), "loopback") {
				t.Errorf("refusal %s does not say the node serves loopback only", b.String())
			}
		})
	}
}

// interfaceAddr returns an address of one of the host's own interfaces
// that is not loopback, skipping the test when there is none.
func interfaceAddr(t *testing.T) netip.Addr {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() && !p.Addr().IsLinkLocalUnicast() {
			return p.Addr()
		}
	}
	t.Skip("the host has no interface address beyond loopback")
	return netip.Addr{}
}

// tenantConfig is the defaults with one tenant, acme, whose token is
// tok-acme.
func tenantConfig() *config.Config {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}}
	return &cfg
}

// TestBodyTimeout: a body sent a byte at a time is answered 408 naming
// http.body_timeout once the timeout passes, and its connection closed; a
// request whose body came at once may be answered long after (a held
// worker poll), and its connection stays usable.
func TestBodyTimeout(t *testing.T) {
	e := newEnv(t, nil, WithBodyTimeout(time.Second))
	c, err := net.Dial("tcp", strings.TrimPrefix(e.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	fmt.Fprintf(c, "POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n")
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("a slow body got no answer within 20s: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	wantError(t, resp.StatusCode, b, http.StatusRequestTimeout, CodeRequestTimeout, "http.body_timeout")
	// Closed reads as EOF, or as a reset when the writer's spaces reach
	// the closed socket first.
	if _, err := br.ReadByte(); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
		t.Errorf("after a timed-out body the connection is still open (%v), want it closed", err)
	}
	t.Logf("answered after %s", time.Since(start).Round(time.Millisecond))

	// A held poll outlives the body timeout, on a connection that then
	// serves another request.
	e.must("PUT", "/v1/tools/lookup_order", spec(""), http.StatusOK, nil)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
	for range 2 {
		req := e.request("POST", "/v1/workers/poll", `{"worker":"w1","tools":["lookup_order"],"wait_ms":2500}`)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent || time.Since(start) < 2*time.Second {
			t.Fatalf("a poll held 2.5s with a 1s body timeout: %d %s after %s, want 204 (no task) after the wait", resp.StatusCode, b, time.Since(start))
		}
	}
}
