// Package workspace confines file paths to a session's workspace (docs/spec.md §5:
// "Paths are relative to the session's workspace (absolute paths inside it
// are accepted too)").
//
// Resolve is the single gate every file tool passes a model-given path
// through. It refuses a path that leaves the workspace lexically (a ".."
// escape or an absolute path elsewhere) or through a symbolic link (an
// existing component, or a dangling link, that points outside). It reads the
// directory entries along the path but never a file's contents, and writes
// nothing.
//
// Confinement is a check at one moment, not a sandbox: a process that can
// change the workspace concurrently (a shell command running in it) can swap
// a checked directory for a link between the check and the use. docs/spec.md §5 says
// as much: file tools are confined, and the shell runs inside a sandbox.
//
// The package imports nothing of callsheet's; it sits beside the tool
// contract at the bottom of the dependency graph.
package workspace
