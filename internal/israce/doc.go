// Package israce reports whether the race detector is built in: tests that
// count allocations skip under it, since it allocates on its own and makes
// sync.Pool drop what is put back at random.
package israce
