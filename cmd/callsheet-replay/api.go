package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/callsheet/callsheet/events"
)

// Limits of reading through the API.
const (
	// apiTimeout bounds one request to the node's API.
	apiTimeout = 60 * time.Second
	// maxEventLine is the longest NDJSON line read: an event is one NATS
	// message at most, and the API carries it as JSON.
	maxEventLine = 64 << 20
	// maxObject is the largest output object read back for a rewind.
	maxObject = 256 << 20
)

// apiSource reads a session through a node's HTTP API, as the tenant whose
// token it holds: GET /v1/sessions/{s}/events?follow=false for the events
// (the whole envelope of each, as stored), GET /v1/outputs/{name} for
// checkpoint pre-images. The node decides what the token may see, so one
// tenant's token never reads another's session (docs/spec.md §10 "Log").
type apiSource struct {
	base   *url.URL
	token  string
	client *http.Client
}

func newAPISource(raw, token string) (*apiSource, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: give the node's API base URL, such as http://127.0.0.1:7700", raw)
	}
	return &apiSource{base: u, token: token, client: &http.Client{Timeout: apiTimeout}}, nil
}

// get sends an authenticated GET for path (already escaped) and returns the
// open answer, or an error carrying the API's status and message.
func (s *apiSource) get(ctx context.Context, path, accept string) (*http.Response, error) {
	u := s.base.String() + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	req.Header.Set("Accept", accept)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var apiErr struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &apiErr) == nil && apiErr.Error.Message != "" {
		msg = apiErr.Error.Code + ": " + apiErr.Error.Message
	}
	hint := ""
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		hint = " (a node with tenants needs the tenant's token: set $" + TokenEnv + ", or --token)"
		if s.token != "" {
			hint = " (check the tenant's token in --token or $" + TokenEnv + ")"
		}
	case http.StatusNotFound:
		hint = " (a token reads its own tenant's sessions only: check --session and the token)"
	}
	return nil, fmt.Errorf("GET %s: %d %s%s", u, resp.StatusCode, msg, hint)
}

func (s *apiSource) events(ctx context.Context, session string) ([]events.Event, error) {
	resp, err := s.get(ctx, "/v1/sessions/"+url.PathEscape(session)+"/events?follow=false", "application/x-ndjson")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	evs, err := decodeEvents(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the events of session %s from %s: %w", session, s.base, err)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("session %s has no events at %s: check --session", session, s.base)
	}
	return evs, nil
}

// decodeEvents reads NDJSON events, one per line, as the API writes them.
// Each line must be one JSON object with the envelope events.Unmarshal
// requires; the error names the line.
func decodeEvents(r io.Reader) ([]events.Event, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var out []events.Event
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		ev, err := events.Unmarshal(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

func (s *apiSource) object(ctx context.Context, name string) ([]byte, error) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	resp, err := s.get(ctx, "/v1/outputs/"+strings.Join(parts, "/"), "*/*")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxObject+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxObject {
		return nil, fmt.Errorf("object %s is larger than %d bytes", name, maxObject)
	}
	return b, nil
}
