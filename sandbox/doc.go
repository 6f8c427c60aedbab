// Package sandbox confines the commands the shell tool runs, with Landlock
// (docs/spec.md §5: "shell runs inside one").
//
// Landlock restricts the process that enables it and every process it
// starts, for good: a node cannot confine one command without confining
// itself. So the node runs each sandboxed command through a helper: it
// re-executes its own binary (/proc/self/exe) with HelperArg as the first
// argument and the policy in the CALLSHEET_SANDBOX_SPEC environment variable.
// Main, called at the top of the binary's main, recognises that, enables
// Landlock in the helper process and replaces it with the command
// (execve), so no extra process stays between the node and the command: the
// command keeps the helper's pid and process group, and the runner that
// started the helper kills and reaps the command as before.
//
// # Wiring
//
// Every binary that builds sandboxed commands with Wrap or Command must call
// Main first thing in main, and every test binary that does so must call it
// first thing in TestMain:
//
//	func main() {
//		sandbox.Main()
//		...
//	}
//
//	func TestMain(m *testing.M) {
//		sandbox.Main()
//		os.Exit(m.Run())
//	}
//
// Wrap refuses with ErrNoHelper in a process that did not call Main, rather
// than re-execute a binary that would take the helper's arguments for its
// own.
//
// # The policy
//
// Inside the sandbox a command may read and execute every file; write, create,
// remove and rename only under Spec.Writable (the workspace and a per-call
// temporary directory); write the harmless character devices (/dev/null,
// /dev/zero, /dev/full, /dev/tty, /dev/ptmx, /dev/pts) and /dev/shm. From
// Landlock ABI 4, TCP connect and bind are denied unless Spec.Network is set;
// from ABI 10, UDP too. From ABI 6, it cannot signal processes outside the
// sandbox (the node among them) nor reach abstract UNIX sockets created outside
// it; from ABI 9, pathname UNIX sockets outside the writable directories are
// refused unless Spec.Network is set. Landlock also sets no_new_privs, so
// set-uid programs (sudo) do not gain privileges.
//
// The helper enforces the full set of restrictions of the kernel's ABI
// version, strictly: it does not use go-landlock's best-effort mode, which
// succeeds without restricting anything on a kernel without Landlock. If the
// kernel cannot enforce what the helper asks, the command does not run: the
// helper exits with ExitSetupFailed (125) and a message starting with
// ErrorPrefix on standard error.
//
// # What it does not do
//
// Reads are not restricted: a command can read whatever the node's user can.
// Below ABI 4 the network cannot be restricted at all (Probe reports it);
// below ABI 10 UDP is not (so DNS queries still leave), and Multipath TCP
// escapes the TCP rules on every version. Landlock does not take capabilities
// away: run the node as an unprivileged user.
package sandbox
