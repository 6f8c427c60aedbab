package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/callsheet/callsheet/cluster"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
	"github.com/callsheet/callsheet/node"
)

// benchCheckpoint measures what the checkpoints cost (docs/audit.md,
// "Checkpoints and the witness"): the latency of one-call turns, one at a
// time, and the process CPU per call at cpuSessions sessions, on a node that
// signs its active sessions' heads every second (the defaults) and, in the
// same run, on one that keeps no checkpoints, which is the row's floor.
func benchCheckpoint(ctx context.Context, s *suite) ([]sample, error) {
	const durability = config.DurabilityFsync
	type result struct {
		p50, p99, cpu time.Duration
		writes        uint64
	}
	measure := func(label string, interval time.Duration) (res result, err error) {
		err = labelled(ctx, label, func(ctx context.Context) error {
			r, err := startNode(ctx, durability, func(o *node.Options) { o.CheckpointInterval = interval })
			if err != nil {
				return err
			}
			defer r.close()
			lat, err := timeCalls(ctx, r, s.cfg.Calls)
			if err != nil {
				return err
			}
			res.p50, res.p99 = percentile(lat, 50), percentile(lat, 99)
			if _, res.cpu, err = measureThroughputCPU(ctx, &sessionsPerLevel{r: r}, cpuSessions, s.cfg.Duration); err != nil {
				return err
			}
			res.writes, err = checkpointWrites(ctx, r.n)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("%s: %w", label, err)
		}
		return res, nil
	}
	without, err := measure("no-checkpoints", -1)
	if err != nil {
		return nil, err
	}
	with, err := measure("checkpoints", 0)
	if err != nil {
		return nil, err
	}
	cadence := fmt.Sprintf("checkpoints every %s and every %d events (the defaults); floor: the same on a node without checkpoints, in the same run", node.DefaultCheckpointInterval, node.DefaultCheckpointEvents)
	lat := fmt.Sprintf("%s, 1 session, one 1-call turn (no-op tool) at a time, SubmitTurn wait=true, %d calls; %s", durability, s.cfg.Calls, cadence)
	cpu := fmt.Sprintf("%s, process CPU time per completed call, %d sessions submitting one-call no-op turns for %s (after the latency series), %d checkpoints written in all; %s",
		durability, cpuSessions, s.cfg.Duration, with.writes, cadence)
	out := []sample{
		{name: "checkpoint/fsync/p50", value: us(with.p50), unit: "µs", better: Lower, floor: us(without.p50), conditions: lat},
		{name: "checkpoint/fsync/p99", value: us(with.p99), unit: "µs", better: Lower, floor: us(without.p99), conditions: lat},
	}
	if with.cpu > 0 && without.cpu > 0 {
		out = append(out, sample{name: "checkpoint/fsync/cpu-per-call", value: us(with.cpu), unit: "µs", better: Lower, floor: us(without.cpu), conditions: cpu})
	}
	if d, ok := signCPU(); ok {
		out = append(out, sample{name: "checkpoint/sign-cpu", value: us(d), unit: "µs", better: Lower,
			conditions: "events.SignCheckpoint (ed25519 over the head message), 2,000 heads, CPU time of the signing thread: what each checkpoint costs a core before its write"})
	}
	return out, nil
}

// signCPU returns the CPU time one checkpoint's signature takes.
func signCPU() (time.Duration, bool) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return 0, false
	}
	const n = 2000
	cp := events.Checkpoint{Chain: events.Chain2, Tenant: tenant, Session: "01M8T4VX2ZP367BQYQJ21QAYB0", Hash: strings.Repeat("ab", 32)}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	t0, ok := threadCPU()
	for i := range n {
		cp.Seq = uint64(i + 1)
		events.SignCheckpoint(key, cp)
	}
	t1, _ := threadCPU()
	return (t1 - t0) / n, ok && t1 > t0
}

// checkpointWrites returns how many checkpoints the node has written: the
// last sequence of the checkpoint bucket's stream (0 without one).
func checkpointWrites(ctx context.Context, n *node.Node) (uint64, error) {
	creds, err := cluster.LoadCredentials(n.NATSCredentials())
	if err != nil {
		return 0, err
	}
	nc, err := nats.Connect(n.ClientURL(), creds.Option())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	st, err := js.Stream(ctx, "KV_"+natslog.DefaultCheckpointBucket)
	if err != nil {
		return 0, nil // a node without checkpoints has no bucket
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}
