package testnode

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/callsheet/callsheet/cluster"
)

// FleetOptions say how to start a fleet of node processes (docs/spec.md §7).
type FleetOptions struct {
	// Nodes is how many nodes; default 3.
	Nodes int
	// Dir holds each node's data dir (Dir/nN), the shared credentials and,
	// with SharedWorkspaces, the shared workspace root; required.
	Dir string
	// Config is every node's --config (as Options.Config).
	Config any
	// SharedWorkspaces gives every node --shared-workspaces and one
	// --workspace-root, Dir/workspaces.
	SharedWorkspaces bool
	// Args and Env are added for every node.
	Args, Env []string
	// NATS, when set, is an external cluster's URL (NATSCluster.URL): every
	// node gets --nats NATS instead of an embedded server and its routes,
	// so no node leads a stream.
	NATS string
	// Creds is the shared --nats-creds file; default Dir/fleet.nk, made
	// when missing.
	Creds string
}

// Fleet is a running fleet of node processes.
type Fleet struct {
	// Procs are the nodes, n1, n2, ..., in order; Restart replaces one.
	Procs []*Proc
	// Creds is the credentials file every node shares.
	Creds string
	// Routes are the nodes' route URLs.
	Routes []string
	// All is every process the fleet started, restarted ones included, in
	// the order they started (their logs tell a failed test's story).
	All []*Proc

	mu sync.Mutex
}

// StartFleet starts o.Nodes nodes named n1..nN, each embedding a clustered
// NATS server listening for routes on a free port of its own, given every
// node's route and one shared --nats-creds file (or, with o.NATS, each
// connected to that external cluster instead), all at once (a node waits
// for a majority of the cluster before it serves), and waits until each
// prints its "listening on" line.
func StartFleet(t testing.TB, bin string, o FleetOptions) *Fleet {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Dir == "" {
		t.Fatal("testnode.StartFleet: FleetOptions.Dir is empty")
	}
	if o.Creds == "" {
		o.Creds = filepath.Join(o.Dir, "fleet.nk")
	}
	f := &Fleet{Creds: o.Creds}
	if _, err := cluster.EnsureCredentials(f.Creds); err != nil {
		t.Fatal(err)
	}
	var listens []string
	for range o.Nodes {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listens = append(listens, ln.Addr().String())
		ln.Close()
	}
	for _, l := range listens {
		f.Routes = append(f.Routes, "nats-route://"+l)
	}
	f.Procs = make([]*Proc, o.Nodes)
	var wg sync.WaitGroup
	var failed []string
	var mu sync.Mutex
	for i := range o.Nodes {
		name := fmt.Sprintf("n%d", i+1)
		args := []string{"--name", name, "--cluster-listen", listens[i], "--routes", strings.Join(f.Routes, ","), "--nats-creds", f.Creds}
		if o.NATS != "" {
			args = []string{"--name", name, "--nats", o.NATS, "--nats-creds", f.Creds}
		}
		if o.SharedWorkspaces {
			args = append(args, "--shared-workspaces", "--workspace-root", filepath.Join(o.Dir, "workspaces"))
		}
		opts := Options{Data: filepath.Join(o.Dir, name), Config: o.Config, Args: append(args, o.Args...), Env: o.Env}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Start fails the test from this goroutine only through Fatal,
			// which must run on the test's own: catch it here.
			p, err := startAsync(t, bin, opts)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", name, err))
				return
			}
			f.Procs[i] = p
		}()
	}
	wg.Wait()
	for _, p := range f.Procs {
		if p != nil {
			f.All = append(f.All, p)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("the fleet did not start:\n%s", strings.Join(failed, "\n"))
	}
	return f
}

// Proc returns the node named name, or nil.
func (f *Fleet) Proc(name string) *Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.Procs {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Alive returns the nodes whose process runs (paused ones included).
func (f *Fleet) Alive() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*Proc
	for _, p := range f.Procs {
		if !p.Exited() {
			out = append(out, p)
		}
	}
	return out
}

// Restart starts the named node again, once its process has exited, and
// puts the new Proc in its place.
func (f *Fleet) Restart(t testing.TB, name string) *Proc {
	t.Helper()
	old := f.Proc(name)
	np := old.Restart(t)
	f.mu.Lock()
	for i, p := range f.Procs {
		if p == old {
			f.Procs[i] = np
		}
	}
	f.All = append(f.All, np)
	f.mu.Unlock()
	return np
}

// DumpOnFailure registers a cleanup that, when the test failed, writes the
// standard error of every process the fleet started into dir (one file per
// process, nN-K.log) and names the files in the test's log.
func (f *Fleet) DumpOnFailure(t testing.TB, dir string) { f.dump(t, dir, false) }

// DumpAlways is DumpOnFailure whether or not the test failed.
func (f *Fleet) DumpAlways(t testing.TB, dir string) { f.dump(t, dir, true) }

func (f *Fleet) dump(t testing.TB, dir string, always bool) {
	t.Helper()
	t.Cleanup(func() {
		if !always && !t.Failed() {
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("node logs: %v", err)
			return
		}
		f.mu.Lock()
		all := slices.Clone(f.All)
		f.mu.Unlock()
		for i, p := range all {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.log", p.Name, i))
			if err := os.WriteFile(path, []byte(p.Stderr()), 0o644); err != nil {
				t.Logf("node logs: %v", err)
				continue
			}
			t.Logf("node %s (process %d) logged to %s", p.Name, i, path)
			if t.Failed() {
				for _, l := range lastErrors(p.Stderr(), 5) {
					t.Logf("node %s (process %d): %s", p.Name, i, l)
				}
			}
		}
	})
}

// lastErrors returns the last n error-level lines of a node's log (text or
// JSON): what a failed run's output shows of why, where the files are lost
// with the machine (CI).
func lastErrors(log string, n int) []string {
	var out []string
	for l := range strings.Lines(log) {
		if strings.Contains(l, "level=ERROR") || strings.Contains(l, `"level":"ERROR"`) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out[max(0, len(out)-n):]
}
