package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/callsheet/callsheet/api"
	"github.com/callsheet/callsheet/config"
	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/worker"
)

// toolExtNoop is the harness tool the worker benchmark registers: the
// no-op's declarations, run by an external worker.
const toolExtNoop = "ext_noop"

// benchWorker times a one-call turn of a harness tool served by an external
// worker (package worker over HTTP on loopback, one task at a time, each
// answer asking for the next task) against a one-call turn of the built-in no-op, same declarations
// (read-only, safe, parallel-safe), same node and session, alternating one
// call of each, so both series see the same machine.
func benchWorker(ctx context.Context, s *suite, durability string) ([]sample, error) {
	n := s.cfg.Calls
	var ext, builtin []time.Duration
	err := labelled(ctx, "worker-"+durability, func(ctx context.Context) error {
		r, err := startNode(ctx, durability)
		if err != nil {
			return err
		}
		defer r.close()
		srv, err := api.New(r.n)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		hs := &http.Server{Handler: srv}
		go func() { _ = hs.Serve(ln) }()
		defer func() {
			srv.CloseStreams()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hs.Shutdown(sctx)
		}()
		w, err := worker.New("http://"+ln.Addr().String(), worker.WithID("bench"), worker.WithConcurrency(1))
		if err != nil {
			return err
		}
		if err := w.Register(ctx, toolExtNoop, worker.Spec{
			Description: "does nothing and answers ok, in a worker", Guidelines: []string{"benchmark only"},
			InputSchema: json.RawMessage(`{"type": "object", "properties": {}, "additionalProperties": false}`),
			Effect:      string(benchDecl.Effect), Replay: string(benchDecl.Replay), Concurrency: string(benchDecl.Concurrency),
		}); err != nil {
			return err
		}
		w.Handle(toolExtNoop, func(context.Context, *worker.Task) ([]worker.Part, error) { return worker.Text("ok"), nil })
		wctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Run(wctx) }()
		defer func() { stop(); <-done }()

		info, err := r.n.OpenSession(ctx, config.DefaultTenant, "", "")
		if err != nil {
			return err
		}
		one := func(name string) (time.Duration, error) {
			start := time.Now()
			t, err := r.n.SubmitTurn(ctx, config.DefaultTenant, info.Session, "", oneCall(name), true)
			if err != nil {
				return 0, err
			}
			if len(t.Results) != 1 || t.Results[0].Outcome != events.OutcomeOK {
				return 0, fmt.Errorf("%s turn %s: %+v", name, t.Turn, t.Results)
			}
			return time.Since(start), nil
		}
		for range warmCalls {
			if _, err := one(toolExtNoop); err != nil {
				return err
			}
			if _, err := one(toolNoop); err != nil {
				return err
			}
		}
		for range n {
			d, err := one(toolExtNoop)
			if err != nil {
				return err
			}
			ext = append(ext, d)
			if d, err = one(toolNoop); err != nil {
				return err
			}
			builtin = append(builtin, d)
		}
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				return fmt.Errorf("worker stopped: %w", err)
			}
		default:
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(ext)
	slices.Sort(builtin)
	cond := fmt.Sprintf("%s, one call at a time, %d calls of each, alternating; value: a one-call turn of a harness tool served by an external worker (package worker over HTTP on loopback, each answer carrying the request for the next task; read-only, safe, parallel-safe); floor: a one-call turn of the built-in no-op with the same declarations, same node and session", durability, n)
	var out []sample
	for _, q := range []float64{50, 99} {
		out = append(out, sample{name: fmt.Sprintf("worker/%s/p%.0f", durability, q), value: us(percentile(ext, q)), unit: "µs", better: Lower, floor: us(percentile(builtin, q)), conditions: cond})
	}
	out = append(out, sample{name: "worker/" + durability + "/overhead-p50", value: us(percentile(ext, 50) - percentile(builtin, 50)), unit: "µs", better: Lower,
		conditions: "the same run: the external worker's p50 minus the built-in no-op's p50"})
	return out, nil
}
