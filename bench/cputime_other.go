//go:build !linux

package main

import "time"

// threadCPU is not available off Linux.
func threadCPU() (time.Duration, bool) { return 0, false }

// processCPU is not available off Linux.
func processCPU() (time.Duration, bool) { return 0, false }

// usage is what the whole process has used so far (processUsage).
type usage struct {
	cpu    time.Duration
	faults int64
}

// processUsage is not available off Linux.
func processUsage() (usage, bool) { return usage{}, false }

// pageFault is not measured off Linux.
func pageFault() (time.Duration, bool) { return 0, false }
