package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/internal/otlptest"
	"github.com/callsheet/callsheet/internal/tracing"
	"github.com/callsheet/callsheet/node"
)

// otelcol is the OpenTelemetry Collector scripts/ensure-otelcol builds
// ($CALLSHEET_OTELCOL, else .tools/bin/otelcol-callsheet of the repository).
func otelcol() (string, error) {
	if p := os.Getenv("CALLSHEET_OTELCOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("the tracing benchmark's receiver, CALLSHEET_OTELCOL=%s: %v: run scripts/ensure-otelcol, or unset it", p, err)
		}
		return p, nil
	}
	for _, dir := range []string{".", ".."} { // go run ./bench, go test ./bench
		if p, err := filepath.Abs(filepath.Join(dir, ".tools", "bin", "otelcol-callsheet")); err == nil {
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", errors.New("the tracing benchmark needs the OpenTelemetry Collector as its receiver: run scripts/ensure-otelcol (or `make bench`, which does), or set CALLSHEET_OTELCOL")
}

// tracingRuns counts benchTracing's runs (the suite runs one at a time).
var tracingRuns int

// benchTracing measures what traces cost, on and off in the same run: the
// interval node's one-call turn p50 (one at a time) and its process CPU per
// call (cpuSessions submitting), first with no tracer provider (spans off,
// as without OTEL_* variables), and with the provider the OTEL_* variables
// make (internal/tracing: batched OTLP/HTTP) exporting to a real
// OpenTelemetry Collector process. The rows' value is tracing on, the floor
// tracing off, so the ratio is what tracing multiplies; runs alternate
// which is measured first.
func benchTracing(ctx context.Context, s *suite) ([]sample, error) {
	bin, err := otelcol()
	if err != nil {
		return nil, skip("%v", err)
	}
	dir, err := os.MkdirTemp("", "csbench-otelcol-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	col, err := otlptest.Run(bin, dir)
	if err != nil {
		return nil, err
	}
	defer col.Stop()
	type cost struct{ p50, cpu time.Duration }
	measure := func(on bool) (c cost, err error) {
		label := "tracing-off"
		var tp *tracing.Provider
		if on {
			label = "tracing-on"
			// The production path: the provider from the OTEL_* variables.
			os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint)
			defer os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
			if tp, err = tracing.FromEnv(ctx, os.Getenv, "bench", "bench"); err != nil {
				return c, err
			}
			defer func() {
				sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if serr := tp.Shutdown(sctx); serr != nil && err == nil {
					err = fmt.Errorf("flushing spans: %w", serr)
				}
			}()
		}
		start := func(ctx context.Context) (*nodeRig, error) {
			return startNode(ctx, config.DurabilityInterval, func(o *node.Options) {
				if tp != nil {
					o.TracerProvider = tp.Node()
				}
			})
		}
		err = labelled(ctx, label, func(ctx context.Context) error {
			r, err := start(ctx)
			if err != nil {
				return err
			}
			lat, err := timeCalls(ctx, r, s.cfg.Calls)
			r.close()
			if err != nil {
				return err
			}
			c.p50 = percentile(lat, 50)
			r, err = start(ctx)
			if err != nil {
				return err
			}
			defer r.close()
			_, c.cpu, err = measureThroughputCPU(ctx, &sessionsPerLevel{r: r}, cpuSessions, s.cfg.Duration)
			return err
		})
		return c, err
	}
	// Runs alternate which goes first, so a drift of the machine's load
	// does not always favour the same one.
	tracingRuns++
	var off, on cost
	for _, first := range []bool{tracingRuns%2 == 0, tracingRuns%2 != 0} {
		c, err := measure(first)
		if err != nil {
			return nil, fmt.Errorf("tracing on %v: %w", first, err)
		}
		if first {
			on = c
		} else {
			off = c
		}
	}
	// The spans reached the receiver: what was measured is exporting.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(col.File(), "execute_tool") {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the Collector received no execute_tool span: %s", col.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
	base := fmt.Sprint("interval, tracing on (OTEL_EXPORTER_OTLP_ENDPOINT: batched OTLP/HTTP to an OpenTelemetry Collector process) against off (no OTEL_* variables) in the same run; floor: off")
	out := []sample{{name: "tracing/interval/p50", value: us(on.p50), unit: "µs", better: Lower, floor: us(off.p50),
		conditions: fmt.Sprintf("%s; 1 session, one 1-call turn (no-op tool) at a time, %d calls", base, s.cfg.Calls)}}
	if on.cpu > 0 && off.cpu > 0 {
		out = append(out, sample{name: "tracing/interval/cpu-per-call", value: us(on.cpu), unit: "µs", better: Lower, floor: us(off.cpu),
			conditions: fmt.Sprintf("%s; process CPU time (the embedded server's included, the Collector's not) per completed call, %d sessions submitting one-call no-op turns, %s", base, cpuSessions, s.cfg.Duration)})
	}
	return out, nil
}
