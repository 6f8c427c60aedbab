package main

import (
	"context"
	"os"
	"runtime/pprof"
	"strings"
)

// labelled runs f with the pprof label rig=name. Goroutines inherit labels
// when they start, and every rig starts its own server, connection and
// actors inside f, so `go tool pprof -tagfocus rig=node` shows the node's
// path alone, without the floors measured in the same run.
func labelled(ctx context.Context, name string, f func(ctx context.Context) error) error {
	var err error
	pprof.Do(ctx, pprof.Labels("rig", name), func(ctx context.Context) { err = f(ctx) })
	return err
}

// loadavg returns the 1-minute load average as /proc/loadavg gives it, or "?".
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
