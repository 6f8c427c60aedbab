package node_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/projections"
)

func limited(l config.Limits) *config.Config {
	c := config.DefaultConfig()
	c.Limits = l
	return &c
}

// sessionsLimited is the default config with limits.sessions_per_tenant n.
func sessionsLimited(n int) *config.Config {
	l := config.DefaultLimits()
	l.SessionsPerTenant = n
	return limited(l)
}

// TestSessionLimitSurvivesRestart: a node counts the open sessions it finds
// in the index at start, closed ones apart.
func TestSessionLimitSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := sessionsLimited(2)
	tt := &testTools{}
	n := startNode(t, dir, cfg, tt)
	s1 := openSession(t, n)
	openSession(t, n)
	ctx := context.Background()
	if _, err := n.OpenSession(ctx, "default", "", ""); !errors.Is(err, node.ErrLimited) || !strings.Contains(err.Error(), "limits.sessions_per_tenant") {
		t.Fatalf("a 3rd session: %v, want ErrLimited naming limits.sessions_per_tenant", err)
	}
	// Another tenant has places of its own.
	if _, err := n.OpenSession(ctx, "other", "", ""); err != nil {
		t.Fatalf("another tenant's session: %v", err)
	}
	n.Close()

	n = startNode(t, dir, cfg, tt)
	defer n.Close()
	if _, err := n.OpenSession(ctx, "default", "", ""); !errors.Is(err, node.ErrLimited) {
		t.Fatalf("a 3rd session after a restart: %v, want ErrLimited", err)
	}
	if err := n.CloseSession(ctx, "default", s1, "done"); err != nil {
		t.Fatal(err)
	}
	openSession(t, n)
	n.Close()
	// A closed session found at start is not counted.
	n = startNode(t, dir, cfg, tt)
	defer n.Close()
	if _, err := n.OpenSession(ctx, "default", "", ""); !errors.Is(err, node.ErrLimited) {
		t.Fatalf("after closing one and opening one: %v, want ErrLimited", err)
	}
}

// TestCallsInFlight: a tenant's calls count from the turn's submission to
// its completion, whether the caller waits for it or not; a refused turn
// records nothing; posting a running turn again does not count it twice.
func TestCallsInFlight(t *testing.T) {
	lim := config.DefaultLimits()
	lim.CallsPerTurn, lim.CallsInFlightPerTenant = 3, 3
	tt := &testTools{}
	n := startNode(t, t.TempDir(), limited(lim), tt)
	defer n.Close()
	ctx := context.Background()
	s1, s2 := openSession(t, n), openSession(t, n)
	if _, err := n.SubmitTurn(ctx, "default", s1, "t", []events.CallSpec{nap("a", 1), nap("b", 1), nap("c", 1), nap("d", 1)}, true); !errors.Is(err, node.ErrTooLarge) || !strings.Contains(err.Error(), "limits.calls_per_turn") {
		t.Fatalf("4 calls: %v, want ErrTooLarge naming limits.calls_per_turn", err)
	}
	running, err := n.SubmitTurn(ctx, "default", s1, "long", []events.CallSpec{mutate("a", 1500), mutate("b", 1)}, false)
	if err != nil || running.Status != projections.StatusRunning {
		t.Fatalf("long turn: %v %s", err, running.Status)
	}
	if _, err := n.SubmitTurn(ctx, "default", s1, "long", []events.CallSpec{mutate("a", 1500), mutate("b", 1)}, false); err != nil {
		t.Fatalf("the running turn posted again: %v", err)
	}
	if _, err := n.SubmitTurn(ctx, "default", s2, "more", []events.CallSpec{nap("x", 1), nap("y", 1)}, true); !errors.Is(err, node.ErrLimited) || !strings.Contains(err.Error(), "limits.calls_in_flight_per_tenant") {
		t.Fatalf("2 more calls beside 2 in flight: %v, want ErrLimited naming limits.calls_in_flight_per_tenant", err)
	}
	if evs := recorded(t, n, s2); len(evs) != 2 {
		t.Fatalf("the refused turn left %d events, want only SessionOpened and OwnershipTaken", len(evs))
	}
	submit(t, n, s2, "one", nap("x", 1)) // 3 in flight at most: fits
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := n.SubmitTurn(ctx, "default", s2, "more", []events.CallSpec{nap("x", 1), nap("y", 1)}, true)
		if err == nil {
			break
		}
		if !errors.Is(err, node.ErrLimited) || time.Now().After(deadline) {
			t.Fatalf("after the long turn: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOutputQuotaSurvivesRestart: a node counts each tenant's kept full
// outputs from the object store at start; past the quota a cut result says
// its full output was not kept, and the call is still ok.
func TestOutputQuotaSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	lim := config.DefaultLimits()
	lim.OutputBytesPerTenant = 150_000 // one 100 kB output fits, two do not
	tt := &testTools{}
	big := events.CallSpec{ID: "b", Name: "big", Arguments: []byte(`{"ms":0}`)}
	n := startNode(t, dir, limited(lim), tt)
	s := openSession(t, n)
	r := submit(t, n, s, "t1", big).Results[0]
	if r.FullOutput == nil {
		t.Fatalf("the first cut output was not kept: %+v", r)
	}
	n.Close()
	n = startNode(t, dir, limited(lim), tt)
	defer n.Close()
	r = submit(t, n, s, "t2", big).Results[0]
	if r.FullOutput == nil {
		t.Fatalf("the second cut output (the tenant at 100 kB of 150 kB) was not kept: %+v", r)
	}
	r = submit(t, n, s, "t3", big).Results[0]
	if r.Outcome != events.OutcomeOK || !r.Truncated || r.FullOutput != nil || !strings.Contains(r.Content[0].Text, "the full output was not kept") || !strings.Contains(r.Content[0].Text, "limits.output_bytes_per_tenant") {
		t.Fatalf("over the quota: %s truncated=%v full=%v ...%q", r.Outcome, r.Truncated, r.FullOutput, r.Content[0].Text[max(len(r.Content[0].Text)-200, 0):])
	}
}

// TestFailedOpenTakesNoPlace: a session whose opening failed after it was
// indexed (its log out of reach: here the event stream is gone) keeps no
// place of the tenant's sessions_per_tenant, on this node or, once the node
// restarts, from the index: the caller never learnt its id, and it never
// opened.
func TestFailedOpenTakesNoPlace(t *testing.T) {
	dir := t.TempDir()
	cfg := sessionsLimited(1)
	tt := &testTools{}
	n := startNode(t, dir, cfg, tt)
	ctx := context.Background()
	if err := jsOf(t, n).DeleteStream(ctx, natslog.DefaultStream); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		_, err := n.OpenSession(ctx, "default", "", "")
		if node.ErrorCode(err) != node.CodeUnavailable {
			t.Fatalf("opening %d without the event stream: %v (%s), want unavailable", i+1, err, node.ErrorCode(err))
		}
	}
	n.Close()
	n = startNode(t, dir, cfg, tt) // the stream made again
	defer n.Close()
	s := openSession(t, n)
	if _, err := n.OpenSession(ctx, "default", "", ""); !errors.Is(err, node.ErrLimited) {
		t.Fatalf("a 2nd session: %v, want ErrLimited", err)
	}
	// Nor are they listed: the list is of what the log holds.
	var listed node.SessionPage
	waitFor(t, func() bool {
		var err error
		listed, err = n.ListSessions(ctx, "default", node.SessionQuery{})
		return err == nil && len(listed.Sessions) > 0
	})
	if len(listed.Sessions) != 1 || listed.Sessions[0].Session != s {
		t.Fatalf("the list holds %d sessions, want only %s", len(listed.Sessions), s)
	}
}

// workspaceDirs lists the directories in a tenant's workspace root.
func workspaceDirs(t *testing.T, root string) []string {
	t.Helper()
	des, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// TestUnopenedEntriesSwept: the index entries that failed openings left
// stay while they are young (an opening may still be under way) and go,
// with the empty workspaces made for them, when a node starts once they are
// old enough; an opened session keeps its own.
func TestUnopenedEntriesSwept(t *testing.T) {
	dir := t.TempDir()
	tt := &testTools{}
	n := startNode(t, dir, nil, tt)
	ctx := context.Background()
	info, err := n.OpenSession(ctx, "default", "", "")
	if err != nil {
		t.Fatal(err)
	}
	s, wsRoot := info.Session, filepath.Dir(info.Workspace)
	if err := jsOf(t, n).DeleteStream(ctx, natslog.DefaultStream); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := n.OpenSession(ctx, "default", "", ""); node.ErrorCode(err) != node.CodeUnavailable {
			t.Fatalf("opening %d without the event stream: %v, want unavailable", i+1, err)
		}
	}
	n.Close()
	keys := func(n *node.Node) []string {
		t.Helper()
		kv, err := jsOf(t, n).KeyValue(ctx, natslog.DefaultIndexBucket)
		if err != nil {
			t.Fatal(err)
		}
		ks, err := kv.Keys(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
			t.Fatal(err)
		}
		return ks
	}
	n = startNode(t, dir, nil, tt) // the stream made again: s's log is gone too
	if ks := keys(n); len(ks) != 3 {
		n.Close()
		t.Fatalf("young unopened entries: index keys %v, want all 3 kept", ks)
	}
	if ds := workspaceDirs(t, wsRoot); len(ds) != 3 {
		n.Close()
		t.Fatalf("young unopened entries: workspaces %v, want all 3 kept", ds)
	}
	s2 := openSession(t, n)
	n.Close()
	defer node.SetUnopenedAfter(0)()
	n = startNode(t, dir, nil, tt)
	defer n.Close()
	if ks := keys(n); len(ks) != 1 || ks[0] != "default."+s2 {
		t.Fatalf("after a start with the entries old enough: index keys %v, want only default.%s (%s's log went with the stream)", ks, s2, s)
	}
	if _, err := n.SessionStatus(ctx, "default", s); !errors.Is(err, node.ErrNotFound) {
		t.Fatalf("the status of %s, whose entry went: %v, want ErrNotFound", s, err)
	}
	if _, err := n.SessionStatus(ctx, "default", s2); err != nil {
		t.Fatalf("the status of %s: %v", s2, err)
	}
	if ds := workspaceDirs(t, wsRoot); len(ds) != 1 || ds[0] != s2 {
		t.Fatalf("after the sweep: workspaces %v, want only %s's (the unopened sessions' empty ones go)", ds, s2)
	}
}

// TestUnindexedOpenLeavesNoWorkspace: an opening whose session could not
// be indexed removes the workspace it made (nothing can run in it), but
// never a workspace the caller named, which may be another session's.
func TestUnindexedOpenLeavesNoWorkspace(t *testing.T) {
	n := startNode(t, t.TempDir(), nil, &testTools{})
	defer n.Close()
	ctx := context.Background()
	info, err := n.OpenSession(ctx, "default", "shared", "")
	if err != nil {
		t.Fatal(err)
	}
	wsRoot := filepath.Dir(info.Workspace)
	if err := jsOf(t, n).DeleteKeyValue(ctx, natslog.DefaultIndexBucket); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "shared"} {
		if _, err := n.OpenSession(ctx, "default", name, ""); err == nil {
			t.Fatalf("opening (workspace %q) without the index: no error", name)
		}
	}
	if ds := workspaceDirs(t, wsRoot); len(ds) != 1 || ds[0] != "shared" {
		t.Fatalf("after openings that could not be indexed: workspaces %v, want only [shared]", ds)
	}
}

// TestCanceledOpenKeepsItsPlace: a tenant that gives up on its openings
// (each request's context ends once the session is indexed, before its
// actor answers) cannot pass sessions_per_tenant with them: the session it
// walked away from goes on to open, can be found in the list, and keeps
// its place.
func TestCanceledOpenKeepsItsPlace(t *testing.T) {
	cfg := sessionsLimited(1)
	tt := &testTools{}
	n := startNode(t, t.TempDir(), cfg, tt)
	defer n.Close()
	kv, err := jsOf(t, n).KeyValue(context.Background(), natslog.DefaultIndexBucket)
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; ; attempt++ {
		w, err := kv.WatchAll(context.Background(), jetstream.UpdatesOnly())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			for e := range w.Updates() {
				if e != nil {
					cancel() // indexed: the caller walks away
					return
				}
			}
		}()
		_, err = n.OpenSession(ctx, "default", "", "")
		cancel()
		w.Stop()
		if err == nil {
			t.Fatalf("attempt %d: the opening was answered before its caller walked away", attempt)
		}
		// Did the session it walked away from open after all?
		var listed node.SessionPage
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if listed, err = n.ListSessions(context.Background(), "default", node.SessionQuery{}); err == nil && len(listed.Sessions) > 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(listed.Sessions) == 0 {
			if attempt == 20 {
				t.Fatal("no walked-away opening went on to open in 20 attempts")
			}
			continue // it walked away before the index answered: nothing opened
		}
		if _, err := n.OpenSession(context.Background(), "default", "", ""); !errors.Is(err, node.ErrLimited) {
			t.Fatalf("attempt %d: %s opened after its caller walked away; another opening: %v, want ErrLimited", attempt, listed.Sessions[0].Session, err)
		}
		return
	}
}
