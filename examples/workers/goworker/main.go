// Command goworker is a complete callsheet harness-tool worker in Go, on
// package worker: the same toy shop as worker.py and worker.ts
// (docs/workers.md). Copy it and replace the tools with your own.
//
// Environment: CALLSHEET_URL (default http://127.0.0.1:7700),
// CALLSHEET_TOKEN, WORKER_ID, WORKER_CONCURRENCY (default 4). SIGTERM or
// Ctrl-C stops polling; running tasks are cancelled and the node settles
// them by their replay policy.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/callsheet/callsheet/worker"
)

var orders = map[string]string{"A-1": "shipped", "B-2": "packing", "C-3": "delivered"}

func main() {
	base := envOr("CALLSHEET_URL", "http://127.0.0.1:7700")
	conc, _ := strconv.Atoi(envOr("WORKER_CONCURRENCY", "4"))
	w, err := worker.New(base, worker.WithToken(os.Getenv("CALLSHEET_TOKEN")),
		worker.WithID(envOr("WORKER_ID", fmt.Sprintf("go-%d", os.Getpid()))),
		worker.WithConcurrency(max(conc, 1)), worker.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	must(w.Register(ctx, "lookup_order", worker.Spec{
		Description: "Look an order of the shop up by its id and say its status.",
		Guidelines:  []string{"Use to answer questions about an order's status."},
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"order": {"type": "string", "description": "order id, such as A-1"}}, "required": ["order"], "additionalProperties": false}`),
		Effect:      "read_only", Replay: "safe", Concurrency: "parallel_safe", Timeout: "10s",
	}))
	w.Handle("lookup_order", func(ctx context.Context, t *worker.Task) ([]worker.Part, error) {
		took(t)
		var args struct{ Order string }
		if err := json.Unmarshal(t.Arguments, &args); err != nil {
			return nil, worker.Permanent(err)
		}
		status, ok := orders[args.Order]
		if !ok {
			return nil, worker.Permanent(fmt.Errorf("no order %s", args.Order))
		}
		return worker.JSON(map[string]string{"order": args.Order, "status": status, "idempotency_key": t.IdempotencyKey})
	})

	// side_effecting, never, exclusive: left out, strictest.
	must(w.Register(ctx, "charge", worker.Spec{
		Description: "Charge an order to the customer's card.",
		Guidelines:  []string{"Use only when the user asked to pay for an order."},
		InputSchema: json.RawMessage(`{"type": "object", "properties": {"order": {"type": "string"}, "cents": {"type": "integer", "minimum": 1}, "delay_ms": {"type": "integer", "minimum": 0}}, "required": ["order", "cents"], "additionalProperties": false}`),
		Timeout:     "60s", HeartbeatTimeout: "2s",
	}))
	w.Handle("charge", func(ctx context.Context, t *worker.Task) ([]worker.Part, error) {
		took(t)
		var args struct {
			Order   string
			Cents   int
			DelayMS int `json:"delay_ms"`
		}
		if err := json.Unmarshal(t.Arguments, &args); err != nil {
			return nil, worker.Permanent(err)
		}
		// A real worker passes the idempotency key to the payment API, so a
		// charge it may already have made is not made twice.
		select {
		case <-time.After(time.Duration(args.DelayMS) * time.Millisecond):
		case <-ctx.Done():
			return nil, errors.New("cancelled before the charge was made")
		}
		return worker.Text(fmt.Sprintf("charged %s %d cents (key %s)", args.Order, args.Cents, t.IdempotencyKey)), nil
	})
	fmt.Println("registered lookup_order, charge")
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func took(t *worker.Task) {
	fmt.Printf("took tool=%s call=%s attempt=%d key=%s\n", t.Tool, t.Call, t.Attempt, t.IdempotencyKey)
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
