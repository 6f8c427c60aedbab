package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/logging/logtest"
)

// freePorts returns n ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ln.Addr().(*net.TCPAddr).Port)
		defer ln.Close()
	}
	return out
}

// startCluster starts clustered embedded servers on dirs (one store dir
// each), sharing creds, each listening for routes on its port and given
// every server's route (its own too, as a fleet's nodes may all be given
// one list). It waits until JetStream answers on every server. With ports
// nil it picks free ones, and picks again if another process took one
// before its server bound it. mods change the options of server i.
func startCluster(t *testing.T, creds *cluster.Credentials, dirs []string, ports []int, mods ...func(i int, o *cluster.EmbeddedOptions)) []*cluster.Embedded {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p := ports
		if p == nil {
			p = freePorts(t, len(dirs))
		}
		out, err := tryCluster(creds, dirs, p, mods)
		if err == nil {
			for _, e := range out {
				t.Cleanup(e.Shutdown)
			}
			for _, e := range out {
				js := jsOf(t, e)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				if err := cluster.WaitJetStream(ctx, js, logtest.New(t), nil); err != nil {
					t.Fatal(err)
				}
				cancel()
			}
			return out
		}
		if ports != nil || attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("a port was taken before its server bound it; trying others: %v", err)
		for _, dir := range dirs {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tryCluster starts the servers of startCluster, and stops those it
// started when one fails.
func tryCluster(creds *cluster.Credentials, dirs []string, ports []int, mods []func(int, *cluster.EmbeddedOptions)) ([]*cluster.Embedded, error) {
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var out []*cluster.Embedded
	for i, dir := range dirs {
		o := cluster.EmbeddedOptions{StoreDir: dir, ServerName: fmt.Sprintf("n%d", i+1), Credentials: creds,
			ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[i]), Routes: routes}
		for _, m := range mods {
			m(i, &o)
		}
		e, err := cluster.StartEmbedded(o)
		if err != nil {
			for _, started := range out {
				started.Shutdown()
			}
			return nil, fmt.Errorf("start n%d: %w", i+1, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func jsOf(t *testing.T, e *cluster.Embedded) jetstream.JetStream {
	t.Helper()
	nc, err := e.Connect(t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// retry runs f until it succeeds or 60 s pass: a cluster elects leaders in
// its own time (docs/facts.md: 4-9 s after a leader is lost).
func retry(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestThreeServersFormOneJetStreamCluster forms a cluster of three embedded
// servers from options alone, stores in an R3 stream through one, reads
// through another, loses the stream's leader and goes on, and restarts every
// server on its store dir: the stream comes back with a leader and every
// message (the failure nats-server issue #6890 reports for hand-built
// options).
func TestThreeServersFormOneJetStreamCluster(t *testing.T) {
	creds, err := cluster.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "a"), filepath.Join(root, "b"), filepath.Join(root, "c")}
	ports := freePorts(t, 3)
	srvs := startCluster(t, creds, dirs, ports)
	js0 := jsOf(t, srvs[0])
	retry(t, "create R3 stream", func(ctx context.Context) error {
		_, err := js0.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Storage: jetstream.FileStorage, Replicas: 3})
		return err
	})
	publish := func(js jetstream.JetStream, n int) {
		for i := range n {
			retry(t, "publish", func(ctx context.Context) error {
				_, err := js.Publish(ctx, "s.x", []byte(fmt.Sprint(i)))
				return err
			})
		}
	}
	publish(jsOf(t, srvs[1]), 10)
	count := func(js jetstream.JetStream) uint64 {
		var n uint64
		retry(t, "stream info", func(ctx context.Context) error {
			s, err := js.Stream(ctx, "S")
			if err != nil {
				return err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return err
			}
			if info.Cluster == nil || info.Cluster.Leader == "" {
				return errors.New("no leader")
			}
			n = info.State.Msgs
			return nil
		})
		return n
	}
	if got := count(jsOf(t, srvs[2])); got != 10 {
		t.Fatalf("msgs=%d through the third server, want 10", got)
	}
	// Lose the stream's leader: the other two elect a new one and go on.
	var leader string
	retry(t, "find leader", func(ctx context.Context) error {
		s, err := js0.Stream(ctx, "S")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err == nil && info.Cluster != nil {
			leader = info.Cluster.Leader
		}
		if leader == "" {
			return errors.New("no leader")
		}
		return err
	})
	var rest []*cluster.Embedded
	for i, e := range srvs {
		if fmt.Sprintf("n%d", i+1) == leader {
			e.Shutdown()
			continue
		}
		rest = append(rest, e)
	}
	if len(rest) != 2 {
		t.Fatalf("leader %q is not one of the servers", leader)
	}
	publish(jsOf(t, rest[0]), 5)
	if got := count(jsOf(t, rest[1])); got != 15 {
		t.Fatalf("msgs=%d after losing the leader, want 15", got)
	}
	// Restart all three on their store dirs.
	for _, e := range srvs {
		e.Shutdown()
	}
	again := startCluster(t, creds, dirs, ports)
	if got := count(jsOf(t, again[2])); got != 15 {
		t.Fatalf("msgs=%d after restarting the cluster, want 15", got)
	}
	publish(jsOf(t, again[0]), 1)
	if got := count(jsOf(t, again[1])); got != 16 {
		t.Fatalf("msgs=%d after a publish on the restarted cluster, want 16", got)
	}
}

// TestRoutesNeedTheFleetsCredentials starts a server whose credentials
// differ from the cluster's: its route is refused, so it never joins (its
// JetStream never answers) while the others go on.
func TestRoutesNeedTheFleetsCredentials(t *testing.T) {
	creds, _ := cluster.NewCredentials()
	other, _ := cluster.NewCredentials()
	root := t.TempDir()
	ports := freePorts(t, 3)
	srvs := startCluster(t, creds, []string{filepath.Join(root, "a"), filepath.Join(root, "b")}, ports[:2])
	intruder, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(root, "x"), ServerName: "x", Credentials: other,
		ClusterListen: fmt.Sprintf("127.0.0.1:%d", ports[2]), Routes: []string{fmt.Sprintf("nats-route://127.0.0.1:%d", ports[0])}})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Shutdown()
	time.Sleep(2 * time.Second)
	if n := intruder.Routes(); n != 0 {
		t.Fatalf("a server with other credentials has %d routes into the cluster, want 0", n)
	}
	if n := srvs[0].Routes(); n < 1 {
		t.Fatalf("the cluster's own servers lost their routes: %d", n)
	}
}

func TestClusterOptionsInvalid(t *testing.T) {
	creds, _ := cluster.NewCredentials()
	for _, tt := range []struct {
		name string
		o    cluster.EmbeddedOptions
	}{
		{"routes without a listener", cluster.EmbeddedOptions{StoreDir: "x", Routes: []string{"nats-route://127.0.0.1:6222"}}},
		{"listener not host:port", cluster.EmbeddedOptions{StoreDir: "x", Credentials: creds, ClusterListen: "6222"}},
		{"listener without routes", cluster.EmbeddedOptions{StoreDir: "x", Credentials: creds, ClusterListen: "127.0.0.1:0"}},
		{"route not a URL", cluster.EmbeddedOptions{StoreDir: "x", Credentials: creds, ClusterListen: "127.0.0.1:0", Routes: []string{"127.0.0.1:6222"}}},
		{"route with a user", cluster.EmbeddedOptions{StoreDir: "x", Credentials: creds, ClusterListen: "127.0.0.1:0", Routes: []string{"nats-route://u:p@127.0.0.1:6222"}}},
		{"no credentials", cluster.EmbeddedOptions{StoreDir: "x", ClusterListen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}}},
		{"bad cluster name", cluster.EmbeddedOptions{StoreDir: "x", Credentials: creds, ClusterListen: "127.0.0.1:0", Routes: []string{"nats-route://127.0.0.1:6222"}, ClusterName: "a b"}},
	} {
		if err := tt.o.Validate(); !errors.Is(err, cluster.ErrInvalidOption) {
			t.Errorf("%s: Validate()=%v, want %v", tt.name, err, cluster.ErrInvalidOption)
		}
	}
}
