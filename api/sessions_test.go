package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
)

// list GETs /v1/sessions with query and returns every page's sessions, in
// order, following the cursors.
func (e *env) list(query string) []SessionItem {
	e.t.Helper()
	var all []SessionItem
	q, _ := url.ParseQuery(query)
	for pages := 0; ; pages++ {
		var page SessionList
		e.must("GET", "/v1/sessions?"+q.Encode(), "", http.StatusOK, &page)
		all = append(all, page.Sessions...)
		if page.Next == "" {
			return all
		}
		if pages > 100 {
			e.t.Fatal("more than 100 pages")
		}
		q.Set("cursor", page.Next)
	}
}

func ids(items []SessionItem) []string {
	out := make([]string, len(items))
	for i, s := range items {
		out[i] = s.Session
	}
	return out
}

// TestSessionSearch builds sessions on a real node that match and miss each
// filter, and checks that GET /v1/sessions finds exactly the ones that
// match, newest first, with their counts, for the token's tenant only,
// through pages of any size.
func TestSessionSearch(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	e := newEnv(t, &cfg)
	turn := func(s, id, calls string) {
		e.must("POST", "/v1/sessions/"+s+"/turns", `{"id":"`+id+`","calls":[`+calls+`]}`, http.StatusOK, nil)
	}
	const (
		readOK    = `{"id":"r","name":"read","arguments":{"path":"notes.md"}}`
		readError = `{"id":"m","name":"read","arguments":{"path":"missing.md"}}`
		writeOK   = `{"id":"w","name":"write","arguments":{"path":"notes.md","content":"hi\n"}}`
		unknown   = `{"id":"u","name":"no_such_tool","arguments":{}}`
		badArgs   = `{"id":"b","name":"write","arguments":{"nope":1}}`
	)
	e.token = "tok-acme"
	var opened []time.Time
	open := func() string {
		opened = append(opened, time.Now())
		time.Sleep(2 * time.Millisecond) // each session opens after the instant noted before it
		return e.open().Session
	}
	a := open() // write ok, read ok
	turn(a, "t1", writeOK)
	turn(a, "t2", readOK)
	b := open() // read error
	turn(b, "t1", readError)
	c := open() // no_such_tool blocked, write blocked (bad arguments), read error
	turn(c, "t1", unknown+","+badArgs+","+readError)
	d := open() // write ok, closed
	turn(d, "t1", writeOK)
	e.must("POST", "/v1/sessions/"+d+"/close", "", http.StatusOK, nil)
	f := open() // nothing yet
	end := time.Now()
	e.token = "tok-globex"
	g := e.open().Session
	turn(g, "t1", writeOK)
	e.token = "tok-acme"

	// The index follows the log within moments: wait for the last change.
	deadline := time.Now().Add(20 * time.Second)
	for {
		all := e.list("")
		if len(all) == 5 && all[1].Closed && all[3].Outcomes[events.OutcomeError] == 1 && all[4].Turns == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index did not catch up: %+v", all)
		}
		time.Sleep(20 * time.Millisecond)
	}

	all := e.list("")
	if !slices.Equal(ids(all), []string{f, d, c, b, a}) {
		t.Fatalf("all sessions: %v, want newest first %v", ids(all), []string{f, d, c, b, a})
	}
	byID := map[string]SessionItem{}
	for _, s := range all {
		byID[s.Session] = s
	}
	if s := byID[c]; s.Turns != 1 || s.Calls != 3 || s.Outcomes[events.OutcomeBlocked] != 2 || s.Outcomes[events.OutcomeError] != 1 ||
		!slices.Equal(s.Tools, []string{"no_such_tool", "read", "write"}) || s.Closed || s.Workspace == "" {
		t.Errorf("session c: %+v", s)
	}
	if s := byID[d]; !s.Closed || s.Signed == 0 || s.Outcomes[events.OutcomeOK] != 1 {
		t.Errorf("closed session d: %+v", s)
	}
	// A session's log opens with SessionOpened and its first owner's
	// OwnershipTaken (docs/events.md).
	if s := byID[f]; s.Turns != 0 || len(s.Outcomes) != 0 || s.Events != 2 {
		t.Errorf("session f without turns: %+v", s)
	}
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"tool=write", []string{d, c, a}},
		{"tool=read", []string{c, b, a}},
		{"tool=no_such_tool", []string{c}},
		{"tool=glob", nil},
		{"outcome=ok", []string{d, a}},
		{"outcome=error", []string{c, b}},
		{"outcome=blocked", []string{c}},
		{"outcome=indeterminate", nil},
		{"tool=read&outcome=error", []string{c, b}},
		{"tool=read&outcome=ok", []string{a}},
		{"tool=write&outcome=blocked", []string{c}},
		{"tool=write&outcome=ok", []string{d, a}},
		{"tool=no_such_tool&outcome=ok", nil},
		{"since=" + opened[2].UTC().Format(time.RFC3339Nano), []string{f, d, c}},
		{"until=" + opened[2].UTC().Format(time.RFC3339Nano), []string{b, a}},
		{"since=" + opened[1].UTC().Format(time.RFC3339Nano) + "&until=" + opened[3].UTC().Format(time.RFC3339Nano), []string{c, b}},
		{"since=" + opened[1].UTC().Format(time.RFC3339Nano) + "&outcome=error", []string{c, b}},
		{"since=" + opened[3].UTC().Format(time.RFC3339Nano) + "&tool=write", []string{d}},
		{"since=" + end.UTC().Format(time.RFC3339Nano), nil},
		{"until=" + opened[0].UTC().Format(time.RFC3339Nano), nil},
		{"since=" + opened[0].UTC().Format("2006-01-02"), []string{f, d, c, b, a}},
	} {
		for _, limit := range []int{1, 2, 50} {
			got := e.list(tc.query + fmt.Sprintf("&limit=%d", limit))
			if !slices.Equal(ids(got), tc.want) {
				t.Errorf("%s (limit %d): %v, want %v", tc.query, limit, ids(got), tc.want)
			}
		}
	}
	// The other tenant sees its own session only, and acme's not at all.
	e.token = "tok-globex"
	if got := e.list(""); !slices.Equal(ids(got), []string{g}) {
		t.Errorf("globex: %v, want %v", ids(got), []string{g})
	}
	if got := e.list("tool=read"); len(got) != 0 {
		t.Errorf("globex tool=read: %v", ids(got))
	}
	e.token = ""
	status, body := e.do("GET", "/v1/sessions", "")
	wantError(t, status, body, http.StatusUnauthorized, CodeUnauthorized)

	// Bad queries say what to send.
	e.token = "tok-acme"
	var first SessionList
	e.must("GET", "/v1/sessions?tool=read&limit=1", "", http.StatusOK, &first)
	for _, tc := range []struct{ query, want string }{
		{"outcome=fine", `outcome "fine"`},
		{"limit=0", "limit"},
		{"limit=x", "limit"},
		{"limit=1001", "limit 1001"},
		{"since=yesterday", "RFC 3339"},
		{"until=2026-13-01", "RFC 3339"},
		{"since=2026-12-02&until=2026-12-01", "is not before until"},
		{"cursor=nope", "is not one this listing gave"},
		{"tool=write&cursor=" + first.Next, "other filters"},
		{"tools=read", `query parameter "tools" is not known`},
		{"tool=read&tool=write", "given 2 times"},
	} {
		status, body := e.do("GET", "/v1/sessions?"+tc.query, "")
		wantError(t, status, body, http.StatusBadRequest, CodeInvalidRequest, tc.want)
	}
}

// TestSessionSearchRebuilds: a node started on a store whose index is gone
// (or was never made, as for sessions from before it) indexes every
// session again from its log at start.
func TestSessionSearchRebuilds(t *testing.T) {
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var want []string
	for range 3 {
		info, err := n.OpenSession(ctx, "default", "", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := n.SubmitTurn(ctx, "default", info.Session, "t1", []events.CallSpec{{ID: "w", Name: "write", Arguments: json.RawMessage(`{"path":"a","content":"b"}`)}}, true); err != nil {
			t.Fatal(err)
		}
		want = append([]string{info.Session}, want...)
	}
	waitSessions(t, n, "write", want)
	n.Close()
	if err := dropSearchIndex(dir); err != nil {
		t.Fatal(err)
	}
	n, err = node.New(ctx, node.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitSessions(t, n, "write", want)
}

func waitSessions(t *testing.T, n *node.Node, tool string, want []string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p, err := n.ListSessions(context.Background(), "default", node.SessionQuery{Tool: tool})
		var got []string
		for _, s := range p.Sessions {
			got = append(got, s.Session)
		}
		if err == nil && slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions with %s: %v (%v), want %v", tool, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestParseSessionQuery(t *testing.T) {
	q, err := ParseSessionQuery(url.Values{"since": {"2026-12-01"}, "until": {"2026-12-02T10:00:00+02:00"}, "tool": {"read"}, "outcome": {"ok"}, "limit": {"5"}})
	if err != nil {
		t.Fatal(err)
	}
	if !q.Since.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !q.Until.Equal(time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)) || q.Tool != "read" || q.Outcome != "ok" || q.Limit != 5 {
		t.Fatalf("%+v", q)
	}
	if q, err := ParseSessionQuery(url.Values{}); err != nil || q.Limit != 50 {
		t.Fatalf("defaults: %+v %v", q, err)
	}
}

func FuzzParseSessionQuery(f *testing.F) {
	f.Add("since=2026-12-01&tool=read&outcome=ok&limit=3")
	f.Add("cursor=eyJ2IjoxfQ&limit=1000")
	f.Add("until=2026-12-01T00:00:00.5Z&since=2026-11-01")
	f.Add("limit=-1&x=1")
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		q, err := ParseSessionQuery(v)
		if err != nil {
			if err.Error() == "" || !strings.ContainsAny(err.Error(), "=\"") && !strings.Contains(err.Error(), "since") && !strings.Contains(err.Error(), "limit") {
				t.Fatalf("an error that names nothing: %q", err)
			}
			return
		}
		if q.Limit < 1 || q.Limit > node.MaxSessionLimit {
			t.Fatalf("accepted limit %d", q.Limit)
		}
		if !q.Since.IsZero() && !q.Until.IsZero() && !q.Since.Before(q.Until) {
			t.Fatalf("accepted since %v >= until %v", q.Since, q.Until)
		}
	})
}

// dropSearchIndex deletes the search index of a stopped node's store.
func dropSearchIndex(dir string) error {
	creds, err := cluster.EnsureCredentials(cluster.DefaultCredentialsPath(dir))
	if err != nil {
		return err
	}
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1, Credentials: creds})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := srv.Connect("test")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return js.DeleteKeyValue(context.Background(), natslog.DefaultSearchBucket)
}

// TestSignRoute: POST /v1/sessions/{s}/sign signs the head with the node's
// key (the signature verifies, over the head's real hash), asking again
// with nothing new answers the same signature and records nothing, another
// tenant's token cannot sign (or learn of) the session, and closing signs
// the close.
func TestSignRoute(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Tokens: []config.TenantToken{{Token: "tok-acme", Principal: "alice"}}}, "globex": {Token: "tok-globex"}}
	e := newEnv(t, &cfg)
	e.token = "tok-acme"
	s := e.open().Session
	e.must("POST", "/v1/sessions/"+s+"/turns", `{"id":"t1","calls":[{"id":"w","name":"write","arguments":{"path":"a","content":"b"}}]}`, http.StatusOK, nil)
	var a SignAnswer
	e.must("POST", "/v1/sessions/"+s+"/sign", "", http.StatusOK, &a)
	pub, id := e.node.SigningKey()
	evs := e.events(s, "")
	head := evs[len(evs)-2] // the signature follows what it signs
	wantHash := itemHash(t, head)
	if a.Signed.Seq != head.Seq || a.Signed.Hash != wantHash || a.Signed.Key != id || a.Signed.Reason != events.SignRequested || a.Signed.By != "alice" || a.Seq != head.Seq+1 {
		t.Fatalf("sign answer %+v; head seq %d hash %s, key %s", a, head.Seq, wantHash, id)
	}
	if err := events.VerifyHead(pub, "acme", s, a.Signed); err != nil {
		t.Fatalf("the signature does not verify: %v", err)
	}
	var again SignAnswer
	e.must("POST", "/v1/sessions/"+s+"/sign", "{}", http.StatusOK, &again)
	if again.Seq != a.Seq || again.Signed != a.Signed || len(e.events(s, "")) != len(evs) {
		t.Fatalf("signing again with nothing new: %+v, want %+v and no new event", again, a)
	}
	status, body := e.do("POST", "/v1/sessions/"+s+"/sign", `{"by":"mallory"}`)
	wantError(t, status, body, http.StatusBadRequest, CodeInvalidBody)
	e.token = "tok-globex"
	status, body = e.do("POST", "/v1/sessions/"+s+"/sign", "")
	wantError(t, status, body, http.StatusNotFound, CodeNotFound)
	e.token = ""
	status, body = e.do("POST", "/v1/sessions/"+s+"/sign", "")
	wantError(t, status, body, http.StatusUnauthorized, CodeUnauthorized)
	e.token = "tok-acme"
	e.must("POST", "/v1/sessions/"+s+"/close", "", http.StatusOK, nil)
	evs = e.events(s, "")
	last := evs[len(evs)-1]
	if last.Type != events.TypeHeadSigned || evs[len(evs)-2].Type != events.TypeSessionClosed || !strings.Contains(string(last.Data), `"reason":"closed"`) {
		t.Fatalf("the close is not signed: %s %s", last.Type, last.Data)
	}
}

// itemHash is the chain hash of an event as the API shows it.
func itemHash(t *testing.T, it EventItem) string {
	t.Helper()
	h, err := events.Hash(events.Event{ID: it.ID, Tenant: it.Tenant, Session: it.Session, Seq: it.Seq, Time: it.Time, Type: it.Type, Causation: it.Causation, Prev: it.Prev, Data: it.Data})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
