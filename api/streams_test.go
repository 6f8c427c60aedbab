package api

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/testnode"
)

// consumers connects to the node's JetStream as another client would and
// counts the event stream's ephemeral consumers: a followed event stream
// holds one.
func (e *env) consumers() int {
	e.t.Helper()
	if e.js == nil {
		e.js = testnode.JetStream(e.t, e.node.ClientURL(), e.node.NATSCredentials())
	}
	js := e.js
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, natslog.DefaultStream)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	list := s.ListConsumers(ctx)
	for ci := range list.Info() {
		if ci.Config.Durable == "" {
			n++
		}
	}
	if err := list.Err(); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// waitConsumers polls until the server lists want ephemeral consumers, or
// fails after 10 s (an abandoned one would stay 5 minutes).
func (e *env) waitConsumers(want int) time.Duration {
	e.t.Helper()
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for {
		got := e.consumers()
		if got == want {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the server lists %d ephemeral consumers on the event stream, want %d", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// follow opens a followed SSE stream with a real HTTP client and reads its
// first event; cancel disconnects the client.
func (e *env) follow(session string) (status int, disconnect func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+session+"/events", "", "Accept", "text/event-stream").WithContext(ctx))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode == http.StatusOK {
		if evs := readSSE(e.t, resp.Body, func(sseEvent) bool { return true }); len(evs) != 1 {
			e.t.Fatalf("followed stream gave %d events before its first, want 1", len(evs))
		}
	}
	return resp.StatusCode, func() { cancel(); resp.Body.Close() }
}

// doWithin is a GET that gives up after 10 s: a followed stream that is
// not refused would never end.
func (e *env) doWithin(path string, header ...string) (int, []byte) {
	e.t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(e.request("GET", path, "", header...))
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("GET %s: status %d, reading body: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, b
}

// TestEventStreamConsumerGoesWithItsClient: the JetStream consumer behind a
// followed stream is deleted when its HTTP client disconnects, not 5
// minutes later.
func TestEventStreamConsumerGoesWithItsClient(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	base := e.consumers()
	_, stop1 := e.follow(s.Session)
	_, stop2 := e.follow(s.Session)
	e.waitConsumers(base + 2)
	stop1()
	took := e.waitConsumers(base + 1)
	stop2()
	took2 := e.waitConsumers(base)
	t.Logf("consumer gone %v and %v after its client disconnected", took, took2)
}

// TestEventStreamsPerTenant: a tenant may hold event_streams.max_per_tenant
// live streams on a node; one more is a 429 naming the limit, other tenants
// and follow=false reads are unaffected, and a stream that ends frees its
// place.
func TestEventStreamsPerTenant(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.EventStreams.MaxPerTenant = 2
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "acme-token"}, "globex": {Token: "globex-token"}}
	e := newEnv(t, &cfg)
	e.token = "acme-token"
	s := e.open()
	_, stop1 := e.follow(s.Session)
	e.follow(s.Session)
	status, b := e.doWithin("/v1/sessions/"+s.Session+"/events", "Accept", "text/event-stream")
	wantError(t, status, b, http.StatusTooManyRequests, CodeTooManyStreams, `tenant "acme"`, "2 live event streams", "event_streams.max_per_tenant")
	status, b = e.doWithin("/v1/sessions/" + s.Session + "/events") // NDJSON, followed: counted too
	wantError(t, status, b, http.StatusTooManyRequests, CodeTooManyStreams)
	if items := e.events(s.Session, ""); len(items) == 0 { // follow=false is not a live stream
		t.Fatal("follow=false read nothing")
	}

	e.token = "globex-token"
	other := e.open()
	if status, _ := e.follow(other.Session); status != http.StatusOK {
		t.Fatalf("another tenant's stream: status %d, want 200", status)
	}

	e.token = "acme-token"
	stop1()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, stop := e.follow(s.Session)
		if status == http.StatusOK {
			stop()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after one stream ended a new one is still refused (%d)", status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLiveTimelinesCountAsStreams: a live timeline page holds a watch like a
// followed event stream, so it takes one of the tenant's stream places; a
// tenant cannot get past the limit by opening live pages instead.
func TestLiveTimelinesCountAsStreams(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.EventStreams.MaxPerTenant = 1
	e := newEnv(t, &cfg)
	s := e.open()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	resp, err := http.DefaultClient.Do(e.request("GET", "/v1/sessions/"+s.Session+"/timeline?live=1", "").WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("live timeline: status %d, want 200", resp.StatusCode)
	}
	status, b := e.doWithin("/v1/sessions/"+s.Session+"/events", "Accept", "text/event-stream")
	wantError(t, status, b, http.StatusTooManyRequests, CodeTooManyStreams, "event_streams.max_per_tenant")
	status, b = e.doWithin("/v1/sessions/" + s.Session + "/timeline?live=1")
	wantError(t, status, b, http.StatusTooManyRequests, CodeTooManyStreams)
}
