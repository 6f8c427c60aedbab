// Package logtest gives tests a *slog.Logger that writes to the test's log
// (t.Log), at debug level, and drops what is logged after the test ended
// (a node's goroutines may still log while it closes).
package logtest

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
)

// New returns a logger writing each record as one text line to t.Log.
func New(t testing.TB) *slog.Logger {
	w := &writer{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct {
	t    testing.TB
	mu   sync.Mutex
	done bool
}

func (w *writer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(b, "\n")))
	}
	return len(b), nil
}
