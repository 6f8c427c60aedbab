package main

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
)

// TestListSessions: replay --list finds the same sessions through the
// store (--nats, then --data) and through the API (--url), with the same
// filters and pages.
func TestListSessions(t *testing.T) {
	n, closed, dir := auditSession(t)
	ctx := context.Background()
	open, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.SubmitTurn(ctx, config.DefaultTenant, open.Session, "t1", []events.CallSpec{{ID: "u", Name: "no_such_tool", Arguments: json.RawMessage(`{}`)}}, true); err != nil {
		t.Fatal(err)
	}
	h, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	nats := []string{"--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials()}
	list := func(out string) api.SessionList {
		var l api.SessionList
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			t.Fatalf("--list --format json: %v\n%s", err, out)
		}
		return l
	}
	ids := func(out string) []string {
		var s []string
		for _, x := range list(out).Sessions {
			s = append(s, x.Session)
		}
		return s
	}
	// The index follows the log within about a second (node.DefaultIndexDelay).
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := run(t, append([]string{"--list", "--format", "json"}, nats...)...)
		if err == nil && slices.Equal(ids(out), []string{open.Session, closed}) && list(out).Sessions[1].Closed && list(out).Sessions[0].Outcomes[events.OutcomeBlocked] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("--list: the index did not catch up: %v\n%s", err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, []string{open.Session, closed}},
		{[]string{"--tool", "write"}, []string{closed}},
		{[]string{"--tool", "no_such_tool", "--outcome", "blocked"}, []string{open.Session}},
		{[]string{"--outcome", "indeterminate"}, nil},
		{[]string{"--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil},
	} {
		viaStore, err := run(t, append(append([]string{"--list", "--format", "json"}, tc.args...), nats...)...)
		if err != nil {
			t.Fatal(err)
		}
		viaAPI, err := run(t, append([]string{"--list", "--format", "json", "--url", srv.URL, "--token", "any"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		if viaStore != viaAPI || !slices.Equal(ids(viaStore), tc.want) {
			t.Errorf("--list %v: store %s, API %s; want %v", tc.args, viaStore, viaAPI, tc.want)
		}
	}
	// A page of one, then the next, as the table says.
	out, err := run(t, append([]string{"--list", "--limit", "1"}, nats...)...)
	if err != nil || !strings.Contains(out, open.Session) || strings.Contains(out, closed) || !strings.Contains(out, "more: add --cursor ") {
		t.Fatalf("--list --limit 1: %v\n%s", err, out)
	}
	cursor := strings.TrimSpace(out[strings.Index(out, "--cursor ")+len("--cursor "):])
	out, err = run(t, append([]string{"--list", "--limit", "1", "--cursor", cursor}, nats...)...)
	if err != nil || !strings.Contains(out, closed) || !strings.Contains(out, "closed, signed at") || strings.Contains(out, "more:") {
		t.Fatalf("--list --cursor: %v\n%s", err, out)
	}
	if _, err := run(t, append([]string{"--list", "--outcome", "fine"}, nats...)...); err == nil || !strings.Contains(err.Error(), `outcome "fine"`) {
		t.Fatalf("--list --outcome fine: %v", err)
	}
	srv.Close()
	n.Close()
	out, err = run(t, "--list", "--data", dir, "--tool", "glob")
	if err != nil || !strings.Contains(out, closed) {
		t.Fatalf("--list --data: %v\n%s", err, out)
	}
}
