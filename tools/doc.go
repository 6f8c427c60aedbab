// Package tools holds callsheet's built-in tools (docs/spec.md §5) and the
// config-defined command tools (docs/spec.md §6).
//
// The default surface: read, write and shell (Builtins; ShellTool builds shell
// with its sandbox options), glob and grep on ripgrep 14+ (FindRipgrep,
// SearchTools), apply_patch (PatchTool), webfetch (WebFetch), web_search and
// skill when config gives them a backend and directories (WebSearch,
// Skills), bg and job (JobTools), question (QuestionTool), task when a
// delegate is configured (TaskTool), and the durable work state
// plan/todo/goal (WorkStateTools); memory_propose when memory is on,
// tool_search when deferred tools exist. edit (EditTool), execute and lsp
// (UnbackedSlots) are registered outside the default surface. Tools that
// need session state (work state, answers, jobs, tool_search) reach the
// runtime through tool.RuntimeFrom(ctx). Command turns a CommandSpec (an
// operator's "command_tools" entry) into a tool. Every file tool reaches the
// session's workspace through the *workspace.Dir the runtime opened for the
// call (workspace.FromContext) and does all its file I/O through that Dir's
// os.Root, so a path that leaves the workspace, even through a directory
// swapped for a link while the call runs, is an error result and nothing
// outside is read or written. Processes (shell, command tools, rg) get the
// workspace's path, tool.CallFrom(ctx).Workspace; glob and grep hand rg a
// path with every link resolved inside the workspace.
//
// # Outputs
//
// Tools return their output; the runtime applies the model-facing caps
// (51,200 bytes and 2,000 lines by default) and keeps the full output
// elsewhere. What a tool holds in memory is bounded: a process's output
// (shell, command tools) streams to a spill (spill.go) that holds its first
// 256 KiB and last 4 KiB in memory and the rest in a file, up to the call's
// tool.Call.MaxOutput (limits.output_bytes_per_call, 64 MiB by default;
// beyond it bytes are discarded with a note); a result then carries the
// start of the output and hands the whole over as tool.Result.Full, which
// the runtime streams into the object store. read refuses files over
// MaxReadBytes (10 MiB) unless the call asks for a line range.
//
// A failure that a retry cannot fix (a refused URL, a bad pattern, a FIFO,
// a binary file) is returned wrapped with tool.Permanent, so the runtime
// does not retry it (tool.IsPermanent).
//
// # Processes
//
// shell and command tools share one process runner. A process runs in the
// workspace, in its own process group, with stdin from /dev/null (shell) or
// the arguments as JSON (command tools), and a minimal environment: PATH,
// HOME (the workspace), LANG, and CALLSHEET_CALL_ID,
// CALLSHEET_IDEMPOTENCY_KEY, CALLSHEET_SESSION, CALLSHEET_TURN and
// CALLSHEET_ATTEMPT from the call, and TMPDIR naming a per-call directory.
// shell runs inside the Landlock sandbox (package sandbox) unless config
// opts out or an approved call escalates. When the process exits, is cancelled or
// times out, its whole process group is killed with SIGKILL, so a background
// child cannot outlive the call or hold its output open. A timeout is
// reported as ErrTimeout (which wraps context.DeadlineExceeded), so the
// runtime can settle a side-effecting call as indeterminate; a cancelled
// context is returned as the context's error, never as a result.
//
// # Exit codes
//
// For shell, a non-zero exit is an ok result that shows the exit code: a
// model reads exit codes as information (grep's 1 means "no match", a failing
// test run is what it wanted to see). For a command tool, a non-zero exit is
// an error, with the exit code and the tail of stderr in its message: an
// operator's tool that fails has failed (docs/spec.md §6).
package tools
