package tool

import "io"

// Output is the whole output of a call when it is too large to hold in
// memory (a process's output streamed to a spill file): the result's Parts
// then hold only its start, at least MinShown bytes of it, and the runtime
// keeps the whole as the call's full output (docs/spec.md §2.5), reading it
// from Open. The runtime calls Close exactly once, after the result is
// recorded or dropped; Close removes what backs it.
type Output interface {
	// Size is the whole output's length in bytes.
	Size() int64
	// Lines is its number of lines; a last line without a newline counts.
	Lines() int
	// Open returns a reader of the whole output from its first byte. It may
	// be called more than once; each reader is closed by its caller.
	Open() (io.ReadCloser, error)
	// Close releases the output.
	Close() error
}

// MinShown is the least a result whose Full is set shows of it in its
// Parts: at least the largest output cap (tool_output.max_bytes is at most
// 256 KiB), so the model-visible cut is the same as if the whole output had
// been in memory.
const MinShown = 256 << 10

// DefaultMaxOutput is how much of a call's output a tool keeps when the
// call does not say (Call.MaxOutput is 0): 64 MiB, the default of the
// config's limits.output_bytes_per_call.
const DefaultMaxOutput = 64 << 20
