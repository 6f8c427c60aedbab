package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// taskQueue is the task queue the peer's worker polls.
const taskQueue = "callsheet-bench"

// callTimeout bounds one activity's run; a no-op takes microseconds, so
// hitting it means the server lost the task.
const callTimeout = 30 * time.Second

// Noop is the no-op activity: the peer's counterpart of the bench's no-op
// tool, which answers "ok".
func Noop(context.Context) (string, error) { return "ok", nil }

// OneCall is a workflow that runs Noop once and returns its result: the
// shape of a one-call turn on a workflow engine (start, schedule the
// activity, run it, record the result, complete).
func OneCall(ctx workflow.Context) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: callTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	var out string
	err := workflow.ExecuteActivity(ctx, Noop).Get(ctx, &out)
	return out, err
}

// Peer is a dev server, an SDK client of it and a worker running Noop and
// OneCall, all in this process.
type Peer struct {
	Setting Setting
	dir     string
	srv     *DevServer
	c       client.Client
	w       worker.Worker
	seq     atomic.Int64
}

// StartPeer starts a dev server with setting s in a fresh directory under
// $TMPDIR, dials it and starts the worker. Close stops them and removes the
// directory.
func StartPeer(s Setting) (_ *Peer, err error) {
	dir, err := os.MkdirTemp("", "csbench-temporal-*")
	if err != nil {
		return nil, err
	}
	p := &Peer{Setting: s, dir: dir}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.srv, err = StartDevServer(dir, s); err != nil {
		return nil, err
	}
	// The SDK logs every worker start and stop at info level.
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if p.c, err = client.Dial(client.Options{HostPort: p.srv.HostPort, Namespace: Namespace, Logger: quiet}); err != nil {
		return nil, fmt.Errorf("dial %s: %w", p.srv.HostPort, err)
	}
	p.w = worker.New(p.c, taskQueue, worker.Options{})
	p.w.RegisterActivity(Noop)
	p.w.RegisterWorkflow(OneCall)
	if err = p.w.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	return p, nil
}

// Activity runs Noop once as a standalone activity (client.ExecuteActivity,
// then the handle's Get, which waits for the result) and checks its result.
func (p *Peer) Activity(ctx context.Context) error {
	h, err := p.c.ExecuteActivity(ctx, client.StartActivityOptions{
		ID:                  fmt.Sprintf("a-%d", p.seq.Add(1)),
		TaskQueue:           taskQueue,
		StartToCloseTimeout: callTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	}, Noop)
	if err != nil {
		return fmt.Errorf("start activity: %w", err)
	}
	var out string
	if err := h.Get(ctx, &out); err != nil {
		return fmt.Errorf("activity %s: %w", h.GetID(), err)
	}
	return checkOK(out)
}

// Workflow runs OneCall once (client.ExecuteWorkflow, then Get) and checks
// its result.
func (p *Peer) Workflow(ctx context.Context) error {
	run, err := p.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:        fmt.Sprintf("w-%d", p.seq.Add(1)),
		TaskQueue: taskQueue,
	}, OneCall)
	if err != nil {
		return fmt.Errorf("start workflow: %w", err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil {
		return fmt.Errorf("workflow %s: %w", run.GetID(), err)
	}
	return checkOK(out)
}

func checkOK(out string) error {
	if out != "ok" {
		return fmt.Errorf("result %q, want %q", out, "ok")
	}
	return nil
}

// Close stops the worker, the client and the server, and removes the
// database.
func (p *Peer) Close() error {
	if p.w != nil {
		p.w.Stop()
	}
	if p.c != nil {
		p.c.Close()
	}
	var err error
	if p.srv != nil {
		err = p.srv.Stop()
	}
	return errors.Join(err, os.RemoveAll(p.dir))
}
