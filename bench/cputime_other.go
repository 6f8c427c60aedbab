//go:build !linux

package main

import "time"

// threadCPU is not available off Linux.
func threadCPU() (time.Duration, bool) { return 0, false }

// processCPU is not available off Linux.
func processCPU() (time.Duration, bool) { return 0, false }
