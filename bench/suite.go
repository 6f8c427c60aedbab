package main

import (
	"context"
	"errors"
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

// skipError says a benchmark cannot run on this machine (a dependency is
// missing) and why; the suite reports it and goes on.
type skipError struct{ reason string }

func (e *skipError) Error() string { return "skipped: " + e.reason }

// skip returns a *skipError with the reason.
func skip(format string, args ...any) error {
	return &skipError{reason: fmt.Sprintf(format, args...)}
}

// outcome is what became of a benchmark that gave no rows: skipped (Err is
// a *skipError) or failed.
type outcome struct {
	Name string
	Err  error
}

// Skipped reports whether the benchmark was skipped rather than failed.
func (o outcome) Skipped() bool {
	var s *skipError
	return errors.As(o.Err, &s)
}

// Reason is why it was skipped, or its error.
func (o outcome) Reason() string {
	var s *skipError
	if errors.As(o.Err, &s) {
		return s.reason
	}
	return o.Err.Error()
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
		benchmark{name: "tracing/interval", fn: benchTracing},
		benchmark{name: "groupcommit/fsync", fn: benchGroupCommit},
		benchmark{name: "groupcommit/interval", fn: benchGroupCommitInterval},
		benchmark{name: "checkpoint/fsync", fn: benchCheckpoint},
	)
	for _, d := range []string{config.DurabilityFsync, config.DurabilityInterval} {
		bs = append(bs, benchmark{name: "schedule/" + d, fn: func(ctx context.Context, s *suite) ([]sample, error) { return benchSchedule(ctx, s, d) }})
	}
	bs = append(bs, benchmark{name: "stream/" + config.DurabilityFsync, fn: func(ctx context.Context, s *suite) ([]sample, error) {
		return benchStream(ctx, s, config.DurabilityFsync)
	}})
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
		benchmark{name: "memory/turn", fn: benchLongSession},
		benchmark{name: "latency/shell", fn: benchShell},
		benchmark{name: "latency/sandbox", fn: benchSandbox},
		benchmark{name: "fairness/cpu", fn: benchCPUFairness},
		benchmark{name: "fairness/slots", once: true, fn: benchSlotFairness},
	)
	return append(bs, s.peerBenchmarks()...)
}

// run runs the selected benchmarks in order and hands each one's rows to
// emit as soon as its runs are done. A benchmark that cannot run here
// (skipError) or fails does not stop the others: it is returned among the
// outcomes, and reported as it happens. Only ctx's end stops the run.
func (s *suite) run(ctx context.Context, emit func([]Row) error) ([]outcome, error) {
	return s.runEach(ctx, s.benchmarks(), emit)
}

func (s *suite) runEach(ctx context.Context, bs []benchmark, emit func([]Row) error) ([]outcome, error) {
	var outcomes []outcome
	for _, b := range bs {
		if s.cfg.Only != nil && !s.cfg.Only.MatchString(b.name) {
			continue
		}
		runs := s.cfg.Runs
		if b.once {
			runs = 1
		}
		start := time.Now()
		var got []sample
		var err error
		for i := range runs {
			if err := ctx.Err(); err != nil {
				return outcomes, err
			}
			s.logf("%s: run %d of %d", b.name, i+1, runs)
			var samples []sample
			if samples, err = b.fn(ctx, s); err != nil {
				break
			}
			got = append(got, samples...)
		}
		if err != nil {
			if ctx.Err() != nil {
				return outcomes, ctx.Err()
			}
			o := outcome{Name: b.name, Err: err}
			outcomes = append(outcomes, o)
			if o.Skipped() {
				s.logf("%s: SKIPPED: %s", b.name, o.Reason())
			} else {
				s.logf("%s: FAILED after %s: %v", b.name, time.Since(start).Round(time.Millisecond), err)
			}
			continue
		}
		s.logf("%s: done in %s", b.name, time.Since(start).Round(time.Millisecond))
		if err := emit(aggregate(got)); err != nil {
			return outcomes, err
		}
	}
	return outcomes, nil
}

func (s *suite) logf(format string, args ...any) {
	if s.progress != nil {
		fmt.Fprintf(s.progress, "bench: "+format+"\n", args...)
	}
}
