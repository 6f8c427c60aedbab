package testnode

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/callsheet/callsheet/internal/testenv"
)

// NATSServerModule is the import path of the nats-server main package,
// built at the version go.mod pins.
const NATSServerModule = "github.com/nats-io/nats-server/v2"

// NATSServer builds the nats-server binary go.mod pins (see Build).
func NATSServer(t testing.TB) string { return build(t, NATSServerModule, "") }

// NATSClusterOptions say how to start an external NATS cluster.
type NATSClusterOptions struct {
	// Servers is how many servers; default 3.
	Servers int
	// Dir holds each server's config file and JetStream store; required.
	Dir string
	// User is the public key ("U...") of the one nkey user the servers
	// admit (cluster.Credentials.PublicKey); required.
	User string
	// SyncAlways sets jetstream { sync_interval: always } (durability
	// "fsync" on an external cluster, docs/operations.md).
	SyncAlways bool
}

// NATSCluster is a cluster of nats-server processes, each with its own
// config file, client port and JetStream store; they are killed at the end
// of the test that started them.
type NATSCluster struct {
	// Servers are the servers, s1, s2, ..., in order.
	Servers []*NATSProc
}

// NATSProc is one running nats-server process.
type NATSProc struct {
	// Name is its server_name; URL its client URL, nats://HOST:PORT.
	Name, URL string
	// Conf is its config file.
	Conf string

	cmd    *exec.Cmd
	stderr *testenv.Buffer
	done   chan struct{}
}

// URL is every server's client URL, comma-separated (what --nats takes).
func (c *NATSCluster) URL() string {
	var urls []string
	for _, s := range c.Servers {
		urls = append(urls, s.URL)
	}
	return strings.Join(urls, ",")
}

// StartNATSCluster writes one config file per server (client and route
// ports on loopback, JetStream in the global account, o.User the only
// client identity, every server routed to every other) and starts the
// servers built by NATSServer, all at once, waiting until each logs that it
// is ready for connections.
func StartNATSCluster(t testing.TB, o NATSClusterOptions) *NATSCluster {
	t.Helper()
	if o.Servers == 0 {
		o.Servers = 3
	}
	if o.Dir == "" || o.User == "" {
		t.Fatal("testnode.StartNATSCluster: Dir and User are required")
	}
	bin := NATSServer(t)
	// The ports are found free and then given to the servers, so another
	// process may take one in between: a server that cannot bind its port
	// ends the attempt, and the cluster starts again on other ports.
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		var c *NATSCluster
		if c, err = startNATSCluster(t, bin, o, attempt); err == nil {
			return c
		}
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatal(err)
	return nil
}

// errPortTaken is a server that exited because its port was taken.
var errPortTaken = errors.New("a port was taken before the server bound it")

// startNATSCluster is one attempt of StartNATSCluster: new ports, the
// servers' configs under o.Dir/attempt-N, the servers started and waited
// for. On an error every server of the attempt is killed.
func startNATSCluster(t testing.TB, bin string, o NATSClusterOptions, attempt int) (*NATSCluster, error) {
	ports := make([]string, 2*o.Servers) // client, route per server
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ports[i] = ln.Addr().String()
		ln.Close()
	}
	var routes []string
	for i := range o.Servers {
		routes = append(routes, fmt.Sprintf("%q", "nats-route://"+ports[2*i+1]))
	}
	sync := ""
	if o.SyncAlways {
		sync = "sync_interval: always"
	}
	c := &NATSCluster{}
	kill := func() {
		for _, s := range c.Servers {
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.done
		}
	}
	base := o.Dir
	if attempt > 1 {
		base = filepath.Join(o.Dir, fmt.Sprintf("attempt-%d", attempt))
	}
	for i := range o.Servers {
		name := fmt.Sprintf("s%d", i+1)
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			kill()
			return nil, err
		}
		chost, cport, _ := net.SplitHostPort(ports[2*i])
		rhost, rport, _ := net.SplitHostPort(ports[2*i+1])
		conf := fmt.Sprintf(`server_name: %q
host: %q
port: %s
jetstream { store_dir: %q
  %s
}
authorization { users: [ { nkey: %q } ] }
cluster {
  name: "callsheet-external"
  host: %q
  port: %s
  routes: [ %s ]
}
`, name, chost, cport, filepath.Join(dir, "jetstream"), sync, o.User, rhost, rport, strings.Join(routes, ", "))
		path := filepath.Join(dir, "nats-server.conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			kill()
			return nil, err
		}
		s := &NATSProc{Name: name, URL: "nats://" + ports[2*i], Conf: path, cmd: exec.Command(bin, "-c", path), stderr: &testenv.Buffer{}, done: make(chan struct{})}
		s.cmd.Stderr, s.cmd.Stdout = s.stderr, s.stderr
		if err := s.cmd.Start(); err != nil {
			kill()
			return nil, err
		}
		go func() {
			_ = s.cmd.Wait()
			close(s.done)
		}()
		t.Cleanup(func() {
			_ = s.cmd.Process.Signal(syscall.SIGKILL)
			<-s.done
		})
		c.Servers = append(c.Servers, s)
	}
	for _, s := range c.Servers {
		if err := s.waitReady(30 * time.Second); err != nil {
			kill()
			if strings.Contains(s.Log(), "address already in use") {
				t.Logf("attempt %d: %v", attempt, err)
				return nil, fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return nil, err
		}
	}
	return c, nil
}

// waitReady waits for the server's "Server is ready" line.
func (s *NATSProc) waitReady(d time.Duration) error {
	deadline := time.Now().Add(d)
	for !strings.Contains(s.stderr.String(), "Server is ready") {
		select {
		case <-s.done:
			return fmt.Errorf("nats-server %s exited before it was ready:\n%s", s.Name, s.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("nats-server " + s.Name + " not ready within " + d.String() + ":\n" + s.stderr.String())
		}
	}
	return nil
}

// Signal sends the server process sig (SIGSTOP and SIGCONT pause and
// resume it).
func (s *NATSProc) Signal(sig syscall.Signal) error { return s.cmd.Process.Signal(sig) }

// Log is what the server wrote to its standard error and output.
func (s *NATSProc) Log() string { return s.stderr.String() }
