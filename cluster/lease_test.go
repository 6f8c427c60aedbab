package cluster_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// stallProxy forwards TCP connections to a NATS server and can hold the
// bytes going either way: a connection whose traffic stands still, as a
// shared connection does behind a big read or a burst of appends.
type stallProxy struct {
	ln                 net.Listener
	toClient, toServer sync.RWMutex // held (Lock) while that direction stalls

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// newStallProxy listens on loopback and forwards each connection to the
// server at addr (HOST:PORT), until the test ends.
func newStallProxy(t *testing.T, addr string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.wg.Add(2)
			p.mu.Unlock()
			go p.pipe(s, c, &p.toServer)
			go p.pipe(c, s, &p.toClient)
		}
	}()
	return p
}

// pipe copies src to dst, a chunk at a time, each while gate is not held.
func (p *stallProxy) pipe(dst, src net.Conn, gate *sync.RWMutex) {
	defer p.wg.Done()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			gate.RLock()
			_, werr := dst.Write(buf[:n])
			gate.RUnlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// url is the proxy's nats:// URL.
func (p *stallProxy) url() string { return "nats://" + p.ln.Addr().String() }

// connect opens a NATS connection through the proxy with e's credentials.
func (p *stallProxy) connect(t *testing.T, e *cluster.Embedded, name string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(p.url(), e.Credentials().Option(), nats.Name(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// js is JetStream on a connection through the proxy (connect).
func (p *stallProxy) js(t *testing.T, e *cluster.Embedded, name string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(p.connect(t, e, name))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// losses counts OnLost calls.
type losses struct{ n atomic.Int32 }

func (l *losses) onLost() { l.n.Add(1) }

// TestLeaseRenewsWhileTheSharedConnectionStalls: a node's connection that
// everything else uses stands still (its traffic held both ways, as behind
// a big read or a burst of appends) for three lease TTLs. A lease renewed on
// a connection of its own (Dial) is never lost; the same lease renewed on
// the shared connection, as before, is.
func TestLeaseRenewsWhileTheSharedConnectionStalls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ownConn  bool
		wantLost bool
	}{
		{"its own connection", true, false},
		{"the shared connection", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
			proxy := newStallProxy(t, e.Server().Addr().String())
			shared := proxy.js(t, e, "shared")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var lost losses
			o := cluster.LeaseOptions{TTL: cluster.MinLeaseTTL, OnLost: lost.onLost}
			if tc.ownConn {
				o.Dial = func() (*nats.Conn, error) { return e.Connect("lease") }
			}
			l, err := cluster.OpenLease(ctx, shared, cluster.Member{Name: "n", Incarnation: "i"}, o)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()

			proxy.toServer.Lock()
			proxy.toClient.Lock()
			stalled := time.Now()
			checked := 0
			for time.Since(stalled) < 3*l.TTL() {
				if l.Check() != nil {
					checked++
				}
				time.Sleep(50 * time.Millisecond)
			}
			proxy.toClient.Unlock()
			proxy.toServer.Unlock()

			st := l.Stats()
			t.Logf("stalled for %s: lost %d times, %d renewals, the longest gap %s", time.Since(stalled).Round(time.Millisecond), st.Lost, st.Renewals, st.LongestGap.Round(time.Millisecond))
			if got := lost.n.Load() > 0 || checked > 0; got != tc.wantLost {
				t.Fatalf("lost=%v (OnLost %d times, Check failed %d times), want %v", got, lost.n.Load(), checked, tc.wantLost)
			}
		})
	}
}

// TestLeaseRenewalAnsweredLateIsKept: the lease's connection delivers
// nothing to the node for 4.5 s (the server's answers held, its requests
// still stored) with a lease TTL of 10 s. A renewal is stored but its answer
// comes after the node stopped waiting, so the next renewal, guarded on the
// revision before, is refused. That refusal is the node's own renewal
// moving the key, not a lapse: the lease goes on from the stored renewal
// and is never lost (before, the node took the refusal for a lost lease
// and stopped every session).
func TestLeaseRenewalAnsweredLateIsKept(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	proxy := newStallProxy(t, e.Server().Addr().String())
	js := jsOf(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var lost losses
	l, err := cluster.OpenLease(ctx, js, cluster.Member{Name: "n", Incarnation: "i"}, cluster.LeaseOptions{TTL: 10 * time.Second,
		OnLost: lost.onLost, Dial: func() (*nats.Conn, error) {
			return nats.Connect(proxy.url(), e.Credentials().Option(), nats.Name("lease"))
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	kv, err := js.KeyValue(ctx, cluster.NodesBucket)
	if err != nil {
		t.Fatal(err)
	}
	before, err := kv.Get(ctx, "n")
	if err != nil {
		t.Fatal(err)
	}

	proxy.toClient.Lock()
	time.Sleep(4500 * time.Millisecond)
	stored, err := kv.Get(ctx, "n")
	proxy.toClient.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if stored.Revision() == before.Revision() {
		t.Fatal("no renewal was stored while the answers were held: the test did not hold what it meant to")
	}
	// Past the deadline a lost lease would have had: the last renewal
	// answered was sent before the stall, 8 s (TTL less the margin) ago.
	deadline := time.Now().Add(6 * time.Second)
	for time.Now().Before(deadline) {
		if err := l.Check(); err != nil {
			t.Fatalf("the lease is lost: %v (OnLost %d times)", err, lost.n.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := lost.n.Load(); n > 0 {
		t.Fatalf("OnLost was called %d times", n)
	}
	if e, err := kv.Get(ctx, "n"); err != nil || e.Revision() <= stored.Revision() {
		t.Fatalf("the lease was not renewed after the stall: %v", err)
	}
}
