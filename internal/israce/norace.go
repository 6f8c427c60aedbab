//go:build !race

package israce

// Enabled reports whether the race detector is built in.
const Enabled = false
