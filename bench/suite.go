package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/callsheet/callsheet/config"
)

// benchmark is one named benchmark. fn runs it once and returns its samples;
// the suite calls it Runs times, unless once is set, in which case fn
// repeats its measurements itself (an expensive setup shared by the runs).
type benchmark struct {
	name string
	once bool
	fn   func(ctx context.Context, s *suite) ([]sample, error)
}

// suite runs the benchmarks and holds what they share.
type suite struct {
	cfg      Config
	progress io.Writer
	probe    *probe // what one call writes, measured on first use
}

func (s *suite) benchmarks() []benchmark {
	bs := []benchmark{
		{name: "probe", once: true, fn: benchProbe},
		{name: "latency/direct", fn: benchDirect},
	}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs,
			benchmark{name: "latency/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchLatency(ctx, s, d) }},
			benchmark{name: "write/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchWrite(ctx, s, d) }},
		)
	}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs, benchmark{name: "throughput/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchThroughput(ctx, s, d) }})
	}
	bs = append(bs,
		benchmark{name: "cpu/interval", fn: func(ctx context.Context, s *suite) ([]sample, error) {
			return benchCPU(ctx, s, config.DurabilityInterval)
		}},
		benchmark{name: "groupcommit/fsync", fn: benchGroupCommit},
		benchmark{name: "checkpoint/fsync", fn: benchCheckpoint},
	)
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs, benchmark{name: "schedule/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchSchedule(ctx, s, d) }})
	}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs, benchmark{name: "mcp/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchMCP(ctx, s, d) }})
	}
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs, benchmark{name: "worker/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchWorker(ctx, s, d) }})
	}
	if !s.cfg.NoFleet {
		bs = append(bs,
			benchmark{name: "fleet/throughput/" + config.DurabilityFsync, fn: func(ctx context.Context, s *suite) ([]sample, error) {
				return benchFleetThroughput(ctx, s, config.DurabilityFsync)
			}},
			benchmark{name: "fleet/takeover", once: true, fn: benchFleetTakeover},
		)
	}
	bs = append(bs,
		benchmark{name: "replay/fold", fn: benchFold},
		benchmark{name: "replay/log", once: true, fn: benchReplayLog},
		benchmark{name: "chain/hash", fn: benchHash},
		benchmark{name: "search", once: true, fn: benchSearch},
		benchmark{name: "memory/session", fn: benchIdleSessions},
		benchmark{name: "memory/call", fn: benchInflight},
		benchmark{name: "latency/shell", fn: benchShell},
	)
	return append(bs, s.peerBenchmarks()...)
}

func (s *suite) run(ctx context.Context) ([]Row, error) {
	var all []sample
	for _, b := range s.benchmarks() {
		if s.cfg.Only != nil && !s.cfg.Only.MatchString(b.name) {
			continue
		}
		runs := s.cfg.Runs
		if b.once {
			runs = 1
		}
		start := time.Now()
		for i := range runs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			s.logf("%s: run %d of %d", b.name, i+1, runs)
			got, err := b.fn(ctx, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", b.name, err)
			}
			all = append(all, got...)
		}
		s.logf("%s: done in %s", b.name, time.Since(start).Round(time.Millisecond))
	}
	return aggregate(all), nil
}

func (s *suite) logf(format string, args ...any) {
	if s.progress != nil {
		fmt.Fprintf(s.progress, "bench: "+format+"\n", args...)
	}
}
