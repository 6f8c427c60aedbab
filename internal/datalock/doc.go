// Package datalock locks a node's data directory for the life of a process:
// an OS file lock (flock(2), exclusive) on DATA/LOCK, and in the same file a
// one-line JSON record of who holds it (program, pid, host, node name, start
// time, HTTP address, and the embedded JetStream's client URL and
// credentials file once known).
//
// nats-server takes no lock on its store, and two processes on one store
// corrupt each other's sessions; a node (node.New) and cmd/callsheet-replay --data
// both take this lock before they touch the directory. The kernel releases
// an flock when the last descriptor of its open file closes, so a process
// killed with SIGKILL leaves no stale lock: the next one takes it and
// overwrites the record. The descriptor is close-on-exec, so children (MCP
// servers, sandboxed commands) never hold it.
//
// A flock is advisory: it keeps out processes that ask for it (every node
// and replay), not one that opens the store without asking. On NFS, Linux
// emulates flock with a POSIX byte-range lock of the whole file, which the
// server's lock manager honours across machines.
package datalock
