package node_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
)

// storedMessages counts the stream messages of one session in a stopped
// node's store (not the events: a message packs several).
func storedMessages(t *testing.T, dir, session string) uint64 {
	t.Helper()
	creds, err := cluster.EnsureCredentials(cluster.DefaultCredentialsPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "jetstream"), Port: -1, Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	nc, err := srv.Connect("test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, natslog.DefaultStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{natslog.DefaultSubjectPrefix + ".default." + session + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if testing.Verbose() {
		batch, err := cons.Fetch(int(info.NumPending), jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for m := range batch.Messages() {
				t.Logf("session %s: %s, %d B", session, m.Subject(), len(m.Data()))
			}
		}
	}
	return info.NumPending
}

// TestReadOnlyTurnIsOneMessage: a read-only, safe call runs while its
// request is being appended, and its outcome goes out with the request
// (docs/spec.md §4: its events can be batched), so its whole one-call turn
// is one stored message; a side-effecting call's request must be durable
// before its claim and its claim before it runs, so its turn takes more.
// Every step is in the log in both; the read-only call's claim is in its
// outcome.
func TestReadOnlyTurnIsOneMessage(t *testing.T) {
	dir := t.TempDir()
	cfg := config.DefaultConfig()
	tt := &testTools{}
	// A linger far longer than the call: the test does not depend on how
	// fast this machine runs it.
	n, err := node.New(context.Background(), node.Options{DataDir: dir, Config: &cfg, Tools: tt.tools(t), ReadLinger: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ro, rw, idle := openSession(t, n), openSession(t, n), openSession(t, n)
	before := map[string]int{}
	for _, s := range []string{ro, rw} {
		before[s] = len(recorded(t, n, s))
	}
	submit(t, n, ro, "t1", nap("a", 0))
	submit(t, n, rw, "t1", mutate("m", 0))
	evsRO, evsRW := recorded(t, n, ro)[before[ro]:], recorded(t, n, rw)[before[rw]:]
	// The read-only call's claim is in its outcome: one event fewer.
	if len(evsRO) != 5 || len(evsRW) != 6 {
		t.Fatalf("events of the turns: %d read-only, %d side-effecting; want 5 and 6", len(evsRO), len(evsRW))
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// What opening a session stores, as the session without a turn shows.
	open := storedMessages(t, dir, idle)
	if got := storedMessages(t, dir, ro) - open; got != 1 {
		t.Errorf("the read-only call's turn is %d messages, want 1", got)
	}
	if got := storedMessages(t, dir, rw) - open; got < 2 {
		t.Errorf("the side-effecting call's turn is %d messages, want at least 2 (request, then claim)", got)
	}
}
