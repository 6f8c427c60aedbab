package natslog_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/decl"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// startServer starts an embedded JetStream server in a temp dir.
func startServer(t testing.TB) *cluster.Embedded {
	t.Helper()
	e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("StartEmbedded: %v", err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// connect opens a JetStream client on its own connection, like another node.
func connect(t testing.TB, e *cluster.Embedded) (jetstream.JetStream, *nats.Conn) {
	t.Helper()
	nc, err := e.Connect(t.Name())
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream.New: %v", err)
	}
	return js, nc
}

// openLog opens a Log on its own connection to e.
func openLog(t testing.TB, e *cluster.Embedded, opts ...natslog.Option) *natslog.Log {
	t.Helper()
	js, _ := connect(t, e)
	l, err := natslog.New(context.Background(), js, opts...)
	if err != nil {
		t.Fatalf("natslog.New: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

var idCounter atomic.Uint64

func newID() string { return fmt.Sprintf("EV%024d", idCounter.Add(1)) }

// mk makes events of a session continuing after seq `after`.
func mk(tenant, session string, after uint64, types ...events.Type) []events.Event {
	out := make([]events.Event, len(types))
	for i, typ := range types {
		var data any = events.SessionClosed{}
		switch typ {
		case events.TypeSessionOpened:
			data = events.SessionOpened{Workspace: "ws"}
		case events.TypeToolCallRequested:
			data = events.ToolCallRequested{CallRef: events.CallRef{Turn: "t1", Call: fmt.Sprintf("c%d", i)}, Name: "read", Concurrency: decl.ClassParallelSafe}
		case events.TypeToolCallStarted:
			data = events.ToolCallStarted{CallRef: events.CallRef{Turn: "t1", Call: "c0"}, Attempt: 1}
		case events.TypeTurnReceived:
			data = events.TurnReceived{Turn: "t1"}
		}
		out[i] = events.Event{
			ID:      newID(),
			Tenant:  tenant,
			Session: session,
			Seq:     after + 1 + uint64(i),
			Time:    time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
			Type:    typ,
			Data:    events.Payload(data),
		}
	}
	return out
}

// ids lists the events' ids.
func ids(evs []events.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	return out
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	return ctxFor(t, 30*time.Second)
}

// ctxFor is ctxT with a longer bound, for tests that read tens of MiB
// (under -race on a loaded 2-core machine they have taken over 30 s).
func ctxFor(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func streamMsgs(t testing.TB, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), natslog.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// forModes runs f in every mode a Log is opened in: atomic batches, the
// default; atomic batches through the group committer (WithGroupCommit(1):
// every append goes through it); and the two modes a node opens its log in
// (node/store.go): sequential appends, named by a writer (a fleet node, or
// interval durability), and the same through the group committer (an
// embedded node with fsync durability; the node's threshold is 32 appends in
// flight, 1 here so that every append is grouped).
func forModes(t *testing.T, f func(t *testing.T, mode natslog.Option)) {
	t.Run("atomic", func(t *testing.T) { f(t, natslog.WithSequentialAppends(false)) })
	t.Run("grouped", func(t *testing.T) { f(t, natslog.WithGroupCommit(1)) })
	node := natslog.AllOf(natslog.WithSequentialAppends(true), natslog.WithWriter("n1"))
	t.Run("sequential", func(t *testing.T) { f(t, node) })
	t.Run("sequential-grouped", func(t *testing.T) { f(t, natslog.AllOf(node, natslog.WithGroupCommit(1))) })
}
