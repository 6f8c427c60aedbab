// Package faults is the crash suite's hook: named points in the runtime where
// a test build can kill its own process with SIGKILL, to prove recovery at
// exactly that point. Points are compiled in only with the build tag
// "faults"; in every other build Hit is an empty function the compiler
// removes.
//
// A faults build reads CALLSHEET_FAULT=point[:n] at start: the n-th time
// (default 1) the named point is hit, the process kills itself.
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
