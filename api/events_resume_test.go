package api

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// sseIDs reads an SSE answer's "id:" lines.
func sseIDs(t *testing.T, e *env, path string, header ...string) []uint64 {
	t.Helper()
	resp, err := http.DefaultClient.Do(e.request("GET", path, "", append([]string{"Accept", "text/event-stream"}, header...)...))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	var ids []uint64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				t.Fatalf("id line %q: %v", sc.Text(), err)
			}
			ids = append(ids, n)
		}
	}
	return ids
}

// TestEventsResumeFromLastEventID: a reconnecting SSE client that sends
// Last-Event-ID gets the events after it and nothing it saw; ?after wins
// over the header, and a bad header is a 400 naming it.
func TestEventsResumeFromLastEventID(t *testing.T) {
	e := newEnv(t, nil)
	s := e.open()
	e.must("POST", "/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[{"id":"c1","name":"read","arguments":{"path":"x"}}]}`, http.StatusOK, nil)
	path := "/v1/sessions/" + s.Session + "/events?follow=false"
	all := sseIDs(t, e, path)
	if len(all) < 4 {
		t.Fatalf("ids %v: want the session's events", all)
	}
	mid := all[len(all)/2]
	rest := sseIDs(t, e, path, "Last-Event-ID", strconv.FormatUint(mid, 10))
	if len(rest) == 0 || rest[0] != mid+1 || rest[len(rest)-1] != all[len(all)-1] {
		t.Errorf("after Last-Event-ID %d: ids %v, want %d..%d", mid, rest, mid+1, all[len(all)-1])
	}
	if got := sseIDs(t, e, path+"&after=1", "Last-Event-ID", strconv.FormatUint(mid, 10)); len(got) == 0 || got[0] != 2 {
		t.Errorf("?after=1 with Last-Event-ID %d: ids %v, want from 2", mid, got)
	}
	status, b := e.do("GET", path, "", "Accept", "text/event-stream", "Last-Event-ID", "x")
	wantError(t, status, b, 400, CodeInvalidRequest, "Last-Event-ID")
}
