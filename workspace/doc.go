// Package workspace confines every file path the node uses to a session's
// workspace (docs/spec.md §10 "Workspace"; docs/security.md "Workspace").
//
// A workspace is reached only through a *Dir: Open (or Create, for a new
// session) opens the workspace name under its tenant's root one component
// at a time without following a symbolic link (openat with
// O_NOFOLLOW|O_DIRECTORY), so a name never passes through a link, not even
// one that stays inside the tenant's root; the os.Root the Dir then holds
// is checked to be that very directory. The node keeps one such Dir per
// session in a Cache, shared by the session's calls and rewinds: each takes
// a lease, for which the name is walked again from the tenant's root without
// following a link and must reach the very directory the Dir holds (same
// device and inode), so a nested workspace (w1/sub) whose path the owner of
// w1 swaps for a link, deletes or replaces is refused, or opened afresh,
// from the next call on. A handle dropped while leases are out (a rewind,
// the session ending) stays open until the last is released.
//
// Inside a Dir every operation goes through its os.Root, which follows a
// symbolic link only while it stays beneath the workspace and resists a
// directory being swapped for a link mid-walk (os.Root's package doc):
// there is no check of a path followed by a plain open. Resolve reads the
// links along a model's path, also through the root, to give the link-free
// workspace-relative path to operate on (to write through a link, or to
// hand rg) and to refuse, with an *OutsideError naming the link, a path
// that leads out; if the workspace changes after that, the root still
// refuses to leave it, and Escaped recognises that refusal.
//
// When the node runs as root, WriteFile, Mkdir and MkdirAll give what they
// create the uid and gid of the workspace's root directory, and Create
// gives the directories it makes the Owner the node passes, so a sandboxed
// command running as the workspace's owner can change what the file tools
// wrote.
//
// Rel and ValidName are pure (no I/O): Rel puts a model's path into the
// workspace-relative form recorded for mutated and touched paths and shown
// in messages; ValidName checks a workspace name.
//
// The package imports nothing of callsheet's; it sits beside the tool
// contract at the bottom of the dependency graph. It needs a Unix kernel
// (openat, O_NOFOLLOW); the node runs on Linux.
package workspace
