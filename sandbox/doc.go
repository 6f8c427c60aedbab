// Package sandbox confines the commands shell and command tools run
// (docs/spec.md §10 "Sandbox"; docs/security.md "Sandbox" has each layer,
// what enforces it and what it does not cover).
//
// # The sandbox
//
// Sandbox.Start runs a command in the sandbox; Sandbox.Attach rewrites an
// *exec.Cmd to do the same. Either starts the namespace helper, in fresh
// user, mount, PID, network, IPC, UTS and cgroup namespaces (Go's
// SysProcAttr.Cloneflags, with a one-id UidMappings and ambient
// capabilities of the new user namespace only), as the run's tenant's uid on
// a root node (Config.IDs). The helper is a small binary of its own,
// sandbox/helper (helperbin.go says where it comes from), or this binary
// (/proc/self/exe) with NamespaceArg, which Main, called first thing in
// main, turns into the helper. It is the sandbox's pid 1. It closes every
// descriptor it inherited but its own (fds.go), raises its oom_score_adj to
// 1000, waits for its policy on its control socket (control.go), which the
// node sends once it has put the helper in the run's cgroup, and
//
//   - builds the sandbox's file system on a fresh tmpfs: the system
//     directories and Config.ReadOnly read-only, /dev, its own /proc, a
//     private tmpfs /tmp; Config.Hidden paths are absent, not covered, by
//     name, resolved target, other mounts and device and inode (hide.go);
//     brings up its own loopback; says "ready";
//   - waits for the call: the workspace, bound from the directory the node
//     opened (a detached mount clone on a root node; a descriptor whose
//     device and inode it checks otherwise), never from a path a session
//     could have swapped; the command, its environment and standard
//     streams;
//   - pivots into the view, sets the rlimits of Limits, and on the thread
//     it starts the command from drops every capability, enables Landlock
//     (writes to the workspace and /tmp only) and a seccomp filter
//     (seccomp.go: also no setuid or setgid bit);
//   - starts the command as its only child, reaps until it exits, kills
//     and reaps whatever is left in the PID namespace, reports the status
//     and exits. It has PR_SET_PDEATHSIG, so it dies with the node.
//
// Start keeps a few sandboxes per tenant prepared up to "ready" (pool.go):
// a call finds one waiting, and only its own part remains. The spawner
// (spawner.go), a small process of the helper's binary, starts their
// helpers, so that the node does not fork itself for each. Each serves one
// call. The helper reports on a status pipe whether the command started
// (Process.Finish and Attached.Finish return ErrSetup otherwise: nothing
// ran). New probes the kernel once by starting the sandbox with nothing to
// run, and Report says, boundary by boundary, what it gives; Ready refuses a
// sandbox missing a required one that Config.AcceptWeaker does not accept.
//
// # Resources
//
// Each sandbox, each tenant's sandboxes and all the node's have a processes
// and a memory limit, the last below what the host gives the node
// (Budget): cgroups enforce them where the node can make cgroups, v2 or v1
// (cgroup.go), the node moving itself into one of its own with ten times a
// tenant's CPU weight; without a pids cgroup the node counts its sandboxes
// (resources.go, ErrBusy). With Config.TenantDisk each tenant's workspaces
// are a file system of their own (disk.go), which Close unmounts.
//
// # The Landlock helper
//
// Wrap and Command run a command under Landlock alone, re-executing this
// binary with HelperArg and the policy in CALLSHEET_SANDBOX_SPEC: the
// helper enables Landlock and replaces itself with the command (execve),
// so the command keeps its pid and process group. Spec.Writable confines
// writes; Spec.Read, when set, confines reads (glob and grep run rg so,
// confined to the workspace); Spec.Network governs TCP from Landlock ABI 4.
// It is the sandbox's fallback on a kernel without namespaces, when the
// config accepts that. It enforces the full set of restrictions of the
// kernel's ABI strictly (not go-landlock's best effort); a helper that
// cannot confine or start the command exits with ExitSetupFailed (125) and
// a line starting with ErrorPrefix.
//
// # Wiring
//
// Every binary that runs sandboxed commands must call Main first thing in
// main, and every test binary that does so first thing in TestMain:
//
//	func main() {
//		sandbox.Main()
//		...
//	}
//
// Wrap, Command and Sandbox.Ready refuse with ErrNoHelper in a process that
// did not, rather than re-execute a binary that would take the helper's
// arguments for its own (the small helper binary, when found, spares the
// namespace helper that; the Landlock helper is always this binary). The
// package is Linux-only.
package sandbox
