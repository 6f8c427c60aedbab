package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/callsheet/callsheet/api"
)

// TestReplayHTMLIsTheTimelinePage: --format html prints exactly the page
// GET /v1/sessions/{s}/timeline served for the same log, from the log and
// through the API, and the Markdown holds the same facts in text.
func TestReplayHTMLIsTheTimelinePage(t *testing.T) {
	dir := t.TempDir()
	n, sess, _ := session(t, dir)
	h, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	resp, err := http.Get(srv.URL + "/v1/sessions/" + sess + "/timeline")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	viaAPI, err := run(t, "--session", sess, "--url", srv.URL, "--token", "any", "--format", "html")
	if err != nil {
		t.Fatalf("replay --url --format html: %v", err)
	}
	if viaAPI != string(page) {
		t.Fatalf("replay --url --format html differs from the API's timeline page (%d bytes against %d)", len(viaAPI), len(page))
	}
	srv.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET timeline: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := run(t, "--session", sess, "--data", dir, "--format", "html")
	if err != nil {
		t.Fatalf("replay --format html: %v", err)
	}
	if got != string(page) {
		t.Fatalf("replay --format html differs from the API's timeline page (%d bytes against %d)", len(got), len(page))
	}
	for _, s := range []string{`data-cs-call="cs-c-0-0"`, "write <code>w</code>", "no_such_tool <code>u</code>", "blocked: unavailable", "blocked: invalid_arguments"} {
		if !strings.Contains(got, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	md, err := run(t, "--session", sess, "--data", dir, "--format", "markdown")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"- Attempt 1: requested +", "claimed +", "- Committed: at +", "- Checkpoint: notes.md (did not exist; a rewind removes it) before attempt 1", "- Blocked: unavailable at +", "received 20", "- Events: "} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

func TestFormatFlag(t *testing.T) {
	for _, f := range Formats {
		if err := NewMain().ParseFlags([]string{"--session", "S", "--format", f}); err != nil {
			t.Errorf("--format %s: %v", f, err)
		}
	}
	err := NewMain().ParseFlags([]string{"--session", "S", "--format", "pdf"})
	if err == nil || !strings.Contains(err.Error(), `"pdf"`) || !strings.Contains(err.Error(), "markdown, json, html") {
		t.Errorf("--format pdf: %v, want an error naming it and the formats", err)
	}
}
