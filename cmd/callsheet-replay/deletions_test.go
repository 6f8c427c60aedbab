package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/node"
)

// TestDeletionsLog: sessions deleted through the API leave nothing replay
// can find (--session, --list), and the tenant's deletions log reads the
// same through the store and the API, verifies with the node's key, and an
// export verifies away from the fleet until one byte of it is changed.
// --list and --deletions name the tenant they read, and a store of several
// tenants needs --tenant.
func TestDeletionsLog(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	n, err := node.New(context.Background(), node.Options{DataDir: dir, Config: &cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	h, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	do := func(token, method, path, body string) []byte {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return b
	}
	open := func(token string) string {
		var s struct{ Session string }
		_ = json.Unmarshal(do(token, "POST", "/v1/sessions", `{}`), &s)
		do(token, "POST", "/v1/sessions/"+s.Session+"/turns", `{"calls":[{"id":"w","name":"write","arguments":{"path":"a.txt","content":"A"}}]}`)
		return s.Session
	}
	gone1, gone2, kept := open("tok-acme"), open("tok-acme"), open("tok-acme")
	open("tok-globex")
	for _, s := range []string{gone1, gone2} {
		do("tok-acme", "DELETE", "/v1/sessions/"+s, "")
	}
	nats := []string{"--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials()}
	pub := filepath.Join(dir, "credentials", "signing.pub")

	// Nothing of the deleted sessions is found.
	for _, s := range []string{gone1, gone2} {
		if _, err := run(t, append([]string{"--session", s, "--tenant", "acme"}, nats...)...); err == nil || !strings.Contains(err.Error(), "no events") {
			t.Errorf("replay --session %s: %v, want no events", s, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := run(t, append([]string{"--list", "--tenant", "acme"}, nats...)...)
		if err == nil && strings.HasPrefix(out, "sessions of tenant acme\n") && strings.Contains(out, kept) && !strings.Contains(out, gone1) && !strings.Contains(out, gone2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--list: %v\n%s", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := run(t, append([]string{"--list"}, nats...)...); err == nil || !strings.Contains(err.Error(), "2 tenants (acme, globex): give --tenant") {
		t.Fatalf("--list without --tenant on a store of two tenants: %v", err)
	}
	out, err := run(t, "--list", "--url", srv.URL, "--token", "tok-globex")
	if err != nil || !strings.HasPrefix(out, "sessions of tenant globex\n") {
		t.Fatalf("--list --url: %v\n%s", err, out)
	}

	// The deletions log, through the store and the API.
	viaStore, err := run(t, append([]string{"--deletions", "--tenant", "acme", "--format", "json"}, nats...)...)
	if err != nil {
		t.Fatal(err)
	}
	viaAPI, err := run(t, "--deletions", "--url", srv.URL, "--token", "tok-acme", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var page api.DeletionsPage
	if err := json.Unmarshal([]byte(viaStore), &page); err != nil || len(page.Deletions) != 2 || page.Tenant != "acme" {
		t.Fatalf("--deletions --format json: %v\n%s", err, viaStore)
	}
	var pageAPI api.DeletionsPage
	_ = json.Unmarshal([]byte(viaAPI), &pageAPI)
	if pageAPI.Tenant != "acme" || len(pageAPI.Deletions) != 2 || string(pageAPI.Deletions[1]) != string(page.Deletions[1]) {
		t.Fatalf("through the API:\n%s\nthrough the store:\n%s", viaAPI, viaStore)
	}
	table, err := run(t, "--deletions", "--url", srv.URL, "--token", "tok-acme")
	if err != nil || !strings.HasPrefix(table, "deletions log of tenant acme: 2 receipts") || !strings.Contains(table, gone2) || !strings.Contains(table, "requested") {
		t.Fatalf("--deletions: %v\n%s", err, table)
	}
	for _, src := range [][]string{append([]string{"--tenant", "acme"}, nats...), {"--url", srv.URL, "--token", "tok-acme"}} {
		rep, err := run(t, append([]string{"--deletions", "--verify", "--pubkey", pub}, src...)...)
		if err != nil || !strings.Contains(rep, "signatures: 2 of 2 verify") || !strings.Contains(rep, "verified the deletions log of tenant acme: 2 receipts, ok") {
			t.Fatalf("--deletions --verify %v: %v\n%s", src, err, rep)
		}
		t.Logf("replay --deletions --verify --pubkey signing.pub %s:\n%s", strings.Join(src[:1], " "), rep)
	}
	// Another tenant's log is its own: empty, and verifies.
	if rep, err := run(t, "--deletions", "--verify", "--url", srv.URL, "--token", "tok-globex"); err != nil || !strings.Contains(rep, "tenant globex: 0 receipts, ok") {
		t.Fatalf("globex: %v\n%s", err, rep)
	}

	// An export, checked away from the fleet; then changed.
	m := NewMain()
	var exp strings.Builder
	m.Stdout, m.Stderr = &exp, io.Discard
	if err := m.ParseFlags([]string{"--deletions", "--export", "--url", srv.URL, "--token", "tok-acme"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "deletions.ndjson")
	if err := os.WriteFile(file, []byte(exp.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := run(t, "--deletions", "--verify", "--file", file, "--pubkey", pub); err != nil || !strings.Contains(rep, "tenant acme: 2 receipts, ok") {
		t.Fatalf("--verify --file: %v\n%s", err, rep)
	}
	tampered := strings.Replace(exp.String(), `"by":"acme"`, `"by":"mallory"`, 1)
	if err := os.WriteFile(file, []byte(tampered), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := run(t, "--deletions", "--verify", "--file", file, "--pubkey", pub)
	if !errors.Is(err, ErrVerifyFailed) || !strings.Contains(rep, "receipt 1 (session "+gone1+"): no given key verifies") || !strings.Contains(rep, "receipt 2 (session "+gone2+"): prev") {
		t.Fatalf("a changed export: %v\n%s", err, rep)
	}
	dropped := exp.String()[strings.Index(exp.String(), "\n")+1:]
	if err := os.WriteFile(file, []byte(dropped), 0o600); err != nil {
		t.Fatal(err)
	}
	if rep, err := run(t, "--deletions", "--verify", "--file", file); !errors.Is(err, ErrVerifyFailed) || !strings.Contains(rep, "genesis link") {
		t.Fatalf("an export without its first receipt: %v\n%s", err, rep)
	}
	var d events.Deletion
	if d, err = events.ParseDeletion(page.Deletions[0]); err != nil || d.Session != gone1 || d.By != "acme" {
		t.Fatalf("receipt 1: %+v %v", d, err)
	}
}
