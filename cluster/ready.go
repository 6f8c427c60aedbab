package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WaitEvery is how often WaitJetStream says what it still waits for.
const WaitEvery = 2 * time.Second

// WaitJetStream waits until JetStream answers an account request on js: in
// a cluster, once a meta leader is elected (which needs a majority of the
// servers) and reachable. Every WaitEvery it tells log what it waits for,
// with the server's error and, when detail is not nil, detail() (an embedded
// server's routes). It returns ctx's error when ctx ends first.
func WaitJetStream(ctx context.Context, js jetstream.JetStream, log *slog.Logger, detail func() string) error {
	start := time.Now()
	last := time.Time{}
	for {
		rctx, cancel := context.WithTimeout(ctx, WaitEvery)
		_, err := js.AccountInfo(rctx)
		cancel()
		if err == nil {
			if !last.IsZero() && log != nil {
				log.Info("JetStream is ready", "after", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for JetStream: %w (last: %v)", ctx.Err(), err)
		}
		if log != nil && time.Since(last) >= WaitEvery {
			args := []any{"err", err}
			if detail != nil {
				args = append(args, "detail", detail())
			}
			log.Info("waiting for JetStream (a meta leader, elected by a majority of the cluster's servers)", args...)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
