package natslog_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/internal/logging/logtest"
	"github.com/callsheet/callsheet/internal/testnode"
)

// TestIndexGetSeesAnotherServersCreate: on a cluster of three nats-server
// processes, sessions indexed through the index's leader while a follower
// was paused are found through that follower the moment it resumes, and a
// purged entry is found through none. A follower answers a direct get from
// its own replica, which may not yet hold what the leader acknowledged (a
// window of milliseconds under load, which this test may or may not hit):
// Get asks the leader before it says not found, and the leader's last
// message of a purged key is its purge marker.
func TestIndexGetSeesAnotherServersCreate(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three nats-server processes")
	}
	creds, err := cluster.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	ext := testnode.StartNATSCluster(t, testnode.NATSClusterOptions{Dir: filepath.Join(t.TempDir(), "nats"), User: creds.PublicKey()})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	idx := map[string]*natslog.Index{}
	var js jetstream.JetStream
	for _, s := range ext.Servers {
		nc, err := cluster.Connect(s.URL, t.Name(), creds.Option())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		if js, err = jetstream.New(nc); err != nil {
			t.Fatal(err)
		}
		if err := cluster.WaitJetStream(ctx, js, logtest.New(t), nil); err != nil {
			t.Fatal(err)
		}
		l, err := natslog.New(ctx, js, natslog.WithReplicas(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		if idx[s.Name], err = l.Index(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stream, err := js.Stream(ctx, "KV_"+natslog.DefaultIndexBucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.Cluster.Leader
	var follower *testnode.NATSProc
	for _, s := range ext.Servers {
		if s.Name != leader {
			follower = s
		}
	}
	const rounds, keys = 3, 40
	var missed atomic.Int64
	for r := range rounds {
		if err := follower.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		for i := range keys {
			if err := idx[leader].Create(ctx, "acme", fmt.Sprintf("S%d-%d", r, i), []byte(`{"i":1}`)); err != nil {
				_ = follower.Signal(syscall.SIGCONT)
				t.Fatal(err)
			}
		}
		var g errgroup.Group
		for i := range keys { // queued on the paused follower's socket
			g.Go(func() error {
				s := fmt.Sprintf("S%d-%d", r, i)
				b, err := idx[follower.Name].Get(ctx, "acme", s)
				switch {
				case errors.Is(err, events.ErrNotFound):
					missed.Add(1)
				case err != nil:
					return err
				case string(b) != `{"i":1}`:
					return fmt.Errorf("%s through %s: %q", s, follower.Name, b)
				}
				return nil
			})
		}
		time.Sleep(100 * time.Millisecond)
		if err := follower.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if n := missed.Load(); n > 0 {
		t.Errorf("%d of %d reads through a follower did not find a session the leader had indexed", n, rounds*keys)
	}
	if err := idx[leader].Delete(ctx, "acme", "S0-0"); err != nil {
		t.Fatal(err)
	}
	for name, x := range idx {
		if _, err := x.Get(ctx, "acme", "S0-0"); !errors.Is(err, events.ErrNotFound) {
			t.Errorf("a purged entry through %s: %v, want not found", name, err)
		}
	}
}

// TestUnavailable: the index's own failures when its servers are out of
// reach (its stream gone: no stream answers; the connection closed) are
// Unavailable, and so are JetStream's "not now" answers; its refusals (a
// session indexed twice, a bad id) and JetStream's other refusals are not.
func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	e := startServer(t)
	js, nc := connect(t, e)
	l, err := natslog.New(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	x, err := l.Index(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Create(ctx, "acme", "s1", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	refused := []error{x.Create(ctx, "acme", "s1", []byte(`{}`)), x.Create(ctx, "acme", "s 1", nil)}
	if err := js.DeleteKeyValue(ctx, natslog.DefaultIndexBucket); err != nil {
		t.Fatal(err)
	}
	noStream := x.Create(ctx, "acme", "s2", []byte(`{}`))
	nc.Close()
	closed := x.Create(ctx, "acme", "s3", []byte(`{}`))
	t.Logf("no stream: %v; closed: %v", noStream, closed)
	for _, err := range []error{noStream, closed,
		fmt.Errorf("index: %w", &jetstream.APIError{Code: 503, ErrorCode: 10163, Description: "expected last sequence per subject temporarily unavailable"}),
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		&jetstream.APIError{Code: 500, ErrorCode: 10118, Description: "stream is offline"},
	} {
		if !natslog.Unavailable(err) {
			t.Errorf("Unavailable(%v) = false, want true", err)
		}
	}
	for _, err := range append(refused, nil,
		&jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence: 1"},
		&jetstream.APIError{Code: 404, ErrorCode: 10059, Description: "stream not found"},
		errors.New("disk on fire")) {
		if natslog.Unavailable(err) {
			t.Errorf("Unavailable(%v) = true, want false", err)
		}
	}
	if refused[0] == nil || refused[1] == nil {
		t.Fatalf("indexing a session twice, and a bad id: %v", refused)
	}
}
