package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
	"github.com/callsheet/callsheet/internal/testnode"
	"github.com/callsheet/callsheet/node"
	"github.com/callsheet/callsheet/signing"
)

// stored is one message of the event stream: its subject and its bytes (one
// event, or a packed JSON array of them).
type stored struct {
	subject string
	data    []byte
}

// store is raw access to a node's event stream, as someone holding the
// node's NATS credentials has it: no callsheet code between them and the
// messages.
type store struct {
	t      *testing.T
	js     jetstream.JetStream
	stream jetstream.Stream
}

func openStore(t *testing.T, n *node.Node) *store {
	t.Helper()
	js := testnode.JetStream(t, n.ClientURL(), n.NATSCredentials())
	st, err := js.Stream(context.Background(), natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	return &store{t: t, js: js, stream: st}
}

// messages returns the session's messages in stream order, with their
// stream sequences.
func (s *store) messages(tenant, session string) ([]stored, []uint64) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []stored
	var seqs []uint64
	filter := "cs.ev." + tenant + "." + session + ".>"
	for seq := uint64(1); ; {
		m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, seqs
		}
		if err != nil {
			s.t.Fatalf("get %s from %d: %v", filter, seq, err)
		}
		out = append(out, stored{m.Subject, m.Data})
		seqs = append(seqs, m.Sequence)
		seq = m.Sequence + 1
	}
}

// rewrite makes the session's messages edit's answer: it deletes every
// message from the first one that differs on, then publishes the rest in
// order, without message ids (the server would drop a re-sent id as a
// duplicate). So the session reads back in the order given, and a rewrite
// that changes one message keeps the count.
func (s *store) rewrite(tenant, session string, edit func([]stored) []stored) {
	s.t.Helper()
	orig, seqs := s.messages(tenant, session)
	want := edit(slices.Clone(orig))
	i := 0
	for i < len(orig) && i < len(want) && orig[i].subject == want[i].subject && bytes.Equal(orig[i].data, want[i].data) {
		i++
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, seq := range seqs[i:] {
		if err := s.stream.DeleteMsg(ctx, seq); err != nil {
			s.t.Fatalf("delete message %d: %v", seq, err)
		}
	}
	for _, m := range want[i:] {
		if _, err := s.js.Publish(ctx, m.subject, m.data); err != nil {
			s.t.Fatalf("publish on %s: %v", m.subject, err)
		}
	}
	if got, _ := s.messages(tenant, session); len(got) != len(want) {
		s.t.Fatalf("the session has %d messages after the rewrite, want %d", len(got), len(want))
	}
}

// eventsOf splits a message into its events' JSON objects, each member
// decoded but data, which is kept as its bytes: an event packed again
// unchanged hashes as before.
func eventsOf(t *testing.T, m stored) []map[string]any {
	t.Helper()
	var raws []json.RawMessage
	if m.data[0] == '[' {
		if err := json.Unmarshal(m.data, &raws); err != nil {
			t.Fatal(err)
		}
	} else {
		raws = []json.RawMessage{m.data}
	}
	out := make([]map[string]any, len(raws))
	for i, raw := range raws {
		var members map[string]json.RawMessage
		if err := json.Unmarshal(raw, &members); err != nil {
			t.Fatal(err)
		}
		ev := map[string]any{}
		for k, v := range members {
			if k == "data" {
				ev[k] = v
				continue
			}
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.UseNumber()
			var x any
			if err := dec.Decode(&x); err != nil {
				t.Fatal(err)
			}
			ev[k] = x
		}
		out[i] = ev
	}
	return out
}

func packed(t *testing.T, evs []map[string]any) []byte {
	t.Helper()
	var b []byte
	var err error
	if len(evs) == 1 {
		b, err = json.Marshal(evs[0])
	} else {
		b, err = json.Marshal(evs)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// find returns the message and position of the first event of typ.
func find(t *testing.T, ms []stored, typ events.Type, nth int) (msg, pos int, seq uint64) {
	t.Helper()
	for i, m := range ms {
		for j, ev := range eventsOf(t, m) {
			if ev["type"] == string(typ) {
				if nth--; nth == 0 {
					s, _ := ev["seq"].(json.Number).Int64()
					return i, j, uint64(s)
				}
			}
		}
	}
	t.Fatalf("no %s in the session's messages", typ)
	return 0, 0, 0
}

// auditSession runs a node and a session of three turns, closes the session
// (its head is signed at the close) and returns the node, still running,
// the session id and its data directory.
func auditSession(t *testing.T) (*node.Node, string, string) {
	t.Helper()
	dir := t.TempDir()
	n, err := node.New(context.Background(), node.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info, err := n.OpenSession(ctx, config.DefaultTenant, "", "")
	if err != nil {
		t.Fatal(err)
	}
	for i, calls := range [][]events.CallSpec{
		{{ID: "w", Name: "write", Arguments: json.RawMessage(`{"path":"notes.md","content":"the original text\n"}`)}},
		{{ID: "r1", Name: "read", Arguments: json.RawMessage(`{"path":"notes.md"}`)}, {ID: "r2", Name: "read", Arguments: json.RawMessage(`{"path":"notes.md"}`)}},
		{{ID: "g", Name: "glob", Arguments: json.RawMessage(`{"pattern":"*.md"}`)}},
	} {
		if _, err := n.SubmitTurn(ctx, config.DefaultTenant, info.Session, fmt.Sprintf("t%d", i+1), calls, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.CloseSession(ctx, config.DefaultTenant, info.Session, "done"); err != nil {
		t.Fatal(err)
	}
	return n, info.Session, dir
}

func verifyNATS(t *testing.T, n *node.Node, sess string, extra ...string) (string, error) {
	t.Helper()
	return run(t, append([]string{"--session", sess, "--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials(), "--verify"}, extra...)...)
}

// TestTamperedStoreFailsVerify rewrites a real node's stored session with a
// raw JetStream client and the node's credentials, as an insider with
// access to the NATS server could, and checks that --verify fails and names
// the event: one event's content changed (the message deleted and
// republished in order, the count unchanged), one message dropped, one
// inserted, two swapped. Before the hash chain each of these but the drop
// verified clean.
func TestTamperedStoreFailsVerify(t *testing.T) {
	n, sess, _ := auditSession(t)
	out, err := verifyNATS(t, n, sess)
	if err != nil || !strings.Contains(out, ": ok, 0 warnings") || !strings.Contains(out, "chain: all") {
		t.Fatalf("the untouched session: %v\n%s", err, out)
	}
	st := openStore(t, n)
	orig, _ := st.messages(config.DefaultTenant, sess)
	restore := func() {
		st.rewrite(config.DefaultTenant, sess, func([]stored) []stored { return orig })
		if out, err := verifyNATS(t, n, sess); err != nil {
			t.Fatalf("restored session: %v\n%s", err, out)
		}
	}

	for _, tc := range []struct {
		name string
		edit func([]stored) []stored
		want func(seq uint64) []string
		seq  func() uint64
	}{
		{
			name: "a result's text changed",
			edit: func(ms []stored) []stored {
				i, j, _ := find(t, ms, events.TypeToolCallCompleted, 1)
				evs := eventsOf(t, ms[i])
				var data map[string]any
				if err := json.Unmarshal(evs[j]["data"].(json.RawMessage), &data); err != nil {
					t.Fatal(err)
				}
				data["content"] = []any{map[string]any{"type": "text", "text": "created notes.md (999 bytes)"}}
				evs[j]["data"] = data
				ms[i].data = packed(t, evs)
				return ms
			},
			seq: func() uint64 { _, _, s := find(t, orig, events.TypeToolCallCompleted, 1); return s },
			want: func(seq uint64) []string {
				return []string{fmt.Sprintf("seq %d: seq %d (ToolCallCompleted) was changed after this event was written", seq+1, seq)}
			},
		},
		{
			name: "an argument changed in a turn",
			edit: func(ms []stored) []stored {
				i, j, _ := find(t, ms, events.TypeTurnReceived, 2)
				evs := eventsOf(t, ms[i])
				b, _ := json.Marshal(evs[j]["data"])
				evs[j]["data"] = json.RawMessage(strings.Replace(string(b), "notes.md", "secret.md", 1))
				ms[i].data = packed(t, evs)
				return ms
			},
			seq:  func() uint64 { _, _, s := find(t, orig, events.TypeTurnReceived, 2); return s },
			want: func(seq uint64) []string { return []string{fmt.Sprintf("seq %d (TurnReceived) was changed", seq)} },
		},
		{
			name: "a message dropped",
			edit: func(ms []stored) []stored {
				i, _, _ := find(t, ms, events.TypeTurnReceived, 3)
				return slices.Delete(ms, i, i+1)
			},
			seq:  func() uint64 { _, _, s := find(t, orig, events.TypeTurnReceived, 3); return s },
			want: func(seq uint64) []string { return []string{"was dropped", fmt.Sprintf("seq %d", seq)} },
		},
		{
			name: "an event inserted",
			edit: func(ms []stored) []stored {
				i, _, _ := find(t, ms, events.TypeTurnCompleted, 1)
				evs := eventsOf(t, ms[i])
				last := evs[len(evs)-1]
				forged := map[string]any{}
				for k, v := range last {
					forged[k] = v
				}
				forged["id"] = "01FORGEDFORGEDFORGEDFORGED"
				forged["type"] = "WorkStateUpdated"
				forged["data"] = map[string]any{"turn": "t1", "call": "w", "index": 0, "kind": "plan", "value": "forged"}
				return slices.Insert(ms, i+1, stored{subject: ms[i].subject, data: packed(t, []map[string]any{forged})})
			},
			seq: func() uint64 { _, _, s := find(t, orig, events.TypeTurnCompleted, 1); return s },
			want: func(seq uint64) []string {
				return []string{fmt.Sprintf("seq %d: WorkStateUpdated was inserted: it is chained to seq %d", seq, seq-1)}
			},
		},
		{
			name: "two messages swapped",
			edit: func(ms []stored) []stored {
				i, _, _ := find(t, ms, events.TypeTurnReceived, 2)
				ms[i], ms[i+1] = ms[i+1], ms[i]
				return ms
			},
			want: func(uint64) []string { return []string{"reordered"} },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.rewrite(config.DefaultTenant, sess, tc.edit)
			defer restore()
			out, err := verifyNATS(t, n, sess)
			if !errors.Is(err, ErrVerifyFailed) {
				t.Fatalf("the tampered session verified: %v\n%s", err, out)
			}
			var seq uint64
			if tc.seq != nil {
				seq = tc.seq()
			}
			first := firstProblem(out)
			for _, w := range tc.want(seq) {
				if !strings.Contains(first, w) {
					t.Fatalf("the first problem %q does not say %q; report:\n%s", first, w, out)
				}
			}
		})
	}
}

// firstProblem is the first line of a report that is not a warning.
func firstProblem(report string) string {
	for _, l := range strings.Split(report, "\n") {
		if strings.HasPrefix(l, "seq ") || (l != "" && !strings.HasPrefix(l, "warning") && !strings.HasPrefix(l, "chain:") && !strings.HasPrefix(l, "signatures:")) {
			return l
		}
	}
	return ""
}

// TestExportVerifiedOffline exports a closed, signed session and checks it
// with no node and no NATS: with the node's public key it passes (in Go and
// in the Python script); with another key, or after one changed byte, it
// fails.
func TestExportVerifiedOffline(t *testing.T) {
	n, sess, data := auditSession(t)
	m := NewMain()
	var export, notes bytes.Buffer
	m.Stdout, m.Stderr = &export, &notes
	if err := m.ParseFlags([]string{"--session", sess, "--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials(), "--export"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(notes.String(), "the head is signed") {
		t.Fatalf("export notes: %s", notes.String())
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "session.ndjson")
	os.WriteFile(file, export.Bytes(), 0o600)
	pub := signing.PublicKeyPath(signing.DefaultKeyPath(data))
	n.Close() // away from the fleet

	out, err := run(t, "--verify", "--file", file, "--pubkey", pub)
	if err != nil || !strings.Contains(out, ": ok, 0 warnings") || !strings.Contains(out, "signed when the session closed, so the log is complete") {
		t.Fatalf("export with the node's key: %v\n%s", err, out)
	}
	py := python(t)
	if out, err := exec.Command(py, chainScript, file, "--pubkey", pub).CombinedOutput(); err != nil || !strings.Contains(string(out), "ok: session "+sess) {
		t.Fatalf("the Python script refuses the export: %v\n%s", err, out)
	}
	if out, err := testnode.Outsider(t, "--pubkey", pub, file); err != nil || !strings.Contains(out, "ok: "+file+": session "+sess) {
		t.Fatalf("the outside verifier refuses the export: %v\n%s", err, out)
	}

	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	other := filepath.Join(dir, "other.pub")
	signing.WritePublicKey(other, otherPub)
	out, err = run(t, "--verify", "--file", file, "--pubkey", other)
	if !errors.Is(err, ErrVerifyFailed) || !strings.Contains(out, "which is not a key given to check it") || !strings.Contains(out, "no signature in the log verifies with the given key") {
		t.Fatalf("export with another key: %v\n%s", err, out)
	}
	if out, err := exec.Command(py, chainScript, file, "--pubkey", other).CombinedOutput(); err == nil || !strings.Contains(string(out), "does not verify with the given key") {
		t.Fatalf("the Python script passes another key: %v\n%s", err, out)
	}

	// One byte changed: a digit of a size in a result.
	b := export.Bytes()
	at := bytes.Index(b, []byte("bytes)"))
	if at < 0 {
		t.Fatalf("no result to change in the export:\n%s", b)
	}
	changed := bytes.Clone(b)
	changed[at-2]++
	seq := seqOfLine(t, changed, at)
	bad := filepath.Join(dir, "changed.ndjson")
	os.WriteFile(bad, changed, 0o600)
	out, err = run(t, "--verify", "--file", bad, "--pubkey", pub)
	if !errors.Is(err, ErrVerifyFailed) || !strings.Contains(firstProblem(out), fmt.Sprintf("seq %d (", seq)) || !strings.Contains(firstProblem(out), "was changed") {
		t.Fatalf("export with one changed byte (seq %d): %v\n%s", seq, err, out)
	}
	if out, err := exec.Command(py, chainScript, bad, "--pubkey", pub).CombinedOutput(); err == nil || !strings.Contains(string(out), fmt.Sprintf("seq %d: the chain breaks here", seq+1)) {
		t.Fatalf("the Python script passes a changed export: %v\n%s", err, out)
	}
	if out, err := testnode.Outsider(t, "--pubkey", pub, bad); err == nil || !strings.Contains(out, fmt.Sprintf("seq %d: the chain breaks here", seq+1)) {
		t.Fatalf("the outside verifier passes a changed export: %v\n%s", err, out)
	}

	// A cut export: no longer complete, and no longer signed.
	lines := bytes.SplitAfter(b, []byte("\n"))
	cut := filepath.Join(dir, "cut.ndjson")
	os.WriteFile(cut, bytes.Join(lines[:len(lines)-3], nil), 0o600)
	if out, err := run(t, "--verify", "--file", cut, "--pubkey", pub); !errors.Is(err, ErrVerifyFailed) || !strings.Contains(out, "no signature in the log verifies") {
		t.Fatalf("a cut export: %v\n%s", err, out)
	}
}

// TestExportNamesThePublicKey: the note an export of a signed session
// prints names the public key to check it with: the data directory's own
// signing.pub when replay read that directory, where a node keeps it when
// replay read a server or an API. (It said "--pubkey signing.pub", a file
// that is nowhere.)
func TestExportNamesThePublicKey(t *testing.T) {
	n, sess, data := auditSession(t)
	export := func(args ...string) string {
		t.Helper()
		m := NewMain()
		var out, notes bytes.Buffer
		m.Stdout, m.Stderr = &out, &notes
		if err := m.ParseFlags(append([]string{"--session", sess, "--export"}, args...)); err != nil {
			t.Fatal(err)
		}
		if err := m.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		return notes.String()
	}
	if got, want := export("--nats", n.ClientURL(), "--nats-creds", n.NATSCredentials()), "check it with callsheet-replay --verify --file FILE --pubkey DATA/credentials/signing.pub (the node's public key)"; !strings.Contains(got, want) {
		t.Fatalf("export through NATS says:\n%s\nwant it to say %q", got, want)
	}
	n.Close()
	pub := signing.PublicKeyPath(signing.DefaultKeyPath(data))
	if _, err := os.Stat(pub); err != nil {
		t.Fatal(err)
	}
	if got, want := export("--data", data), "check it with callsheet-replay --verify --file FILE --pubkey "+pub+"\n"; !strings.HasSuffix(got, want) {
		t.Fatalf("export of a data directory says:\n%s\nwant it to end %q", got, want)
	}
}

// seqOfLine returns the seq of the event on the line of b holding offset at.
func seqOfLine(t *testing.T, b []byte, at int) uint64 {
	t.Helper()
	start := bytes.LastIndexByte(b[:at], '\n') + 1
	end := start + bytes.IndexByte(b[start:], '\n')
	var ev struct{ Seq uint64 }
	if err := json.Unmarshal(b[start:end], &ev); err != nil {
		t.Fatal(err)
	}
	return ev.Seq
}

// TestOldUnchainedLogVerifies: a log recorded by a node before the hash
// chain (projections/testdata/mixed-started.events.jsonl) still replays and
// verifies, as unchained, with a warning; --require-chain refuses it.
func TestOldUnchainedLogVerifies(t *testing.T) {
	golden := filepath.Join("..", "..", "projections", "testdata", "mixed-started.events.jsonl")
	f, err := os.Open(golden)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := readExport(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(evs, events.Chained) {
		t.Fatal("the golden stream has hash links: it is no longer an old log")
	}
	out, err := run(t, "--verify", "--file", golden)
	if err != nil || !strings.Contains(out, "warning: the log is unchained") || !strings.Contains(out, "chain: none") || !strings.Contains(out, ": ok, 1 warnings") {
		t.Fatalf("old log: %v\n%s", err, out)
	}
	if out, err := run(t, "--verify", "--file", golden, "--require-chain"); !errors.Is(err, ErrVerifyFailed) {
		t.Fatalf("--require-chain passed an old log: %v\n%s", err, out)
	}
	// The same log in a store, replayed from it.
	dir := t.TempDir()
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	nc, _ := srv.Connect("test")
	js, _ := jetstream.New(nc)
	l, err := natslog.New(context.Background(), js)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append(context.Background(), evs[0].Tenant, evs[0].Session, 0, evs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	nc.Close()
	srv.Shutdown()
	if _, err := cluster.EnsureCredentials(cluster.DefaultCredentialsPath(dir)); err != nil {
		t.Fatal(err)
	}
	out, err = run(t, "--session", evs[0].Session, "--tenant", evs[0].Tenant, "--data", dir, "--verify")
	if err != nil || !strings.Contains(out, "warning: the log is unchained") {
		t.Fatalf("old log from a store: %v\n%s", err, out)
	}
	if md, err := run(t, "--session", evs[0].Session, "--tenant", evs[0].Tenant, "--data", dir); err != nil || !strings.Contains(md, "## Turn") {
		t.Fatalf("old log replayed: %v\n%s", err, md)
	}
}

// chainScript is the hash chain recomputed in Python.
var chainScript = filepath.Join("..", "..", "scripts", "verify-chain.py")

func python(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CALLSHEET_PYTHON"); p != "" {
		return p
	}
	p, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not on PATH: run scripts/ensure-python")
	}
	return p
}

func FuzzReadExport(f *testing.F) {
	f.Add([]byte(`{"seq":1,"id":"01A","type":"SessionOpened","time":"2026-11-30T10:05:05Z","tenant":"t","session":"s","prev":"ab","data":{"workspace":"w"}}` + "\n"))
	f.Add([]byte("\n"))
	f.Add([]byte(`{"seq":1,"id":"a","type":"HeadSigned","tenant":"t","session":"s","data":{"seq":9,"hash":"x","key":"k","signature":"!!"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := readExport(bytes.NewReader(b))
		if err != nil {
			return
		}
		if len(evs) == 0 {
			t.Fatal("an export without events was accepted")
		}
		// Whatever was accepted can be checked without a panic.
		m := NewMain()
		m.Stdout = &bytes.Buffer{}
		m.Tenant, m.Session = evs[0].Tenant, evs[0].Session
		_ = m.report(evs, nil, false)
	})
}
