package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/events/natslog"
)

// warmCalls run before every timed series and are not timed.
const warmCalls = 50

// timeCalls times n calls of worker 0, one at a time, after warmCalls
// untimed ones, and returns the latencies sorted.
func timeCalls(ctx context.Context, r rig, n int) ([]time.Duration, error) {
	if err := r.prepare(ctx, 1); err != nil {
		return nil, err
	}
	for range warmCalls {
		if err := r.call(ctx, 0); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		if err := r.call(ctx, 0); err != nil {
			return nil, err
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return lat, nil
}

// benchDirect calls the no-op tool's Run in-process: argument validation,
// decoding and the function, nothing durable.
func benchDirect(ctx context.Context, s *suite) ([]sample, error) {
	tools, err := benchTools(nil)
	if err != nil {
		return nil, err
	}
	noop := tools[0]
	args := json.RawMessage(`{}`)
	for range 1000 {
		if _, err := noop.Run(ctx, args); err != nil {
			return nil, err
		}
	}
	lat := make([]time.Duration, s.cfg.DirectCalls)
	for i := range lat {
		start := time.Now()
		if _, err := noop.Run(ctx, args); err != nil {
			return nil, err
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	cond := fmt.Sprintf("tool.Run of the no-op Go tool in-process (validate + decode args + call), %d calls", len(lat))
	return []sample{
		{name: "latency/direct/p50", value: us(percentile(lat, 50)), unit: "µs", better: Lower, conditions: cond},
		{name: "latency/direct/p99", value: us(percentile(lat, 99)), unit: "µs", better: Lower, conditions: cond},
	}, nil
}

// benchLatency times one-call turns over the node, one at a time, and the
// two floors with the same count on the same server settings.
func benchLatency(ctx context.Context, s *suite, durability string) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	n := s.cfg.Calls
	run := func(label string, start func(ctx context.Context) (rig, error)) (lat []time.Duration, err error) {
		err = labelled(ctx, label, func(ctx context.Context) error {
			r, err := start(ctx)
			if err != nil {
				return err
			}
			defer r.close()
			lat, err = timeCalls(ctx, r, n)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		return lat, nil
	}
	callLat, err := run("node", func(ctx context.Context) (rig, error) { return startNode(ctx, durability) })
	if err != nil {
		return nil, err
	}
	minLat, err := run("minimal-floor", func(ctx context.Context) (rig, error) { return startMinimalFloor(ctx, durability) })
	if err != nil {
		return nil, err
	}
	wrLat, err := run("writes-floor", func(ctx context.Context) (rig, error) { return startWritesFloor(ctx, durability, p) })
	if err != nil {
		return nil, err
	}
	base := fmt.Sprintf("%s, 1 session, one 1-call turn (no-op tool) at a time, SubmitTurn wait=true, %d calls", durability, n)
	minCond := base + "; floor: docs/facts.md minimal call (publish request, consume, publish completion, consume; 300 B)"
	wrCond := fmt.Sprintf("%s; floor: the call's %d events (%d B) as a request consumer needs them, in 2 messages (the turn with its request, consumed by a worker, then the rest), as plain sync publishes + 1 pull delivery + ack", base, len(p.writes), p.bytes())
	var out []sample
	for _, q := range []float64{50, 99} {
		name := fmt.Sprintf("latency/%s/p%.0f", durability, q)
		v := us(percentile(callLat, q))
		out = append(out,
			sample{name: name, value: v, unit: "µs", better: Lower, floor: us(percentile(minLat, q)), conditions: minCond},
			sample{name: name + "-vs-writes", value: v, unit: "µs", better: Lower, floor: us(percentile(wrLat, q)), conditions: wrCond},
		)
	}
	return out, nil
}

// benchWrite times one guarded Append of one event (the node's write: encode,
// dedup id, guard on the session's last stream sequence) against one plain
// synchronous publish of the same bytes, on one session.
func benchWrite(ctx context.Context, s *suite, durability string) ([]sample, error) {
	p, err := s.getProbe(ctx)
	if err != nil {
		return nil, err
	}
	srv, err := startServer(durability)
	if err != nil {
		return nil, err
	}
	defer srv.close()
	l, err := natslog.New(ctx, srv.js)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	n := s.cfg.Calls
	var last uint64
	// The payloads, to mint each event as the session actor does
	// (events.Encode, before the append: docs/events.md, "One encoding per
	// event"), so the row times the append the node makes.
	payloads := make([]any, len(p.writes))
	for i, ev := range p.writes {
		if payloads[i], err = events.Decode(ev); err != nil {
			return nil, err
		}
	}
	appendOne := func() (time.Duration, error) {
		i := int(last) % len(p.writes)
		ev := p.writes[i]
		ev.ID, ev.Session, ev.Seq, ev.Data = ulid.Make().String(), "w", last+1, nil
		ev = events.Encode(ev, payloads[i])
		start := time.Now()
		if err := l.Append(ctx, tenant, "w", last, []events.Event{ev}); err != nil {
			return 0, err
		}
		last++
		return time.Since(start), nil
	}
	datas := make([][]byte, len(p.writes))
	for i, ev := range p.writes {
		if datas[i], err = events.Marshal(ev); err != nil {
			return nil, err
		}
	}
	var k int
	publishOne := func() (time.Duration, error) {
		b := datas[k%len(datas)]
		k++
		start := time.Now()
		if _, err := srv.js.Publish(ctx, floorPrefix+"."+tenant+".p.log", b); err != nil {
			return 0, err
		}
		return time.Since(start), nil
	}
	series := func(f func() (time.Duration, error)) ([]time.Duration, error) {
		for range warmCalls {
			if _, err := f(); err != nil {
				return nil, err
			}
		}
		lat := make([]time.Duration, n)
		for i := range lat {
			if lat[i], err = f(); err != nil {
				return nil, err
			}
		}
		slices.Sort(lat)
		return lat, nil
	}
	plain, err := series(publishOne)
	if err != nil {
		return nil, err
	}
	guarded, err := series(appendOne)
	if err != nil {
		return nil, err
	}
	cond := fmt.Sprintf("%s, natslog Append of 1 event (the call's events in turn, %d B mean, minted by events.Encode) on one session, %d appends; floor: plain js.Publish of the same bytes", durability, p.bytes()/len(p.sizes), n)
	return []sample{
		{name: "write/" + durability + "/p50", value: us(percentile(guarded, 50)), unit: "µs", better: Lower, floor: us(percentile(plain, 50)), conditions: cond},
		{name: "write/" + durability + "/p99", value: us(percentile(guarded, 99)), unit: "µs", better: Lower, floor: us(percentile(plain, 99)), conditions: cond},
	}, nil
}
