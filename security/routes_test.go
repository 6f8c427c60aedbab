package security

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/internal/logging/logtest"
)

// TestRogueServerCannotJoinTheFleet attacks a fleet's route port
// (docs/spec.md §7, §10) the way a hostile local process would: it runs a
// plain nats-server of its own, with JetStream, the fleet's cluster name
// (which is no secret) and a route to a fleet server, presenting no
// credentials, the fleet's route user with a guessed password, or another
// user, and then asks its own server for the fleet's event stream. The
// route must be refused every time: the rogue server never has a route,
// its JetStream never sees the stream, and the fleet keeps its three peers.
func TestRogueServerCannotJoinTheFleet(t *testing.T) {
	creds, err := cluster.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	ports := freePorts(t, 3)
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	var fleet []*cluster.Embedded
	for i, p := range ports {
		e, err := cluster.StartEmbedded(cluster.EmbeddedOptions{StoreDir: filepath.Join(root, fmt.Sprintf("n%d", i+1)),
			ServerName: fmt.Sprintf("n%d", i+1), Credentials: creds, ClusterListen: fmt.Sprintf("127.0.0.1:%d", p), Routes: routes})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Shutdown)
		fleet = append(fleet, e)
	}
	nc, err := fleet[0].Connect("fleet")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.WaitJetStream(ctx, js, logtest.New(t), nil); err != nil {
		t.Fatal(err)
	}
	// The fleet's secret: an R3 stream with one message.
	for {
		_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "CALLSHEET", Subjects: []string{"cs.ev.>"}, Replicas: 3})
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "cs.ev.default.s1.log", []byte(`{"secret":"fleet"}`)); err != nil {
		t.Fatal(err)
	}

	// Route connections per server before any rogue (nats-server pools
	// several per peer).
	var before []int
	for _, e := range fleet {
		before = append(before, e.Routes())
	}
	for _, tt := range []struct {
		name string
		user *url.Userinfo
	}{
		{"no credentials", nil},
		{"the route user with a guessed password", url.UserPassword(cluster.RouteUser, "callsheet")},
		{"the route user without a password", url.User(cluster.RouteUser)},
		{"another user", url.UserPassword("admin", "admin")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u, _ := url.Parse(routes[0])
			u.User = tt.user
			rogue, err := server.NewServer(&server.Options{
				ServerName: "rogue", Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
				Cluster: server.ClusterOpts{Name: cluster.DefaultClusterName, Host: "127.0.0.1", Port: -1},
				Routes:  []*url.URL{u}, NoLog: true, NoSigs: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			go rogue.Start()
			defer rogue.Shutdown()
			if !rogue.ReadyForConnections(10 * time.Second) {
				t.Fatal("the rogue server did not start")
			}
			rc, err := nats.Connect(rogue.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			rjs, err := jetstream.New(rc)
			if err != nil {
				t.Fatal(err)
			}
			// Long enough for a route to connect and for a meta leader's
			// state to reach a new peer several times over.
			deadline := time.Now().Add(6 * time.Second)
			routed := false
			for time.Now().Before(deadline) {
				sctx, scancel := context.WithTimeout(context.Background(), time.Second)
				s, err := rjs.Stream(sctx, "CALLSHEET")
				if err == nil {
					m, gerr := s.GetMsg(sctx, 1)
					scancel()
					if gerr == nil {
						t.Fatalf("the rogue server read the fleet's stream: %s", m.Data)
					}
					t.Fatalf("the rogue server's JetStream sees the fleet's stream (%v)", gerr)
				}
				scancel()
				// The rogue counts the route it solicits from the moment the
				// fleet server's INFO arrives, which the server sends before
				// it checks the rogue's CONNECT, until the authorization
				// violation closes it: a moment, which a look can land in
				// under load. A route seen at two looks in a row was
				// accepted.
				if n := rogue.NumRoutes(); n != 0 {
					if routed {
						t.Fatalf("the rogue server has %d routes into the fleet, for 200 ms or more", n)
					}
					routed = true
				} else {
					routed = false
				}
				time.Sleep(200 * time.Millisecond)
			}
			for i, e := range fleet {
				if n := e.Routes(); n > before[i] {
					t.Fatalf("fleet server n%d has %d route connections, %d before the rogue tried", i+1, n, before[i])
				}
			}
			info, err := streamInfo(ctx, js)
			if err != nil {
				t.Fatal(err)
			}
			if got := 1 + len(info.Cluster.Replicas); got != 3 {
				t.Fatalf("the stream has %d peers, want its 3", got)
			}
			for _, r := range info.Cluster.Replicas {
				if r.Name == "rogue" {
					t.Fatal("the rogue server is a replica of the fleet's stream")
				}
			}
		})
	}
}

func streamInfo(ctx context.Context, js jetstream.JetStream) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, "CALLSHEET")
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

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
