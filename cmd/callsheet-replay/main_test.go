package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
)

// session runs a node on dir, plays two turns through the API and returns
// the node (still running), the session id and the API's transcript bytes.
func session(t *testing.T, dir string) (*node.Node, string, []byte) {
	t.Helper()
	ctx := context.Background()
	n, err := node.New(ctx, node.Options{DataDir: dir})
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
	post := func(path, body string) []byte {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 300 {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		return b
	}
	var s struct{ Session string }
	_ = json.Unmarshal(post("/v1/sessions", ""), &s)
	post("/v1/sessions/"+s.Session+"/turns", `{"id":"t1","calls":[
		{"id":"w","name":"write","arguments":{"path":"notes.md","content":"# hi\n"}},
		{"id":"r","name":"read","arguments":"{\"path\":\"notes.md\"}"},
		{"id":"m","name":"read","arguments":{"path":"missing.txt"}},
		{"id":"x","name":"read","arguments":{"nope":1}}]}`)
	post("/v1/sessions/"+s.Session+"/turns", `{"id":"t2","calls":[{"id":"u","name":"no_such_tool","arguments":{}}]}`)
	resp, err := http.Get(srv.URL + "/v1/sessions/" + s.Session + "/transcript")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	tr, _ := io.ReadAll(resp.Body)
	return n, s.Session, tr
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	m := NewMain()
	var out bytes.Buffer
	m.Stdout = &out
	if err := m.ParseFlags(args); err != nil {
		t.Fatalf("ParseFlags(%q): %v", args, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := m.Run(ctx)
	return out.String(), err
}

func TestReplayMatchesAPI(t *testing.T) {
	dir := t.TempDir()
	n, sess, want := session(t, dir)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := run(t, "--session", sess, "--data", dir, "--format", "json")
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if got != string(want) {
		t.Fatalf("replay --format json:\n%s\nwant the API's transcript:\n%s", got, want)
	}

	md, err := run(t, "--session", sess, "--data", dir)
	if err != nil {
		t.Fatalf("replay markdown: %v", err)
	}
	for _, s := range []string{"# Session " + sess, "## Turn t1 (complete)", "write `w`: ok", "read `m`: error", "read `x`: blocked (invalid_arguments)", "no_such_tool `u`: blocked (unavailable)"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}

	rep, err := run(t, "--session", sess, "--data", dir, "--verify")
	if err != nil || !strings.Contains(rep, ": ok, 0 warnings") {
		t.Fatalf("verify: %v\n%s", err, rep)
	}

	if _, err := run(t, "--session", "NOSUCHSESSION", "--data", dir); err == nil || !strings.Contains(err.Error(), "no events") {
		t.Errorf("unknown session: err=%v, want one saying it has no events", err)
	}
	if _, err := run(t, "--session", sess, "--data", dir, "--tenant", "other"); err == nil || !strings.Contains(err.Error(), "--tenant") {
		t.Errorf("another tenant: err=%v, want one naming --tenant", err)
	}
}

func TestReplayBesideARunningNode(t *testing.T) {
	dir := t.TempDir()
	n, sess, want := session(t, dir)
	// --data of a running node reads through its embedded server, found
	// in the data directory's lock record.
	got, err := run(t, "--session", sess, "--data", dir, "--format", "json")
	if err != nil {
		t.Fatalf("--data of a running node: %v", err)
	}
	if got != string(want) {
		t.Fatalf("replay --data beside the node:\n%s\nwant:\n%s", got, want)
	}
	got, err = run(t, "--session", sess, "--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials(), "--format", "json")
	if err != nil {
		t.Fatalf("--nats %s: %v", n.ClientURL(), err)
	}
	if got != string(want) {
		t.Fatalf("replay over --nats:\n%s\nwant:\n%s", got, want)
	}
	// Without the node's credentials the server refuses, and replay says
	// what to give.
	if _, err := run(t, "--session", sess, "--nats", n.ClientURL()); err == nil || !strings.Contains(err.Error(), "--nats-creds") || !strings.Contains(err.Error(), "--url") {
		t.Fatalf("--nats without credentials: err=%v, want one naming --nats-creds and --url", err)
	}
	other, err := cluster.EnsureCredentials(filepath.Join(t.TempDir(), "other.nk"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "--session", sess, "--nats", n.ClientURL(), "--nats-creds", other.Path()); err == nil || !strings.Contains(err.Error(), "refused "+other.Path()) {
		t.Fatalf("--nats with other credentials: err=%v, want a refusal naming the file", err)
	}
}

// TestReplayThroughAPI: --url and --token give the outputs --data gives for
// the same session: JSON byte for byte, the Markdown, --verify and a rewind
// from the pre-images the API serves.
func TestReplayThroughAPI(t *testing.T) {
	dir := t.TempDir()
	n, sess, _ := session(t, dir)
	h, err := api.New(n)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	// One more turn that overwrites notes.md, so its pre-image is an
	// object the rewind must fetch through the API.
	resp, err := http.Post(srv.URL+"/v1/sessions/"+sess+"/turns", "application/json", strings.NewReader(`{"id":"t3","calls":[{"id":"w2","name":"write","arguments":{"path":"notes.md","content":"changed <&>\n"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/v1/sessions/" + sess + "/transcript")
	if err != nil {
		t.Fatal(err)
	}
	want, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got, err := run(t, "--session", sess, "--url", srv.URL, "--token", "any", "--format", "json")
	if err != nil {
		t.Fatalf("--url: %v", err)
	}
	if got != string(want) {
		t.Fatalf("replay --url --format json:\n%s\nwant the API's transcript:\n%s", got, want)
	}
	apiMD, err := run(t, "--session", sess, "--url", srv.URL, "--token", "any")
	if err != nil {
		t.Fatal(err)
	}
	apiVerify, err := run(t, "--session", sess, "--url", srv.URL+"/", "--token", "any", "--verify")
	if err != nil || !strings.Contains(apiVerify, "(tenant default): ok, 0 warnings") {
		t.Fatalf("--url --verify: %v\n%s", err, apiVerify)
	}
	// A node without tenants needs no token (before: ParseFlags refused
	// "--url needs the tenant's bearer token"); the checkpoint of the
	// session comes through the API too.
	t.Setenv(TokenEnv, "")
	var noToken string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// The head is checkpointed within node.DefaultCheckpointInterval.
		if noToken, err = run(t, "--session", sess, "--url", srv.URL, "--verify"); err != nil || strings.Contains(noToken, "checkpoints: 1") {
			break
		}
	}
	if err != nil || !strings.Contains(noToken, "(tenant default): ok, 0 warnings") || !strings.Contains(noToken, "checkpoints: 1; the latest, in the node's checkpoints") {
		t.Fatalf("--url --verify without a token: %v\n%s", err, noToken)
	}
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.md"), []byte("changed <&>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "--session", sess, "--url", srv.URL, "--token", "any", "--rewind", "w2", "--workspace", ws); err != nil {
		t.Fatalf("--url --rewind w2: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes.md")); err != nil || string(b) != "# hi\n" {
		t.Fatalf("after --url --rewind w2, notes.md holds %q (%v), want its pre-image %q", b, err, "# hi\n")
	}
	if out, err := run(t, "--session", sess, "--url", srv.URL, "--token", "any", "--rewind", "w", "--workspace", ws); err != nil {
		t.Fatalf("--url --rewind w: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(ws, "notes.md")); !os.IsNotExist(err) {
		t.Fatalf("after --url --rewind w, notes.md is still there (%v)", err)
	}
	if _, err := run(t, "--session", "01NOSUCHSESSION", "--url", srv.URL, "--token", "any"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("--url, unknown session: err=%v, want the API's 404", err)
	}
	srv.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	logMD, err := run(t, "--session", sess, "--data", dir)
	if err != nil {
		t.Fatal(err)
	}
	logVerify, err := run(t, "--session", sess, "--data", dir, "--verify")
	if err != nil {
		t.Fatal(err)
	}
	// The same but for where the checkpoint was read, and when (the API's
	// was read before the node had written it).
	noCheckpoints := func(s string) string {
		var keep []string
		for _, l := range strings.Split(s, "\n") {
			if !strings.HasPrefix(l, "checkpoints: ") {
				keep = append(keep, l)
			}
		}
		return strings.Join(keep, "\n")
	}
	if apiMD != logMD || noCheckpoints(apiVerify) != noCheckpoints(logVerify) {
		t.Fatalf("through the API and from the log differ:\nmarkdown:\n%s\n---\n%s\nverify:\n%s\n---\n%s", apiMD, logMD, apiVerify, logVerify)
	}
}

// TestReplayLooseCredentials: credentials others could read are refused,
// saying how to fix them. (A process that may not read them at all is the
// security suite's attack, run as another user: security/log_test.go.)
func TestReplayLooseCredentials(t *testing.T) {
	dir := t.TempDir()
	n, sess, _ := session(t, dir)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	creds := cluster.DefaultCredentialsPath(dir)
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, "--session", sess, "--data", dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("credentials readable by others: err=%v, want a refusal saying chmod 600", err)
	}
}

func FuzzDecodeEvents(f *testing.F) {
	f.Add([]byte(`{"seq":1,"id":"01A","type":"SessionOpened","time":"2026-11-30T10:05:05Z","tenant":"t","session":"s","data":{"workspace":"w"}}` + "\n"))
	f.Add([]byte("\n\n"))
	f.Add([]byte(`{"seq":1}` + "\n" + `[1,2]`))
	f.Add([]byte(`{"seq":0,"id":"x","type":"T","tenant":"t","session":"s"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := decodeEvents(bytes.NewReader(b))
		if err != nil {
			return
		}
		for _, ev := range evs {
			if ev.ID == "" || ev.Type == "" || ev.Tenant == "" || ev.Session == "" || ev.Seq == 0 {
				t.Fatalf("accepted an event without its envelope: %+v", ev)
			}
		}
	})
}

func TestReplayVerifyFails(t *testing.T) {
	dir := t.TempDir()
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	l, err := natslog.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	// Turn t1 never completes, yet t2 is received.
	var evs []events.Event
	add := func(typ events.Type, p any) {
		seq := uint64(len(evs) + 1)
		evs = append(evs, events.Event{ID: fmt.Sprintf("01E%03d", seq), Tenant: config.DefaultTenant, Session: "S1", Seq: seq, Time: time.Unix(int64(seq), 0).UTC(), Type: typ, Data: events.Payload(p)})
	}
	add(events.TypeSessionOpened, events.SessionOpened{Workspace: "w"})
	add(events.TypeTurnReceived, events.TurnReceived{Turn: "t1", Calls: []events.CallSpec{{ID: "a", Name: "read"}}, Plan: []events.PlanEntry{{Name: "read"}}})
	add(events.TypeTurnReceived, events.TurnReceived{Turn: "t2", Calls: []events.CallSpec{}, Plan: []events.PlanEntry{}})
	add(events.TypeTurnCompleted, events.TurnCompleted{Turn: "t2"})
	if err := events.Link(evs); err != nil { // chained, as a node writes it
		t.Fatal(err)
	}
	if err := l.Append(ctx, config.DefaultTenant, "S1", 0, evs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	nc.Close()
	srv.Shutdown()

	out, err := run(t, "--session", "S1", "--data", dir, "--verify")
	if !errors.Is(err, ErrVerifyFailed) {
		t.Fatalf("err=%v, want ErrVerifyFailed; output:\n%s", err, out)
	}
	for _, s := range []string{"seq 3: turn t2 received while turn t1 was still running", "turn t1 (received at seq 2) never completed", "2 problems, 0 warnings"} {
		if !strings.Contains(out, s) {
			t.Errorf("report lacks %q:\n%s", s, out)
		}
	}
}

func TestReplayStoreErrors(t *testing.T) {
	if _, err := run(t, "--session", "S", "--data", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no JetStream store") {
		t.Errorf("empty dir: err=%v, want no JetStream store", err)
	}
	// A JetStream store without the event stream is refused, not changed.
	dir := t.TempDir()
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv.Shutdown()
	if _, err := run(t, "--session", "S", "--data", dir); err == nil || !strings.Contains(err.Error(), "no callsheet event log") {
		t.Errorf("store without the stream: err=%v", err)
	}
	if _, err := run(t, "--session", "S", "--nats", "nats://127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "--nats") {
		t.Errorf("unreachable --nats: err=%v", err)
	}
	if _, err := run(t, "--session", "bad session", "--data", dir); err == nil || !strings.Contains(err.Error(), "--session") {
		t.Errorf("bad session id: err=%v", err)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "--session is required"},
		{[]string{"--session", "S", "--format", "yaml"}, `"yaml"`},
		{[]string{"--session", "S", "--data", "d", "--nats", "nats://x"}, "not several"},
		{[]string{"--session", "S", "--url", "http://x", "--token", "t", "--nats", "nats://x"}, "not several"},
		{[]string{"--session", "S", "--nats-creds", "k.nk"}, "goes with --nats"},
		{[]string{"--witness", "w"}, "give --nats (with --nats-creds) or --url"},
		{[]string{"--witness", "w", "--url", "http://x", "--export"}, "follows the checkpoints into the file"},
		{[]string{"--session", "S", "--require-chain"}, "goes with --verify"},
		{[]string{"--session", "S", "--url", "http://x", "--token", "t", "--tenant", "a"}, "token names the tenant"},
		{[]string{"--session", "S", "extra"}, `"extra"`},
		{[]string{"--file", "f"}, "--file goes with --verify"},
		{[]string{"--verify", "--file", "f", "--data", "d"}, "without --data"},
		{[]string{"--session", "S", "--pubkey", "k"}, "goes with --verify"},
		{[]string{"--session", "S", "--sign"}, "--sign needs --url"},
		{[]string{"--session", "S", "--export", "--verify"}, "--export writes the events"},
		{[]string{"--session", "S", "--tool", "read"}, "go with --list"},
		{[]string{"--list", "--session", "S"}, "--list lists sessions"},
		{[]string{"--list", "--format", "html"}, "prints a table"},
	} {
		m := NewMain()
		if err := m.ParseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseFlags(%q): err=%v, want one holding %q", tc.args, err, tc.want)
		}
	}
	m := NewMain()
	if err := m.ParseFlags([]string{"--session", "S"}); err != nil {
		t.Fatal(err)
	}
	if m.DataDir != "./data" || m.Tenant != "default" || m.Format != "markdown" || m.Verify {
		t.Errorf("defaults: %+v", m)
	}
	if err := NewMain().ParseFlags([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

func TestReplayRewindsAWorkspaceCopy(t *testing.T) {
	dir := t.TempDir()
	n, sess, _ := session(t, dir)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// A copy of the workspace as it is now: notes.md written by call w.
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.md"), []byte("# hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, "--session", sess, "--data", dir, "--rewind", "w", "--workspace", ws)
	if err != nil {
		t.Fatalf("rewind: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "notes.md")); !os.IsNotExist(err) {
		t.Fatalf("notes.md did not exist before call w, but is still there after the rewind (%v)\n%s", err, out)
	}
	if _, err := run(t, "--session", sess, "--data", dir, "--rewind", "nosuch", "--workspace", ws); err == nil {
		t.Fatal("rewind to an unknown call succeeded")
	}
}

// TestURLTokenOnlyWithTenants: --url needs no token on a node without
// tenants (TestReplayThroughAPI); on a node with tenants, a missing token is
// the API's 401, and the error says which variable to set. A tenant's
// token reads its own session and its checkpoints, and another tenant's
// token reads neither.
func TestURLTokenOnlyWithTenants(t *testing.T) {
	cfg := config.DefaultConfig()
	cfg.Tenants = map[string]config.Tenant{"acme": {Token: "tok-acme"}, "globex": {Token: "tok-globex"}}
	n, err := node.New(context.Background(), node.Options{DataDir: t.TempDir(), Config: &cfg, CheckpointInterval: 20 * time.Millisecond})
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
	ctx := context.Background()
	info, err := n.OpenSession(ctx, "acme", "", "")
	if err != nil {
		t.Fatal(err)
	}
	// The open session's head is signed first (the interval is 20 ms), as
	// it may be under load: the read must wait for the close's checkpoint.
	time.Sleep(100 * time.Millisecond)
	if err := n.CloseSession(ctx, "acme", info.Session, "done"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(TokenEnv, "")
	if _, err := run(t, "--session", info.Session, "--url", srv.URL, "--verify"); err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "$"+TokenEnv) {
		t.Fatalf("--url without a token on a node with tenants: %v, want the 401 naming $%s", err, TokenEnv)
	}
	var out string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		// Until a checkpoint holds the session's head: one of the open
		// session alone leaves its last events uncovered (a warning).
		if out, err = run(t, "--session", info.Session, "--url", srv.URL, "--token", "tok-acme", "--verify"); err != nil || strings.Contains(out, "ok, 0 warnings") {
			break
		}
	}
	if err != nil || !strings.Contains(out, "(tenant acme): ok, 0 warnings") || !regexp.MustCompile(`(?m)^checkpoints: [1-9]`).MatchString(out) {
		t.Fatalf("--url with acme's token: %v\n%s", err, out)
	}
	if _, err := run(t, "--session", info.Session, "--url", srv.URL, "--token", "tok-globex", "--verify"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("--url with globex's token: %v, want a 404", err)
	}
	// globex's checkpoints do not hold acme's session.
	req, _ := http.NewRequest("GET", srv.URL+"/v1/checkpoints?follow=false&session="+info.Session, nil)
	req.Header.Set("Authorization", "Bearer tok-globex")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(bytes.TrimSpace(b)) != 0 {
		t.Fatalf("globex reading acme's checkpoints: %d %s", resp.StatusCode, b)
	}
	// acme's auditor witnesses its tenant's checkpoints through the API.
	witness := filepath.Join(t.TempDir(), "acme.witness")
	stop := startWitness(t, "--witness", witness, "--url", srv.URL, "--token", "tok-acme")
	waitWitnessed(t, witness, info.Session, 3)
	stop()
	out, err = run(t, "--session", info.Session, "--url", srv.URL, "--token", "tok-acme", "--verify", "--witness", witness)
	if err != nil || !strings.Contains(out, "checkpoints: 2") {
		t.Fatalf("--verify --witness through the API: %v\n%s", err, out)
	}
}
