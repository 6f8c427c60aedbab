package security

// Attacks on the log boundary (docs/spec.md §10 "Log", docs/security.md
// "Log"): a local process without the node's credentials reaching the
// embedded NATS server, forging events, or replaying another tenant's log.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/internal/testnode"
)

// natsURL is the embedded server's TCP URL, from the line the node logs at
// start ("embedded JetStream at nats://127.0.0.1:PORT ...").
//
// The node writes that line to stderr before it prints "listening on" to
// stdout, but the two pipes are read apart, so the line may reach the test a
// moment after Start returned: wait for it.
func natsURL(t *testing.T, p *testnode.Proc) string {
	t.Helper()
	// The line is written before "listening on", but on another pipe, whose
	// copier may not have caught up yet when Start returns.
	re := regexp.MustCompile(`embedded JetStream at (nats://[0-9.:]+)`)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(p.Stderr()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node did not log its embedded NATS URL:\n%s", p.Stderr())
		}

	}
}

// dial connects to url as an attacker would, once, without retrying.
func dial(url string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Name("attacker"), nats.Timeout(5 * time.Second), nats.MaxReconnects(0)}, opts...)...)
}

// refused fails the test unless nc is nil and err is an authorization
// failure: the attempt must be turned away, not merely time out.
func refused(t *testing.T, what string, nc *nats.Conn, err error) {
	t.Helper()
	if err == nil {
		defer nc.Close()
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		names := []string{}
		for n := range js.StreamNames(ctx).Name() {
			names = append(names, n)
		}
		t.Fatalf("%s: connected to the node's NATS server (and listed streams %v), want a refusal", what, names)
	}
	if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Fatalf("%s: err=%v, want an authorization violation", what, err)
	}
}

// TestLogAnonymousClientRefused: a local process that knows the port but not
// the credentials cannot connect, so it cannot read, publish or purge.
func TestLogAnonymousClientRefused(t *testing.T) {
	p := node(t, nil)
	url := natsURL(t, p)
	nc, err := dial(url)
	refused(t, "anonymous connect", nc, err)
}

// TestLogWrongCredentialsRefused: guessed or self-made credentials do not
// get in either: a fresh nkey, a user and password, a token.
func TestLogWrongCredentialsRefused(t *testing.T) {
	p := node(t, nil)
	url := natsURL(t, p)
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	nc, err := dial(url, nats.Nkey(pub, kp.Sign))
	refused(t, "a fresh nkey", nc, err)
	nc, err = dial(url, nats.UserInfo("callsheet", "callsheet"))
	refused(t, "user and password", nc, err)
	nc, err = dial(url, nats.Token("callsheet"))
	refused(t, "a token", nc, err)
}

// TestLogForgedSessionClosedNeverLands: the attack that made a session answer
// 503 forever. A process without credentials publishes a SessionClosed for a
// live session; the log must not hold it and the session must keep working.
func TestLogForgedSessionClosedNeverLands(t *testing.T) {
	p := node(t, nil)
	url := natsURL(t, p)
	sess := open(t, p, "")
	evs, err := p.Events(sess)
	if err != nil {
		t.Fatal(err)
	}
	forged := events.Event{
		ID: "01FORGEDFORGEDFORGEDFORGED", Tenant: "default", Session: sess, Seq: uint64(len(evs) + 1),
		Time: time.Now().UTC(), Type: events.TypeSessionClosed, Data: events.Payload(events.SessionClosed{Reason: "forged"}),
	}
	b, _ := json.Marshal(forged)
	if nc, err := dial(url); err == nil {
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, perr := js.Publish(ctx, fmt.Sprintf("cs.ev.default.%s.log", sess), b)
		cancel()
		nc.Close()
		t.Logf("connected without credentials; forged publish: %v", perr)
	} else {
		t.Logf("connect without credentials refused: %v", err)
	}
	evs, err = p.Events(sess)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == events.TypeSessionClosed {
			t.Fatalf("the forged SessionClosed landed in the log as event %d", ev.Seq)
		}
	}
	tv := call(t, p, sess, "write", map[string]any{"path": "still.txt", "content": "open\n"})
	if got := tv.Results[0].Outcome; got != events.OutcomeOK {
		t.Fatalf("a call after the forgery: outcome=%q, want ok", got)
	}
}

// TestLogReplayNeedsCredentials: cmd/callsheet-replay reading the log directly needs
// the node's credentials. Over --nats without them it is refused; on the
// data dir, a process that cannot read the credentials (another user) fails
// with a message that says so and what to do instead.
func TestLogReplayNeedsCredentials(t *testing.T) {
	p := node(t, nil)
	url := natsURL(t, p)
	sess := open(t, p, "")
	call(t, p, sess, "write", map[string]any{"path": "a.txt", "content": "a\n"})
	replay := testnode.Replay(t)

	out, err := exec.Command(replay, "--nats", url, "--session", sess).CombinedOutput()
	if err == nil {
		t.Fatalf("replay --nats %s without credentials read the session:\n%s", url, out)
	}
	if !strings.Contains(string(out), "--nats-creds") {
		t.Fatalf("replay --nats without credentials: %v\n%s\nwant a message naming --nats-creds", err, out)
	}

	p.Stop(t)
	// The owner replays the stopped node's data dir: it can read the
	// credentials.
	if out, err := exec.Command(replay, "--data", p.Data, "--session", sess, "--verify").CombinedOutput(); err != nil {
		t.Fatalf("replay --data as the node's user: %v\n%s", err, out)
	}
	other, err := asOtherUser(t, replay, "--data", p.Data, "--session", sess)
	if err == nil {
		t.Fatalf("replay --data by a user who cannot read the credentials succeeded:\n%s", other)
	}
	t.Logf("replay --data by another user: %v\n%s", err, other)
	for _, want := range []string{"credentials", "--url"} {
		if !strings.Contains(other, want) {
			t.Fatalf("replay --data by another user: %v\n%s\nwant a message holding %q", err, other, want)
		}
	}
}

// asOtherUser runs bin with args as a process that is not the node's user:
// as uid 65534 (nobody) when the test runs as root, else with the
// credentials made unreadable to their owner. The path to the data dir is
// left traversable, so only the credentials' own modes stand in the way.
func asOtherUser(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	if os.Geteuid() == 0 {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		copyBin := filepath.Join(dir, filepath.Base(bin))
		b, err := os.ReadFile(bin)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copyBin, b, 0o755); err != nil {
			t.Fatal(err)
		}
		// Open the path to the data dir (t.TempDir's directories are 0700)
		// so that only the modes the node set on what it created matter.
		data := args[1]
		for d := filepath.Dir(data); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
			_ = os.Chmod(d, 0o755)
		}
		_ = os.Chmod(data, 0o755)
		cmd = exec.Command(copyBin, args...)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else {
		creds, _ := filepath.Glob(filepath.Join(args[1], "*", "*.nk"))
		for _, c := range creds {
			if err := os.Chmod(c, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestLogReplayThroughAPI: a tenant's auditor replays through the API with
// the tenant's token and gets what the log gives (JSON byte-identical to the
// API's transcript, the Markdown, a clean --verify); another tenant's token
// cannot read the session.
func TestLogReplayThroughAPI(t *testing.T) {
	cfg := map[string]any{"tenants": map[string]any{
		"acme":   map[string]any{"token": "acme-token-1"},
		"globex": map[string]any{"token": "globex-token-1"},
	}}
	p := node(t, cfg)
	p.Token = "globex-token-1"
	sess := open(t, p, "")
	call(t, p, sess, "write", map[string]any{"path": "a.txt", "content": "<&> \u00e9\n"})
	call(t, p, sess, "read", map[string]any{"path": "a.txt"})
	var want []byte
	if code, err := p.Do("GET", "/v1/sessions/"+sess+"/transcript", nil, &want); err != nil || code != http.StatusOK {
		t.Fatalf("transcript: %d %v", code, err)
	}
	replay := testnode.Replay(t)
	base := p.Base
	run := func(args ...string) (string, string, error) {
		cmd := exec.Command(replay, args...)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), err
	}
	got, stderr, err := run("--url", base, "--token", "globex-token-1", "--session", sess, "--format", "json")
	if err != nil {
		t.Fatalf("replay --url --token (own tenant): %v\n%s", err, stderr)
	}
	if got != string(want) {
		t.Fatalf("replay --url --format json:\n%s\nwant GET transcript byte for byte:\n%s", got, want)
	}
	md, stderr, err := run("--url", base, "--token", "globex-token-1", "--session", sess)
	if err != nil || !strings.Contains(md, "# Session "+sess) || !strings.Contains(md, "write `c1`: ok") {
		t.Fatalf("replay --url markdown: %v\n%s%s", err, md, stderr)
	}
	rep, stderr, err := run("--url", base, "--token", "globex-token-1", "--session", sess, "--verify")
	if err != nil || !strings.Contains(rep, "(tenant globex): ok, 0 warnings") {
		t.Fatalf("replay --url --verify: %v\n%s%s", err, rep, stderr)
	}

	out, stderr, err := run("--url", base, "--token", "acme-token-1", "--session", sess, "--format", "json")
	if err == nil || strings.Contains(out, "a.txt") {
		t.Fatalf("tenant acme's token replayed globex's session:\n%s", out)
	}
	if !strings.Contains(stderr, "404") && !strings.Contains(stderr, "not found") {
		t.Fatalf("another tenant's session: %v\n%s\nwant a not-found answer", err, stderr)
	}
	if _, stderr, err := run("--url", base, "--token", "wrong", "--session", sess); err == nil || !strings.Contains(stderr, "401") {
		t.Fatalf("a wrong token: err=%v\n%s\nwant the API's 401", err, stderr)
	}
}
