// Package core is callsheet's decision core, pure code with no clock, no id
// minting and no I/O (docs/spec.md §2, §3): the pre-phase that resolves, validates and
// gates every call of a turn in model order; the Schedule that admits calls
// under the exclusive barrier, the parallel-safe cap, self-concurrency groups
// and parallel_tool_calls=false; and the Session state, folded from events,
// whose decisions (ReceiveTurn, Progress, Claim, Settle, RetryDue, Recover)
// return drafts the shell turns into events. State changes only in Apply.
package core
