//go:build !faults

package faults

// Enabled reports whether this build has crash points.
const Enabled = false

// Hit does nothing outside a faults build.
func Hit(string) {}

// Panic does nothing outside a faults build.
func Panic(string, string) {}
