package cluster_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
)

// TestBoundSlotLapsesWithItsRenewals: node A takes the one slot of a cap for
// a call with a 60 s timeout; then A's connection stands still for good, as
// a stopped or dead node's does. A slot A bound frees within the lease TTL,
// and never before the last moment A was told its call may run (the reaper
// ends the call's processes by then); a slot A did not bind stays held until
// its deadline plus CapGrace.
func TestBoundSlotLapsesWithItsRenewals(t *testing.T) {
	const lease = cluster.MinLeaseTTL
	for _, bind := range []bool{true, false} {
		name := map[bool]string{true: "bound", false: "unbound"}[bind]
		t.Run(name, func(t *testing.T) {
			e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
			proxy := newStallProxy(t, e.Server().Addr().String())
			jsA := proxy.js(t, e, "a")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			a, b := openCaps(t, ctx, jsA, lease), openCaps(t, ctx, jsOf(t, e), lease)

			slot, err := a.Acquire(ctx, "fleet", "t", 1, time.Minute, cluster.Holder{Node: "a", Call: "c"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = slot.Release(rctx)
			})
			held := slot.Until()
			var mu sync.Mutex
			var untils []time.Time
			if bind {
				if !slot.Bind(func(u time.Time) { mu.Lock(); untils = append(untils, u); mu.Unlock() }) {
					t.Fatal("Bind refused a slot taken for a deadline")
				}
				if slot.Bind(func(time.Time) {}) {
					t.Fatal("Bind took a slot bound already")
				}
			}
			// Renewals go on while A is reachable: the slot stays held.
			short, cancelShort := context.WithTimeout(ctx, 2*lease)
			if _, err := b.Acquire(short, "fleet", "t", 1, time.Minute, cluster.Holder{Node: "b", Call: "d"}); err == nil {
				t.Fatal("B took the slot A holds")
			}
			cancelShort()

			proxy.toServer.Lock()
			proxy.toClient.Lock()
			defer proxy.toClient.Unlock()
			defer proxy.toServer.Unlock()
			stalled := time.Now()
			wait, cancelWait := context.WithTimeout(ctx, 3*lease)
			defer cancelWait()
			got, err := b.Acquire(wait, "fleet", "t", 1, time.Minute, cluster.Holder{Node: "b", Call: "d"})
			took := time.Now()
			if !bind {
				if err == nil {
					t.Fatalf("B took an unbound slot %s after A went, before its deadline", took.Sub(stalled).Round(time.Millisecond))
				}
				return
			}
			if err != nil {
				t.Fatalf("B could not take a bound slot within %s of A going: %v", 3*lease, err)
			}
			defer got.Release(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if len(untils) < 3 {
				t.Fatalf("A was told %d times how long its call may run, want the first and renewals: %v", len(untils), untils)
			}
			if untils[0].After(held) {
				t.Fatalf("Bind's first moment %v is after the slot's end before it, %v", untils[0], held)
			}
			last := untils[len(untils)-1]
			if !last.Before(took) {
				t.Fatalf("B took the slot at %v, before A's call had to end (%v): the cap could be exceeded", took, last)
			}
			t.Logf("the slot freed %s after A went (lease %s); A's call had to end %s before B took it",
				took.Sub(stalled).Round(time.Millisecond), lease, took.Sub(last).Round(time.Millisecond))
			if took.Sub(stalled) > lease+1500*time.Millisecond {
				t.Fatalf("a bound slot freed %s after its node went, want within the lease %s", took.Sub(stalled), lease)
			}
		})
	}
}

// TestBindRefusesSlotsItCannotBind: a slot without a deadline is renewed
// already, and a released one is gone.
func TestBindRefusesSlotsItCannotBind(t *testing.T) {
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := openCaps(t, ctx, jsOf(t, e), cluster.MinLeaseTTL)
	patient, err := c.Acquire(ctx, "fleet", "p", 1, 0, cluster.Holder{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if patient.Bind(func(time.Time) {}) {
		t.Fatal("Bind took a slot without a deadline")
	}
	_ = patient.Release(ctx)
	timed, err := c.Acquire(ctx, "fleet", "q", 1, time.Minute, cluster.Holder{Node: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := timed.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if timed.Bind(func(time.Time) {}) {
		t.Fatal("Bind took a released slot")
	}
}

// TestBoundSlotRenewalAnsweredLateIsKept: the answers to A's renewals are
// held for three renewals (the server still stores them); the next renewal,
// guarded on the revision before, is refused. That refusal is A's own
// renewal moving the key: the slot goes on from the stored revision, A's
// call is told it may run on, and the slot stays A's.
func TestBoundSlotRenewalAnsweredLateIsKept(t *testing.T) {
	const lease = cluster.MinLeaseTTL
	e := start(t, cluster.EmbeddedOptions{StoreDir: t.TempDir()})
	proxy := newStallProxy(t, e.Server().Addr().String())
	jsA := proxy.js(t, e, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := openCaps(t, ctx, jsA, lease)
	slot, err := a.Acquire(ctx, "fleet", "t", 1, time.Minute, cluster.Holder{Node: "a", Call: "c"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slot.Release(context.Background()) })
	var mu sync.Mutex
	var last time.Time
	slot.Bind(func(u time.Time) { mu.Lock(); last = u; mu.Unlock() })
	time.Sleep(lease / 2)

	proxy.toClient.Lock()
	time.Sleep(3 * lease / 5)
	proxy.toClient.Unlock()
	resumed := time.Now()
	time.Sleep(2 * lease)
	mu.Lock()
	got := last
	mu.Unlock()
	// A renewal sent after the stall moves the end past the stall's end.
	if !got.After(resumed.Add(lease - cluster.BindMargin)) {
		t.Fatalf("after the stall A's call must end by %s, %s after it: its renewals were refused since",
			got.Format("15:04:05.000"), got.Sub(resumed).Round(time.Millisecond))
	}
	b := openCaps(t, ctx, jsOf(t, e), lease)
	if held, err := b.Held(ctx, "fleet", "t", 1); err != nil || len(held) != 1 || held[0].Node != "a" {
		t.Fatalf("the slot's holders after the stall: %+v, %v; want A", held, err)
	}
}

// openCaps opens the caps bucket on js, closed when the test ends.
func openCaps(t *testing.T, ctx context.Context, js jetstream.JetStream, lease time.Duration) *cluster.Caps {
	t.Helper()
	c, err := cluster.OpenCaps(ctx, js, 1, lease)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
