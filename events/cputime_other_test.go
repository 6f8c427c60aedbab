//go:build !linux

package events_test

// threadCPUNanos is not measured off Linux.
func threadCPUNanos() (int64, bool) { return 0, false }
