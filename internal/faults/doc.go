// Package faults is the crash suite's hook: named points in the runtime where
// a test build can kill its own process with SIGKILL, to prove recovery at
// exactly that point. Points are compiled in only with the build tag
// "faults"; in every other build Hit is an empty function the compiler
// removes.
//
// A faults build reads CALLSHEET_FAULT=point[:n] at start: the n-th time
// (default 1) the named point is hit, the process kills itself. It also
// reads CALLSHEET_PANIC=point:key[,point:key...]: a session actor panics
// (Panic) at each named panic point whenever it handles the keyed thing,
// to prove that a bug in one session's handling stops only that session.
package faults

// The named crash points (docs/recovery.md has what each one leaves behind).
const (
	// AfterRequested: a batch holding a ToolCallRequested is durable.
	AfterRequested = "after-requested"
	// AfterClaim: the claim (ToolCallStarted) is durable; the tool has not run.
	AfterClaim = "after-claim"
	// DuringTool: the tool is running (hit as it starts).
	DuringTool = "during-tool"
	// AfterReturn: the tool returned; its outcome is not logged yet.
	AfterReturn = "after-return"
	// AfterResult: the outcome (ToolCallCompleted/Failed) is durable; the
	// result is not committed yet.
	AfterResult = "after-result"
)

// The named panic points: a session actor panics while it handles a message
// of the turn the point is keyed with (docs/operations.md, "A session that
// panics").
const (
	// PanicOnTurn: handling the SubmitTurn of the turn, before anything of
	// it is decided.
	PanicOnTurn = "panic-on-turn"
	// PanicOnOutcome: handling the outcome of a call of the turn, after the
	// call ran and before its outcome is decided.
	PanicOnOutcome = "panic-on-outcome"
)
