package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/callsheet/callsheet/internal/testenv"
)

// blockedLog is a compactLog whose Compact waits for release.
type blockedLog struct {
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	forgot  []string
}

func (l *blockedLog) Compact(ctx context.Context, _, _ string) error {
	select {
	case l.started <- struct{}{}:
	default:
	}
	select {
	case <-l.release:
	case <-ctx.Done():
	}
	return nil
}

func (l *blockedLog) ForgetTip(_, session string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgot = append(l.forgot, session)
}

// TestPassivatedOverflowDropsTip: a passivated session that finds the
// compaction queue full has its snapshot tip dropped at once, so an idle
// session holds no tip when the compactor falls behind; the queued ones
// keep theirs until compacted.
func TestPassivatedOverflowDropsTip(t *testing.T) {
	l := &blockedLog{started: make(chan struct{}, 1), release: make(chan struct{})}
	c := newCompactor(l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.gone = newTombstones()
	defer c.stop()
	defer close(l.release)
	c.add("acme", "busy")
	<-l.started // the compactor holds "busy"; the queue is empty
	for i := range compactQueue {
		c.add("acme", fmt.Sprintf("q%d", i))
	}
	c.add("acme", "over")
	l.mu.Lock()
	forgot := slices.Clone(l.forgot)
	l.mu.Unlock()
	if !slices.Equal(forgot, []string{"over"}) {
		t.Fatalf("tips dropped at passivation: %q, want only the session past the full queue, \"over\"", forgot)
	}
}

// TestDrainedPendingReleased: once a burst of sessions pending compaction
// has drained (their actors passivated), the compactor does not keep the
// room they took.
func TestDrainedPendingReleased(t *testing.T) {
	l := &blockedLog{started: make(chan struct{}, 1), release: make(chan struct{})}
	close(l.release)
	c := newCompactor(l, slog.New(slog.NewTextHandler(io.Discard, nil)))
	c.gone = newTombstones()
	defer c.stop()
	const n = 50_000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("s%d", i)
	}
	before := testenv.LiveHeap()
	for _, k := range keys {
		c.durable("acme", k, nil)
	}
	for _, k := range keys {
		c.add("acme", k)
	}
	after := testenv.LiveHeap()
	runtime.KeepAlive(keys)
	if after > before && after-before > 3<<20 {
		t.Fatalf("%d bytes still held after %d pending sessions drained, want under 3 MiB (the drop list of the fake log included)", after-before, n)
	}
}
