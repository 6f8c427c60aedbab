package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// membersChildEnv, when set (to the server's URL), makes the test binary a
// member process (membersChild) instead of running the tests.
const (
	membersChildEnv   = "CALLSHEET_TEST_MEMBER_URL"
	membersChildCreds = "CALLSHEET_TEST_MEMBER_CREDS"
)

// membersChild is a fleet member in a process of its own: it holds the
// lease of node "p" and watches the members, printing "ready" once it
// watches and "joined NAME" / "left NAME" for every change, until killed.
func membersChild() int {
	creds, err := cluster.LoadCredentials(os.Getenv(membersChildCreds))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	nc, err := cluster.Connect(os.Getenv(membersChildEnv), "member-p", creds.Option())
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: "p", Incarnation: "ip"}, cluster.LeaseOptions{TTL: cluster.DefaultLeaseTTL})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	m, err := cluster.WatchMembers(ctx, js, cluster.DefaultLeaseTTL, 1, func(c cluster.Change) {
		if c.Joined {
			fmt.Println("joined", c.Member.Name)
		} else {
			fmt.Println("left", c.Member.Name)
		}
	}, cluster.WithLease(l))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	defer m.Close()
	fmt.Println("ready", strings.Join(m.Names(), ","))
	select {}
}

// lines collects a process's output lines as they come.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) has(prefix string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.all {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "; ")
}

// TestMembersOfAStoppedProcessSeeNoLapseWhenItResumes stops a real member
// process (SIGSTOP) for longer than the lease TTL while two other members
// keep renewing, then lets it run again (SIGCONT): as the process sees it,
// the others never left (they renewed all along; its own watch was what
// stood still), so it must not report them left. Before the fix it did, at
// once on waking, and held its lease again for seconds while it believed it
// was alone: a node then took every session it was asked about from live
// owners (the fleet suite's SIGSTOP trials). The others must still see the
// stopped process leave, and come back.
func TestMembersOfAStoppedProcessSeeNoLapseWhenItResumes(t *testing.T) {
	dir := t.TempDir()
	credsPath := filepath.Join(dir, "nats.nk")
	creds, err := cluster.EnsureCredentials(credsPath)
	if err != nil {
		t.Fatal(err)
	}
	e := start(t, cluster.EmbeddedOptions{StoreDir: filepath.Join(dir, "js"), Credentials: creds})
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ttl := cluster.DefaultLeaseTTL
	var leases []*cluster.Lease
	for _, name := range []string{"a", "b"} {
		l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: name, Incarnation: "i" + name}, cluster.LeaseOptions{TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		leases = append(leases, l)
	}
	changes := make(chan cluster.Change, 16)
	m, err := cluster.WatchMembers(ctx, js, ttl, 1, func(c cluster.Change) { changes <- c }, cluster.WithLease(leases[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), membersChildEnv+"="+e.ClientURL(), membersChildCreds+"="+credsPath)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var got lines
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			got.mu.Lock()
			got.all = append(got.all, sc.Text())
			got.mu.Unlock()
		}
	}()
	waitFor := func(what string, d time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s (process said: %s)", what, d, &got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("the member process watches", 30*time.Second, func() bool { return got.has("ready") })
	if !got.has("ready a,b,p") {
		t.Fatalf("the member process sees %s, want a, b and itself", &got)
	}
	waitFor("this process sees p", 30*time.Second, func() bool { _, ok := m.Alive("p"); return ok })
	for len(changes) > 0 {
		<-changes
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	// The live members count the stopped one lapsed once its renewals stop.
	select {
	case c := <-changes:
		if c.Joined || c.Member.Name != "p" {
			t.Fatalf("while p is stopped: %+v, want p left", c)
		}
	case <-time.After(4 * ttl):
		t.Fatalf("p, stopped for %s, is still counted alive", time.Since(stopped))
	}
	time.Sleep(max(0, 2*ttl-time.Since(stopped)))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Awake, it holds its lease again, and the others see it back.
	waitFor("the others see p back", 6*ttl, func() bool { _, ok := m.Alive("p"); return ok })
	// Give its own view time to settle, then look at what it said: a and b
	// renewed all along, so they never left.
	time.Sleep(2 * ttl)
	if got.has("left") {
		t.Fatalf("the resumed member process reported live members as left: %s", &got)
	}
	for _, l := range leases {
		if err := l.Check(); err != nil {
			t.Fatalf("%s lost its lease: %v", l.Self().Name, err)
		}
	}
}

// TestMembersRideOutANodesBucketElection loses the server that leads the
// nodes bucket, on a real three-server cluster, at the moment a member
// (c) dies: while the bucket elects a new leader (4-9 s, longer than the
// TTL) no lease can be renewed, and the new leader expires every key whose
// TTL passed meanwhile. The members that live (a and b) must not count
// each other lapsed for it: before the fix each reported the other left
// (its own clock ran while nothing could be renewed, and an expiry marker
// counted as a departure), and two nodes took each other's sessions. The
// member that did die must still be reported left by both.
func TestMembersRideOutANodesBucketElection(t *testing.T) {
	creds, err := cluster.NewCredentials()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dirs := []string{filepath.Join(root, "s1"), filepath.Join(root, "s2"), filepath.Join(root, "s3")}
	servers := startCluster(t, creds, dirs, nil)
	ttl := cluster.DefaultLeaseTTL
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	js0 := jsOf(t, servers[0])
	var first *cluster.Lease
	retry(t, "the nodes bucket", func(ctx context.Context) (err error) {
		first, err = cluster.OpenLease(ctx, js0, cluster.Member{Name: "c", Incarnation: "ic"}, cluster.LeaseOptions{TTL: ttl, Replicas: 3})
		return err
	})
	var leader string
	retry(t, "the nodes bucket's leader", func(ctx context.Context) error {
		s, err := js0.Stream(ctx, "KV_"+cluster.NodesBucket)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("no leader yet")
		}
		leader = info.Cluster.Leader
		return nil
	})
	// a and b live on the servers that stay; c is connected to the
	// leader's server and dies with it.
	var stay []*cluster.Embedded
	var lost *cluster.Embedded
	for _, s := range servers {
		if s.Server().Name() == leader {
			lost = s
		} else {
			stay = append(stay, s)
		}
	}
	if lost == nil {
		t.Fatalf("leader %q is none of the servers", leader)
	}
	c := first
	if servers[0] != lost {
		c.Close()
		jsL := jsOf(t, lost)
		retry(t, "c's lease", func(ctx context.Context) (err error) {
			c, err = cluster.OpenLease(ctx, jsL, cluster.Member{Name: "c", Incarnation: "ic2"}, cluster.LeaseOptions{TTL: ttl, Replicas: 3})
			return err
		})
	}
	type watcher struct {
		name    string
		lease   *cluster.Lease
		m       *cluster.Members
		changes chan cluster.Change
	}
	var ws []*watcher
	for i, name := range []string{"a", "b"} {
		js := jsOf(t, stay[i])
		w := &watcher{name: name, changes: make(chan cluster.Change, 64)}
		l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: name, Incarnation: "i" + name}, cluster.LeaseOptions{TTL: ttl, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close)
		w.lease = l
		w.m, err = cluster.WatchMembers(ctx, js, ttl, 3, func(c cluster.Change) { w.changes <- c }, cluster.WithLease(l))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.m.Close)
		ws = append(ws, w)
	}
	for _, w := range ws {
		eventually := time.Now().Add(30 * time.Second)
		for len(w.m.Names()) != 3 {
			if time.Now().After(eventually) {
				t.Fatalf("%s sees %v, want a, b, c", w.name, w.m.Names())
			}
			time.Sleep(20 * time.Millisecond)
		}
		for len(w.changes) > 0 {
			<-w.changes
		}
	}

	// c dies with the bucket's leader.
	c.Close()
	lost.Shutdown()
	lostAt := time.Now()
	for _, w := range ws {
		cLeft := false
		deadline := time.Now().Add(60 * time.Second)
		for !cLeft {
			select {
			case ch := <-w.changes:
				switch {
				case ch.Member.Name == "c" && !ch.Joined:
					cLeft = true
					t.Logf("%s saw c leave %s after the leader was lost", w.name, time.Since(lostAt).Round(time.Millisecond))
				case ch.Member.Name != w.name && ch.Member.Name != "c":
					t.Fatalf("%s reported %s %s during the nodes bucket's election (joined=%v): a live member counted lapsed", w.name, ch.Member.Name, map[bool]string{true: "joined", false: "left"}[ch.Joined], ch.Joined)
				}
			case <-time.After(time.Until(deadline)):
				t.Fatalf("%s never saw c, dead with the bucket's leader, leave", w.name)
			}
		}
	}
	// The survivors hold their leases again, and stay members for each other.
	time.Sleep(2 * ttl)
	for _, w := range ws {
		for len(w.changes) > 0 {
			if ch := <-w.changes; ch.Member.Name != w.name {
				t.Fatalf("%s reported %+v after the election", w.name, ch)
			}
		}
		if err := w.lease.Check(); err != nil {
			t.Fatalf("%s does not hold its lease after the election: %v", w.name, err)
		}
		for _, other := range []string{"a", "b"} {
			if _, ok := w.m.Alive(other); !ok {
				t.Fatalf("%s does not count %s alive after the election", w.name, other)
			}
		}
	}
}
