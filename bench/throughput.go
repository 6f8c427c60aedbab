package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// measureThroughput runs conc workers, each calling in a loop, and counts the
// calls completed per second over cfg.Duration after a warm-up.
func measureThroughput(ctx context.Context, r rig, conc int, dur time.Duration) (float64, error) {
	rate, _, err := measureThroughputCPU(ctx, r, conc, dur)
	return rate, err
}

// measureThroughputCPU is measureThroughput that also returns the process's
// CPU time per completed call over the measurement (0 where unavailable).
func measureThroughputCPU(ctx context.Context, r rig, conc int, dur time.Duration) (float64, time.Duration, error) {
	rate, u, err := measureThroughputUsage(ctx, r, conc, dur)
	return rate, u.cpu, err
}

// perCall is what the process used per completed call: CPU time and minor
// page faults; and, for a node, the appends its log stored.
type perCall struct {
	cpu     time.Duration
	faults  float64
	appends float64
}

// appendCounter is a rig that counts the appends its log stored.
type appendCounter interface {
	appends() (float64, bool)
}

// measureThroughputUsage is measureThroughput that also returns what the
// process used per completed call over the measurement (zero where
// unavailable).
func measureThroughputUsage(ctx context.Context, r rig, conc int, dur time.Duration) (float64, perCall, error) {
	if err := r.prepare(ctx, conc); err != nil {
		return 0, perCall{}, err
	}
	var done atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var errOnce sync.Once
	var firstErr error
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				if err := r.call(cctx, w); err != nil {
					if cctx.Err() == nil {
						errOnce.Do(func() { firstErr = fmt.Errorf("worker %d: %w", w, err) })
						cancel()
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	sleep := func(d time.Duration) {
		select {
		case <-time.After(d):
		case <-cctx.Done():
		}
	}
	sleep(dur / 5)
	ac, counts := r.(appendCounter)
	var a0, a1 float64
	if counts {
		a0, counts = ac.appends()
	}
	u0, _ := processUsage()
	c0, t0 := done.Load(), time.Now()
	sleep(dur)
	// A window in which no call completed measures nothing (a loaded machine,
	// a short -duration): it stays open until one does, up to 50 windows.
	for deadline := time.Now().Add(50 * dur); done.Load() == c0 && time.Now().Before(deadline) && cctx.Err() == nil; {
		sleep(dur / 5)
	}
	c1, t1 := done.Load(), time.Now()
	u1, cpuOK := processUsage()
	if counts {
		a1, counts = ac.appends()
	}
	cancel()
	wg.Wait()
	if firstErr != nil {
		return 0, perCall{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return 0, perCall{}, err
	}
	var per perCall
	if cpuOK && c1 > c0 {
		per = perCall{cpu: (u1.cpu - u0.cpu) / time.Duration(c1-c0), faults: float64(u1.faults-u0.faults) / float64(c1-c0)}
	}
	if counts && c1 > c0 {
		per.appends = (a1 - a0) / float64(c1-c0)
	}
	return float64(c1-c0) / t1.Sub(t0).Seconds(), per, nil
}

// benchThroughput measures calls/s of the node at each concurrency, beside
// the two floors with as many publishers. One rig serves every concurrency
// of a run, each with sessions of its own.
func benchThroughput(ctx context.Context, s *suite, durability string) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	var nodeAppends []float64 // per call, at each level
	rates := func(label string, start func(ctx context.Context) (rig, error)) (out []float64, err error) {
		err = labelled(ctx, label, func(ctx context.Context) error {
			r, err := start(ctx)
			if err != nil {
				return err
			}
			defer r.close()
			out = make([]float64, len(s.cfg.Concurrency))
			for i, c := range s.cfg.Concurrency {
				var u perCall
				if out[i], u, err = measureThroughputUsage(ctx, r, c, s.cfg.Duration); err != nil {
					return fmt.Errorf("%d sessions: %w", c, err)
				}
				if label == "node" {
					nodeAppends = append(nodeAppends, u.appends)
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		return out, nil
	}
	nodeRates, err := rates("node", func(ctx context.Context) (rig, error) {
		r, err := startNode(ctx, durability)
		if err != nil {
			return nil, err
		}
		return &sessionsPerLevel{r: r}, nil
	})
	if err != nil {
		return nil, err
	}
	minRates, err := rates("minimal-floor", func(ctx context.Context) (rig, error) { return startMinimalFloor(ctx, durability) })
	if err != nil {
		return nil, err
	}
	wrRates, err := rates("writes-floor", func(ctx context.Context) (rig, error) { return startWritesFloor(ctx, durability, p) })
	if err != nil {
		return nil, err
	}
	var out []sample
	for i, c := range s.cfg.Concurrency {
		base := fmt.Sprintf("%s, %d sessions each submitting one-call no-op turns in a loop (wait=true), %s", durability, c, s.cfg.Duration)
		name := fmt.Sprintf("throughput/%s/s%d", durability, c)
		out = append(out,
			sample{name: name, value: nodeRates[i], unit: "calls/s", better: Higher, floor: minRates[i],
				conditions: base + fmt.Sprintf("; floor: docs/facts.md minimal call with %d publishers", c)},
			sample{name: name + "-vs-writes", value: nodeRates[i], unit: "calls/s", better: Higher, floor: wrRates[i],
				conditions: base + fmt.Sprintf("; floor: the call's %d events in 2 messages (request, then the rest) as plain sync publishes with %d publishers", len(p.writes), c)},
		)
		if i < len(nodeAppends) && nodeAppends[i] > 0 {
			out = append(out, sample{name: name + "-appends", value: nodeAppends[i], unit: "appends", better: Lower,
				conditions: base + "; value: the appends the node's log stored per completed call (callsheet_append_seconds' count): 1 when a read-only call's turn goes out whole, as it does with nothing queued"})
		}
	}
	return out, nil
}

// sessionsPerLevel gives every concurrency level sessions of its own, so a
// level never inherits turns still running from the one before.
type sessionsPerLevel struct {
	r    *nodeRig
	base int
}

func (s *sessionsPerLevel) prepare(ctx context.Context, n int) error {
	s.base = len(s.r.sessions)
	return s.r.open(ctx, s.base+n, 16)
}

func (s *sessionsPerLevel) call(ctx context.Context, w int) error { return s.r.call(ctx, s.base+w) }
func (s *sessionsPerLevel) close()                                { s.r.close() }
func (s *sessionsPerLevel) appends() (float64, bool)              { return s.r.appends() }

// cpuSessions is the concurrency of the cpu benchmark: enough sessions to
// keep both cores busy, few enough that nothing queues.
const cpuSessions = 16

// benchCPU measures the process's CPU time per no-op call: the node's
// one-call turns at cpuSessions sessions beside the minimal floor with as
// many publishers, in the same run. Both include the embedded server's work
// for their two messages per call, so the difference is the node's own work
// over the floor's client (docs/performance.md, "CPU per call").
func benchCPU(ctx context.Context, s *suite, durability string) ([]sample, error) {
	per := func(label string, start func(ctx context.Context) (rig, error)) (u perCall, err error) {
		err = labelled(ctx, label, func(ctx context.Context) error {
			r, err := start(ctx)
			if err != nil {
				return err
			}
			defer r.close()
			_, u, err = measureThroughputUsage(ctx, r, cpuSessions, s.cfg.Duration)
			return err
		})
		return u, err
	}
	node, err := per("node", func(ctx context.Context) (rig, error) {
		r, err := startNode(ctx, durability)
		if err != nil {
			return nil, err
		}
		return &sessionsPerLevel{r: r}, nil
	})
	if err != nil {
		return nil, err
	}
	floor, err := per("minimal-floor", func(ctx context.Context) (rig, error) { return startMinimalFloor(ctx, durability) })
	if err != nil {
		return nil, err
	}
	if node.cpu == 0 || floor.cpu == 0 {
		return nil, nil // no process CPU time on this platform
	}
	base := fmt.Sprintf("%s, process CPU time (all threads, the embedded server's included) per completed call, %d sessions submitting one-call no-op turns, %s", durability, cpuSessions, s.cfg.Duration)
	var fault []sample
	if d, ok := pageFault(); ok {
		fault = []sample{{name: "cpu/" + durability + "/page-fault", value: float64(d.Nanoseconds()) / 1000, unit: "µs", better: Lower,
			conditions: "the thread CPU time of one minor page fault on this machine: each 4 KiB page of a fresh 32 MiB anonymous mapping touched once, median of 5; times faults-per-call, what first touches cost a call"}}
	}
	return append([]sample{
		{name: "cpu/" + durability + "/per-call", value: us(node.cpu), unit: "µs", better: Lower, floor: us(floor.cpu),
			conditions: base + "; floor: the minimal call with as many publishers (its client and the server's work)"},
		{name: "cpu/" + durability + "/over-floor", value: us(node.cpu - floor.cpu), unit: "µs", better: Lower,
			conditions: base + "; the node's per-call CPU minus the minimal floor's: our own work above the floor's client"},
		{name: "cpu/" + durability + "/faults-per-call", value: node.faults, unit: "faults", better: Lower,
			conditions: fmt.Sprintf("%s, the process's minor page faults per completed call in the same measurements (the minimal floor's: %.2f): first touches of memory the process had not used, each costing cpu/page-fault", durability, floor.faults)},
	}, fault...), nil
}
