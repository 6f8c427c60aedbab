// Package worker is the Go client of callsheet's harness tools
// (docs/spec.md §7, docs/workers.md): a program registers its own tools
// with a node and serves their calls as an external worker, pulling tasks,
// heartbeating and reporting over plain HTTP. callsheet keeps validation,
// permission, scheduling, claims, timeouts, replay policy and the ordered
// commit; a worker only runs the calls it is handed, with arguments
// already validated against the tool's schema.
//
//	w, _ := worker.New("http://127.0.0.1:7700", worker.WithToken(tok), worker.WithID("shop-1"))
//	_ = w.Register(ctx, "lookup_order", worker.Spec{Description: ..., Guidelines: ..., InputSchema: ...})
//	w.Handle("lookup_order", func(ctx context.Context, t *worker.Task) ([]worker.Part, error) {
//		// t.Arguments, t.IdempotencyKey; ctx ends at the call's deadline or when it is cancelled
//		return worker.Text("order shipped"), nil
//	})
//	err := w.Run(ctx) // until ctx ends
//
// Run long-polls POST /v1/workers/poll for at most its concurrency of tasks
// at once, runs each in its own goroutine with a context that ends at the
// task's deadline, heartbeats while it runs (often enough for the tool's
// heartbeat_timeout; the answer says when the call was cancelled, which
// cancels the context), and posts complete or fail. The answer also asks
// for the worker's next task ("next", docs/workers.md), so one request is in
// flight and the next task comes back on the exchange that carries the
// result; WithAnswerAndPoll(false) posts plain answers and polls apart. A
// handler's error fails the attempt; Permanent(err) stops the retries of a
// safe tool. The package imports nothing of callsheet's: copy it, or read it
// as the protocol by example.
package worker
